"""The contract every sink fulfils. A sink only *stores*: the write planner (``planning/planner.py``) decides
which rows and identities a write produces, the transaction driver (``transaction/driver.py``) decides
when it counts. A third sink adds storage code here and nothing else.

Implementations: ``sinks.iceberg.IcebergSink`` and ``sinks.pg.PgSink``; ``open_sinks`` builds them.
"""

from __future__ import annotations

import logging
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, Literal, Protocol

import pyarrow as pa

from ..control.plane import DatasetRecord, Outcome
from ..core.errors import UnsupportedBySinkError
from ..core.identity import ROW_ID_TEXT
from ..core.partitions import PartitionFilter
from ..core.write_modes import WriteMode

AsOf = int | str | uuid.UUID | datetime | None

log = logging.getLogger("trident")


@dataclass(frozen=True)
class WriteRequest:
    """What a transaction asks a sink to store; built by the transaction driver."""

    dataset: DatasetRecord
    mode: WriteMode
    keys: tuple[str, ...]
    row_filter: str | None
    txn_id: uuid.UUID
    tau: datetime  # the transaction's instant (the ledger's started_at): every new row's __created_at
    reader: pa.RecordBatchReader | None  # None for a delete by row_filter
    spill_dir: Path
    note_location: Callable[[str], None]  # records where files go, for cleanup after a crash
    # Migration copies (canary): the reader already carries the identity columns, which the
    # planner keeps as they are instead of stamping new ones.
    preserve_identity: bool = False
    # Called right before the sink's atomic commit: raises when this writer lost its dataset lock
    # (another writer may own the dataset now), so a fenced writer never commits.
    fence: Callable[[], None] = lambda: None
    stage: bool = False  # write-audit-publish: commit on an audit branch, not the published version
    # A partition write: only the rows of this partition (range) are replaced, and new
    # rows reserve their __row_index range through ``reserve_rows(n) -> first`` (writers of other
    # partitions run at the same time).
    partition: PartitionFilter | None = None
    reserve_rows: Callable[[int], int] | None = None


@dataclass(frozen=True)
class WriteCounts:
    """The planner's numbers for one write; the sink stores them with its change (so recovery
    reads the same numbers the writer would have committed)."""

    rows_written: int
    next_row_index: int
    skipped: int = 0
    preserved: int = 0
    deleted: int = 0


@dataclass(frozen=True)
class StorageInfo:
    """What ``describe`` shows of a dataset's storage (``Sink.storage_info``)."""

    partitioning: tuple[tuple[str, str], ...] | None  # (column, transform) pairs; None: nothing stored
    partitions: list[dict[str, Any]] = field(default_factory=list)
    # the table's current metadata file (Iceberg): what another engine opens to read exactly this
    # version without the catalog (pyiceberg's StaticTable, DuckDB's iceberg_scan, Spark)
    metadata_location: str | None = None


@dataclass(frozen=True)
class Maintenance:
    key: str
    expired_snapshots: int
    deleted_files: int  # data files
    discarded_staged: list[uuid.UUID] = field(default_factory=list)  # staged versions past their age
    # compaction: small data files rewritten into target-size ones, in one snapshot
    compacted_files: int = 0
    compaction_files_written: int = 0
    data_files_before: int | None = None
    data_files_after: int | None = None
    # data files rewritten because their manifest bounds lost rows (a row group without min/max)
    repaired_files: int = 0
    # data files an older Trident wrote in encodings some readers cannot decode, rewritten
    reencoded_files: int = 0
    # pg sink: row blocks (its read cache) rebuilt over rows whose blocks keyed writes dropped
    rebuilt_blocks: int = 0
    # iceberg_native: inlined rows (small writes kept in the control plane) flushed into one snapshot
    flushed_rows: int = 0

    # manifests, manifest lists and metadata files that no retained snapshot, ref or log used
    deleted_metadata_files: int = 0
    aborted_uploads: int = 0  # incomplete multipart uploads of dead writers
    cleaned_txns: int = 0  # aborted transactions whose pending storage cleanup ran now
    cleanup_pending: int = 0  # ... and those whose cleanup still cannot run (storage unreachable)
    skipped: str | None = None  # why nothing was done: a write of the dataset was open (the next run does it)
    # iceberg_native, production's maintenance: each environment's own small files compacted on its
    # branch (environment -> files rewritten), docs/environments.md#maintenance
    environment_compacted_files: dict[str, int] = field(default_factory=dict)
    expiry_refused: str | None = None  # the catalog refuses snapshot expiry over its REST API (its own maintenance expires)


