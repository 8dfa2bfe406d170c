"""``Trident``: the one door. Every write and read of dataset rows goes through here, whatever sink
the dataset lives in, and every write is one INTENT -> WRITE -> COMMIT transaction."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from . import queries as q
from .control_plane import ControlPlane, DatasetRecord, LedgerEntry, Outcome
from .embedded_pg import ensure_embedded_postgres
from .errors import DatasetNotFoundError, InvalidReadError, InvalidWriteError, SinkMismatchError
from .identity import refuse_reserved
from .inputs import to_reader
from .keys import iceberg_identifier, validate_key
from .results import Description, ReconcileReport, WriteResult
from .router import RouteDecision, Router
from .settings import TridentSettings
from .sinks import open_sinks
from .sinks.base import WRITE_MODES, AsOf, Maintenance, Sink, WriteMode
from .transaction import Intent, TransactionDriver, Watermarks

if TYPE_CHECKING:  # returned by ingest_stream / migrate
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
        self.router = Router(self.control, s.workspace, s.flag_refresh_seconds)
        self.driver = TransactionDriver(self.control, open_sinks(s, self.control, dsn), s)

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
    ) -> WriteResult:
        """Write ``data`` to dataset ``key`` as one transaction; see DESIGN.md "Write modes".

        ``txn_id`` makes a retry idempotent: a transaction id that already committed is a no-op.
        ``watermarks`` (source key -> (committed_at, source txn)) and ``provenance`` are recorded
        in the same COMMIT step.
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
        route = self._route(key, writer, existing)
        ident = ".".join(iceberg_identifier(self.settings.namespace_root, self.workspace, key))
        ds = existing or self.control.ensure_dataset(self.workspace, key, route.sink, ident)
        with self.driver.locked(ds) as ds:
            route = self._route(key, writer, ds)  # decided again: the dataset may have moved or been born meanwhile
            if ds.sink != route.sink:  # not born yet (an aborted first write may have named another sink)
                self.control.set_dataset_sink(ds.dataset_id, route.sink, ident)
                ds = self.control.dataset_by_id(ds.dataset_id) or ds
            log.info("trident write %s mode=%s writer=%s sink=%s", key, mode, writer, route.describe())
            intent = Intent(
                txn_id=txn, mode=mode, writer=writer, sink=route.sink, route=route,
                source_refs=list(source_refs or []), metadata=dict(metadata or {}),
            )
            transaction = self.driver.open(ds, intent)
            if transaction is None:
                return self._noop_result(key, txn, route)
            outcome = transaction.write(reader, keys=key_cols, row_filter=row_filter)
            done = transaction.commit(outcome, provenance=provenance, watermarks=self._watermark_rows(watermarks))
            return _result(ds.key, done, outcome, route)

    def _watermark_rows(self, watermarks: Mapping[str, tuple[datetime, uuid.UUID | None]] | None) -> Watermarks:
        return [(self._record(key).dataset_id, mark, source_txn) for key, (mark, source_txn) in (watermarks or {}).items()]

    def _noop_result(self, key: str, txn: uuid.UUID, route: RouteDecision) -> WriteResult:
        prior = self.control.ledger_entry(txn)
        assert prior is not None and prior.status == "committed"
        outcome = Outcome(
            rows_written=prior.rows_written or 0, row_count=prior.row_count or 0, next_row_index=0,
            snapshot_id=prior.snapshot_id, schema=[], skipped=prior.skipped or 0, preserved=prior.preserved or 0,
        )
        return _result(key, prior, outcome, route, noop=True)

    def reconcile(self) -> ReconcileReport:
        """Repair transactions left open by crashed processes; live writers are left alone."""
        return self.driver.reconcile(self.workspace)

    # -- READ -------------------------------------------------------------------------------
    def stream(
        self, key: str, columns: list[str] | None = None, row_filter: str | None = None, as_of: AsOf = None
    ) -> pa.RecordBatchReader:
        """The dataset's rows as a bounded-memory stream, from whichever sink holds them."""
        ds = self._record(key)
        sink = self._sink(ds.sink)
        version = self._version_at(ds, as_of) if sink.time_travel else as_of
        return sink.scan(ds, columns=columns, row_filter=row_filter, as_of=version)

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
            when = as_of if as_of.tzinfo is not None else as_of.replace(tzinfo=timezone.utc)
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

    def maintain(
        self,
        key: str,
        *,
        older_than: timedelta = timedelta(days=7),
        retain_last: int = 5,
        uploads_older_than: timedelta = timedelta(hours=1),
    ) -> Maintenance:
        """Table maintenance: expire versions older than ``older_than`` (keeping the newest
        ``retain_last``) and delete the files only they used; abort incomplete multipart uploads
        under the table older than ``uploads_older_than`` (a writer killed mid-file leaves one);
        and retry the storage cleanup of the dataset's aborted transactions that could not run
        (``cleanup_pending``) — also for a dataset whose first write aborted, which never came to
        exist. Time travel to expired versions ends here."""
        ds = self.control.dataset(self.workspace, validate_key(key))
        if ds is None:
            raise DatasetNotFoundError(key, self.workspace)
        with self.driver.locked(ds) as ds:
            cleanups = self.driver.retry_cleanups(self.workspace, ds)
            if not ds.exists:
                if not (cleanups.cleaned or cleanups.pending):
                    raise DatasetNotFoundError(key, self.workspace)
                done = Maintenance(key=ds.key, expired_snapshots=0, deleted_files=0)
            else:
                now = datetime.now(timezone.utc)
                done = self._sink(ds.sink).maintain(
                    ds, older_than=now - older_than, retain_last=retain_last, uploads_before=now - uploads_older_than
                )
            return replace(
                done, deleted_files=done.deleted_files + cleanups.files,
                aborted_uploads=done.aborted_uploads + cleanups.uploads,
                cleaned_txns=len(cleanups.cleaned), cleanup_pending=len(cleanups.pending),
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

    def write_manifest(self, key: str, entries: Any, *, mode: WriteMode = "upsert", **write_kwargs: Any) -> WriteResult:
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


def _result(key: str, entry: LedgerEntry, outcome: Outcome, route: RouteDecision, noop: bool = False) -> WriteResult:
    return WriteResult(
        key=key, txn_id=entry.txn_id, mode=entry.mode, writer=entry.writer, sink=entry.sink,
        rows_written=outcome.rows_written, row_count=outcome.row_count, skipped=outcome.skipped,
        preserved=outcome.preserved, deleted=outcome.deleted, snapshot_id=outcome.snapshot_id,
        committed_at=entry.committed_at or entry.started_at, schema_version=entry.schema_version or 0,
        route=route.describe(), noop=noop,
    )
