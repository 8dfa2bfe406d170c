"""The ``iceberg_native`` sink: Parquet data files in object storage, one Iceberg snapshot per
transaction, copy-on-write for keyed writes (no delete files, so every reader stays simple)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError, RESTError
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.expressions.parser import parse as parse_filter
from pyiceberg.expressions.visitors import bind
from pyiceberg.io.pyarrow import expression_to_pyarrow, schema_to_pyarrow
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table, Transaction
from pyiceberg.table.snapshots import Snapshot, ancestors_of

from ...control_plane import DatasetRecord, Outcome
from ...errors import (
    DatasetNotFoundError,
    InvalidFilterError,
    InvalidReadError,
    InvalidWriteError,
    SchemaMismatchError,
    StorageUnavailableError,
    TransactionConflictError,
)
from ...failpoints import failpoint
from ...identity import ROW_ID, ROW_INDEX, stamp
from ...keys import iceberg_identifier
from ...merge import FILE_COLUMN, KeyedMerge
from ...schemas import compatible, conform, describe_schema, plan_schema, to_iceberg, user_fields, with_identity
from ...settings import TridentSettings
from ..base import AsOf, Maintenance, Sink, WriteRequest
from .catalog import ensure_namespace
from .files import DataFileWriter, delete_paths, filesystem_for, list_txn_files
from .maintenance import data_files_of, existing_under, once_referenced

TXN_PROPERTY = "trident.txn-id"
TABLE_PROPERTIES = {"format-version": "2", "write.parquet.compression-codec": "zstd"}


def _num(summary: Any, key: str) -> int:
    """A numeric snapshot-summary property (absent means zero)."""
    try:
        value = summary[key]
    except KeyError:
        return 0
    return int(value) if value is not None else 0


# Scans of this format (ours, or DuckDB's through arrow_source) read one row group at a time:
# pre-buffering would hold whole files' compressed bytes in memory.
_PARQUET = pads.ParquetFileFormat(default_fragment_scan_options=pads.ParquetFragmentScanOptions(pre_buffer=False))


def _scan(dataset: pads.Dataset, columns: list[str] | None, expr: Any) -> pa.RecordBatchReader:
    """A bounded-memory scan: pyarrow's default read-ahead (16 batches x 4 files) holds far more
    than a row group in flight, which is what made keyed writes grow with the data."""
    return dataset.scanner(
        columns=columns, filter=expr, batch_size=65_536, batch_readahead=1, fragment_readahead=1,
    ).to_reader()


def _constant(value: int, n: int) -> pa.Array:
    return pa.array(np.full(n, value, dtype=np.int32))


def _summary_outcome(snap: Snapshot, schema: pa.Schema) -> Outcome:
    """A transaction's outcome as its snapshot summary recorded it: the same numbers whether the
    writer commits them itself or the reconciler rolls a crashed writer's transaction forward."""
    s = snap.summary
    assert s is not None
    return Outcome(
        rows_written=_num(s, "trident.rows-written"),
        row_count=_num(s, "total-records"),
        next_row_index=_num(s, "trident.next-row-index"),
        snapshot_id=snap.snapshot_id,
        schema=describe_schema(schema),
        skipped=_num(s, "trident.skipped"),
        preserved=_num(s, "trident.preserved"),
        deleted=_num(s, "trident.deleted"),
    )


def _strip(schema: pa.Schema) -> pa.Schema:
    return pa.schema([pa.field(f.name, f.type, f.nullable) for f in schema])


