"""The Dagster instance every command runs on: the same persistent one ``trident ui`` serves.

A run executed in-process (``trident demo``, ``trident check``) on Dagster's default ephemeral
instance would leave no trace the UI can show (every asset "Never materialized"), so these commands run on the instance ``DAGSTER_HOME`` names when the user set one (a deployment's,
or their own), else on Trident's own under ``$TRIDENT_HOME/dagster``, with its ``dagster.yaml``
written when absent and its storage in the control plane's Postgres server (``ui.py`` says how
the URL is found). A user's own ``dagster asset materialize`` without ``DAGSTER_HOME`` still runs
on an ephemeral instance; the ledger sensor reports its commits (``trident_sensors/commits.py``).

While a command runs on it, ``DAGSTER_HOME`` and ``TRIDENT_DAGSTER_PG_URL`` are set in this
process, so that whatever Dagster code reads the instance from the environment finds the same one.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

from trident_resources.core.settings import TridentSettings

from .environ import temporarily

if TYPE_CHECKING:
    import dagster as dg


@contextlib.contextmanager
def command_instance(settings: TridentSettings) -> Iterator[tuple[dg.DagsterInstance, str]]:
    """(The persistent instance, a line saying which) for the length of a command (module docstring)."""
    import dagster as dg

    from .ui import URL_VARIABLE, dagster_home, instance_storage_url, keepalive, write_instance_config

    if os.environ.get("DAGSTER_HOME"):
        with dg.DagsterInstance.get() as instance:
            yield instance, f"the Dagster instance of DAGSTER_HOME={os.environ['DAGSTER_HOME']}"
        return
    home = dagster_home(settings)
    config = write_instance_config(home)
    url, origin = instance_storage_url(settings)
    with (
        temporarily({"DAGSTER_HOME": str(home), URL_VARIABLE: url}),
        keepalive(url) if origin.startswith("the embedded") else contextlib.nullcontext(),
        dg.DagsterInstance.from_config(str(home)) as instance,
    ):
        yield instance, f"the Dagster instance of trident ui ({config}; storage: {origin})"
