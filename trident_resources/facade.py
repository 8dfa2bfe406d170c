"""``Trident``: the one door. Every write and read of dataset rows goes through here, whatever sink
the dataset lives in, and every write is one INTENT -> WRITE -> COMMIT transaction."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping
from contextlib import ExitStack
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa

from . import queries as q
from . import range_locks, reading, validate
from .control_plane import ControlPlane, DatasetRecord, LedgerEntry, Outcome
from .embedded_pg import ensure_embedded_postgres
from .errors import (
    ConcurrentWriteError,
    DatasetNotFoundError,
    InvalidArgumentError,
    InvalidReadError,
    InvalidSettingsError,
    InvalidWriteError,
    PartitionError,
    SinkMismatchError,
    TableOwnershipError,
    UnsupportedBySinkError,
    WriterLockLostError,
)
from .identity import ROW_INDEX, refuse_case_clash, refuse_reserved
from .inputs import to_reader
from .keys import iceberg_identifier, validate_key
from .partitions import BoundPartition, PartitionFilter
from .results import Description, ReconcileReport, WriteResult
from .router import RouteDecision, Router
from .settings import TridentSettings, settings_from_env, usable_home
from .sinks import open_sinks
from .sinks.base import WRITE_MODES, AsOf, Maintenance, ScanPlan, Sink, WriteMode
from .sql import SandboxCache
from .transaction import PARTITION_META, WATERMARK_META, Intent, TransactionDriver, Watermarks, watermark_meta

if TYPE_CHECKING:  # returned by ingest_stream / migrate
    from .canary import MigrationReport
    from .sinks.iceberg.sink import IcebergSink
    from .streaming import IngestStream

log = logging.getLogger("trident")


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
        dsn = (
            s.pg_dsn.get_secret_value()
            if s.pg_dsn
            else ensure_embedded_postgres(s.home / "pg", idle_minutes=s.embedded_pg_idle_minutes)
        )
        self.control = ControlPlane(dsn, pool_max=s.pg_pool_max)
        self.sql_sandboxes = SandboxCache()  # locked DuckDB sandboxes kept for repeated queries (sql.py)
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
    def _record(self, key: str) -> DatasetRecord:
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
        """Write ``data`` to dataset ``key`` as one transaction; see DESIGN.md "Write modes".

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
        _check_mode(mode, key_cols, row_filter, data)
        refs, metadata = validate.source_refs(source_refs), validate.metadata(metadata)
        provenance = validate.metadata(provenance, "provenance") if provenance is not None else None
        if partition is not None and mode == "delete":
            raise InvalidWriteError("a delete takes row_filter=... (a partition is a filter like any other), not partition=")
        reader = None if data is None else to_reader(data)
        if reader is not None:
            refuse_reserved(reader.schema)
        partition = validate.partition_filter(partition)
        bound = partition.bind(reader.schema) if partition is not None and reader is not None else None
        # delta per partition: a partition write's watermarks are recorded per output partition
        marked = bound.watermark_keys() if bound is not None and watermarks else [""]
        txn = validate.txn_id(txn_id) or uuid.uuid4()
        # before the transaction opens: raised between its WRITE and COMMIT, a bad watermark left the
        # transaction open with its data written, and the reconciler later committed the failed write
        marks = self._watermark_rows(watermarks, marked)
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
                meta[STAGED_META] = _staged_meta(provenance, watermarks, marked)
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
                return self._noop_result(key, txn, route)
            outcome = transaction.write(reader, keys=key_cols, row_filter=row_filter, stage=stage, partition=partition)
            if stage:
                return _result(ds.key, transaction.stage(outcome), outcome, route, staged=True)
            done = transaction.commit(outcome, provenance=provenance, watermarks=marks)
            return _result(ds.key, done, outcome, route)

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

    def _watermark_rows(
        self, watermarks: Mapping[str, tuple[datetime, uuid.UUID | None]] | None, partition_keys: list[str]
    ) -> Watermarks:
        """``watermarks`` as control-plane rows, one per source and output partition (``[""]``: the
        whole output); InvalidWriteError for a malformed one, and DatasetNotFoundError for a source
        key that is not a dataset."""
        if watermarks is None:
            return []
        if not isinstance(watermarks, Mapping):
            raise InvalidWriteError(f"watermarks must map source keys to (committed_at, source txn id), got {watermarks!r}")
        rows: Watermarks = []
        for key, value in watermarks.items():
            if not isinstance(value, (tuple, list)) or len(value) != 2 or not isinstance(value[0], datetime):
                raise InvalidWriteError(
                    f"watermarks[{key!r}] must be (committed_at: datetime, source txn id or None), got {value!r}"
                )
            source = self._record(key).dataset_id
            rows.extend((source, part, value[0], validate.txn_id(value[1])) for part in partition_keys)
        return rows

    def _noop_result(self, key: str, txn: uuid.UUID, route: RouteDecision) -> WriteResult:
        prior = self.control.ledger_entry(txn)
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
        return _result(key, prior, outcome, route, noop=True)

    def adopt(self, key: str) -> Description:
        """Take over an existing Iceberg table at ``key``'s identifier that this control plane did
        not create (a rebuilt control plane, a table written by another tool with Trident's identity
        columns). The table is stamped with the dataset's id and recorded as one ledger
        transaction; ``__row_index`` continues from the table's max + 1. Refused (TableOwnershipError)
        when the table belongs to another dataset or lacks the identity columns; see README.

        The upgrade path: a table that a Trident older than the ``trident.dataset-id`` property
        created belongs to an existing dataset of the same key but carries no owner, so every write
        to it is refused. ``adopt`` stamps it when the ledger agrees with the table: its current
        snapshot was made by a transaction this dataset's ledger recorded as committed, and it is
        the snapshot the control plane last recorded. Anything else (a table some other tool wrote
        to since) is refused with TableOwnershipError, naming what disagrees."""
        from .router import RouteDecision
        from .sinks.iceberg.sink import IcebergSink

        validate_key(key)
        sink = self._sink("iceberg_native")
        assert isinstance(sink, IcebergSink)
        existing = self.control.dataset(self.workspace, key)
        upgrade = existing is not None and existing.exists
        if upgrade and existing is not None and existing.sink != sink.name:
            raise InvalidWriteError(
                f"{key!r} is already a dataset of this control plane (in {existing.sink}); there is nothing to adopt"
            )
        ident = ".".join(iceberg_identifier(self.settings.namespace_root, self.workspace, key))
        ds = existing or self.control.ensure_dataset(self.workspace, key, sink.name, ident)
        with self.driver.locked(ds) as ds:
            if upgrade:
                self._ledger_agrees(ds, sink)
            elif ds.sink != sink.name:
                self.control.set_dataset_sink(ds.dataset_id, sink.name, ident)
                ds = self.control.dataset_by_id(ds.dataset_id) or ds
            sink.adoptable(ds)  # refuse before any ledger row exists
            route = RouteDecision(sink=sink.name, requested=sink.name, clamped=False, reason="adopt")
            intent = Intent(txn_id=uuid.uuid4(), mode="adopt", writer="manual.table", sink=sink.name, route=route)  # type: ignore[arg-type]
            transaction = self.driver.open(ds, intent)
            assert transaction is not None
            try:
                outcome = sink.adopt(ds, transaction.txn_id)
                if upgrade:  # indexes once given out (rows deleted since) are never handed out again
                    outcome = replace(outcome, next_row_index=max(outcome.next_row_index, ds.next_row_index))
            except BaseException as exc:
                transaction.fail(exc)
                raise
            transaction.commit(outcome)
        log.info("trident %s the Iceberg table %s as %s", "stamped" if upgrade else "adopted", ident, key)
        return self.describe(key)

    def _ledger_agrees(self, ds: DatasetRecord, sink: IcebergSink) -> None:
        """For ``adopt`` of an existing dataset's unowned table: refuse unless the table's current
        snapshot is the one this dataset's ledger last committed (see ``adopt``)."""
        state = sink.ownership(ds)
        if state.owner == str(ds.dataset_id):
            raise InvalidWriteError(f"{ds.key!r} is already a dataset of this control plane; there is nothing to adopt")
        if state.owner:
            return  # another dataset's table: adoptable() refuses it with the reason
        entry = self.control.ledger_entry(state.txn_id) if state.txn_id is not None else None
        ours = entry is not None and entry.dataset_id == ds.dataset_id and entry.status == "committed"
        if not ours or state.snapshot_id != ds.snapshot_id:
            if state.txn_id is None:
                made_by = "no Trident transaction"
            elif entry is None or entry.dataset_id != ds.dataset_id:
                made_by = f"transaction {state.txn_id}, which this dataset's ledger never recorded"
            else:
                made_by = f"transaction {state.txn_id}, {entry.status} in the ledger"
            raise TableOwnershipError(
                f"the Iceberg table {state.identifier} carries no owner, and its current snapshot "
                f"{state.snapshot_id} (made by {made_by}) is not the version {ds.snapshot_id} the ledger of "
                f"{ds.key!r} last committed: something other than this control plane wrote to it, so Trident "
                "will not stamp it as this dataset's. Inspect it; to start over, drop the dataset and copy the rows in"
            )

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
        columns = validate.read_columns(columns)
        if columns == []:  # no user columns, as pyarrow's columns=[]: batches that carry only their row counts
            rows = self.stream(key, [ROW_INDEX], row_filter, as_of, partition, staged=staged)
            return pa.RecordBatchReader.from_batches(pa.schema([]), (b.select([]) for b in rows))
        if staged is not None:
            if as_of is not None:
                raise InvalidReadError("read either a staged version or a past one (as_of), not both")
            ds, entry = self._staged_entry(key, staged)
            sink = self._sink(ds.sink)
            row_filter = self._with_partition(sink, ds, row_filter, partition)
            snapshot = entry.snapshot_id
            return reading.guarded(key, lambda: sink.scan(ds, columns=columns, row_filter=row_filter, as_of=snapshot))
        ds = self._record(key)
        sink = self._sink(ds.sink)
        row_filter = self._with_partition(sink, ds, row_filter, partition)
        version = self._version_at(ds, as_of) if sink.time_travel else as_of
        return reading.guarded(key, lambda: sink.scan(ds, columns=columns, row_filter=row_filter, as_of=version))

    def _version_at(self, ds: DatasetRecord, as_of: AsOf) -> int | None:
        """The snapshot id of the version ``as_of`` names, decided by the ledger: a transaction id,
        a snapshot id or an instant name a COMMITTED transaction of this dataset, and an instant
        reads the newest version committed at or before it (``committed_at`` is the ledger's τ).
        Anything else is an InvalidReadError, never an empty or older version."""
        if as_of is None:
            return None
        committed = [e for e in self.control.history(ds.dataset_id, None) if e.status == "committed"]
        if isinstance(as_of, bool) or not isinstance(as_of, (int, str, uuid.UUID, datetime)):
            raise InvalidReadError(f"as_of must be a transaction id, a snapshot id or a datetime, not {as_of!r}")
        if isinstance(as_of, datetime):
            when = as_of if as_of.tzinfo is not None else as_of.replace(tzinfo=UTC)
            at = [e for e in committed if e.committed_at is not None and e.committed_at <= when]
            if not at:
                raise InvalidReadError(f"dataset {ds.key!r} has no version committed at or before {when.isoformat()}")
            return max(at, key=lambda e: e.committed_at).snapshot_id  # type: ignore[arg-type, return-value]
        if isinstance(as_of, int):
            for e in committed:
                if e.snapshot_id == as_of:
                    return as_of
            raise InvalidReadError(f"no committed version of {ds.key!r} has snapshot id {as_of}")
        try:
            txn = uuid.UUID(str(as_of))
        except ValueError:
            raise InvalidReadError(f"as_of {as_of!r} is neither a transaction id (uuid) nor a snapshot id") from None
        entry = self.control.ledger_entry(txn)
        if entry is None or entry.dataset_id != ds.dataset_id:
            raise InvalidReadError(f"transaction {txn} is not a transaction of {ds.key!r}")
        if entry.status != "committed" or entry.snapshot_id is None:
            raise InvalidReadError(f"transaction {txn} of {ds.key!r} is {entry.status}, not committed: it has no version")
        return entry.snapshot_id

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
        columns = validate.read_columns(columns)
        if columns == []:  # as pyarrow's read_table(columns=[]): no columns, the matching rows' count kept
            return self.read(key, [ROW_INDEX], row_filter, as_of, partition).select([])
        ds = self._record(key)
        sink = self._sink(ds.sink)
        row_filter = self._with_partition(sink, ds, row_filter, partition)
        version = self._version_at(ds, as_of) if sink.time_travel else as_of
        return reading.read_all(key, lambda: sink.read(ds, columns=columns, row_filter=row_filter, as_of=version))

    # -- write-audit-publish --------------------------------------------------------------------
    def _staged_entry(self, key: str, txn_id: uuid.UUID | str) -> tuple[DatasetRecord, LedgerEntry]:
        ds = self.control.dataset(self.workspace, validate_key(key))
        if ds is None:
            raise DatasetNotFoundError(key, self.workspace)
        try:
            txn = uuid.UUID(str(txn_id))
        except ValueError:
            raise InvalidReadError(f"{txn_id!r} is not a transaction id") from None
        entry = self.control.ledger_entry(txn)
        if entry is None or entry.dataset_id != ds.dataset_id:
            raise InvalidReadError(f"transaction {txn} is not a transaction of {key!r}")
        if entry.status != "staged":
            raise InvalidReadError(f"transaction {txn} of {key!r} is {entry.status}, not staged")
        return ds, entry

    def staged(self, key: str | None = None) -> list[tuple[str, LedgerEntry]]:
        """Staged versions waiting for publish or discard: (dataset key, ledger entry). A ``key``
        that is not a valid key, or names no dataset (not even one whose first version is staged),
        is a named error: "0 staged versions" for a misspelt key read as "nothing to audit"."""
        if key is not None and self.control.dataset(self.workspace, validate_key(key)) is None:
            raise DatasetNotFoundError(key, self.workspace)
        out = []
        for entry in self.control.staged_entries():
            ds = self.control.dataset_by_id(entry.dataset_id)
            if ds is not None and ds.workspace == self.workspace and (key is None or ds.key == key):
                out.append((ds.key, entry))
        return out

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
        ds, entry = self._staged_entry(key, txn_id)
        with self._publish_lock(ds, entry) as ds:
            ds, entry = self._staged_entry(key, txn_id)  # still staged now that we hold the lock
            pending = entry.metadata.get(STAGED_META) or {}
            if provenance is None:
                provenance = pending.get("provenance")
            if watermarks is None:
                watermarks = {
                    k: (datetime.fromisoformat(mark), uuid.UUID(src) if src else None)
                    for k, (mark, src) in (pending.get("watermarks") or {}).items()
                }
            marked = list(pending.get("watermark_partitions") or [""])
            done, outcome = self.driver.publish(
                ds, entry, provenance=provenance, watermarks=self._watermark_rows(watermarks, marked)
            )
        route = RouteDecision(
            sink=entry.sink,
            requested=entry.requested_sink or entry.sink,
            clamped=entry.clamped,
            reason=entry.route_reason or "staged",
        )
        return _result(ds.key, done, outcome, route)

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
        ds, entry = self._staged_entry(key, txn_id)
        with self.driver.locked(ds) as ds:
            ds, entry = self._staged_entry(key, txn_id)
            self.driver.discard_staged(ds, entry, reason)

    @staticmethod
    def _with_partition(sink: Sink, ds: DatasetRecord, row_filter: str | None, partition: PartitionFilter | None) -> str | None:
        partition = validate.partition_filter(partition)
        if partition is None:
            return row_filter
        part = partition.bind(sink.schema(ds)).to_row_filter()
        return part if not row_filter else f"({row_filter}) and {part}"

    def schema(self, key: str) -> pa.Schema:
        ds = self._record(key)
        return self._sink(ds.sink).schema(ds)

    def arrow_source(self, key: str, partition: PartitionFilter | None = None, *, staged: uuid.UUID | str | None = None) -> Any:
        """A re-scannable Arrow source of the dataset (a pyarrow dataset) for DuckDB compute;
        with ``partition``, only those partitions (their files only, on the trident); with
        ``staged=txn``, that staged version."""
        if staged is not None:
            ds, entry = self._staged_entry(key, staged)
            return self._sink(ds.sink).arrow_source(ds, snapshot_id=entry.snapshot_id)
        ds = self._record(key)
        sink = self._sink(ds.sink)
        partition = validate.partition_filter(partition)
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
            ds, entry = self._staged_entry(key, staged)
            plan = self._sink(ds.sink).scan_plan(ds, snapshot_id=entry.snapshot_id)
        else:
            ds = self._record(key)
            plan = self._sink(ds.sink).scan_plan(ds)
        log.info("trident scan %s path=%s files=%d (%s)", key, plan.path, len(plan.files), plan.reason)
        return plan

    def describe(self, key: str) -> Description:
        ds = self._record(key)
        scan_path, scan_reason = self._sink(ds.sink).scan_path(ds)
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
            provenance=self.control.provenance(ds.dataset_id),
            partitioning=[f"{t}({c})" for c, t in (self._sink(ds.sink).partitioning(ds) or ())],
            partitions=self._sink(ds.sink).partition_stats(ds),
        )

    def history(self, key: str, limit: int | None = None) -> list[LedgerEntry]:
        """The ledger of ``key``: one entry per transaction (committed, aborted or open), newest first."""
        ds = self.control.dataset(self.workspace, validate_key(key))
        if ds is None:
            raise DatasetNotFoundError(key, self.workspace)
        return self.control.history(ds.dataset_id, validate.history_limit(limit))

    def set_provenance(self, key: str, provenance: Mapping[str, Any]) -> None:
        checked = validate.metadata(provenance, "provenance (a dict of governance fields)", InvalidArgumentError)
        self.control.set_provenance(self._record(key).dataset_id, checked)

    def watermarks(self, key: str, partition: PartitionFilter | None = None) -> dict[str, datetime]:
        """Per source key, how far the output ``key`` has consumed it (delta strategies).

        With ``partition``, how far that partition (or range) of the output has: a source is
        listed only when every partition in the slice has a watermark for it and they all agree
        (a range whose days were consumed to different points has no single mark, so a delta run
        of it rebuilds it instead of reading some rows twice)."""
        ds = self.control.dataset(self.workspace, validate_key(key))
        partition = validate.partition_filter(partition)  # a bare value was "'str' object has no attribute 'bind'"
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
        from .sql import run_sql

        return run_sql(self, query, staged=validate.sql_arguments(query, staged))

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
        validate.maintenance_window(older_than, retain_last, uploads_older_than)
        ds = self.control.dataset(self.workspace, validate_key(key))
        if ds is None:
            raise DatasetNotFoundError(key, self.workspace)
        with ExitStack() as stack:
            try:
                ds = stack.enter_context(self.driver.locked(ds, wait_s=0))
            except WriterLockLostError:
                raise
            except ConcurrentWriteError:
                reason = self._busy_reason(ds)
                log.info("trident maintain %s: skipped, %s", key, reason)
                return Maintenance(key=ds.key, expired_snapshots=0, deleted_files=0, skipped=reason)
            cleanups = self.driver.retry_cleanups(self.workspace, ds)
            if not ds.exists:
                if not (cleanups.cleaned or cleanups.pending):
                    raise DatasetNotFoundError(key, self.workspace)
                done = Maintenance(key=ds.key, expired_snapshots=0, deleted_files=0)
            elif (nothing_to_do := self._sink(ds.sink).no_maintenance) is not None:
                log.info("trident maintain %s: skipped, %s", key, nothing_to_do)
                done = Maintenance(key=ds.key, expired_snapshots=0, deleted_files=0, skipped=nothing_to_do)
            else:
                now = datetime.now(UTC)
                cutoff = now - timedelta(days=self.settings.staged_max_age_days)
                stale = [
                    e for e in self.control.staged_entries(ds.dataset_id) if e.staged_at is not None and e.staged_at < cutoff
                ]
                for entry in stale:
                    self.driver.discard_staged(
                        ds, entry, f"discarded by maintenance: staged over {self.settings.staged_max_age_days} days ago"
                    )
                sink = self._sink(ds.sink)
                try:
                    compacted = sink.compact(ds)
                except Exception as exc:  # compaction reads every small file: a damaged one is named
                    err = reading.named(exc, key)
                    if err is exc:
                        raise
                    raise err from exc
                log.info("trident maintain %s: %s", key, compacted)
                done = sink.maintain(
                    ds,
                    older_than=_before(now, older_than),
                    retain_last=retain_last,
                    uploads_before=_before(now, uploads_older_than),
                )
                done = replace(
                    done,
                    discarded_staged=[e.txn_id for e in stale],
                    compacted_files=compacted.compacted_files,
                    compaction_files_written=compacted.compaction_files_written,
                    data_files_before=compacted.data_files_before,
                    data_files_after=compacted.data_files_after,
                )
            return replace(
                done,
                deleted_files=done.deleted_files + cleanups.files,
                aborted_uploads=done.aborted_uploads + cleanups.uploads,
                cleaned_txns=len(cleanups.cleaned),
                cleanup_pending=len(cleanups.pending),
            )

    def _busy_reason(self, ds: DatasetRecord) -> str:
        """Why ``maintain`` could not take the writer lock, naming the open write when there is one."""
        open_now = self.control.open_entries(ds.dataset_id)
        if not open_now:
            return "its writer lock is held (another maintenance or reconcile of it is running)"
        e = open_now[0]
        return (
            f"a write of it is open (transaction {e.txn_id}, writer {e.writer}, pid {e.pid} on {e.host}, "
            f"since {e.started_at:%Y-%m-%d %H:%M:%S%z}); the next maintenance does it"
        )

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
        with self.driver.locked(self._record(key)) as ds:
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
        from .streaming import IngestStream

        validate_key(key)
        key_cols = _keys(keys)
        _check_mode(mode, key_cols, None, object())
        if mode == "delete":
            raise InvalidWriteError("an ingest stream adds rows; use delete_rows() or write(mode='delete')")
        validate.stream_session(schema, max_queued)
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
        from .row_edit import complete_rows

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
        from .manifest import MANIFEST_KEY, MANIFEST_WRITER, manifest_table

        table = manifest_table(entries, keys_only=mode == "delete")
        keys = None if mode == "replace" else [MANIFEST_KEY]
        return self.write(key, table, mode=mode, keys=keys, writer=MANIFEST_WRITER, **write_kwargs)

    def move_refusal(self, key: str, to_sink: str) -> str | None:
        """Why a canary may not move ``key`` to ``to_sink`` (its writers could not follow), or None."""
        from .canary import move_refusal

        return move_refusal(self, self._record(key).dataset_id, key, to_sink)

    def migrate(self, key: str, to_sink: str = "iceberg_native", *, progress: Any = None) -> MigrationReport:
        """Canary: copy ``key`` to ``to_sink`` preserving identity, compare order-independent
        checksums of both copies, and flip the dataset only on parity (else revert, unchanged).
        ``progress(phase, rows_done, rows_total)`` is called as rows stream. See ``canary.py``."""
        from .canary import migrate

        return migrate(self, validate_key(key), to_sink, progress)

    # -- Dagster layer (issue 9): commits as events --------------------------------------------
    def commits_since(self, after: int = 0, limit: int = 500) -> list[tuple[int, str, LedgerEntry]]:
        """This workspace's committed transactions in commit order, after commit sequence ``after``:
        ``(sequence, dataset key, ledger entry)``, at most ``limit``. The sequence is drawn in the
        COMMIT step (the sync log's id), so a cursor over it sees each commit once, whatever writer
        made it; the Dagster ledger sensor reports them as materializations."""
        rows = self.control.execute(q.COMMITS_SINCE, (self.workspace, after, limit))
        return [(r.pop("seq"), r.pop("dataset_key"), LedgerEntry(**r)) for r in rows]


