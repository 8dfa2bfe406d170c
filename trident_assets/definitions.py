"""The Definitions root: what ``dagster dev`` serves (``workspace.yaml`` and ``[tool.dagster]`` in
pyproject.toml point here), as ``defs``.

It only assembles: the example (``trident_assets.example``: the pipeline's assets and checks, its
jobs and rebuild schedule), the automation (``trident_sensors``: ledger reconciler and commits
sensors, table-maintenance and canary jobs), the executor, and the two resources every Trident
asset needs, under the keys a user's own Definitions must use too:

* ``trident``: a ``TridentResource`` (assets, checks, sensors and ops take it as a typed parameter);
* ``io_manager``: a ``TridentIOManager`` on that same resource (assets return rows, inputs load rows).

``build_definitions(TridentResource(...))`` builds the same Definitions on another configuration
(tests, the CLI); ``defs`` is built on ``TridentResource()``, i.e. on ``TRIDENT_*`` variables.
"""

from __future__ import annotations

import gc

import dagster as dg

from trident_resources.dagster import TridentIOManager, TridentResource
from trident_sensors import automation_definitions

from .example import example_definitions


def resources(trident: TridentResource | None = None) -> dict[str, object]:
    """The resource keys Trident assets expect, both on one ``TridentResource``."""
    trident = trident or TridentResource()
    return {"trident": trident, "io_manager": TridentIOManager(trident=trident)}


# Dagster's default executor (each step in its own process, independent steps in parallel up to
# the CPU count), with step processes forked from a server that has already imported this module:
# a fresh interpreter importing dagster, pyiceberg, pyarrow and duckdb is most of a small step's time.
DEFAULT_EXECUTOR = dg.multi_or_in_process_executor.configured(
    {"multiprocess": {"start_method": {"forkserver": {"preload_modules": [__name__]}}}},
    name="multi_or_in_process_executor",
)


def build_definitions(trident: TridentResource | None = None, executor: dg.ExecutorDefinition | None = None) -> dg.Definitions:
    """The Definitions, optionally on a given resource (tests and the CLI point it elsewhere) and
    executor. Without one, Dagster's default runs each step in its own process, independent steps
    in parallel (up to the CPU count); a deployment passes its own (``deploy/*/definitions.py``:
    ``k8s_job_executor``, ``celery_executor``, ``docker_executor``) without touching the assets."""
    trident = trident or TridentResource()
    return dg.Definitions.merge(
        example_definitions(trident.settings()),
        automation_definitions(),
        dg.Definitions(resources=resources(trident), executor=executor or DEFAULT_EXECUTOR),
    )


defs = build_definitions()

# Everything imported and built above lives as long as the process (forkserver step processes
# preload this module, see DEFAULT_EXECUTOR). Frozen, it leaves the collector's generations: a
# full collection, which any allocation-heavy moment of a run triggers, does not walk all of it
# again (that costs ~0.3-1 s of an example pipeline run in two full collections), and forked
# children do not touch, and so copy, its pages when they collect.
gc.freeze()