ScanPath = Literal["native", "arrow"]


@dataclass(frozen=True)
class ScanPlan:
    """How SQL and node compute read one dataset version (``Trident.scan_plan``).

    ``native``: ``files`` are the local paths of EXACTLY the snapshot's data files (the trident
    never writes delete files, so they are the rows) and ``field_ids`` maps each column of
    ``schema`` to its Iceberg field id, so DuckDB reads them itself with ``read_parquet`` and
    matches columns by id (a column added later reads as NULL in older files). ``arrow``: the
    caller registers ``Sink.arrow_source`` instead; ``reason`` says why (logged, and shown by
    ``describe``)."""

    key: str
    path: ScanPath
    schema: pa.Schema  # identity + user columns, in the table's order
    reason: str
    snapshot_id: int | None = None
    files: tuple[str, ...] = ()
    field_ids: tuple[int, ...] = ()
    # rows of this version inlined into the control plane (``read/tail.py``), in the table's stored
    # types: the version is the files' rows plus these; None when there are none
    tail: pa.Table | None = None


@dataclass(frozen=True)
class VersionStats:
    """What a version's data files already record about their rows (``Trident.version_stats``):
    the Parquet writer computed it when the version was written, so reading it costs the
    manifests, not a scan. ``null_counts`` holds only the top-level columns whose null count
    EVERY data file records (a file written before a column was added, or without column
    metrics, records none for it, though the column reads NULL there).

    ``integer_bounds``: for the top-level integer columns (Iceberg ``int``/``long``) whose lower
    AND upper bound every data file records, (smallest lower bound, largest upper bound). Files
    Trident writes record a column's exact min and max or no bound at all (``stats.py``), but a
    file written before that rule may claim bounds narrower than its values (``bounds_repair.py``),
    so a consumer treats them as a claim it verifies against the rows it reads (``key_bitmap``)."""

    rows: int
    null_counts: Mapping[str, int]
    integer_bounds: Mapping[str, tuple[int, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class Discarded:
    """What ``Sink.discard`` removed of an unfinished transaction."""

    files: int = 0
    uploads: int = 0  # incomplete multipart uploads aborted


class Removal(Protocol):
    """Which existing row versions a keyed write removes (the planner's ``KeyedMerge``)."""

    def removed_ids(self) -> pa.RecordBatchReader:
        """``__row_id`` of every removed row."""

    def affected_files(self) -> list[int]:
        """Indexes (the ``__file`` column of ``existing_keys``) of files holding removed rows."""

    def kept_rows(self, rows: pa.RecordBatchReader) -> pa.RecordBatchReader:
        """``rows`` minus the removed ones, unchanged."""


class SinkWrite(ABC):
    """One sink-side change in progress: rows go in, one atomic commit comes out. Leaving the
    ``with`` block without ``commit`` discards everything written."""

    arrow_schema: pa.Schema  # what ``put`` batches must look like (identity columns first)

    @abstractmethod
    def put(self, batches: Iterable[pa.RecordBatch], *, clustered: bool = False) -> int:
        """Store new row versions (already stamped and conformed); returns rows stored.
        ``clustered``: each partition's rows arrive together (the planner clustered a wide
        partition write), so a sink may finish a partition's files as soon as the next begins."""

    @abstractmethod
    def remove(self, removal: Removal) -> None:
        """Remove existing row versions (keyed writes other than replace)."""

    @abstractmethod
    def commit(self, counts: WriteCounts) -> Outcome:
        """Make everything put/removed durable as ONE change carrying the txn id."""

    @abstractmethod
    def discard(self) -> None:
        """Drop what was written and not committed."""

    def __enter__(self) -> SinkWrite:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        """On failure, drop what was written. A drop that fails too (storage gone) must not replace
        the write's own error: the transaction's abort records the cleanup as pending instead."""
        if t is None:
            return
        try:
            self.discard()
        except Exception as exc:
            log.warning("could not drop the files of a failed write yet (%s: %s)", type(exc).__name__, exc)


class StoredVersion(ABC):
    """The dataset's current version as one sink holds it, read once per write (the writer
    holds the dataset's lock, so it cannot change underneath)."""

    schema: pa.Schema | None  # identity + user columns; None when nothing is stored yet
    # the ``__row_id`` type this version stores (and a write into it mints): text in the pg sink
    # and in Iceberg tables created before uuid ids, ``pa.uuid()`` in every newer Iceberg table
    row_id_type: pa.DataType = ROW_ID_TEXT

    @abstractmethod
    def existing_keys(self, keys: tuple[str, ...], partition: PartitionFilter | None = None) -> pa.RecordBatchReader:
        """``(keys..., __row_id, __row_index[, __file])`` of every current row (only those of
        ``partition`` when given), streamed (only called when ``schema`` is not None)."""

    @abstractmethod
    def matching_ids(self, expr: Any) -> pa.RecordBatchReader:
        """``(__row_id[, __file])`` of the current rows matching ``expr`` (a pyarrow expression,
        parsed once by the planner)."""

    @abstractmethod
    def begin(self, req: WriteRequest, user_schema: pa.Schema, *, replace: bool) -> SinkWrite:
        """Start the change that stores this write's rows; with ``replace`` the change's rows
        become the whole dataset (schema ``user_schema`` wins)."""


@dataclass(frozen=True)
class RefMove:
    """A published group member whose table's current version must follow the control plane:
    ``ds``'s storage to ``snapshot_id``, the version transaction ``txn_id`` staged."""

    ds: DatasetRecord
    txn_id: uuid.UUID
    snapshot_id: int
    main: bool = True  # False: a later commit superseded it; only its audit branch is left to drop


class Sink(ABC):
    name: ClassVar[str]
    tracks_files: ClassVar[bool] = False  # existing_keys carries __file; Removal.affected_files matters
    time_travel: ClassVar[bool] = True  # keeps past versions: ``as_of`` reaches scan as a snapshot id
    stages: ClassVar[bool] = False  # can hold a staged (unpublished) version: write-audit-publish
    partitions: ClassVar[bool] = False  # can replace one partition of a dataset (WriteRequest.partition)

    def partitioning(self, ds: DatasetRecord) -> tuple[tuple[str, str], ...] | None:
        """The dataset's partitioning as (column, transform) pairs; () unpartitioned, None when
        nothing is stored yet."""
        return None

    def partition_stats(self, ds: DatasetRecord) -> list[dict[str, Any]]:
        """Per partition: its values, row count, data files and the last transaction that changed it."""
        return []

    def storage_info(self, ds: DatasetRecord) -> StorageInfo:
        """``partitioning``, ``partition_stats`` and where the table's metadata is, together
        (``describe`` shows them all, and is asked several times per pipeline step): a sink that
        reads them from one place reads it once."""
        return StorageInfo(self.partitioning(ds), self.partition_stats(ds))

    @abstractmethod
    def current(self, ds: DatasetRecord) -> StoredVersion:
        """The dataset's current version, for the planner to read and write against."""

    # -- what the transaction driver needs ----------------------------------------------------
    @abstractmethod
    def undo(self, ds: DatasetRecord, txn_id: uuid.UUID) -> None:
        """Revert a change a write made when the COMMIT step could not record it."""

    @abstractmethod
    def discard(self, ds: DatasetRecord, txn_id: uuid.UUID, location: str | None = None) -> Discarded:
        """Remove anything an unfinished transaction left behind (files it never committed,
        incomplete uploads); ``location`` is where the ledger says it wrote, for a writer that died
        mid-way or a first write whose table never came to exist. Idempotent; raises when storage
        cannot be reached (the ledger keeps the cleanup pending and it is retried)."""

    @abstractmethod
    def find_committed(self, ds: DatasetRecord, txn_id: uuid.UUID) -> Outcome | None:
        """The outcome of ``txn_id`` when its change is part of the dataset's current state."""

    # -- write-audit-publish (sinks with ``stages``) -----------------------------------------
    def publish(
        self, ds: DatasetRecord, txn_id: uuid.UUID, base_snapshot_id: int | None, partition: PartitionFilter | None = None
    ) -> Outcome:
        """Make a staged version the published one, metadata only. A sink that cannot stage
        never holds a staged version (``Trident.write(stage=True)`` refuses first), so reaching
        this is a named refusal, not a crash."""
        raise self.staging_refusal(ds)

    def discard_staged(self, ds: DatasetRecord, txn_id: uuid.UUID, location: str | None = None) -> None:
        """Drop a staged version and the storage only it used (see ``publish``)."""
        raise self.staging_refusal(ds)

    def rebase_staged(self, ds: DatasetRecord, txn_id: uuid.UUID, partition: PartitionFilter) -> Outcome:
        """Re-base a staged partition write onto the dataset's current version (other partitions'
        writers committed since it was staged), still staged; its new outcome. Raises
        StagedVersionConflictError when the partition itself changed since staging."""
        raise self.staging_refusal(ds)

    def drop_branch(
        self, ds: DatasetRecord, environment: str, txn_ids: set[uuid.UUID], *, remove_table: bool
    ) -> tuple[int, bool]:
        """Remove ``environment``'s branch of the dataset and what only it used (ops/environments.py);
        returns (files deleted, whether the table itself went). A sink without branches has none."""
        return 0, False

    def move_refs(self, moves: Sequence[RefMove], idempotency_key: str) -> int:
        """Make the published members of a transaction group the storage's current versions (the
        control plane already says they are); idempotent. Returns the storage commits it took."""
        if moves:
            raise self.staging_refusal(moves[0].ds)
        return 0

    def staging_refusal(self, ds: DatasetRecord) -> UnsupportedBySinkError:
        return UnsupportedBySinkError(
            f"dataset {ds.key!r} lives in sink {self.name!r}, which cannot hold a staged version "
            f"(write-audit-publish needs iceberg_native): move it with `trident canary {ds.key}`"
        )

    # -- reads and upkeep ---------------------------------------------------------------------
    @abstractmethod
    def scan(self, ds: DatasetRecord, *, columns: list[str] | None, row_filter: str | None, as_of: AsOf) -> pa.RecordBatchReader:
        """Stream the dataset's rows (bounded memory)."""

    def scan_staged(
        self, ds: DatasetRecord, snapshot_id: int, *, columns: list[str] | None, row_filter: str | None
    ) -> pa.RecordBatchReader:
        """Stream a staged (unpublished) version; by default as a past version (``as_of``)."""
        return self.scan(ds, columns=columns, row_filter=row_filter, as_of=snapshot_id)

    @abstractmethod
    def arrow_source(self, ds: DatasetRecord, partition: Any = None, snapshot_id: int | None = None) -> Any:
        """Something DuckDB can scan repeatedly with projection pushdown (SQL over datasets)."""

    def scan_plan(self, ds: DatasetRecord, snapshot_id: int | None = None) -> ScanPlan:
        """How DuckDB should read the current (or ``snapshot_id``'s) version; by default through
        ``arrow_source``."""
        return ScanPlan(key=ds.key, path="arrow", schema=self.schema(ds), reason=self.scan_path(ds)[1])

    def version_stats(self, ds: DatasetRecord, snapshot_id: int | None = None) -> VersionStats | None:
        """The current (or ``snapshot_id``'s) version's row and null counts from what its files
        record; None when the sink keeps no such statistics (callers then count with SQL)."""
        return None

    def scan_path(self, ds: DatasetRecord) -> tuple[ScanPath, str]:
        """Which path a scan of ``ds`` takes and why, without planning it (cheap: ``describe``)."""
        return "arrow", f"sink {self.name!r} has no files DuckDB can read itself"

    def read(self, ds: DatasetRecord, *, columns: list[str] | None, row_filter: str | None, as_of: AsOf) -> pa.Table:
        """The whole result in memory; a sink may read faster than draining ``scan`` (in parallel)."""
        return self.scan(ds, columns=columns, row_filter=row_filter, as_of=as_of).read_all()

    @abstractmethod
    def schema(self, ds: DatasetRecord) -> pa.Schema:
        """The dataset's current Arrow schema, identity columns first."""

    def compact(self, ds: DatasetRecord) -> Maintenance:
        """Rewrite small storage units into target-size ones without changing any row (nothing to
        do by default); the caller holds the dataset's writer lock."""
        return Maintenance(key=ds.key, expired_snapshots=0, deleted_files=0)

    def maintain(
        self, ds: DatasetRecord, *, older_than: datetime, retain_last: int, uploads_before: datetime | None = None
    ) -> Maintenance:
        """Expire old versions and delete the storage only they used, and abort incomplete uploads
        started before ``uploads_before`` (nothing to do by default)."""
        return Maintenance(key=ds.key, expired_snapshots=0, deleted_files=0)

    @abstractmethod
    def drop(self, ds: DatasetRecord) -> None:
        """Delete the dataset's rows and storage."""