def _before(now: datetime, age: timedelta) -> datetime:
    """``now - age``, or the earliest instant when ``age`` reaches past year 1 (``timedelta.max``
    means "keep everything", and was a raw OverflowError)."""
    try:
        return now - age
    except OverflowError:
        return datetime.min.replace(tzinfo=UTC)


def _keys(keys: Iterable[str] | str | None) -> tuple[str, ...]:
    return validate.write_keys(keys)


def _check_mode(mode: str, keys: tuple[str, ...], row_filter: str | None, data: Any) -> None:
    if mode not in WRITE_MODES:
        raise InvalidWriteError(f"unknown mode {mode!r}; modes are {list(WRITE_MODES)}")
    if mode in ("upsert", "append_new") and not keys:
        raise InvalidWriteError(f"mode {mode!r} needs keys=[...] naming the key column(s)")
    if mode == "append" and keys:
        raise InvalidWriteError("mode 'append' takes no keys; use 'append_new' to skip existing keys or 'upsert'")
    if mode == "delete":
        if bool(keys) == bool(row_filter):
            raise InvalidWriteError(
                "mode 'delete' needs exactly one of keys=[...] (with data holding the keys) or row_filter=..."
            )
        if keys and data is None:
            raise InvalidWriteError("a delete by keys needs data: the key values of the rows to delete")
    elif row_filter is not None:
        raise InvalidWriteError("row_filter is only for mode='delete'; reads take row_filter in read()/stream()")
    if mode != "delete" and data is None:
        raise InvalidWriteError(f"mode {mode!r} needs data")


STAGED_META = "trident.staged"  # ledger metadata of a staged write: what publish records with it


def _staged_meta(
    provenance: Mapping[str, Any] | None,
    watermarks: Mapping[str, tuple[datetime, uuid.UUID | None]] | None,
    partition_keys: list[str],
) -> dict[str, Any]:
    return {
        "provenance": dict(provenance) if provenance is not None else None,
        "watermarks": {k: [mark.isoformat(), str(src) if src else None] for k, (mark, src) in (watermarks or {}).items()},
        "watermark_partitions": partition_keys,
    }


def _result(
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
        committed_at=entry.committed_at or entry.started_at,
        schema_version=entry.schema_version or 0,
        route=route.describe(),
        noop=noop,
        staged=staged,
    )
