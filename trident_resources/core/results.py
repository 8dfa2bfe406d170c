"""What the client returns: plain dataclasses, safe to print and to put in Dagster metadata."""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class WriteResult:
    key: str
    txn_id: uuid.UUID
    mode: str
    writer: str
    sink: str
    rows_written: int
    row_count: int
    skipped: int
    preserved: int
    deleted: int
    snapshot_id: int | None
    committed_at: datetime  # when the version became visible (a staged one: when it was staged)
    created_at: datetime  # the transaction's instant τ: every row it wrote has it as __created_at
    schema_version: int
    route: str
    noop: bool = False  # a retry of a transaction id that had already committed
    staged: bool = False  # committed on an audit branch: not visible until Trident.publish
    environment: str = "main"  # the environment it was written in (main: production; docs/environments.md)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Description:
    key: str
    workspace: str
    dataset_id: uuid.UUID
    sink: str
    row_count: int
    schema: list[dict[str, Any]]
    schema_version: int
    snapshot_id: int | None
    last_txn_id: uuid.UUID | None
    committed_at: datetime | None
    updated_at: datetime
    iceberg_identifier: str | None
    provenance: dict[str, Any] = field(default_factory=dict)
    partitioning: list[str] = field(default_factory=list)  # e.g. ["day(l_shipdate)"]; [] unpartitioned
    # per partition: {"partition": {...}, "row_count", "files", "last_snapshot_id", "last_txn_id"}
    partitions: list[dict[str, Any]] = field(default_factory=list)
    # How SQL and node compute scan it: "native" (DuckDB read_parquet over the snapshot's files)
    # or "arrow" (pyarrow reads, DuckDB scans Arrow), and why.
    scan_path: str = "arrow"
    scan_reason: str = ""
    # Iceberg: the table's current metadata file, where another engine reads this version from
    # without the catalog (pyiceberg's StaticTable.from_metadata, DuckDB's iceberg_scan); None for
    # the pg sink and for describe(storage=False)
    metadata_location: str | None = None
    # rows inlined into the control plane by small writes and not flushed into Iceberg yet: part
    # of row_count and of every Trident read, but not of what another Iceberg engine reads
    inlined_rows: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ReconcileReport:
    rolled_forward: list[uuid.UUID]
    aborted: list[uuid.UUID]
    still_running: list[uuid.UUID]
    # Storage cleanup of aborted transactions: leftovers an earlier abort could not
    # remove (storage unreachable), removed now; and those still pending, retried next time.
    cleaned_up: list[uuid.UUID] = field(default_factory=list)
    cleanup_pending: list[uuid.UUID] = field(default_factory=list)
    deleted_files: int = 0  # data files of aborted transactions removed by this pass
    aborted_uploads: int = 0  # incomplete multipart uploads of aborted transactions aborted by this pass


@dataclass(frozen=True)
class GroupResult:
    """A published transaction group: every member's result (by dataset key), all committed at
    ``published_at``; ``refs_moved`` is False when the Iceberg refs could not all follow yet
    (Trident's readers see the group anyway; ``reconcile`` moves the rest)."""

    group_id: uuid.UUID
    published_at: datetime | None
    results: dict[str, WriteResult]
    refs_moved: bool = True
