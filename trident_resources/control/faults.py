"""Control-plane faults at the facade's door, named.

Every public ``Trident`` method asks the control-plane Postgres something first (the dataset's
record, the ledger, flags). A Postgres that went away after the ``Trident`` opened (a restart, a
dropped network, the pool's 30 s wait for a connection) surfaced as psycopg's own exceptions
(``OperationalError``, ``psycopg_pool.PoolTimeout``) from ``exists``, ``describe``, ``history``,
``datasets``, ``sql`` and the eager half of ``read``: a caller could not catch it as a
``TridentError``. The write path and the lazy half of reads already named theirs; this names the
rest at the one place all of them pass, with psycopg's error chained.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import psycopg

from ..core.errors import ControlPlaneUnavailableError

P = ParamSpec("P")
R = TypeVar("R")


def control_plane_named(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` with any psycopg error escaping it raised as ``ControlPlaneUnavailableError``."""

    @functools.wraps(fn)
    def door(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except psycopg.Error as exc:
            raise ControlPlaneUnavailableError(
                f"{fn.__name__}: the control-plane Postgres failed: {type(exc).__name__}: {' '.join(str(exc).split())}"
            ) from exc

    return door


def name_control_plane_faults(cls: type) -> None:
    """Wrap every public method defined on ``cls`` (new ones too, so none is forgotten)."""
    for name, attr in list(vars(cls).items()):
        if not name.startswith("_") and callable(attr) and not isinstance(attr, (classmethod, staticmethod, property)):
            setattr(cls, name, control_plane_named(attr))
