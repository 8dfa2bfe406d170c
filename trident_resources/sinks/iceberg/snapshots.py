"""What a table's snapshots say, shared by the writer, the reader and write-audit-publish: the
transaction a snapshot carries (its summary's ``trident.txn-id``), the ``Outcome`` its summary
recorded, the audit branch a staged transaction commits to, and the schema of the published
version (main's snapshot, which a staged write's schema evolution must not change)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from ...control.plane import Outcome
from ...core.schemas import describe_schema

TXN_PROPERTY = "trident.txn-id"
# The data files a snapshot ADDED have bounds from ``stats.py``, which leaves a column unbounded
# when a row group has values but no min/max: ``bounds_repair`` never reads their footers. Every
# snapshot whose files come from Trident's file writers carries it (writes, compaction; a rebased
# publish copies the staged snapshot's summary, so it says what the staged write said).
BOUNDS_PROPERTY = "trident.bounds"
EXACT_BOUNDS = "v2"
# Trident's own maintenance commits (compaction, with the bounds repair it carries) say what they
# are here and carry no ``trident.txn-id``: they change files, never rows.
OPERATION_PROPERTY = "trident.operation"
MAINTENANCE_OPERATIONS = frozenset({"compaction"})
# A maintenance snapshot's data version: the snapshot id of the transaction whose rows it holds
# (its parent's data version, recorded when it commits, so expiring the parent loses nothing).
DATA_VERSION_PROPERTY = "trident.data-version"


def summary_number(summary: Any, key: str) -> int:
    """A numeric snapshot-summary property (absent means zero)."""
    try:
        value = summary[key]
    except KeyError:
        return 0
    return int(value) if value is not None else 0


def visible_since(snap: Snapshot, table: Table | None = None) -> datetime:
    """When ``snap`` became the table's published version: its newest entry in ``table``'s
    snapshot log (what Iceberg readers' time travel by timestamp goes by: a staged snapshot
    published later entered the log then, not when it was written), else its own timestamp
    (a snapshot committed straight to main enters the log with it)."""
    ms = snap.timestamp_ms
    if table is not None:
        ms = next((e.timestamp_ms for e in reversed(table.metadata.snapshot_log) if e.snapshot_id == snap.snapshot_id), ms)
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def summary_outcome(snap: Snapshot, schema: pa.Schema, table: Table | None = None) -> Outcome:
    """A transaction's outcome as its snapshot summary recorded it: the same numbers whether the
    writer commits them itself or the reconciler rolls a crashed writer's transaction forward,
    and the instant it became visible (``visible_since``; ``table`` is the table as committed)."""
    s = snap.summary
    assert s is not None
    return Outcome(
        rows_written=summary_number(s, "trident.rows-written"),
        row_count=summary_number(s, "total-records"),
        next_row_index=summary_number(s, "trident.next-row-index"),
        snapshot_id=snap.snapshot_id,
        schema=describe_schema(schema),
        skipped=summary_number(s, "trident.skipped"),
        preserved=summary_number(s, "trident.preserved"),
        deleted=summary_number(s, "trident.deleted"),
        visible_at=visible_since(snap, table),
    )


def carries_txn(snap: Snapshot, txn_id: uuid.UUID) -> bool:
    """Was ``snap`` committed by transaction ``txn_id`` (its summary says so)?"""
    return snap.summary is not None and snap.summary.get(TXN_PROPERTY) == str(txn_id)


def has_exact_bounds(snap: Snapshot) -> bool:
    """Were the files ``snap`` added written with ``stats.py``'s bounds (see ``BOUNDS_PROPERTY``)?"""
    return snap.summary is not None and snap.summary.get(BOUNDS_PROPERTY) == EXACT_BOUNDS


def is_maintenance(snap: Snapshot) -> bool:
    """Is ``snap`` one of Trident's own maintenance commits (same rows as its parent)?"""
    s = snap.summary
    return s is not None and s.get(OPERATION_PROPERTY) in MAINTENANCE_OPERATIONS and s.get(TXN_PROPERTY) is None


def data_version(table: Table, snapshot_id: int | None) -> int | None:
    """The data version ``snapshot_id`` holds: its own id, unless it is a maintenance snapshot,
    whose rows are those of the version it was made from. Every check of "is the table still at
    the version I started from" compares data versions, so a compaction between the two points
    changes nothing. An id the table no longer has is its own data version."""
    by_id = {s.snapshot_id: s for s in table.snapshots()}
    seen: set[int] = set()
    while snapshot_id is not None and snapshot_id not in seen:
        seen.add(snapshot_id)
        snap = by_id.get(snapshot_id)
        if snap is None or not is_maintenance(snap):
            return snapshot_id
        assert snap.summary is not None
        recorded = snap.summary.get(DATA_VERSION_PROPERTY)
        if recorded is not None:
            return int(recorded)
        snapshot_id = snap.parent_snapshot_id
    return snapshot_id


def same_data_version(table: Table, a: int | None, b: int | None) -> bool:
    """Do snapshots ``a`` and ``b`` hold the same data version (see ``data_version``)?"""
    return a == b or data_version(table, a) == data_version(table, b)


def snapshot_to_read(table: Table, version: int) -> int:
    """The snapshot to read data version ``version`` from: the current one when it holds that
    version (a compaction of it is the same rows in fewer files), else ``version`` itself while
    the table has it, else the newest maintenance snapshot made from it (the version's own
    snapshot expired, its compacted copy did not). Otherwise ``version``, for the caller to refuse."""
    current = table.current_snapshot()
    if current is not None and data_version(table, current.snapshot_id) == version:
        return current.snapshot_id
    if table.snapshot_by_id(version) is not None:
        return version
    copies = [s for s in table.snapshots() if is_maintenance(s) and data_version(table, s.snapshot_id) == version]
    return max(copies, key=lambda s: s.sequence_number or 0).snapshot_id if copies else version


ENV_BRANCH_PREFIX = "trident_env_"


def env_branch(environment: str) -> str:
    """The branch an environment's versions of a table live on (docs/environments.md)."""
    return f"{ENV_BRANCH_PREFIX}{environment}"


def audit_branch(txn_id: uuid.UUID) -> str:
    """The branch a staged (write-audit-publish) transaction commits to."""
    return f"trident-audit-{txn_id}"


def published_iceberg_schema(table: Table) -> Any:
    """The Iceberg schema of the version readers see (main's snapshot), which a staged write's
    schema evolution on the table must not change."""
    snap = table.current_snapshot()
    schema = table.schema()
    if snap is not None and snap.schema_id is not None:
        schema = table.schemas().get(snap.schema_id, schema)
    return schema


def published_schema(table: Table) -> pa.Schema:
    return schema_to_pyarrow(published_iceberg_schema(table), include_field_ids=False)


def has_column(schema: Any, name: str) -> bool:
    """Does the Iceberg ``schema`` have a top-level column ``name``? (``find_field`` raises.)"""
    try:
        schema.find_field(name)
    except ValueError:
        return False
    return True


def without_metadata(schema: pa.Schema) -> pa.Schema:
    """``schema`` without field metadata (Iceberg field ids): the shape the sink reports and
    compares, whichever table or snapshot it came from."""
    return pa.schema([pa.field(f.name, f.type, f.nullable) for f in schema])
