"""Write-audit-publish's decisions on a staged version: ``publish`` makes it the published one
(metadata only, no data file rewritten) and records it as committed; ``discard`` drops it.

Both run under the lock its write took (a staged partition write: its partitions' locks), and look
the staged entry up again once they hold it: another process may have decided it meanwhile.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ..control.router import RouteDecision
from ..core.results import WriteResult
from ..engine import Engine
from ..read import versions
from ..transaction.driver import StagedRecords
from . import commit_records
from .group import refuse_member


def publish(
    engine: Engine,
    key: str,
    txn_id: uuid.UUID | str,
    *,
    provenance: Mapping[str, Any] | None = None,
    watermarks: Mapping[str, tuple[datetime, uuid.UUID | None]] | None = None,
) -> WriteResult:
    """``Trident.publish`` (see there)."""
    ds, entry = versions.staged_entry(engine, key, txn_id)
    refuse_member(entry)
    with engine.staged_lock(ds, entry) as ds:
        ds, entry = versions.staged_entry(engine, key, txn_id)  # still staged now that we hold the lock
        pending = StagedRecords.of(entry)
        if provenance is None:
            provenance = pending.provenance
        if watermarks is None:
            watermarks = pending.watermarks
        marked = pending.partitions
        done, outcome = engine.driver.publish(
            ds, entry, provenance=provenance, watermarks=commit_records.watermark_rows(engine, watermarks, marked)
        )
    route = RouteDecision(
        sink=entry.sink,
        requested=entry.requested_sink or entry.sink,
        clamped=entry.clamped,
        reason=entry.route_reason or "staged",
    )
    return commit_records.write_result(ds.key, done, outcome, route)


def discard(engine: Engine, key: str, txn_id: uuid.UUID | str, *, reason: str = "discarded") -> None:
    """``Trident.discard`` (see there)."""
    ds, entry = versions.staged_entry(engine, key, txn_id)
    refuse_member(entry)
    with engine.driver.locked(ds) as ds:
        ds, entry = versions.staged_entry(engine, key, txn_id)
        engine.driver.discard_staged(ds, entry, reason)
