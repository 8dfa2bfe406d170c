"""``Trident``: the one door. Every write and read of dataset rows goes through here, whatever sink
the dataset lives in, and every write is one INTENT -> WRITE -> COMMIT transaction."""

from __future__ import annotations

import builtins
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, Literal, TypeVar, overload

import pyarrow as pa

from .control.groups import GroupRecord
from .control.plane import DatasetRecord, LedgerEntry
from .core import arguments
from .core.errors import InvalidArgumentError, InvalidSettingsError, InvalidWriteError
from .core.keys import validate_key
from .core.partitions import PartitionFilter
from .core.results import Description, GroupResult, ReconcileReport, WriteResult
from .core.settings import TridentSettings, settings_from_env
from .core.write_modes import WriteMode
from .engine import Engine
from .ops import adopt, drop, edits, environments, flush, group, maintain, manifest, migrate, publish, write
from .ops.group import TransactionGroup
from .ops.migrate import MigrationReport
from .ops.stream_ingest import IngestStream, WriteOptions
from .planning.inputs import to_reader
from .read import datasets, records, sql
from .sinks.contract import AsOf, Maintenance, ScanPlan, VersionStats

log = logging.getLogger("trident")
Watermarks = Mapping[str, tuple[datetime, uuid.UUID | None]]  # source key -> (committed_at, source txn id)
R = TypeVar("R")


