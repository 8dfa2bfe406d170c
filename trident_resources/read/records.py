"""What the control plane knows of datasets, as the client reports it: a dataset's description,
history, provenance and watermarks, the staged versions waiting for a decision, the datasets
with storage cleanup pending, and the workspace's commits in order.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from ..control.plane import LedgerEntry, entry_environment
from ..core import arguments
from ..core.errors import DatasetNotFoundError
from ..core.keys import validate_key
from ..core.partitions import PartitionFilter
from ..core.results import Description
from ..core.schemas import describe_schema
from ..engine import Engine
from ..sinks.contract import StorageInfo
from ..transaction.driver import StagedRecords
from . import tail, versions


def describe(engine: Engine, key: str, *, storage: bool = True, staged: uuid.UUID | str | None = None) -> Description:
    """``Trident.describe`` (see there)."""
    if staged is not None:
        return _describe_staged(engine, key, staged)
    ds, provenance = engine.record_with_provenance(key)
    scan_path, scan_reason = "unknown", "not looked up: describe(storage=False)"
    stored = StorageInfo(None)
    if storage:
        scan_path, scan_reason = engine.sink(ds.sink).scan_path(ds)
        stored = engine.sink(ds.sink).storage_info(ds)
    return Description(
        scan_path=scan_path,
        scan_reason=scan_reason,
        key=ds.key,
        workspace=ds.workspace,
        dataset_id=ds.dataset_id,
        sink=ds.sink,
        row_count=ds.row_count,
        schema=ds.schema or [],
        schema_version=ds.schema_version,
        snapshot_id=ds.snapshot_id,
        last_txn_id=ds.last_txn_id,
        committed_at=ds.committed_at,
        updated_at=ds.updated_at,
        iceberg_identifier=ds.iceberg_identifier,
        provenance=provenance,
        partitioning=[f"{t}({c})" for c, t in (stored.partitioning or ())],
        partitions=stored.partitions,
        metadata_location=stored.metadata_location,
        inlined_rows=tail.rows_count(engine, ds),
    )


def _describe_staged(engine: Engine, key: str, staged: uuid.UUID | str) -> Description:
    """A staged version as ``describe`` reports versions: its rows, schema, snapshot and the
    provenance its publish will record; ``committed_at`` None (it is not visible yet). Also for a
    dataset whose first version is the staged one."""
    ds, entry = versions.staged_entry(engine, key, staged)
    schema = describe_schema(engine.sink(ds.sink).scan_plan(ds, snapshot_id=entry.snapshot_id).schema)
    return Description(
        scan_path="unknown",
        scan_reason="a staged version",
        key=ds.key,
        workspace=ds.workspace,
        dataset_id=ds.dataset_id,
        sink=ds.sink,
        row_count=entry.row_count or 0,
        schema=schema,
        schema_version=entry.schema_version if entry.schema_version is not None else ds.schema_version,
        snapshot_id=entry.snapshot_id,
        last_txn_id=entry.txn_id,
        committed_at=None,
        updated_at=ds.updated_at,
        iceberg_identifier=ds.iceberg_identifier,
        provenance=dict(StagedRecords.of(entry).provenance or {}),
    )


def history(engine: Engine, key: str, limit: int | None = None) -> list[LedgerEntry]:
    """``Trident.history`` (see there)."""
    entries = engine.control.history_by_key(engine.workspace, validate_key(key), arguments.history_limit(limit))
    if entries is None:
        raise DatasetNotFoundError(key, engine.workspace)
    return entries


def watermarks(engine: Engine, key: str, partition: PartitionFilter | None = None) -> dict[str, datetime]:
    """``Trident.watermarks`` (see there)."""
    ds = engine.control.dataset(engine.workspace, validate_key(key))
    partition = arguments.partition_filter(partition)
    if ds is None or (partition is not None and not ds.exists):
        return {}
    parts = [""] if partition is None else partition.bind(engine.sink(ds.sink).schema(ds)).watermark_keys()
    found: dict[uuid.UUID, dict[str, datetime]] = {}
    for (source_id, part), mark in engine.control.watermarks(ds.dataset_id, parts).items():
        found.setdefault(source_id, {})[part] = mark
    out = {}
    for source_id, marks in found.items():
        src = engine.control.dataset_by_id(source_id)
        if src is not None and len(marks) == len(parts) and len(set(marks.values())) == 1:
            out[src.key] = next(iter(marks.values()))
    return out


def staged_versions(engine: Engine, key: str | None = None) -> list[tuple[str, LedgerEntry]]:
    """``Trident.staged`` (see there)."""
    if key is not None:  # one dataset's: its entries only, no look-up of each entry's dataset
        entries = engine.control.staged_entries_by_key(engine.workspace, validate_key(key))
        if entries is None:
            raise DatasetNotFoundError(key, engine.workspace)
        return [(key, entry) for entry in entries if entry_environment(entry) == engine.environment]
    out = []
    for entry in engine.control.staged_entries():
        if entry_environment(entry) != engine.environment:  # another environment's (or production's)
            continue
        ds = engine.control.dataset_by_id(entry.dataset_id)
        if ds is not None and ds.workspace == engine.workspace:
            out.append((ds.key, entry))
    return out


def pending_cleanup_keys(engine: Engine) -> list[str]:
    """``Trident.pending_cleanup_keys`` (see there)."""
    keys = set()
    for entry in engine.control.pending_cleanups(engine.workspace):
        ds = engine.control.dataset_by_id(entry.dataset_id)
        if ds is not None:
            keys.add(ds.key)
    return sorted(keys)
