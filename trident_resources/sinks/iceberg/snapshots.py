"""What a table's snapshots say, shared by the writer, the reader and write-audit-publish: the
transaction a snapshot carries (its summary's ``trident.txn-id``), the ``Outcome`` its summary
recorded, the audit branch a staged transaction commits to, and the schema of the published
version (main's snapshot, which a staged write's schema evolution must not change)."""

from __future__ import annotations

import uuid
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


def summary_number(summary: Any, key: str) -> int:
    """A numeric snapshot-summary property (absent means zero)."""
    try:
        value = summary[key]
    except KeyError:
        return 0
    return int(value) if value is not None else 0


def summary_outcome(snap: Snapshot, schema: pa.Schema) -> Outcome:
    """A transaction's outcome as its snapshot summary recorded it: the same numbers whether the
    writer commits them itself or the reconciler rolls a crashed writer's transaction forward."""
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
    )


def carries_txn(snap: Snapshot, txn_id: uuid.UUID) -> bool:
    """Was ``snap`` committed by transaction ``txn_id`` (its summary says so)?"""
    return snap.summary is not None and snap.summary.get(TXN_PROPERTY) == str(txn_id)


def has_exact_bounds(snap: Snapshot) -> bool:
    """Were the files ``snap`` added written with ``stats.py``'s bounds (see ``BOUNDS_PROPERTY``)?"""
    return snap.summary is not None and snap.summary.get(BOUNDS_PROPERTY) == EXACT_BOUNDS


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
