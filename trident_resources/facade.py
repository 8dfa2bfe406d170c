"""``Trident``: the one door. Every write and read of dataset rows goes through here, whatever sink
the dataset lives in, and every write is one INTENT -> WRITE -> COMMIT transaction."""

from __future__ import annotations

import logging
import shutil
import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, NoReturn

import pyarrow as pa

from . import queries as q
from .control_plane import ControlPlane, DatasetRecord, LedgerEntry, Outcome
from .embedded_pg import ensure_embedded_postgres
from .errors import DatasetNotFoundError, InvalidWriteError, SinkMismatchError, StorageUnavailableError, TridentError
from .failpoints import failpoint
from .identity import refuse_reserved
from .inputs import to_reader
from .keys import iceberg_identifier, validate_key
from .sinks.iceberg.catalog import open_catalog
from .sinks.iceberg.sink import IcebergSink
from .results import Description, ReconcileReport, WriteResult
from .router import RouteDecision, Router
from .settings import TridentSettings
from .sinks.base import WRITE_MODES, AsOf, Maintenance, Sink, WriteRequest

if TYPE_CHECKING:  # issue 4: returned by ingest_stream / migrate
    from .canary import MigrationReport
    from .streaming import IngestStream

log = logging.getLogger("trident")


class Trident:
    """Open one per process (it owns a connection pool); ``close()`` or use it as a context manager."""

    def __init__(self, settings: TridentSettings | None = None) -> None:
        self.settings = settings or TridentSettings()
        s = self.settings
        dsn = s.pg_dsn.get_secret_value() if s.pg_dsn else ensure_embedded_postgres(s.home / "pg")
        self.control = ControlPlane(dsn, pool_max=s.pg_pool_max)
        self.catalog = open_catalog(s, dsn)
        self.router = Router(self.control, s.workspace, s.flag_refresh_seconds)
        self.sinks: dict[str, Sink] = {IcebergSink.name: IcebergSink(self.catalog, s)}
        self._register_extra_sinks()

    def _register_extra_sinks(self) -> None:
        try:
            from .sinks.pg.sink import PgSink
        except ImportError:
            return
        self.sinks[PgSink.name] = PgSink(self.control, self.settings)

    @classmethod
    def from_env(cls) -> Trident:
        return cls(TridentSettings())

    def close(self) -> None:
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
        try:
            return self.sinks[sink]
        except KeyError:
            raise StorageUnavailableError(f"sink {sink!r} is not available in this installation") from None

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
        mode: str = "replace",
        writer: str = "ingest.api",
        keys: Iterable[str] | str | None = None,
        row_filter: str | None = None,
        source_refs: Iterable[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
        txn_id: uuid.UUID | str | None = None,
        provenance: Mapping[str, Any] | None = None,
        watermarks: Mapping[str, tuple[datetime, uuid.UUID | None]] | None = None,
        migrate_to: str | None = None,
    ) -> WriteResult:
        """Write ``data`` to dataset ``key`` as one transaction; see DESIGN.md "Write modes".

        ``txn_id`` makes a retry idempotent: a transaction id that already committed is a no-op.
        ``watermarks`` (source key -> (committed_at, source txn)) and ``provenance`` are recorded
        in the same COMMIT step. ``migrate_to`` is for canaries: it lets a write move a dataset.
        """
        validate_key(key)
        key_cols = _keys(keys)
        _check_mode(mode, key_cols, row_filter, data)
        reader = None if data is None else to_reader(data)
        if reader is not None:
            refuse_reserved(reader.schema)
        txn = uuid.UUID(str(txn_id)) if txn_id is not None else uuid.uuid4()
        existing = self.control.dataset(self.workspace, key)
        if mode == "delete" and (existing is None or not existing.exists):
            raise DatasetNotFoundError(key, self.workspace)
        route = self.router.resolve(writer, key, existing) if migrate_to else self._route(key, writer, existing)
        sink_name = migrate_to or route.sink
        sink = self._sink(sink_name)
        ident = ".".join(iceberg_identifier(self.settings.namespace_root, self.workspace, key))
        ds = existing or self.control.ensure_dataset(self.workspace, key, sink_name, ident)
        log.info("trident write %s mode=%s writer=%s sink=%s", key, mode, writer, route.describe())
        with self.control.writer_lock(ds, self.settings.writer_wait_seconds):
            ds = self.control.dataset_by_id(ds.dataset_id) or ds
            for stale in self.control.open_entries(ds.dataset_id):
                self._recover(ds, stale)  # we hold the lock, so its writer is gone
            ds = self.control.dataset_by_id(ds.dataset_id) or ds
            if ds.sink != sink_name and (not ds.exists or migrate_to is not None):
                self.control.set_dataset_sink(ds.dataset_id, sink_name, ident)
                ds = self.control.dataset_by_id(ds.dataset_id) or ds
            entry = self.control.open_txn(
                LedgerEntry(
                    txn_id=txn, dataset_id=ds.dataset_id, status="open", mode=mode, writer=writer, sink=sink_name,
                    started_at=datetime.now(), requested_sink=route.requested, clamped=route.clamped,
                    route_reason=route.reason, source_refs=list(source_refs or []), metadata=dict(metadata or {}),
                )
            )
            if entry is None:
                return self._noop_result(key, txn, route)
            return self._run(ds, entry, sink, reader, key_cols, row_filter, route, provenance, watermarks)

    def _run(
        self,
        ds: DatasetRecord,
        entry: LedgerEntry,
        sink: Sink,
        reader: pa.RecordBatchReader | None,
        keys: tuple[str, ...],
        row_filter: str | None,
        route: RouteDecision,
        provenance: Mapping[str, Any] | None,
        watermarks: Mapping[str, tuple[datetime, uuid.UUID | None]] | None,
    ) -> WriteResult:
        spill = self.settings.home / "tmp" / str(entry.txn_id)
        try:
            try:
                failpoint("intent.after")
                outcome = sink.write(
                    WriteRequest(
                        dataset=ds, mode=entry.mode, keys=keys, row_filter=row_filter, txn_id=entry.txn_id,
                        tau=entry.started_at, reader=reader, spill_dir=spill,
                        note_location=lambda loc: self.control.set_txn_location(entry.txn_id, loc),
                    )
                )
            except BaseException as exc:
                self._fail(ds, entry, exc)
                _reraise(exc)
            try:
                failpoint("commit.before_ledger")
                marks = self._watermark_rows(watermarks)
                done = self.control.commit_txn(
                    entry, outcome, watermarks=marks, provenance=dict(provenance) if provenance is not None else None
                )
            except BaseException as exc:
                self._fail(ds, entry, exc)
                _reraise(exc)
        finally:
            shutil.rmtree(spill, ignore_errors=True)
        return _result(ds.key, done, outcome, route)

    def _fail(self, ds: DatasetRecord, entry: LedgerEntry, exc: BaseException) -> None:
        """A write failed: revert its change if it became visible, mark the ledger ``aborted`` and
        remove its files. Each step that cannot be done (storage or Postgres down) is logged and
        left to the reconciler, so the caller always gets the original, named error."""
        sink = self._sink(entry.sink)
        try:
            sink.undo(ds, entry.txn_id)  # a no-op unless the change is the dataset's current state
        except Exception as undo_exc:
            log.error(
                "trident write %s failed (txn %s) and its change could not be checked or reverted (%s); "
                "the ledger row stays open for `trident reconcile`", ds.key, entry.txn_id, undo_exc,
            )
            return
        self._abort(ds, entry, exc)

    def _abort(self, ds: DatasetRecord, entry: LedgerEntry, exc: BaseException) -> None:
        msg = f"{type(exc).__name__}: {exc}"
        try:
            self.control.abort_txn(entry.txn_id, msg)
        except Exception as pg_exc:
            log.error("could not mark txn %s aborted (%s); `trident reconcile` will", entry.txn_id, pg_exc)
            return
        try:
            self._sink(entry.sink).discard(ds, entry.txn_id)
        except Exception as io_exc:
            log.warning(
                "txn %s aborted, but its files could not be removed yet (%s); `trident maintain` removes them",
                entry.txn_id, io_exc,
            )
        log.warning("trident write %s aborted (txn %s): %s", ds.key, entry.txn_id, msg)

    def _watermark_rows(
        self, watermarks: Mapping[str, tuple[datetime, uuid.UUID | None]] | None
    ) -> list[tuple[uuid.UUID, datetime, uuid.UUID | None]]:
        rows = []
        for key, (mark, source_txn) in (watermarks or {}).items():
            rows.append((self._record(key).dataset_id, mark, source_txn))
        return rows

    def _noop_result(self, key: str, txn: uuid.UUID, route: RouteDecision) -> WriteResult:
        prior = self.control.ledger_entry(txn)
        assert prior is not None and prior.status == "committed"
        outcome = Outcome(
            rows_written=prior.rows_written or 0, row_count=prior.row_count or 0, next_row_index=0,
            snapshot_id=prior.snapshot_id, schema=[], skipped=prior.skipped or 0, preserved=prior.preserved or 0,
        )
        return _result(key, prior, outcome, route, noop=True)

    # -- recovery ---------------------------------------------------------------------------
    def _recover(self, ds: DatasetRecord, entry: LedgerEntry) -> str:
        """Roll an orphaned open transaction forward when its change is in the sink, else abort it."""
        sink = self._sink(entry.sink)
        outcome = sink.find_committed(ds, entry.txn_id)
        if outcome is not None:
            self.control.commit_txn(entry, outcome)
            log.warning("reconciled: rolled forward txn %s of %s", entry.txn_id, ds.key)
            return "rolled_forward"
        self.control.abort_txn(entry.txn_id, "aborted by the reconciler: the writer died before its change committed")
        sink.discard(ds, entry.txn_id, location=entry.location)
        log.warning("reconciled: aborted txn %s of %s", entry.txn_id, ds.key)
        return "aborted"

    def reconcile(self) -> ReconcileReport:
        """Repair transactions left open by crashed processes; live writers are left alone."""
        forward: list[uuid.UUID] = []
        aborted: list[uuid.UUID] = []
        running: list[uuid.UUID] = []
        for entry in self.control.open_entries():
            ds = self.control.dataset_by_id(entry.dataset_id)
            if ds is None or ds.workspace != self.workspace:
                continue
            try:
                with self.control.writer_lock(ds, 0):
                    still = self.control.ledger_entry(entry.txn_id)
                    if still is None or still.status != "open":
                        continue
                    (forward if self._recover(ds, still) == "rolled_forward" else aborted).append(entry.txn_id)
            except TridentError:
                running.append(entry.txn_id)
        return ReconcileReport(rolled_forward=forward, aborted=aborted, still_running=running)

    # -- READ -------------------------------------------------------------------------------
    def stream(
        self, key: str, columns: list[str] | None = None, row_filter: str | None = None, as_of: AsOf = None
    ) -> pa.RecordBatchReader:
        """The dataset's rows as a bounded-memory stream, from whichever sink holds them."""
        ds = self._record(key)
        return self._sink(ds.sink).scan(ds, columns=columns, row_filter=row_filter, as_of=as_of)

    def read(
        self, key: str, columns: list[str] | None = None, row_filter: str | None = None, as_of: AsOf = None
    ) -> pa.Table:
        return self.stream(key, columns=columns, row_filter=row_filter, as_of=as_of).read_all()

    def schema(self, key: str) -> pa.Schema:
        ds = self._record(key)
        return self._sink(ds.sink).schema(ds)

    def arrow_source(self, key: str) -> Any:
        """A re-scannable Arrow source of the dataset (a pyarrow dataset) for DuckDB compute."""
        ds = self._record(key)
        return self._sink(ds.sink).arrow_source(ds)

    def describe(self, key: str) -> Description:
        ds = self._record(key)
        return Description(
            key=ds.key, workspace=ds.workspace, dataset_id=ds.dataset_id, sink=ds.sink, row_count=ds.row_count,
            schema=ds.schema or [], schema_version=ds.schema_version, snapshot_id=ds.snapshot_id,
            last_txn_id=ds.last_txn_id, committed_at=ds.committed_at, updated_at=ds.updated_at,
            iceberg_identifier=ds.iceberg_identifier, provenance=self.control.provenance(ds.dataset_id),
        )

    def history(self, key: str, limit: int | None = None) -> list[LedgerEntry]:
        """The ledger of ``key``: one entry per transaction (committed, aborted or open), newest first."""
        ds = self.control.dataset(self.workspace, validate_key(key))
        if ds is None:
            raise DatasetNotFoundError(key, self.workspace)
        return self.control.history(ds.dataset_id, limit)

    def set_provenance(self, key: str, provenance: Mapping[str, Any]) -> None:
        self.control.set_provenance(self._record(key).dataset_id, dict(provenance))

    def watermarks(self, key: str) -> dict[str, datetime]:
        """Per source key, how far the output ``key`` has consumed it (delta strategies)."""
        ds = self.control.dataset(self.workspace, validate_key(key))
        if ds is None:
            return {}
        out = {}
        for source_id, mark in self.control.watermarks(ds.dataset_id).items():
            src = self.control.dataset_by_id(source_id)
            if src is not None:
                out[src.key] = mark
        return out

    def sql(self, query: str) -> pa.Table:
        """Read-only SQL (DuckDB) over this workspace's datasets, named by key: ``"sales/orders"``."""
        from .sql import run_sql

        return run_sql(self, query)

    def maintain(self, key: str, *, older_than: timedelta = timedelta(days=7), retain_last: int = 5) -> Maintenance:
        """Table maintenance: expire versions older than ``older_than`` (keeping the newest
        ``retain_last``) and delete the files only they used. Time travel to them ends here."""
        ds = self._record(key)
        with self.control.writer_lock(ds, self.settings.writer_wait_seconds):
            return self._sink(ds.sink).maintain(
                ds, older_than=datetime.now(timezone.utc) - older_than, retain_last=retain_last
            )

    def drop(self, key: str) -> None:
        """Delete a dataset: its rows, storage and control-plane records."""
        ds = self._record(key)
        with self.control.writer_lock(ds, self.settings.writer_wait_seconds):
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
        mode: str = "append",
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
        self._route(key, writer, self.control.dataset(self.workspace, key))  # refuse before the producer sends anything
        return IngestStream(
            self, key, mode=mode, keys=key_cols, writer=writer, schema=schema, max_queued=max_queued,
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

    def write_manifest(self, key: str, entries: Any, *, mode: str = "upsert", **write_kwargs: Any) -> WriteResult:
        """Record file pointers (object_key, size, checksum, content_type [+ extra columns]) in a
        ``dataset.manifest`` dataset, which lives in the control plane (sink ``pg``) by design.
        ``mode`` upsert (default, keyed by object_key), append_new, replace or delete."""
        from .manifest import MANIFEST_KEY, MANIFEST_WRITER, manifest_table

        table = manifest_table(entries, keys_only=mode == "delete")
        keys = None if mode == "replace" else [MANIFEST_KEY]
        return self.write(key, table, mode=mode, keys=keys, writer=MANIFEST_WRITER, **write_kwargs)

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


def _keys(keys: Iterable[str] | str | None) -> tuple[str, ...]:
    if keys is None:
        return ()
    return (keys,) if isinstance(keys, str) else tuple(keys)


def _check_mode(mode: str, keys: tuple[str, ...], row_filter: str | None, data: Any) -> None:
    if mode not in WRITE_MODES:
        raise InvalidWriteError(f"unknown mode {mode!r}; modes are {list(WRITE_MODES)}")
    if mode in ("upsert", "append_new") and not keys:
        raise InvalidWriteError(f"mode {mode!r} needs keys=[...] naming the key column(s)")
    if mode == "append" and keys:
        raise InvalidWriteError("mode 'append' takes no keys; use 'append_new' to skip existing keys or 'upsert'")
    if mode == "delete":
        if bool(keys) == bool(row_filter):
            raise InvalidWriteError("mode 'delete' needs exactly one of keys=[...] (with data holding the keys) or row_filter=...")
        if keys and data is None:
            raise InvalidWriteError("a delete by keys needs data: the key values of the rows to delete")
    elif row_filter is not None:
        raise InvalidWriteError("row_filter is only for mode='delete'; reads take row_filter in read()/stream()")
    if mode != "delete" and data is None:
        raise InvalidWriteError(f"mode {mode!r} needs data")


def _reraise(exc: BaseException) -> NoReturn:
    """Re-raise, naming storage faults (OSError from pyarrow/S3) as StorageUnavailableError."""
    if isinstance(exc, OSError) and not isinstance(exc, TridentError):
        raise StorageUnavailableError(f"storage unavailable, nothing was committed: {type(exc).__name__}: {exc}") from exc
    raise exc


def _result(key: str, entry: LedgerEntry, outcome: Outcome, route: RouteDecision, noop: bool = False) -> WriteResult:
    return WriteResult(
        key=key, txn_id=entry.txn_id, mode=entry.mode, writer=entry.writer, sink=entry.sink,
        rows_written=outcome.rows_written, row_count=outcome.row_count, skipped=outcome.skipped,
        preserved=outcome.preserved, deleted=outcome.deleted, snapshot_id=outcome.snapshot_id,
        committed_at=entry.committed_at or entry.started_at, schema_version=entry.schema_version or 0,
        route=route.describe(), noop=noop,
    )