class IcebergSink(Sink):
    name = "iceberg_native"

    def __init__(self, catalog: Catalog, settings: TridentSettings) -> None:
        self.catalog = catalog
        self.settings = settings
        self._staged_create = True
        self._nested = settings.catalog_nested_namespaces if settings.catalog_nested_namespaces is not None else bool(settings.catalog_uri)

    # -- tables -----------------------------------------------------------------------------
    def identifier(self, ds: DatasetRecord) -> tuple[str, ...]:
        """``(<root>, <workspace>, *dirs, table)``; folded into one namespace level for catalogs
        without nested namespaces (pyiceberg's SQL catalog)."""
        parts = iceberg_identifier(self.settings.namespace_root, ds.workspace, ds.key)
        if self._nested:
            return parts
        return (".".join(parts[:-1]), parts[-1])

    def table(self, ds: DatasetRecord) -> Table | None:
        try:
            return self.catalog.load_table(self.identifier(ds))
        except NoSuchTableError:
            return None
        except (OSError, ConnectionError) as exc:
            raise StorageUnavailableError(f"Iceberg catalog unavailable: {type(exc).__name__}: {exc}") from exc

    def _existing_table(self, ds: DatasetRecord) -> Table:
        table = self.table(ds)
        if table is None:
            raise DatasetNotFoundError(ds.key, ds.workspace)
        return table

    def _ensure_namespaces(self, ident: tuple[str, ...]) -> None:
        for i in range(1, len(ident)):
            ensure_namespace(self.catalog, ident[:i])

    def schema(self, ds: DatasetRecord) -> pa.Schema:
        return schema_to_pyarrow(self._existing_table(ds).schema(), include_field_ids=False)

    # -- WRITE ------------------------------------------------------------------------------
    def write(self, req: WriteRequest) -> Outcome:
        table = self.table(req.dataset)
        if req.mode in ("append", "replace") and not req.keys:
            assert req.reader is not None
            return self._write_stream(req, table)
        if table is None and req.mode == "delete":
            raise DatasetNotFoundError(req.dataset.key, req.dataset.workspace)
        return self._write_keyed(req, table)

    def _begin(self, req: WriteRequest, table: Table | None, target: pa.Schema, *, replace: bool) -> Transaction:
        """Open the Iceberg transaction that creates or evolves the table to ``target``."""
        if table is None:
            ident = self.identifier(req.dataset)
            self._ensure_namespaces(ident)
            txn = self._create_transaction(ident, target)
        else:
            txn = table.transaction()
            current = schema_to_pyarrow(table.schema(), include_field_ids=False)
            if replace:
                gone = [
                    f.name for f in current
                    if f.name not in target.names
                    or not compatible(target.field(f.name).type, f.type)
                ]
                if gone:
                    with txn.update_schema(allow_incompatible_changes=True) as upd:
                        for name in gone:
                            upd.delete_column(name)
            if any(f.name not in current.names for f in target) or replace:
                with txn.update_schema() as upd:
                    upd.union_by_name(to_iceberg(target))
        req.note_location(txn.table_metadata.location)
        return txn

    def _create_transaction(self, ident: tuple[str, ...], target: pa.Schema) -> Transaction:
        """Create the table in the same commit as its first data when the catalog supports staged
        creation; otherwise create it empty first (an empty table is no dataset: the control plane
        only knows committed ones, and ``discard`` drops a table that never got a snapshot)."""
        schema = to_iceberg(target)
        if self._staged_create:
            try:
                return self.catalog.create_table_transaction(ident, schema=schema, properties=TABLE_PROPERTIES)
            except (NotImplementedError, RESTError) as exc:
                if "not implemented" not in str(exc).lower() and not isinstance(exc, NotImplementedError):
                    raise
                self._staged_create = False
        return self.catalog.create_table(ident, schema=schema, properties=TABLE_PROPERTIES).transaction()

    def _writer(self, req: WriteRequest, txn: Transaction) -> DataFileWriter:
        meta = txn.table_metadata
        return DataFileWriter(
            txn._table.io,
            meta.location,
            req.txn_id,
            meta.schema(),
            dict(meta.properties),
            spec_id=meta.default_spec_id,
            target_file_bytes=self.settings.target_file_bytes,
            row_group_bytes=self.settings.row_group_bytes,
            parallelism=self.settings.write_parallelism,
        )

    def _write_stream(self, req: WriteRequest, table: Table | None) -> Outcome:
        replace = req.mode == "replace"
        assert req.reader is not None
        existing = None if table is None else schema_to_pyarrow(table.schema(), include_field_ids=False)
        user_schema = plan_schema(existing, user_fields(req.reader.schema), replace=replace)
        txn = self._begin(req, table, with_identity(user_schema), replace=replace)
        writer = self._writer(req, txn)
        first = 0 if (replace or table is None) else req.dataset.next_row_index
        seq = 0
        top = -1  # highest carried __row_index of an identity-preserving copy
        try:
            for batch in req.reader:
                if batch.num_rows == 0:
                    continue
                if req.preserve_identity:  # a migration copy: the rows keep the identity they have
                    stamped = conform(batch, with_identity(user_schema))
                    top = max(top, pc.max(stamped.column(ROW_INDEX)).as_py() or 0)
                else:
                    stamped = stamp(conform(batch, user_fields(user_schema)), req.txn_id, seq, first + seq, req.tau)
                writer.write(conform(stamped, writer.arrow_schema))
                seq += batch.num_rows
            files = writer.close()
            failpoint("write.before_commit")
            next_index = max(req.dataset.next_row_index, top + 1) if req.preserve_identity else first + seq
            props = self._summary(req, rows_written=seq, next_row_index=next_index)
            target = with_identity(user_schema)
            snapshot = self._commit(
                req, table, txn, files, delete="all" if replace else "none", props=props,
                rebegin=lambda t: self._begin(req, t, target, replace=replace),
            )
        except BaseException:
            writer.discard()
            raise
        return self._outcome(snapshot, writer)

    def _write_keyed(self, req: WriteRequest, table: Table | None) -> Outcome:
        existing = None if table is None else schema_to_pyarrow(table.schema(), include_field_ids=False)
        if req.mode == "delete":
            if existing is None:
                raise DatasetNotFoundError(req.dataset.key, req.dataset.workspace)
            user_schema = user_fields(existing)
        else:
            assert req.reader is not None
            user_schema = plan_schema(existing, req.reader.schema, replace=req.mode == "replace")
        current_files = self._files(table)
        with KeyedMerge(req.spill_dir, memory_limit=self.settings.duckdb_memory_limit, threads=self.settings.duckdb_threads) as merge:
            first = req.dataset.next_row_index if table is not None else 0
            if req.mode == "delete" and req.row_filter:
                removed = merge.plan_removal(self._matching_ids(table, current_files, req.row_filter))  # type: ignore[arg-type]
                counts = {"rows_written": 0, "deleted": removed, "preserved": 0, "skipped": 0}
                fresh = 0
            else:
                assert req.reader is not None
                merge.stage(req.reader, req.keys, keys_only=req.mode == "delete")
                merge.load_existing(self._existing_keys(table, current_files, req.keys, existing))
                plan = merge.plan(req.mode, first_index=first, txn_id=req.txn_id, tau=req.tau)
                fresh = plan.fresh if req.mode != "delete" else 0
                counts = plan.counts(req.mode)
            txn = self._begin(req, table, with_identity(user_schema), replace=req.mode == "replace")
            writer = self._writer(req, txn)
            try:
                affected = [current_files[i] for i in merge.affected_files()]
                if affected and req.mode != "replace":
                    kept = merge.kept_rows(self._rows_of(table, affected))  # type: ignore[arg-type]
                    writer.write_all(conform(b, writer.arrow_schema) for b in kept)
                writer.write_all(conform(b, writer.arrow_schema) for b in merge.added_rows())
                files = writer.close()
                failpoint("write.before_commit")
                next_index = first + fresh if req.mode != "replace" or table is not None else fresh
                props = self._summary(req, next_row_index=next_index, **counts)
                delete: Any = "all" if req.mode == "replace" else affected
                snapshot = self._commit(req, table, txn, files, delete=delete, props=props)
            except BaseException:
                writer.discard()
                raise
        return self._outcome(snapshot, writer)

    # -- helpers of WRITE ---------------------------------------------------------------------
    def _files(self, table: Table | None, snapshot_id: int | None = None) -> list[DataFile]:
        if table is None or table.current_snapshot() is None:
            return []
        return [task.file for task in table.scan(snapshot_id=snapshot_id).plan_files()]

    def _file_dataset(self, table: Table, paths: list[str], schema: pa.Schema | None = None) -> pads.Dataset:
        schema = schema or schema_to_pyarrow(table.schema(), include_field_ids=False)
        if not paths:
            return pads.dataset(pa.Table.from_batches([], schema=schema))
        fs, _ = filesystem_for(table.io, paths[0])
        return pads.dataset([filesystem_for(table.io, p)[1] for p in paths], schema=schema, filesystem=fs, format=_PARQUET)

    def _existing_keys(
        self, table: Table | None, files: list[DataFile], keys: tuple[str, ...], existing: pa.Schema | None
    ) -> pa.RecordBatchReader:
        """(keys, __row_id, __row_index, __file) of every current row, streamed file by file."""
        if existing is not None:
            missing = [k for k in keys if k not in existing.names]
            if missing:
                raise SchemaMismatchError(f"key column(s) {missing} are not in the dataset (columns: {existing.names})")
        cols = [*keys, ROW_ID, ROW_INDEX]
        if existing is None:
            schema = pa.schema([pa.field(k, pa.large_string()) for k in keys] + [pa.field(ROW_ID, pa.large_string()), pa.field(ROW_INDEX, pa.int64()), pa.field(FILE_COLUMN, pa.int32())])
            return pa.RecordBatchReader.from_batches(schema, [])
        assert table is not None
        proj = pa.schema([existing.field(c) for c in cols])
        out_schema = proj.append(pa.field(FILE_COLUMN, pa.int32()))

        def batches() -> Iterator[pa.RecordBatch]:
            for i, f in enumerate(files):
                for b in _scan(self._file_dataset(table, [f.file_path], existing), cols, None):
                    yield pa.RecordBatch.from_arrays([*b.columns, _constant(i, b.num_rows)], schema=out_schema)

        return pa.RecordBatchReader.from_batches(out_schema, batches())

    def _matching_ids(self, table: Table, files: list[DataFile], row_filter: str) -> pa.RecordBatchReader:
        expr = self._filter(table, row_filter)
        schema = schema_to_pyarrow(table.schema(), include_field_ids=False)
        out_schema = pa.schema([pa.field(ROW_ID, pa.large_string()), pa.field(FILE_COLUMN, pa.int32())])

        def batches() -> Iterator[pa.RecordBatch]:
            for i, f in enumerate(files):
                for b in _scan(self._file_dataset(table, [f.file_path], schema), [ROW_ID], expr):
                    yield pa.RecordBatch.from_arrays([b.column(0), _constant(i, b.num_rows)], schema=out_schema)

        return pa.RecordBatchReader.from_batches(out_schema, batches())

    @staticmethod
    def _filter(table: Table, row_filter: str) -> Any:
        try:
            return expression_to_pyarrow(bind(table.schema(), parse_filter(row_filter), case_sensitive=True))
        except Exception as exc:
            raise InvalidFilterError(
                f"invalid row_filter {row_filter!r}: {exc}. Use pyiceberg filter syntax, e.g. \"k > 5 and v = 'x'\""
            ) from exc

    def _rows_of(self, table: Table, files: list[DataFile]) -> pa.RecordBatchReader:
        ds = self._file_dataset(table, [f.file_path for f in files])
        return _scan(ds, None, None)

    def _summary(self, req: WriteRequest, **counts: int) -> dict[str, str]:
        return {
            TXN_PROPERTY: str(req.txn_id),
            "trident.mode": req.mode,
            "trident.created-at": req.tau.isoformat(),
            **{f"trident.{k.replace('_', '-')}": str(v) for k, v in counts.items()},
        }

    def _commit(
        self,
        req: WriteRequest,
        table: Table | None,
        txn: Transaction,
        files: list[DataFile],
        *,
        delete: str | list[DataFile],
        props: dict[str, str],
        rebegin: Callable[[Table], Transaction] | None = None,
    ) -> Snapshot:
        """Commit ONE snapshot. A conflicting concurrent commit is retried on a refreshed table
        when the change does not depend on the old snapshot's contents (``rebegin`` given: append,
        full replace) and the refreshed schema still matches the files written."""
        written_schema = txn.table_metadata.schema()
        attempts = self.settings.commit_retries + 1 if rebegin is not None else 1
        for attempt in range(attempts):
            try:
                self._stage_snapshot(txn, table, files, delete, props)
                failpoint("commit.before_catalog")
                committed = txn.commit_transaction()
                snap = committed.current_snapshot()
                assert snap is not None and snap.summary is not None and snap.summary[TXN_PROPERTY] == str(req.txn_id)
                return snap
            except CommitFailedException as exc:
                if attempt + 1 >= attempts or table is None or rebegin is None:
                    raise TransactionConflictError(
                        f"Iceberg commit of {req.dataset.key!r} conflicted with a concurrent change: {exc}. "
                        "Nothing was committed; retry the write"
                    ) from exc
                table = table.refresh()
                txn = rebegin(table)
                if txn.table_metadata.schema() != written_schema:
                    raise TransactionConflictError(
                        f"the schema of {req.dataset.key!r} changed during the write; nothing was committed, retry"
                    ) from exc
        raise AssertionError("unreachable")

    def _stage_snapshot(
        self, txn: Transaction, table: Table | None, files: list[DataFile], delete: str | list[DataFile], props: dict[str, str]
    ) -> None:
        to_delete: list[DataFile] = self._files(table) if delete == "all" else ([] if delete == "none" else list(delete))  # type: ignore[arg-type]
        update = txn.update_snapshot(snapshot_properties=props)
        producer = update.overwrite() if to_delete else update.fast_append()
        with producer as p:
            for f in to_delete:
                p.delete_data_file(f)
            for f in files:
                p.append_data_file(f)

    def _outcome(self, snap: Snapshot, writer: DataFileWriter) -> Outcome:
        return _summary_outcome(snap, _strip(writer.arrow_schema))

    # -- recovery ---------------------------------------------------------------------------
    def _txn_snapshot(self, table: Table, txn_id: uuid.UUID) -> Snapshot | None:
        for snap in ancestors_of(table.current_snapshot(), table.metadata):
            if snap.summary is not None and snap.summary.get(TXN_PROPERTY) == str(txn_id):
                return snap
        return None

    def find_committed(self, ds: DatasetRecord, txn_id: uuid.UUID) -> Outcome | None:
        table = self.table(ds)
        snap = None if table is None else self._txn_snapshot(table, txn_id)
        if snap is None:
            return None
        assert table is not None
        return _summary_outcome(snap, schema_to_pyarrow(table.schema(), include_field_ids=False))

    def undo(self, ds: DatasetRecord, txn_id: uuid.UUID) -> None:
        table = self.table(ds)
        if table is None:
            return
        snap = table.current_snapshot()
        if snap is None or snap.summary is None or snap.summary.get(TXN_PROPERTY) != str(txn_id):
            return
        if snap.parent_snapshot_id is None:
            self.catalog.drop_table(self.identifier(ds))
        else:
            table.manage_snapshots().set_current_snapshot(snap.parent_snapshot_id).commit()
        delete_paths(table.io, list_txn_files(table.io, table.location(), txn_id))

    def discard(self, ds: DatasetRecord, txn_id: uuid.UUID, location: str | None = None) -> None:
        table = self.table(ds)
        if table is not None and self._txn_snapshot(table, txn_id) is not None:
            return  # committed: its files are the dataset
        if table is not None and table.current_snapshot() is None:
            self.catalog.drop_table(self.identifier(ds))  # created empty by an aborted first write
        io = table.io if table is not None else self.catalog._load_file_io(location=location)
        where = location or (table.location() if table is not None else None)
        if where:
            delete_paths(io, list_txn_files(io, where, txn_id))

    # -- READ -------------------------------------------------------------------------------
    def _snapshot_id(self, table: Table, as_of: AsOf) -> int | None:
        if as_of is None:
            return None
        if isinstance(as_of, int):
            return as_of
        if isinstance(as_of, datetime):
            snap = table.snapshot_as_of_timestamp(int(as_of.timestamp() * 1000))
            if snap is None:
                raise InvalidReadError(f"the dataset has no snapshot as of {as_of.isoformat()}")
            return snap.snapshot_id
        txn = uuid.UUID(str(as_of))
        for snap in table.metadata.snapshots:
            if snap.summary is not None and snap.summary.get(TXN_PROPERTY) == str(txn):
                return snap.snapshot_id
        raise InvalidReadError(
            f"no snapshot of this dataset carries transaction {txn} (expired by maintenance, or another dataset's)"
        )

    def scan(
        self, ds: DatasetRecord, *, columns: list[str] | None, row_filter: str | None, as_of: AsOf
    ) -> pa.RecordBatchReader:
        """Stream rows with pyarrow's dataset scanner over the snapshot's data files.

        pyiceberg plans the files (pruning by column stats); pyarrow reads them with bounded
        read-ahead. pyiceberg's own batch reader materialises every file task at once through its
        thread pool, which is not bounded. There are never delete files (keyed writes are
        copy-on-write), so the data files alone are the rows.
        """
        table = self._existing_table(ds)
        schema = schema_to_pyarrow(table.schema(), include_field_ids=False)
        if columns:
            unknown = [c for c in columns if c not in schema.names]
            if unknown:
                raise SchemaMismatchError(f"unknown column(s) {unknown}; the dataset has {schema.names}")
        snapshot_id = self._snapshot_id(table, as_of)
        expr = self._filter(table, row_filter) if row_filter else None
        files = [
            t.file.file_path
            for t in table.scan(row_filter=parse_filter(row_filter) if row_filter else AlwaysTrue(), snapshot_id=snapshot_id).plan_files()
        ] if (table.current_snapshot() is not None) else []
        return _scan(self._file_dataset(table, files, schema), columns or schema.names, expr)

    def arrow_source(self, ds: DatasetRecord) -> Any:
        table = self._existing_table(ds)
        return self._file_dataset(table, [f.file_path for f in self._files(table)])

    def maintain(self, ds: DatasetRecord, *, older_than: datetime, retain_last: int) -> Maintenance:
        """Expire snapshots older than ``older_than`` (always keeping the newest ``retain_last`` and
        the current one), then delete the data files this table's own metadata once referenced and
        no remaining snapshot reads. Never "every unused file in the folder": a folder may hold
        another dataset's files (see ``maintenance.py``). The caller holds the dataset's writer
        lock, so no Trident write has files in flight."""
        table = self._existing_table(ds)
        keep = {s.snapshot_id for s in sorted(table.snapshots(), key=lambda s: s.timestamp_ms)[-max(retain_last, 1):]}
        cutoff = int(older_than.timestamp() * 1000)
        expire = [s.snapshot_id for s in table.snapshots() if s.snapshot_id not in keep and s.timestamp_ms < cutoff]
        current = table.current_snapshot()
        expire = [i for i in expire if current is None or i != current.snapshot_id]
        if expire:
            table.maintenance.expire_snapshots().by_ids(expire).commit()
            table = table.refresh()
        ours = once_referenced(table)
        still_read = data_files_of(table.io, table.snapshots(), live_only=True)
        garbage = existing_under(table, ours - still_read)
        delete_paths(table.io, garbage)
        return Maintenance(key=ds.key, expired_snapshots=len(expire), deleted_files=len(garbage))

    def drop(self, ds: DatasetRecord) -> None:
        try:
            self.catalog.purge_table(self.identifier(ds))
        except NoSuchTableError:
            pass