class Trident:
    """Open one per process (it owns a connection pool); ``close()`` or use it as a context manager."""

    def __init__(self, settings: TridentSettings | None = None) -> None:
        """Open the engine: the control plane (migrated), the sinks, the router, the SQL sandboxes.

        Raises:
            InvalidSettingsError: ``settings`` is not a TridentSettings, or a setting is unusable.
            ControlPlaneUnavailableError: the control-plane Postgres cannot be reached.
            StorageUnavailableError: the Iceberg catalog cannot be reached.
        """
        if settings is not None and not isinstance(settings, TridentSettings):  # a dict failed as "no attribute 'home'"
            raise InvalidSettingsError(
                f"settings must be a TridentSettings (e.g. TridentSettings(workspace='x')), got a {type(settings).__name__}"
            )
        self.settings = settings or settings_from_env()
        self.engine = Engine(self.settings)
        self.control = self.engine.control
        self.sql_sandboxes = self.engine.sql_sandboxes
        self.router = self.engine.router
        self.driver = self.engine.driver

    @classmethod
    def from_env(cls) -> Trident:
        """A ``Trident`` on the settings the ``TRIDENT_*`` environment variables give (the
        embedded default when none is set).

        Raises:
            InvalidSettingsError: a ``TRIDENT_*`` variable holds an unusable value.
            ControlPlaneUnavailableError: the control-plane Postgres cannot be reached.
            StorageUnavailableError: the Iceberg catalog cannot be reached.
        """
        return cls(settings_from_env())

    def close(self) -> None:
        """Release the connection pool and the SQL sandboxes; a closed ``Trident`` raises
        ``TridentClosedError`` when used again.

        Raises:
            Nothing: closing twice is harmless.
        """
        self.engine.close()

    def __enter__(self) -> Trident:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Trident(workspace={self.settings.workspace!r}, home={str(self.settings.home)!r})"

    @property
    def workspace(self) -> str:
        return self.settings.workspace

    @property
    def environment(self) -> str:
        """The environment this Trident reads and writes (``main``: production; docs/environments.md)."""
        return self.settings.environment

    @property
    def environments(self) -> Environments:
        """The workspace's environments: ``list()``, ``show(name)``, ``diff(name)``,
        ``promote(name)``, ``drop(name)``, ``stale()`` (``ops/environments.py``)."""
        return Environments(self.engine)

    # -- datasets -------------------------------------------------------------------------------
    def dataset_record(self, key: str) -> DatasetRecord:
        """The control plane's record of an existing dataset (``DatasetNotFoundError`` otherwise):
        what tools hand to a sink.

        Raises:
            InvalidDatasetKeyError: ``key`` is not a dataset key.
            DatasetNotFoundError: no dataset ``key`` exists in this workspace.
            ControlPlaneUnavailableError: the control-plane Postgres went away.
        """
        return self.engine.dataset_record(key)

    def exists(self, key: str) -> bool:
        """Whether dataset ``key`` exists (a first write that aborted leaves none).

        Raises:
            InvalidDatasetKeyError: ``key`` is not a dataset key.
            ControlPlaneUnavailableError: the control-plane Postgres went away.
        """
        ds = self.control.dataset(self.workspace, validate_key(key))
        return ds is not None and ds.exists

    def datasets(self) -> list[DatasetRecord]:
        """This workspace's datasets.

        Raises:
            ControlPlaneUnavailableError: the control-plane Postgres went away.
        """
        return self.control.datasets(self.workspace)

    # -- WRITE ------------------------------------------------------------------------------
    # One overload per rule a mode follows, so a type checker refuses what ``write`` refuses at run
    # time (the run-time checks stay: not every caller is type-checked). A mode known only at run
    # time takes the last overload.
    @overload
    def write(
        self,
        key: str,
        data: Any,
        *,
        mode: Literal["replace"] = ...,
        writer: str = ...,
        source_refs: Iterable[str] | None = ...,
        metadata: Mapping[str, Any] | None = ...,
        txn_id: uuid.UUID | str | None = ...,
        provenance: Mapping[str, Any] | None = ...,
        watermarks: Watermarks | None = ...,
        stage: bool = ...,
        keys: Iterable[str] | str | None = ...,
        partition: PartitionFilter | None = ...,
    ) -> WriteResult: ...

    @overload
    def write(
        self,
        key: str,
        data: Any,
        *,
        mode: Literal["append"],
        writer: str = ...,
        source_refs: Iterable[str] | None = ...,
        metadata: Mapping[str, Any] | None = ...,
        txn_id: uuid.UUID | str | None = ...,
        provenance: Mapping[str, Any] | None = ...,
        watermarks: Watermarks | None = ...,
        stage: bool = ...,
        partition: PartitionFilter | None = ...,
    ) -> WriteResult: ...

    @overload
    def write(
        self,
        key: str,
        data: Any,
        *,
        mode: Literal["upsert", "append_new"],
        keys: Iterable[str] | str,
        writer: str = ...,
        source_refs: Iterable[str] | None = ...,
        metadata: Mapping[str, Any] | None = ...,
        txn_id: uuid.UUID | str | None = ...,
        provenance: Mapping[str, Any] | None = ...,
        watermarks: Watermarks | None = ...,
        stage: bool = ...,
        partition: PartitionFilter | None = ...,
    ) -> WriteResult: ...

    @overload
    def write(
        self,
        key: str,
        data: Any,
        *,
        mode: Literal["delete"],
        keys: Iterable[str] | str,
        writer: str = ...,
        source_refs: Iterable[str] | None = ...,
        metadata: Mapping[str, Any] | None = ...,
        txn_id: uuid.UUID | str | None = ...,
        provenance: Mapping[str, Any] | None = ...,
        watermarks: Watermarks | None = ...,
        stage: bool = ...,
    ) -> WriteResult: ...

    @overload
    def write(
        self,
        key: str,
        data: None = ...,
        *,
        mode: Literal["delete"],
        row_filter: str,
        writer: str = ...,
        source_refs: Iterable[str] | None = ...,
        metadata: Mapping[str, Any] | None = ...,
        txn_id: uuid.UUID | str | None = ...,
        provenance: Mapping[str, Any] | None = ...,
        watermarks: Watermarks | None = ...,
        stage: bool = ...,
    ) -> WriteResult: ...

    @overload
    def write(
        self,
        key: str,
        data: Any = ...,
        *,
        mode: WriteMode,
        writer: str = ...,
        source_refs: Iterable[str] | None = ...,
        metadata: Mapping[str, Any] | None = ...,
        txn_id: uuid.UUID | str | None = ...,
        provenance: Mapping[str, Any] | None = ...,
        watermarks: Watermarks | None = ...,
        stage: bool = ...,
        keys: Iterable[str] | str | None = ...,
        row_filter: str | None = ...,
        partition: PartitionFilter | None = ...,
    ) -> WriteResult: ...

    def write(
        self,
        key: str,
        data: Any = None,
        *,
        mode: WriteMode = "replace",
        writer: str = "ingest.api",
        keys: Iterable[str] | str | None = None,
        row_filter: str | None = None,
        source_refs: Iterable[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
        txn_id: uuid.UUID | str | None = None,
        provenance: Mapping[str, Any] | None = None,
        watermarks: Watermarks | None = None,
        stage: bool = False,
        partition: PartitionFilter | None = None,
    ) -> WriteResult:
        """Write ``data`` to dataset ``key`` as one transaction; the modes (see docs/python-api.md "Write modes"): ``replace`` (the whole dataset, or with ``keys`` keeping the identity of rows whose key stays), ``append``, ``upsert`` and ``append_new`` (by ``keys``), ``delete`` (by ``keys`` or ``row_filter``).

        ``txn_id`` makes a retry idempotent: a transaction id that already committed is a no-op.
        ``watermarks`` (source key -> (committed_at, source txn)) and ``provenance`` are recorded
        in the same COMMIT step. ``stage=True`` commits the version on an audit branch instead
        (ledger ``staged``, readers see nothing new) until ``publish`` or ``discard``.

        ``partition`` scopes the write to one partition (or a range of them): ``replace`` then
        replaces exactly the rows of that partition and nothing else (one snapshot), keyed modes
        merge against that partition's rows only, and any input row outside it is refused with
        PartitionError before anything is written. The dataset's Iceberg table is partitioned as
        the filter says (created so, or evolved in the same commit). Writers of different
        partitions of one dataset run concurrently; only their commits are serialised.

        Raises:
            InvalidDatasetKeyError: ``key`` is not a dataset key.
            InvalidWriteError: a mode, its keys/row_filter/data, a writer or a watermark is malformed (before anything is written).
            InvalidArgumentError: an argument has the wrong type.
            ReservedColumnError: ``data`` carries an identity column (``__row_id``...).
            SchemaMismatchError: ``data`` cannot be stored in the dataset's schema.
            EmptyInputError, NullKeyError, DuplicateKeyError: the input's keys cannot be merged.
            PartitionError: a row lies outside ``partition``, or the filter is malformed.
            DatasetNotFoundError: a delete (or a watermark's source) names no dataset.
            SinkMismatchError: the writer resolves to another sink than the dataset lives in.
            UnsupportedBySinkError: the dataset's sink cannot do this (partitions, staging).
            ConcurrentWriteError: another writer held the dataset's lock past ``TRIDENT_WRITER_WAIT_SECONDS``.
            WriteFailedError, StorageUnavailableError, WriterLockLostError: the write failed; the
                ledger says ``aborted`` (or the reconciler settles it) and the dataset is as it was.
            ControlPlaneUnavailableError: the control-plane Postgres went away.
        """
        return write.write(
            self.engine,
            key,
            data,
            mode=mode,
            writer=writer,
            keys=keys,
            row_filter=row_filter,
            source_refs=source_refs,
            metadata=metadata,
            txn_id=txn_id,
            provenance=provenance,
            watermarks=watermarks,
            stage=stage,
            partition=partition,
        )

    def adopt(self, key: str) -> Description:
        """Take over an existing Iceberg table at ``key``'s identifier that this control plane did
        not create (a rebuilt control plane, a table written by another tool with Trident's identity
        columns). The table is stamped with the dataset's id and recorded as one ledger
        transaction; ``__row_index`` continues from the table's max + 1. Refused (TableOwnershipError)
        when the table belongs to another dataset or lacks the identity columns; see docs/operations.md, "Table ownership".

        The upgrade path: a table that a Trident older than the ``trident.dataset-id`` property
        created belongs to an existing dataset of the same key but carries no owner, so every write
        to it is refused. ``adopt`` stamps it when the ledger agrees with the table: its current
        snapshot was made by a transaction this dataset's ledger recorded as committed, and it is
        the snapshot the control plane last recorded. Anything else (a table some other tool wrote
        to since) is refused with TableOwnershipError, naming what disagrees.

        Raises:
            InvalidDatasetKeyError: ``key`` is not a dataset key.
            TableOwnershipError: the table belongs to another dataset, lacks identity columns, or disagrees with the ledger.
            ConcurrentWriteError: the dataset's writer lock is held.
            ControlPlaneUnavailableError: the control-plane Postgres went away.
        """
        return adopt.adopt(self.engine, key)

    def reconcile(self) -> ReconcileReport:
        """Repair transactions left open by crashed processes; live writers are left alone.

        Raises:
            ControlPlaneUnavailableError: the control-plane Postgres went away.
        """
        return self.driver.reconcile(self.workspace)

    # -- READ -------------------------------------------------------------------------------
    def stream(
        self,
        key: str,
        columns: list[str] | None = None,
        row_filter: str | None = None,
        as_of: AsOf = None,
        partition: PartitionFilter | None = None,
        *,
        staged: uuid.UUID | str | None = None,
    ) -> pa.RecordBatchReader:
        """The dataset's rows as a bounded-memory stream, from whichever sink holds them.
        ``partition`` reads only those partitions: it becomes part of ``row_filter``, so pyiceberg
        prunes by partition and only their files are opened. ``staged=txn_id`` reads a staged
        (not yet published) version, for audits.

        Raises:
            InvalidDatasetKeyError: ``key`` is not a dataset key.
            DatasetNotFoundError: no dataset ``key`` exists in this workspace.
            InvalidReadError: ``as_of``/``staged`` name no version of the dataset, or both are given.
            InvalidFilterError: ``row_filter`` is malformed or names unknown columns.
            PartitionError: ``partition`` does not fit the dataset.
            UnreadableDataError, StorageUnavailableError: a data file is missing or corrupt, or storage went away (also while iterating).
            ControlPlaneUnavailableError: the control-plane Postgres went away.
        """
        return datasets.stream(self.engine, key, columns, row_filter, as_of, partition, staged=staged)

    def read(
        self,
        key: str,
        columns: list[str] | None = None,
        row_filter: str | None = None,
        as_of: AsOf = None,
        partition: PartitionFilter | None = None,
        *,
        staged: uuid.UUID | str | None = None,
    ) -> pa.Table:
        """The whole result in memory, so the sink may read its files in parallel (``stream``
        stays bounded: one file and one batch in flight). ``columns=[]`` selects no column and keeps
        the matching rows' count (``num_rows``), as pyarrow's ``read_table(columns=[])`` does: a
        count without moving any value; None reads every column.

        Raises:
            InvalidDatasetKeyError: ``key`` is not a dataset key.
            DatasetNotFoundError: no dataset ``key`` exists in this workspace.
            InvalidReadError: ``as_of``/``staged`` name no version of the dataset, or both are given.
            InvalidFilterError: ``row_filter`` is malformed or names unknown columns.
            UnreadableDataError, StorageUnavailableError: a data file is missing or corrupt, or storage went away.
            ControlPlaneUnavailableError: the control-plane Postgres went away.
        """
        return datasets.read_table(self.engine, key, columns, row_filter, as_of, partition, staged=staged)

    # -- write-audit-publish --------------------------------------------------------------------
    def staged(self, key: str | None = None) -> list[tuple[str, LedgerEntry]]:
        """Staged versions waiting for publish or discard: (dataset key, ledger entry). A ``key``
        that is not a valid key, or names no dataset (not even one whose first version is staged),
        is a named error: "0 staged versions" for a misspelt key read as "nothing to audit".

        Raises:
            InvalidDatasetKeyError: ``key`` is not a dataset key.
            DatasetNotFoundError: no dataset ``key`` exists in this workspace.
            ControlPlaneUnavailableError: the control-plane Postgres went away.
        """
        return records.staged_versions(self.engine, key)

    def decide_staged(self, txn_id: uuid.UUID, decide: Callable[[], R]) -> R:
        """``decide()``, while no other process decides on staged transaction ``txn_id``.

        Why: under the multiprocess executor several step processes of one run settle its gated
        versions (each check step at teardown, each downstream step at setup). Without one
        decider at a time, two could each find no decision reported yet and both report one;
        under this lock the second reads the first's report and stays quiet.

        Raises:
            ControlPlaneUnavailableError: the control-plane Postgres went away.
            and whatever ``decide()`` raises (the lock is released).
        """
        with self.control.staged_decision_lock(txn_id):
            return decide()

    def publish(
        self,
        key: str,
        txn_id: uuid.UUID | str,
        *,
        provenance: Mapping[str, Any] | None = None,
        watermarks: Mapping[str, tuple[datetime, uuid.UUID | None]] | None = None,
    ) -> WriteResult:
        """Make a staged version the published one (metadata only, no data file rewritten) and
        record it as committed: row count, schema version, provenance and watermarks land now.
        Refused (StagedVersionConflictError) when the dataset changed since it was staged; a
        staged partition write is refused only when that partition changed (commits of other
        partitions meanwhile are kept: its change is re-based onto them).

        Raises:
            InvalidDatasetKeyError: ``key`` is not a dataset key.
            DatasetNotFoundError: no dataset ``key`` exists in this workspace.
            InvalidReadError: ``txn_id`` is not a staged transaction of ``key``.
            StagedVersionConflictError: the dataset (or the staged partition) changed since it was staged.
            ConcurrentWriteError: the dataset's lock is held.
            ControlPlaneUnavailableError: the control-plane Postgres went away.
        """
        return publish.publish(self.engine, key, txn_id, provenance=provenance, watermarks=watermarks)

    def discard(self, key: str, txn_id: uuid.UUID | str, *, reason: str = "discarded") -> None:
        """Drop a staged version: the ledger says ``rejected``; its branch and files are removed.

        Raises:
            InvalidDatasetKeyError: ``key`` is not a dataset key.
            DatasetNotFoundError: no dataset ``key`` exists in this workspace.
            InvalidReadError: ``txn_id`` is not a staged transaction of ``key``.
            ControlPlaneUnavailableError: the control-plane Postgres went away.
        """
        publish.discard(self.engine, key, txn_id, reason=reason)

    # -- multi-dataset transactions --------------------------------------------------------------
    def transaction(
        self,
        *,
        label: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        group_id: uuid.UUID | None = None,
        external: bool = False,
    ) -> TransactionGroup:
        """A multi-dataset transaction: ``with t.transaction() as tx: tx.write(a, ...); tx.write(b, ...)``
        stages every write and, when the block ends without an exception, publishes them all in ONE
        control-plane transaction: readers see all of them or none, also across a crash (the
        reconciler aborts a group whose owner died before publishing, and finishes one that died
        while its Iceberg refs moved). An exception in the block discards the group.

        ``external=True`` joins (or opens) group ``group_id`` owned outside this process, e.g. a
        Dagster run whose steps run in several processes: its writes may be partition writes,
        leaving the block decides nothing, and its owner calls ``publish_group`` or
        ``discard_group`` (the reconciler does not abort it).

        Raises:
            ControlPlaneUnavailableError: the control-plane Postgres went away (when the group opens).
        """
        return TransactionGroup(self.engine, label=label, metadata=metadata, group_id=group_id, external=external)

    def publish_group(self, group_id: uuid.UUID | str) -> GroupResult:
        """Publish an open transaction group (``group_id``: its id or a unique prefix of it).

        Raises:
            TransactionGroupError: no such group, it is not open, or a member is still being written.
            InvalidArgumentError: the prefix names several groups.
            StagedVersionConflictError: a member's dataset changed since it was staged (nothing published).
            ConcurrentWriteError: a member's dataset stayed locked by another writer.
            ControlPlaneUnavailableError: the control-plane Postgres went away.
        """
        return group.publish_group(self.engine, group_id)

    def discard_group(self, group_id: uuid.UUID | str, *, reason: str = "discarded") -> list[uuid.UUID]:
        """Discard an open transaction group: every staged member is dropped; returns their txn ids.

        Raises:
            TransactionGroupError: no such group, or it was published.
            InvalidArgumentError: the prefix names several groups.
            ControlPlaneUnavailableError: the control-plane Postgres went away.
        """
        return group.discard_group(self.engine, group_id, reason)

    def keep_group(self, group_id: uuid.UUID | str, *, reason: str) -> GroupRecord:
        """Keep an open transaction group for audit: its staged versions stay (``staged()``,
        ``sql(staged=...)``) until ``publish_group`` or ``discard_group``; ``reason`` is shown
        with it. What a failed Dagster run's group becomes with ``TRIDENT_FAILED_RUN_STAGED=keep``.

        Raises:
            TransactionGroupError: no such group, or it is not open.
            InvalidArgumentError: the prefix names several groups.
            ControlPlaneUnavailableError: the control-plane Postgres went away.
        """
        return group.keep_group(self.engine, group_id, reason)

    def transaction_group(self, group_id: uuid.UUID | str) -> GroupRecord:
        """The transaction group ``group_id`` (its id or a unique prefix): status, label, metadata.

        Raises:
            TransactionGroupError: no group of this workspace has that id.
            InvalidArgumentError: the prefix names several groups.
            ControlPlaneUnavailableError: the control-plane Postgres went away.
        """
        return group.find(self.engine, group_id)

    def read_many(self, keys: Iterable[str], columns: list[str] | None = None) -> dict[str, pa.Table]:
        """Several datasets as of ONE moment of the control plane: every version is resolved by one
        statement (one Postgres snapshot), so the tables never show half of a transaction group,
        nor dataset A after a commit and dataset B before it.

        Raises:
            InvalidDatasetKeyError: a key is not a dataset key.
            DatasetNotFoundError: a key names no dataset of this workspace.
            InvalidReadError: a column is not in a dataset.
            UnreadableDataError, StorageUnavailableError: a data file is missing or corrupt, or storage went away.
            ControlPlaneUnavailableError: the control-plane Postgres went away.
        """
        return datasets.read_many(self.engine, list(keys), columns)

    def schema(self, key: str) -> pa.Schema:
        """The dataset's schema as readers get it (``__row_id`` as text, however it is stored).

        Raises:
            InvalidDatasetKeyError: ``key`` is not a dataset key.
            DatasetNotFoundError: no dataset ``key`` exists in this workspace.
            ControlPlaneUnavailableError: the control-plane Postgres went away.
        """
        return datasets.schema(self.engine, key)

    def arrow_source(self, key: str, partition: PartitionFilter | None = None, *, staged: uuid.UUID | str | None = None) -> Any:
        """A re-scannable Arrow source of the dataset (a pyarrow dataset) for DuckDB compute;
        with ``partition``, only those partitions (their files only, on the trident); with
        ``staged=txn``, that staged version.

        Raises:
            InvalidDatasetKeyError: ``key`` is not a dataset key.
            DatasetNotFoundError: no dataset ``key`` exists in this workspace.
            InvalidReadError: ``staged`` is not a staged transaction of ``key``.
            PartitionError: ``partition`` does not fit the dataset.
            ControlPlaneUnavailableError: the control-plane Postgres went away.
        """
        return datasets.arrow_source(self.engine, key, partition, staged=staged)

    def scan_plan(self, key: str, *, staged: uuid.UUID | str | None = None) -> ScanPlan:
        """How DuckDB reads ``key``'s current version (or, with ``staged=txn``, a staged one): on
        a local warehouse, the exact data files of the snapshot with the schema and field ids
        (``path == "native"``); otherwise ``path == "arrow"`` and the caller registers
        ``arrow_source(key)``. The path taken is logged (and ``describe`` shows it) so a slow
        query can be explained.

        Raises:
            InvalidDatasetKeyError: ``key`` is not a dataset key.
            DatasetNotFoundError: no dataset ``key`` exists in this workspace.
            InvalidReadError: ``staged`` is not a staged transaction of ``key``.
            ControlPlaneUnavailableError: the control-plane Postgres went away.
        """
        return datasets.scan_plan(self.engine, key, staged=staged)

    def scan_plan_of(self, ds: DatasetRecord, *, snapshot_id: int | None = None) -> ScanPlan:
        """``scan_plan(ds.key)`` for a record the caller just read (``sql`` lists the workspace's
        datasets first), so the dataset is not looked up again by key: a query per dataset per query.

        Raises:
            StorageUnavailableError: the catalog or storage went away.
            ControlPlaneUnavailableError: the control-plane Postgres went away.
        """
        return datasets.scan_plan_of(self.engine, ds, snapshot_id=snapshot_id)

    def version_stats(self, key: str, *, staged: uuid.UUID | str | None = None) -> VersionStats | None:
        """Row count and per-column null counts of ``key``'s current version (or, with
        ``staged=txn``, a staged one) from what its data files record: no scan (asset checks
        answer ``not_null`` and row counts from it). None when the sink keeps no statistics.

        Raises:
            InvalidDatasetKeyError: ``key`` is not a dataset key.
            DatasetNotFoundError: no dataset ``key`` exists in this workspace.
            InvalidReadError: ``staged`` is not a staged transaction of ``key``.
            UnreadableDataError, StorageUnavailableError: the version's metadata cannot be read.
            ControlPlaneUnavailableError: the control-plane Postgres went away.
        """
        return datasets.version_stats(self.engine, key, staged=staged)

    def describe(self, key: str, *, storage: bool = True, staged: uuid.UUID | str | None = None) -> Description:
        """What the trident knows of ``key``. ``storage=False``: the control plane's part only
        (record, versions, schema, provenance: one query), without looking the table up in the
        catalog; ``partitioning``/``partitions`` are then left empty and ``scan_path`` is
        ``"unknown"``. What a step that reports a version or plans from its sources' versions
        asks (a catalog look-up per source per step). ``staged=txn``: that staged version (its
        rows, schema, snapshot; ``committed_at`` None), also of a dataset not published yet.

        Raises:
            InvalidDatasetKeyError: ``key`` is not a dataset key.
            DatasetNotFoundError: no dataset ``key`` exists in this workspace.
            InvalidReadError: ``staged`` is not a staged transaction of ``key``.
            ControlPlaneUnavailableError: the control-plane Postgres went away.
        """
        return records.describe(self.engine, key, storage=storage, staged=staged)

    def history(self, key: str, limit: int | None = None) -> list[LedgerEntry]:
        """The ledger of ``key``: one entry per transaction (committed, aborted or open), newest first.

        Raises:
            InvalidDatasetKeyError: ``key`` is not a dataset key.
            DatasetNotFoundError: no dataset ``key`` exists in this workspace.
            InvalidArgumentError: ``limit`` is not a positive integer.
            ControlPlaneUnavailableError: the control-plane Postgres went away.
        """
        return records.history(self.engine, key, limit)

    def provenance(self, key: str) -> dict[str, Any]:
        """``key``'s governance metadata, what ``describe(key).provenance`` holds, without
        describing its storage (table, partitions): node factories merge their sources' provenance
        in every step, where describing each source would be a catalog look-up apiece.

        Raises:
            InvalidDatasetKeyError: ``key`` is not a dataset key.
            DatasetNotFoundError: no dataset ``key`` exists in this workspace.
            ControlPlaneUnavailableError: the control-plane Postgres went away.
        """
        return self.engine.record_with_provenance(key)[1]

    def set_provenance(self, key: str, provenance: Mapping[str, Any]) -> None:
        """Replace ``key``'s governance metadata.

        Raises:
            InvalidDatasetKeyError: ``key`` is not a dataset key.
            DatasetNotFoundError: no dataset ``key`` exists in this workspace.
            InvalidArgumentError: ``provenance`` is not a dict of JSON values.
            ControlPlaneUnavailableError: the control-plane Postgres went away.
        """
        checked = arguments.metadata(provenance, "provenance (a dict of governance fields)", InvalidArgumentError)
        self.control.set_provenance(self.engine.dataset_record(key).dataset_id, checked)

    def watermarks(self, key: str, partition: PartitionFilter | None = None) -> dict[str, datetime]:
        """Per source key, how far the output ``key`` has consumed it (delta strategies).

        With ``partition``, how far that partition (or range) of the output has: a source is
        listed only when every partition in the slice has a watermark for it and they all agree
        (a range whose days were consumed to different points has no single mark, so a delta run
        of it rebuilds it instead of reading some rows twice).

        Raises:
            InvalidDatasetKeyError: ``key`` is not a dataset key.
            PartitionError: ``partition`` does not fit the dataset.
            ControlPlaneUnavailableError: the control-plane Postgres went away.
        """
        return records.watermarks(self.engine, key, partition)

    def sql(self, query: str, *, staged: Mapping[str, uuid.UUID | str] | None = None) -> pa.Table:
        """Read-only SQL (DuckDB) over this workspace's datasets, named by key: ``"sales/orders"``.
        ``staged={key: txn_id}`` reads those datasets' staged versions instead (audits, checks).

        Raises:
            SqlNotAllowedError: not one read-only SELECT over this workspace's datasets.
            SqlError: DuckDB refused or failed the query.
            SqlTimeoutError: the query ran past ``TRIDENT_SQL_TIMEOUT_SECONDS``.
            SqlResultTooLargeError: the result passed ``TRIDENT_SQL_MAX_ROWS``/``_BYTES``.
            InvalidReadError: a ``staged`` entry names no staged version.
            ControlPlaneUnavailableError: the control-plane Postgres went away.
        """
        return sql.run_sql(self.engine, query, staged=arguments.sql_arguments(query, staged))

    def maintain(
        self,
        key: str,
        *,
        older_than: timedelta = timedelta(days=7),
        retain_last: int = 5,
        uploads_older_than: timedelta = timedelta(hours=1),
    ) -> Maintenance:
        """Table maintenance: discard staged versions older than ``TRIDENT_STAGED_MAX_AGE_DAYS``;
        compact small data files into target-size ones (one snapshot, identity unchanged, readers
        see the same rows); expire versions older than ``older_than`` (keeping the newest
        ``retain_last``) and delete the files only they used; abort incomplete multipart uploads
        under the table older than ``uploads_older_than`` (a writer killed mid-file leaves one);
        and retry the storage cleanup of the dataset's aborted transactions that could not run
        (``cleanup_pending``) — also for a dataset whose first write aborted, which never came to
        exist. Time travel to expired versions ends here; to the version before compaction it
        does not.

        Runs under the dataset's writer lock, taken without waiting: while a write of the dataset
        is open (or another maintenance holds the lock) nothing is done and the report's
        ``skipped`` says why, so a nightly run over every dataset succeeds and the next run
        compacts it. Waiting instead would fail the whole run with ConcurrentWriteError, or hold
        maintenance hostage to a long stream ingest.

        Raises:
            InvalidDatasetKeyError: ``key`` is not a dataset key.
            DatasetNotFoundError: no dataset ``key`` exists in this workspace.
            MaintenanceFailedError: a step failed (the dataset's rows are unchanged).
            ControlPlaneUnavailableError: the control-plane Postgres went away.
        """
        return maintain.maintain(
            self.engine, key, older_than=older_than, retain_last=retain_last, uploads_older_than=uploads_older_than
        )

    def flush(self, key: str) -> LedgerEntry | None:
        """Move the dataset's inlined rows (small appends kept in the control plane, see
        ``TRIDENT_INLINE_MAX_ROWS``) into ONE Iceberg snapshot, identity unchanged, so that other
        Iceberg engines see them. Returns the flush's ledger entry (writer ``inline.flush``), or
        ``None`` when nothing was inlined (or the dataset is not ``iceberg_native``). Readers
        through Trident see the same rows before and after. Waits for the writer lock like a write.

        Raises:
            InvalidDatasetKeyError: ``key`` is not a dataset key.
            DatasetNotFoundError: no dataset ``key`` exists in this workspace.
            ConcurrentWriteError: another writer held the dataset longer than ``TRIDENT_WRITER_WAIT_SECONDS``.
            StorageUnavailableError, ControlPlaneUnavailableError: storage or the control plane went
                away (the rows stay inlined, or the reconciler rolls the flush forward).
        """
        return flush.flush(self.engine, key)

    def pending_cleanup_keys(self) -> list[str]:
        """Datasets with aborted transactions whose storage cleanup could not run yet (including
        datasets whose first write aborted and so do not exist): what ``maintain`` should visit.

        Raises:
            ControlPlaneUnavailableError: the control-plane Postgres went away.
        """
        return records.pending_cleanup_keys(self.engine)

    def drop(self, key: str) -> None:
        """Delete a dataset: its rows, storage and control-plane records.

        Raises:
            InvalidDatasetKeyError: ``key`` is not a dataset key.
            DatasetNotFoundError: no dataset ``key`` exists in this workspace.
            ConcurrentWriteError: the dataset's lock is held.
            ControlPlaneUnavailableError: the control-plane Postgres went away.
        """
        drop.drop(self.engine, key)

    # -- Dagster layer: routing questions asked before any row is written ---------------
    def resolve_sink(self, key: str, writer: str = "pipeline.output") -> str:
        """The sink a write of ``key`` by ``writer`` would land in, without writing anything.

        Raises SinkMismatchError exactly when ``write`` would refuse (the dataset lives elsewhere),
        so a node with several outputs can refuse before producing any of them.

        Raises:
            InvalidDatasetKeyError: ``key`` is not a dataset key.
            InvalidWriteError: ``writer`` is not a registered writer.
            SinkMismatchError: the dataset lives in another sink.
            ControlPlaneUnavailableError: the control-plane Postgres went away.
        """
        return self.engine.route(validate_key(key), writer, self.control.dataset(self.workspace, key)).sink

    # -- Sinks and writers: stream ingest, row edits, manifests, migration ----------------
    def ingest_stream(
        self,
        key: str,
        *,
        mode: WriteMode = "append",
        keys: Iterable[str] | str | None = None,
        writer: str = "ingest.stream",
        schema: pa.Schema | None = None,
        max_queued: int = 4,
        source_refs: Iterable[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
        txn_id: uuid.UUID | str | None = None,
        provenance: Mapping[str, Any] | None = None,
        watermarks: Watermarks | None = None,
        stage: bool = False,
        partition: PartitionFilter | None = None,
    ) -> IngestStream:
        """A write session: ``with t.ingest_stream(key) as s: s.append(batch)`` for as long as the
        producer runs, committed as ONE transaction (one snapshot) when the block ends; an exception
        or ``s.abort()`` leaves nothing. ``mode``/``keys`` are those of ``write`` (default append),
        and so are ``source_refs``, ``metadata``, ``txn_id``, ``provenance``, ``watermarks``,
        ``stage`` and ``partition``.
        A sink mismatch is refused here, before the producer sends anything.

        Raises:
            InvalidDatasetKeyError: ``key`` is not a dataset key.
            InvalidWriteError: the mode, keys or session arguments are malformed, or the mode is delete.
            SinkMismatchError: the dataset lives in another sink than the writer resolves to.
            ControlPlaneUnavailableError: the control-plane Postgres went away.
        """
        validate_key(key)
        key_cols = arguments.write_keys(keys)
        arguments.write_mode(mode, key_cols, None, object())
        if mode == "delete":
            raise InvalidWriteError("an ingest stream adds rows; use delete_rows() or write(mode='delete')")
        arguments.stream_session(schema, max_queued)
        self.engine.route(key, writer, self.control.dataset(self.workspace, key))  # refuse before the producer sends anything
        return IngestStream(
            self.engine,
            key,
            mode=mode,
            keys=key_cols,
            writer=writer,
            schema=schema,
            max_queued=max_queued,
            options=WriteOptions(
                source_refs=source_refs,
                metadata=metadata,
                txn_id=txn_id,
                provenance=provenance,
                watermarks=watermarks,
                stage=stage,
                partition=partition,
            ),
        )

    def update_rows(
        self,
        key: str,
        data: Any,
        keys: Iterable[str] | str,
        *,
        writer: str = "row.edit",
        source_refs: Iterable[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
        txn_id: uuid.UUID | str | None = None,
        provenance: Mapping[str, Any] | None = None,
        watermarks: Watermarks | None = None,
        stage: bool = False,
        partition: PartitionFilter | None = None,
    ) -> WriteResult:
        """Point update by key (writer ``row.edit``): the rows of ``data`` replace the rows with the
        same key, keeping their ``__row_id`` and ``__row_index``; other rows are untouched.

        ``data`` may carry only some columns: the others keep their current values. Every key must
        already exist (KeyNotFoundError otherwise; use ``write(mode='upsert')`` to insert too).
        The other keywords are those of ``write``.

        Raises:
            InvalidDatasetKeyError: ``key`` is not a dataset key.
            DatasetNotFoundError: no dataset ``key`` exists in this workspace.
            KeyNotFoundError: a key of ``data`` names no row.
            NullKeyError: a key value is null.
            InvalidWriteError: ``data`` or ``keys`` are malformed.
            and whatever ``write`` raises.
            ControlPlaneUnavailableError: the control-plane Postgres went away.
        """
        key_cols = arguments.write_keys(keys)
        full = edits.complete_rows(self.engine, key, to_reader(data).read_all(), key_cols)
        return write.write(
            self.engine,
            key,
            full,
            mode="upsert",
            keys=key_cols,
            writer=writer,
            source_refs=source_refs,
            metadata=metadata,
            txn_id=txn_id,
            provenance=provenance,
            watermarks=watermarks,
            stage=stage,
            partition=partition,
        )

    def delete_rows(
        self,
        key: str,
        data: Any = None,
        *,
        keys: Iterable[str] | str | None = None,
        where: str | None = None,
        writer: str = "row.edit",
        source_refs: Iterable[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
        txn_id: uuid.UUID | str | None = None,
        provenance: Mapping[str, Any] | None = None,
        watermarks: Watermarks | None = None,
        stage: bool = False,
    ) -> WriteResult:
        """Point delete (writer ``row.edit``): the rows whose key is in ``data`` (with ``keys``), or
        the rows matching ``where`` (a row filter like ``"order_id = 7"``); others keep identity.
        The other keywords are those of ``write(mode='delete')``.

        Raises:
            whatever ``write(mode='delete')`` raises.
        """
        return write.write(
            self.engine,
            key,
            None if where is not None else data,
            mode="delete",
            keys=None if where is not None else keys,
            row_filter=where,
            writer=writer,
            source_refs=source_refs,
            metadata=metadata,
            txn_id=txn_id,
            provenance=provenance,
            watermarks=watermarks,
            stage=stage,
        )

    def write_manifest(
        self,
        key: str,
        entries: Any,
        *,
        mode: WriteMode = "upsert",
        source_refs: Iterable[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
        txn_id: uuid.UUID | str | None = None,
        provenance: Mapping[str, Any] | None = None,
        watermarks: Watermarks | None = None,
        stage: bool = False,
        partition: PartitionFilter | None = None,
    ) -> WriteResult:
        """Record file pointers (object_key, size, checksum, content_type [+ extra columns]) in a
        ``dataset.manifest`` dataset, which lives in the control plane (sink ``pg``) by design.
        ``mode`` upsert (default, keyed by object_key), append_new, replace or delete; the other
        keywords are those of ``write``.

        Raises:
            SchemaMismatchError: ``entries`` lack the manifest columns.
            and whatever ``write`` raises.
        """
        table = manifest.manifest_table(entries, keys_only=mode == "delete")
        keys = None if mode == "replace" else [manifest.MANIFEST_KEY]
        return write.write(
            self.engine,
            key,
            table,
            mode=mode,
            keys=keys,
            writer=manifest.MANIFEST_WRITER,
            source_refs=source_refs,
            metadata=metadata,
            txn_id=txn_id,
            provenance=provenance,
            watermarks=watermarks,
            stage=stage,
            partition=partition,
        )

    def move_refusal(self, key: str, to_sink: str) -> str | None:
        """Why a canary may not move ``key`` to ``to_sink`` (its writers could not follow), or None.

        Raises:
            InvalidDatasetKeyError: ``key`` is not a dataset key.
            DatasetNotFoundError: no dataset ``key`` exists in this workspace.
            ControlPlaneUnavailableError: the control-plane Postgres went away.
        """
        return migrate.move_refusal(self.engine, self.engine.dataset_record(key).dataset_id, key, to_sink)

    def migrate(self, key: str, to_sink: str = "iceberg_native", *, progress: Any = None) -> MigrationReport:
        """Canary: copy ``key`` to ``to_sink`` preserving identity, compare order-independent
        checksums of both copies, and flip the dataset only on parity (else revert, unchanged).
        ``progress(phase, rows_done, rows_total)`` is called as rows stream. See ``ops/migrate.py``.

        Raises:
            InvalidDatasetKeyError: ``key`` is not a dataset key.
            DatasetNotFoundError: no dataset ``key`` exists in this workspace.
            MigrationError: the move is refused (unknown sink, writers that cannot follow) or parity failed (the dataset is left where it was).
            ControlPlaneUnavailableError: the control-plane Postgres went away.
        """
        return migrate.migrate(self.engine, validate_key(key), to_sink, progress)

    # -- Dagster layer: commits as events --------------------------------------------
    def commits_since(self, after: int = 0, limit: int = 500) -> list[tuple[int, str, LedgerEntry]]:
        """This workspace's committed transactions in commit order, after commit sequence ``after``:
        ``(sequence, dataset key, ledger entry)``, at most ``limit``. The sequence is drawn in the
        COMMIT step (the sync log's id), so a cursor over it sees each commit once, whatever writer
        made it; the Dagster ledger sensor reports them as materializations.

        Raises:
            ControlPlaneUnavailableError: the control-plane Postgres went away.
        """
        return self.control.commits_since(self.workspace, after, limit)


class Environments:
    """``Trident.environments``: a thin door to ``ops/environments.py`` (see there, and
    docs/environments.md). Every name is checked (``InvalidEnvironmentNameError``)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def list(self) -> list[environments.EnvironmentInfo]:
        """Every environment of the workspace.

        Raises:
            ControlPlaneUnavailableError: the control-plane Postgres went away.
        """
        return environments.list_environments(self._engine)

    def show(self, name: str) -> environments.EnvironmentInfo:
        """One environment and every dataset it wrote.

        Raises:
            InvalidEnvironmentNameError: ``name`` is not an environment name.
            EnvironmentNotFoundError: no such environment.
        """
        return environments.show(self._engine, name)

    def diff(self, name: str) -> environments.EnvironmentDiff:
        """Per dataset: rows added, removed, changed (by key where its writes named keys),
        schema changes, and whether production moved since the fork.

        Raises:
            InvalidEnvironmentNameError: ``name`` is not an environment name.
            EnvironmentNotFoundError: no such environment.
        """
        return environments.diff(self._engine, name)

    def promote(self, name: str) -> environments.PromoteResult:
        """Publish every dataset the environment changed as ONE transaction group (all or none).

        Raises:
            InvalidEnvironmentNameError: ``name`` is not an environment name.
            EnvironmentNotFoundError: no such environment.
            EnvironmentUnsupportedError: this Trident runs in an environment, not production.
            EnvironmentConflictError: production changed a dataset so that the environment's change
                cannot be rebased onto it (nothing promoted; each dataset named).
            StagedVersionConflictError: production committed during the publish (nothing promoted).
        """
        return environments.promote(self._engine, name)

    def drop(self, name: str) -> environments.DropResult:
        """Remove the environment's branches, its own files and its control-plane rows.

        Raises:
            InvalidEnvironmentNameError: ``name`` is not an environment name.
            EnvironmentNotFoundError: no such environment.
            ConcurrentWriteError: a dataset stayed locked by another writer.
        """
        return environments.drop(self._engine, name)

    def stale(self, max_age_days: float | None = None) -> builtins.list[environments.EnvironmentInfo]:
        """Environments not written for ``TRIDENT_ENVIRONMENT_MAX_AGE_DAYS`` days.

        Raises:
            ControlPlaneUnavailableError: the control-plane Postgres went away.
        """
        return environments.stale(self._engine, max_age_days)
