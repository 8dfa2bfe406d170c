"""``Trident``: the one door. Every write and read of dataset rows goes through here, whatever sink
the dataset lives in, and every write is one INTENT -> WRITE -> COMMIT transaction."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar, cast

import pyarrow as pa

from .control import faults, range_locks
from .control import queries as q
from .control.embedded_pg import ensure_embedded_postgres
from .control.plane import ControlPlane, DatasetRecord, LedgerEntry
from .control.router import RouteDecision, Router
from .core import arguments
from .core.arrow_memory import use_memory_pool
from .core.errors import (
    DatasetNotFoundError,
    InvalidArgumentError,
    InvalidReadError,
    InvalidSettingsError,
    InvalidWriteError,
    PartitionError,
    SinkMismatchError,
    UnsupportedBySinkError,
)
from .core.identity import ROW_INDEX, public_schema, refuse_case_clash, refuse_reserved
from .core.keys import iceberg_identifier, validate_key
from .core.partitions import BoundPartition, PartitionFilter
from .core.results import Description, ReconcileReport, WriteResult
from .core.settings import TridentSettings, settings_from_env, usable_home
from .ops import adopt, maintain, write
from .planning.inputs import to_reader
from .read import faults as read_faults
from .read import versions
from .read.sql import SandboxCache, prepare_spares
from .sinks import open_sinks
from .sinks.contract import AsOf, Maintenance, ScanPlan, Sink, StorageInfo, VersionStats, WriteMode
from .transaction.driver import PARTITION_META, WATERMARK_META, Intent, TransactionDriver, watermark_meta

if TYPE_CHECKING:  # returned by ingest_stream / migrate
    from .ops.migrate import MigrationReport
    from .ops.stream_ingest import IngestStream
    from .sinks.iceberg.sink import IcebergSink

log = logging.getLogger("trident")
R = TypeVar("R")


class Trident:
    """Open one per process (it owns a connection pool); ``close()`` or use it as a context manager."""

    def __init__(self, settings: TridentSettings | None = None) -> None:
        if settings is not None and not isinstance(settings, TridentSettings):  # a dict failed as "no attribute 'home'"
            raise InvalidSettingsError(
                f"settings must be a TridentSettings (e.g. TridentSettings(workspace='x')), got a {type(settings).__name__}"
            )
        self.settings = settings or settings_from_env()
        s = self.settings
        usable_home(s.home)
        use_memory_pool(s.arrow_memory_pool)
        dsn = (
            s.pg_dsn.get_secret_value()
            if s.pg_dsn
            else ensure_embedded_postgres(s.home / "pg", idle_minutes=s.embedded_pg_idle_minutes)
        )
        self.control = ControlPlane(dsn, pool_max=s.pg_pool_max)
        self.sql_sandboxes = SandboxCache()  # locked DuckDB sandboxes kept for repeated queries (sql.py)
        prepare_spares(s.duckdb_memory_limit, s.duckdb_threads)  # the first sandboxes' databases, opened ahead
        self.router = Router(self.control, s.workspace, s.flag_refresh_seconds)
        try:
            self.driver = TransactionDriver(self.control, open_sinks(s, self.control, dsn), s)
        except BaseException:
            self.control.close()  # a Trident that failed to open owns no pool
            raise

    @classmethod
    def from_env(cls) -> Trident:
        return cls(settings_from_env())

    def close(self) -> None:
        self.sql_sandboxes.close()
        self.control.close()

    def __enter__(self) -> Trident:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Trident(workspace={self.settings.workspace!r}, home={str(self.settings.home)!r})"

    @property
    def workspace(self) -> str:
        return self.settings.workspace

    # -- datasets -------------------------------------------------------------------------------
    def dataset_record(self, key: str) -> DatasetRecord:
        """The control plane's record of an existing dataset (``DatasetNotFoundError`` otherwise):
        what the facade's modules (canary, write records) and tools hand to a sink."""
        ds = self.control.dataset(self.workspace, validate_key(key))
        if ds is None or not ds.exists:
            raise DatasetNotFoundError(key, self.workspace)
        return ds

    def _sink(self, sink: str) -> Sink:
        return self.driver.sink(sink)

    def exists(self, key: str) -> bool:
        ds = self.control.dataset(self.workspace, validate_key(key))
        return ds is not None and ds.exists

    def datasets(self) -> list[DatasetRecord]:
        return self.control.datasets(self.workspace)

    # -- WRITE ------------------------------------------------------------------------------
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
        watermarks: Mapping[str, tuple[datetime, uuid.UUID | None]] | None = None,
        stage: bool = False,
        partition: PartitionFilter | None = None,
    ) -> WriteResult:
        """Write ``data`` to dataset ``key`` as one transaction; see docs/python-api.md "Write modes".

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
        """
        validate_key(key)
        key_cols = _keys(keys)
        arguments.write_mode(mode, key_cols, row_filter, data)
        refs, metadata = arguments.source_refs(source_refs), arguments.metadata(metadata)
        provenance = arguments.metadata(provenance, "provenance") if provenance is not None else None
        if partition is not None and mode == "delete":
            raise InvalidWriteError("a delete takes row_filter=... (a partition is a filter like any other), not partition=")
        reader = None if data is None else to_reader(data)
        if reader is not None:
            refuse_reserved(reader.schema)
        partition = arguments.partition_filter(partition)
        bound = partition.bind(reader.schema) if partition is not None and reader is not None else None
        # delta per partition: a partition write's watermarks are recorded per output partition
        marked = bound.watermark_keys() if bound is not None and watermarks else [""]
        txn = arguments.txn_id(txn_id) or uuid.uuid4()
        # before the transaction opens: raised between its WRITE and COMMIT, a bad watermark left the
        # transaction open with its data written, and the reconciler later committed the failed write
        marks = write.watermark_rows(self, watermarks, marked)
        existing = self.control.dataset(self.workspace, key)
        if mode == "delete" and (existing is None or not existing.exists):
            raise DatasetNotFoundError(key, self.workspace)
        if reader is not None and existing is not None and existing.schema and (mode != "replace" or partition is not None):
            refuse_case_clash((c["name"] for c in existing.schema), reader.schema)
        route = self._route(key, writer, existing)
        if partition is not None:
            self._partitionable(key, route.sink)
        ident = ".".join(iceberg_identifier(self.settings.namespace_root, self.workspace, key))
        ds = existing or self.control.ensure_dataset(self.workspace, key, route.sink, ident)
        with self._lock(ds, bound) as ds:
            route = self._route(key, writer, ds)  # decided again: the dataset may have moved or been born meanwhile
            if partition is not None:
                self._partitionable(key, route.sink)
            if ds.sink != route.sink:  # not born yet (an aborted first write may have named another sink)
                self.control.set_dataset_sink(ds.dataset_id, route.sink, ident)
                ds = self.control.dataset_by_id(ds.dataset_id) or ds
            log.info("trident write %s mode=%s writer=%s sink=%s", key, mode, writer, route.describe())
            meta = dict(metadata)
            if partition is not None:
                meta[PARTITION_META] = partition.as_metadata()
            if marks and not stage:  # a roll-forward by the reconciler records them too
                meta[WATERMARK_META] = watermark_meta(marks)
            if stage:  # recorded by publish, with the version (a staged version changes nothing yet)
                meta[write.STAGED_META] = write.staged_meta(provenance, watermarks, marked)
            intent = Intent(
                txn_id=txn,
                mode=mode,
                writer=writer,
                sink=route.sink,
                route=route,
                source_refs=refs,
                metadata=meta,
            )
            if stage and not self._sink(route.sink).stages:
                raise self._sink(route.sink).staging_refusal(ds)
            transaction = self.driver.open(ds, intent)
            if transaction is None:
                return write.noop_result(self, key, txn, route)
            outcome = transaction.write(reader, keys=key_cols, row_filter=row_filter, stage=stage, partition=partition)
            if stage:
                return write.write_result(ds.key, transaction.stage(outcome), outcome, route, staged=True)
            done = transaction.commit(outcome, provenance=provenance, watermarks=marks)
            return write.write_result(ds.key, done, outcome, route)

    def _partitionable(self, key: str, sink: str) -> None:
        if not self._sink(sink).partitions:
            raise UnsupportedBySinkError(
                f"dataset {key!r} lives in the {sink!r} sink, which cannot replace one partition of a dataset; "
                f"move it to the trident first with `trident canary {key}`, then write partitions"
            )

    def _lock(self, ds: DatasetRecord, bound: BoundPartition | None) -> Any:
        """The writer lock a write needs: a partition write of a dataset already partitioned that
        way locks only its slice (range locks: writers of slices that do not overlap it run
        alongside, however wide either is); everything else (whole-dataset writes, a dataset's
        first write or first partitioned write, a slice that cannot be locked by parts) locks the
        whole dataset."""
        items = range_locks.claim(bound) if bound is not None else None
        if bound is not None and items is not None and ds.exists:
            have = self._sink(ds.sink).partitioning(ds)
            if have is not None and set(have) == set(bound.filter.spec):
                return self.driver.partition_locked(
                    ds,
                    items,
                    what=f"partitions {bound.filter.describe()}",
                    overlapping=lambda e: range_locks.overlaps(bound, e.metadata.get(PARTITION_META)),
                )
        return self.driver.locked(ds)

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
        to since) is refused with TableOwnershipError, naming what disagrees."""
        return adopt.adopt(self, key)

    def reconcile(self) -> ReconcileReport:
        """Repair transactions left open by crashed processes; live writers are left alone."""
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
        (not yet published) version, for audits."""
        columns = arguments.read_columns(columns)
        if columns == []:  # no user columns, as pyarrow's columns=[]: batches that carry only their row counts
            rows = self.stream(key, [ROW_INDEX], row_filter, as_of, partition, staged=staged)
            return pa.RecordBatchReader.from_batches(pa.schema([]), (b.select([]) for b in rows))
        if staged is not None:
            if as_of is not None:
                raise InvalidReadError("read either a staged version or a past one (as_of), not both")
            ds, entry = versions.staged_entry(self, key, staged)
            sink = self._sink(ds.sink)
            row_filter = self._with_partition(sink, ds, row_filter, partition)
            snapshot = entry.snapshot_id
            if snapshot is None:  # (as before: no snapshot to name)
                return read_faults.guarded(key, lambda: sink.scan(ds, columns=columns, row_filter=row_filter, as_of=None))
            return read_faults.guarded(key, lambda: sink.scan_staged(ds, snapshot, columns=columns, row_filter=row_filter))
        ds = self.dataset_record(key)
        sink = self._sink(ds.sink)
        row_filter = self._with_partition(sink, ds, row_filter, partition)
        version = versions.version_at(self, ds, as_of) if sink.time_travel else as_of
        return read_faults.guarded(key, lambda: sink.scan(ds, columns=columns, row_filter=row_filter, as_of=version))

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
        count without moving any value; None reads every column."""
        if staged is not None:
            return self.stream(
                key, columns=columns, row_filter=row_filter, as_of=as_of, partition=partition, staged=staged
            ).read_all()
        columns = arguments.read_columns(columns)
        if columns == []:  # as pyarrow's read_table(columns=[]): no columns, the matching rows' count kept
            return self.read(key, [ROW_INDEX], row_filter, as_of, partition).select([])
        ds = self.dataset_record(key)
        sink = self._sink(ds.sink)
        row_filter = self._with_partition(sink, ds, row_filter, partition)
        version = versions.version_at(self, ds, as_of) if sink.time_travel else as_of
        return read_faults.read_all(key, lambda: sink.read(ds, columns=columns, row_filter=row_filter, as_of=version))

    # -- write-audit-publish --------------------------------------------------------------------
    def staged(self, key: str | None = None) -> list[tuple[str, LedgerEntry]]:
        """Staged versions waiting for publish or discard: (dataset key, ledger entry). A ``key``
        that is not a valid key, or names no dataset (not even one whose first version is staged),
        is a named error: "0 staged versions" for a misspelt key read as "nothing to audit"."""
        if key is not None:  # one dataset's: its entries only, no look-up of each entry's dataset
            entries = self.control.staged_entries_by_key(self.workspace, validate_key(key))
            if entries is None:
                raise DatasetNotFoundError(key, self.workspace)
            return [(key, entry) for entry in entries]
        out = []
        for entry in self.control.staged_entries():
            ds = self.control.dataset_by_id(entry.dataset_id)
            if ds is not None and ds.workspace == self.workspace and (key is None or ds.key == key):
                out.append((ds.key, entry))
        return out

    def decide_staged(self, txn_id: uuid.UUID, decide: Callable[[], R]) -> R:
        """``decide()``, while no other process decides on staged transaction ``txn_id``.

        Why: under the multiprocess executor several step processes of one run settle its gated
        versions (each check step at teardown, each downstream step at setup). Each read the
        run's events, found no decision reported yet, and reported one: a rejected version was
        reported twice. Under this lock the second reads the first's report and stays quiet."""
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
        partitions meanwhile are kept: its change is re-based onto them)."""
        ds, entry = versions.staged_entry(self, key, txn_id)
        with self._publish_lock(ds, entry) as ds:
            ds, entry = versions.staged_entry(self, key, txn_id)  # still staged now that we hold the lock
            pending = entry.metadata.get(write.STAGED_META) or {}
            if provenance is None:
                provenance = pending.get("provenance")
            if watermarks is None:
                watermarks = {
                    k: (datetime.fromisoformat(mark), uuid.UUID(src) if src else None)
                    for k, (mark, src) in (pending.get("watermarks") or {}).items()
                }
            marked = list(pending.get("watermark_partitions") or [""])
            done, outcome = self.driver.publish(
                ds, entry, provenance=provenance, watermarks=write.watermark_rows(self, watermarks, marked)
            )
        route = RouteDecision(
            sink=entry.sink,
            requested=entry.requested_sink or entry.sink,
            clamped=entry.clamped,
            reason=entry.route_reason or "staged",
        )
        return write.write_result(ds.key, done, outcome, route)

    def _publish_lock(self, ds: DatasetRecord, entry: LedgerEntry) -> Any:
        """A staged partition write publishes under its partitions' locks (like its write), so a
        publish neither waits for nor blocks writers of other partitions; anything else under the
        whole-dataset lock."""
        meta = entry.metadata.get(PARTITION_META)
        if not meta or not ds.exists:
            return self.driver.locked(ds)
        partition = PartitionFilter.from_metadata(meta)
        try:
            bound = partition.bind(self._sink(ds.sink).schema(ds))
        except PartitionError:  # the partition column is new in the staged version: lock it all
            return self.driver.locked(ds)
        return self._lock(ds, bound)

    def discard(self, key: str, txn_id: uuid.UUID | str, *, reason: str = "discarded") -> None:
        """Drop a staged version: the ledger says ``rejected``; its branch and files are removed."""
        ds, entry = versions.staged_entry(self, key, txn_id)
        with self.driver.locked(ds) as ds:
            ds, entry = versions.staged_entry(self, key, txn_id)
            self.driver.discard_staged(ds, entry, reason)

    @staticmethod
    def _with_partition(sink: Sink, ds: DatasetRecord, row_filter: str | None, partition: PartitionFilter | None) -> str | None:
        partition = arguments.partition_filter(partition)
        if partition is None:
            return row_filter
        part = partition.bind(sink.schema(ds)).to_row_filter()
        return part if not row_filter else f"({row_filter}) and {part}"

    def schema(self, key: str) -> pa.Schema:
        """The dataset's schema as readers get it (``__row_id`` as text, however it is stored)."""
        ds = self.dataset_record(key)
        return public_schema(self._sink(ds.sink).schema(ds))

    def arrow_source(self, key: str, partition: PartitionFilter | None = None, *, staged: uuid.UUID | str | None = None) -> Any:
        """A re-scannable Arrow source of the dataset (a pyarrow dataset) for DuckDB compute;
        with ``partition``, only those partitions (their files only, on the trident); with
        ``staged=txn``, that staged version."""
        if staged is not None:
            ds, entry = versions.staged_entry(self, key, staged)
            return self._sink(ds.sink).arrow_source(ds, snapshot_id=entry.snapshot_id)
        ds = self.dataset_record(key)
        sink = self._sink(ds.sink)
        partition = arguments.partition_filter(partition)
        if partition is None:
            return sink.arrow_source(ds)
        bound = partition.bind(sink.schema(ds))
        source = cast("IcebergSink", sink).arrow_source(ds, partition=bound) if sink.partitions else sink.arrow_source(ds)
        return source.filter(bound.arrow_expr())

    def scan_plan(self, key: str, *, staged: uuid.UUID | str | None = None) -> ScanPlan:
        """How DuckDB reads ``key``'s current version (or, with ``staged=txn``, a staged one): on
        a local warehouse, the exact data files of the snapshot with the schema and field ids
        (``path == "native"``); otherwise ``path == "arrow"`` and the caller registers
        ``arrow_source(key)``. The path taken is logged (and ``describe`` shows it) so a slow
        query can be explained."""
        if staged is not None:
            ds, entry = versions.staged_entry(self, key, staged)
            return self.scan_plan_of(ds, snapshot_id=entry.snapshot_id)
        return self.scan_plan_of(self.dataset_record(key))

    def scan_plan_of(self, ds: DatasetRecord, *, snapshot_id: int | None = None) -> ScanPlan:
        """``scan_plan(ds.key)`` for a record the caller just read (``sql`` lists the workspace's
        datasets first): looking each one up again by key was a query per dataset per query."""
        plan = self._sink(ds.sink).scan_plan(ds, snapshot_id=snapshot_id)
        log.info("trident scan %s path=%s files=%d (%s)", ds.key, plan.path, len(plan.files), plan.reason)
        return plan

    def version_stats(self, key: str, *, staged: uuid.UUID | str | None = None) -> VersionStats | None:
        """Row count and per-column null counts of ``key``'s current version (or, with
        ``staged=txn``, a staged one) from what its data files record: no scan (asset checks
        answer ``not_null`` and row counts from it). None when the sink keeps no statistics."""
        if staged is not None:
            ds, entry = versions.staged_entry(self, key, staged)
            sink, snapshot_id = self._sink(ds.sink), entry.snapshot_id
        else:
            ds = self.dataset_record(key)
            sink, snapshot_id = self._sink(ds.sink), None
        try:
            return sink.version_stats(ds, snapshot_id)
        except Exception as exc:
            err = read_faults.named(exc, key)
            if err is exc:
                raise
            raise err from exc

    def describe(self, key: str, *, storage: bool = True) -> Description:
        """What the trident knows of ``key``. ``storage=False``: the control plane's part only
        (record, versions, schema, provenance: one query), without looking the table up in the
        catalog; ``partitioning``/``partitions`` are then left empty and ``scan_path`` is
        ``"unknown"``. What a step that reports a version or plans from its sources' versions
        asks (issue 12: a catalog look-up per source per step)."""
        ds, provenance = self._record_with_provenance(key)
        scan_path, scan_reason = "unknown", "not looked up: describe(storage=False)"
        stored = StorageInfo(None)
        if storage:
            scan_path, scan_reason = self._sink(ds.sink).scan_path(ds)
            stored = self._sink(ds.sink).storage_info(ds)
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
        )

    def history(self, key: str, limit: int | None = None) -> list[LedgerEntry]:
        """The ledger of ``key``: one entry per transaction (committed, aborted or open), newest first."""
        entries = self.control.history_by_key(self.workspace, validate_key(key), arguments.history_limit(limit))
        if entries is None:
            raise DatasetNotFoundError(key, self.workspace)
        return entries

    def provenance(self, key: str) -> dict[str, Any]:
        """``key``'s governance metadata, what ``describe(key).provenance`` holds, without
        describing its storage (table, partitions): node factories merge their sources' provenance
        in every step, where describing each source was a catalog look-up apiece (issue 12)."""
        return self._record_with_provenance(key)[1]

    def _record_with_provenance(self, key: str) -> tuple[DatasetRecord, dict[str, Any]]:
        """``dataset_record(key)`` and its provenance, in one query."""
        ds, provenance = self.control.dataset_with_provenance(self.workspace, validate_key(key))
        if ds is None or not ds.exists:
            raise DatasetNotFoundError(key, self.workspace)
        return ds, provenance

    def set_provenance(self, key: str, provenance: Mapping[str, Any]) -> None:
        checked = arguments.metadata(provenance, "provenance (a dict of governance fields)", InvalidArgumentError)
        self.control.set_provenance(self.dataset_record(key).dataset_id, checked)

    def watermarks(self, key: str, partition: PartitionFilter | None = None) -> dict[str, datetime]:
        """Per source key, how far the output ``key`` has consumed it (delta strategies).

        With ``partition``, how far that partition (or range) of the output has: a source is
        listed only when every partition in the slice has a watermark for it and they all agree
        (a range whose days were consumed to different points has no single mark, so a delta run
        of it rebuilds it instead of reading some rows twice)."""
        ds = self.control.dataset(self.workspace, validate_key(key))
        partition = arguments.partition_filter(partition)  # a bare value was "'str' object has no attribute 'bind'"
        if ds is None or (partition is not None and not ds.exists):
            return {}
        parts = [""] if partition is None else partition.bind(self._sink(ds.sink).schema(ds)).watermark_keys()
        found: dict[uuid.UUID, dict[str, datetime]] = {}
        for (source_id, part), mark in self.control.watermarks(ds.dataset_id, parts).items():
            found.setdefault(source_id, {})[part] = mark
        out = {}
        for source_id, marks in found.items():
            src = self.control.dataset_by_id(source_id)
            if src is not None and len(marks) == len(parts) and len(set(marks.values())) == 1:
                out[src.key] = next(iter(marks.values()))
        return out

    def sql(self, query: str, *, staged: Mapping[str, uuid.UUID | str] | None = None) -> pa.Table:
        """Read-only SQL (DuckDB) over this workspace's datasets, named by key: ``"sales/orders"``.
        ``staged={key: txn_id}`` reads those datasets' staged versions instead (audits, checks)."""
        from .read.sql import run_sql

        return run_sql(self, query, staged=arguments.sql_arguments(query, staged))

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
        maintenance hostage to a long stream ingest."""
        return maintain.maintain(self, key, older_than=older_than, retain_last=retain_last, uploads_older_than=uploads_older_than)

    def pending_cleanup_keys(self) -> list[str]:
        """Datasets with aborted transactions whose storage cleanup could not run yet (including
        datasets whose first write aborted and so do not exist): what ``maintain`` should visit."""
        keys = set()
        for entry in self.control.pending_cleanups(self.workspace):
            ds = self.control.dataset_by_id(entry.dataset_id)
            if ds is not None:
                keys.add(ds.key)
        return sorted(keys)

    def drop(self, key: str) -> None:
        """Delete a dataset: its rows, storage and control-plane records."""
        with self.driver.locked(self.dataset_record(key)) as ds:
            self._sink(ds.sink).drop(ds)
            self.control.execute(q.DELETE_DATASET, (ds.dataset_id,))

    # -- Dagster layer (issue 3): routing questions asked before any row is written ---------------
    def resolve_sink(self, key: str, writer: str = "pipeline.output") -> str:
        """The sink a write of ``key`` by ``writer`` would land in, without writing anything.

        Raises SinkMismatchError exactly when ``write`` would refuse (the dataset lives elsewhere),
        so a node with several outputs can refuse before producing any of them.
        """
        return self._route(validate_key(key), writer, self.control.dataset(self.workspace, key)).sink

    def _route(self, key: str, writer: str, existing: DatasetRecord | None) -> RouteDecision:
        """The router's decision for this write, refused when it would split the dataset's rows
        across sinks (a dataset's sink only changes through a canary)."""
        route = self.router.resolve(writer, key, existing)
        if existing is not None and existing.exists and existing.sink != route.sink:
            raise SinkMismatchError(
                f"dataset {key!r} lives in sink {existing.sink!r} but writer {writer!r} resolves to "
                f"{route.describe()}; the rows would be split. Move it with `trident canary {key}`, "
                f"or pin it: `trident pin set {key} {existing.sink}`"
            )
        return route

    # -- Sinks and writers (issue 4): stream ingest, row edits, manifests, migration ----------------
    def ingest_stream(
        self,
        key: str,
        *,
        mode: WriteMode = "append",
        keys: Iterable[str] | str | None = None,
        writer: str = "ingest.stream",
        schema: pa.Schema | None = None,
        max_queued: int = 4,
        **write_kwargs: Any,
    ) -> IngestStream:
        """A write session: ``with t.ingest_stream(key) as s: s.append(batch)`` for as long as the
        producer runs, committed as ONE transaction (one snapshot) when the block ends; an exception
        or ``s.abort()`` leaves nothing. ``mode``/``keys`` are those of ``write`` (default append);
        ``write_kwargs`` pass through (``source_refs``, ``metadata``, ``provenance``...).
        A sink mismatch is refused here, before the producer sends anything."""
        from .ops.stream_ingest import IngestStream

        validate_key(key)
        key_cols = _keys(keys)
        arguments.write_mode(mode, key_cols, None, object())
        if mode == "delete":
            raise InvalidWriteError("an ingest stream adds rows; use delete_rows() or write(mode='delete')")
        arguments.stream_session(schema, max_queued)
        self._route(key, writer, self.control.dataset(self.workspace, key))  # refuse before the producer sends anything
        return IngestStream(
            self,
            key,
            mode=mode,
            keys=key_cols,
            writer=writer,
            schema=schema,
            max_queued=max_queued,
            write_kwargs=write_kwargs,
        )

    def update_rows(
        self, key: str, data: Any, keys: Iterable[str] | str, *, writer: str = "row.edit", **write_kwargs: Any
    ) -> WriteResult:
        """Point update by key (writer ``row.edit``): the rows of ``data`` replace the rows with the
        same key, keeping their ``__row_id`` and ``__row_index``; other rows are untouched.

        ``data`` may carry only some columns: the others keep their current values. Every key must
        already exist (KeyNotFoundError otherwise; use ``write(mode='upsert')`` to insert too).
        """
        from .ops.edits import complete_rows

        key_cols = _keys(keys)
        full = complete_rows(self, key, to_reader(data).read_all(), key_cols)
        return self.write(key, full, mode="upsert", keys=key_cols, writer=writer, **write_kwargs)

    def delete_rows(
        self,
        key: str,
        data: Any = None,
        *,
        keys: Iterable[str] | str | None = None,
        where: str | None = None,
        writer: str = "row.edit",
        **write_kwargs: Any,
    ) -> WriteResult:
        """Point delete (writer ``row.edit``): the rows whose key is in ``data`` (with ``keys``), or
        the rows matching ``where`` (a row filter like ``"order_id = 7"``); others keep identity."""
        if where is not None:
            return self.write(key, None, mode="delete", row_filter=where, writer=writer, **write_kwargs)
        return self.write(key, data, mode="delete", keys=keys, writer=writer, **write_kwargs)

    def write_manifest(self, key: str, entries: Any, *, mode: WriteMode = "upsert", **write_kwargs: Any) -> WriteResult:
        """Record file pointers (object_key, size, checksum, content_type [+ extra columns]) in a
        ``dataset.manifest`` dataset, which lives in the control plane (sink ``pg``) by design.
        ``mode`` upsert (default, keyed by object_key), append_new, replace or delete."""
        from .ops.manifest import MANIFEST_KEY, MANIFEST_WRITER, manifest_table

        table = manifest_table(entries, keys_only=mode == "delete")
        keys = None if mode == "replace" else [MANIFEST_KEY]
        return self.write(key, table, mode=mode, keys=keys, writer=MANIFEST_WRITER, **write_kwargs)

    def move_refusal(self, key: str, to_sink: str) -> str | None:
        """Why a canary may not move ``key`` to ``to_sink`` (its writers could not follow), or None."""
        from .ops.migrate import move_refusal

        return move_refusal(self, self.dataset_record(key).dataset_id, key, to_sink)

    def migrate(self, key: str, to_sink: str = "iceberg_native", *, progress: Any = None) -> MigrationReport:
        """Canary: copy ``key`` to ``to_sink`` preserving identity, compare order-independent
        checksums of both copies, and flip the dataset only on parity (else revert, unchanged).
        ``progress(phase, rows_done, rows_total)`` is called as rows stream. See ``ops/migrate.py``."""
        from .ops.migrate import migrate

        return migrate(self, validate_key(key), to_sink, progress)

    # -- Dagster layer (issue 9): commits as events --------------------------------------------
    def commits_since(self, after: int = 0, limit: int = 500) -> list[tuple[int, str, LedgerEntry]]:
        """This workspace's committed transactions in commit order, after commit sequence ``after``:
        ``(sequence, dataset key, ledger entry)``, at most ``limit``. The sequence is drawn in the
        COMMIT step (the sync log's id), so a cursor over it sees each commit once, whatever writer
        made it; the Dagster ledger sensor reports them as materializations."""
        rows = self.control.execute(q.COMMITS_SINCE, (self.workspace, after, limit))
        return [(r.pop("seq"), r.pop("dataset_key"), LedgerEntry(**r)) for r in rows]


def _keys(keys: Iterable[str] | str | None) -> tuple[str, ...]:
    return arguments.write_keys(keys)


faults.name_control_plane_faults(Trident)  # a control plane lost after opening: ControlPlaneUnavailableError (control/faults.py)
