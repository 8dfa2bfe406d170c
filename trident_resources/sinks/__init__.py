"""Sinks: where a dataset's rows are stored. Each only stores; the write planner decides what to
store and the transaction driver when it counts.

``open_sinks`` builds one of each for a ``Trident``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..control.router import SINK_NAMES

if TYPE_CHECKING:
    from ..control.plane import ControlPlane
    from ..core.settings import TridentSettings
    from .contract import Sink


def open_sinks(settings: TridentSettings, control: ControlPlane, dsn: str) -> dict[str, Sink]:
    """One instance of every sink, by name (imported here: the router needs only the names)."""
    from .iceberg.catalog import open_catalog
    from .iceberg.sink import IcebergSink
    from .pg.sink import PgSink

    sinks: list[Sink] = [PgSink(control, settings), IcebergSink(open_catalog(settings, dsn), settings)]
    assert tuple(s.name for s in sinks) == SINK_NAMES
    return {s.name: s for s in sinks}
