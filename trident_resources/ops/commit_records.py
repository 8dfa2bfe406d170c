"""What a write records and reports besides its rows: watermarks as control-plane rows, the
metadata a staged write keeps for its publish, and the ``WriteResult`` built from the ledger."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ..control.plane import ENV_LEDGER_META, PRODUCTION, LedgerEntry, Outcome
from ..control.router import RouteDecision
from ..core import arguments
from ..core.errors import DatasetNotFoundError, InvalidWriteError
from ..core.keys import validate_key
from ..core.results import WriteResult
from ..engine import Engine
from ..transaction.driver import Watermarks


def watermark_rows(
    engine: Engine, watermarks: Mapping[str, tuple[datetime, uuid.UUID | None]] | None, partition_keys: list[str]
) -> Watermarks:
    """``watermarks`` as control-plane rows, one per source and output partition (``[""]``: the
    whole output); InvalidWriteError for a malformed one, and DatasetNotFoundError for a source
    key that is not a dataset."""
    if watermarks is None:
        return []
    if not isinstance(watermarks, Mapping):
        raise InvalidWriteError(f"watermarks must map source keys to (committed_at, source txn id), got {watermarks!r}")
    rows: Watermarks = []
    # the sources' records in one query, not one per source; refusals in the input's order
    records = (
        engine.control.datasets_by_keys(engine.workspace, [k for k in watermarks if isinstance(k, str)]) if watermarks else {}
    )
    for key, value in watermarks.items():
        if not isinstance(value, (tuple, list)) or len(value) != 2 or not isinstance(value[0], datetime):
            raise InvalidWriteError(f"watermarks[{key!r}] must be (committed_at: datetime, source txn id or None), got {value!r}")
        found = records.get(validate_key(key))
        if found is None or not found.exists:
            raise DatasetNotFoundError(key, engine.workspace)
        source = found.dataset_id
        rows.extend((source, part, value[0], arguments.txn_id(value[1])) for part in partition_keys)
    return rows


def noop_result(engine: Engine, key: str, txn: uuid.UUID, route: RouteDecision) -> WriteResult:
    prior = engine.control.ledger_entry(txn)
    assert prior is not None and prior.status == "committed"
    outcome = Outcome(
        rows_written=prior.rows_written or 0,
        row_count=prior.row_count or 0,
        next_row_index=0,
        snapshot_id=prior.snapshot_id,
        schema=[],
        skipped=prior.skipped or 0,
        preserved=prior.preserved or 0,
    )
    return write_result(key, prior, outcome, route, noop=True)


def staged_meta(
    provenance: Mapping[str, Any] | None,
    watermarks: Mapping[str, tuple[datetime, uuid.UUID | None]] | None,
    partition_keys: list[str],
) -> dict[str, Any]:
    return {
        "provenance": dict(provenance) if provenance is not None else None,
        "watermarks": {k: [mark.isoformat(), str(src) if src else None] for k, (mark, src) in (watermarks or {}).items()},
        "watermark_partitions": partition_keys,
    }


def write_result(
    key: str, entry: LedgerEntry, outcome: Outcome, route: RouteDecision, noop: bool = False, staged: bool = False
) -> WriteResult:
    return WriteResult(
        key=key,
        txn_id=entry.txn_id,
        mode=entry.mode,
        writer=entry.writer,
        sink=entry.sink,
        rows_written=outcome.rows_written,
        row_count=outcome.row_count,
        skipped=outcome.skipped,
        preserved=outcome.preserved,
        deleted=outcome.deleted,
        snapshot_id=outcome.snapshot_id,
        committed_at=entry.committed_at or entry.staged_at or entry.started_at,
        created_at=entry.started_at,
        schema_version=entry.schema_version or 0,
        route=route.describe(),
        noop=noop,
        staged=staged,
        environment=str(entry.metadata.get(ENV_LEDGER_META) or PRODUCTION),
    )
