"""The ``iceberg_native`` sink: Parquet data files in object storage, one Iceberg snapshot per
transaction, copy-on-write for keyed writes (no delete files, so every reader stays simple)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from dataclasses import asdict
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.fs as pafs
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError, RESTError
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io import load_file_io
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table, Transaction
from pyiceberg.table.snapshots import Snapshot, ancestors_of

from ...control_plane import DatasetRecord, Outcome
from ...errors import (
    DatasetNotFoundError,
    InvalidReadError,
    StorageUnavailableError,
    TransactionConflictError,
)
from ...failpoints import failpoint
from ...filters import arrow_filter, check_columns
from ...identity import ROW_ID, ROW_INDEX
from ...keys import iceberg_identifier
from ...merge import FILE_COLUMN
from ...schemas import compatible, conform, describe_schema, to_iceberg, with_identity
from ...settings import TridentSettings
from ..base import AsOf, Discarded, Maintenance, Removal, Sink, SinkWrite, StoredVersion, WriteCounts, WriteRequest
from ...pyiceberg_compat import name_commit_files, transaction_io
from .files import DataFileWriter, delete_paths, filesystem_for, list_txn_files, list_txn_metadata
from .s3_housekeeping import abort_incomplete_uploads

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


def _order_like(txn: Transaction, target: pa.Schema) -> None:
    """A replace makes the dataset exactly its input, column order included (the pg sink does the
    same); ``union_by_name`` keeps the old order and appends new columns, so move them."""
    names = [f.name for f in txn.table_metadata.schema().fields]
    if names == target.names:
        return
    with txn.update_schema() as upd:
        upd.move_first(target.names[0])
        for before, name in zip(target.names, target.names[1:]):
            upd.move_after(name, before)


def _strip(schema: pa.Schema) -> pa.Schema:
    return pa.schema([pa.field(f.name, f.type, f.nullable) for f in schema])


class IcebergVersion(StoredVersion):
    """The table as loaded once for this write; ``files`` is the current snapshot's data files,
    whose positions are the ``__file`` numbers of ``existing_keys``."""

    def __init__(self, sink: IcebergSink, ds: DatasetRecord, table: Table | None) -> None:
        self.sink = sink
        self.ds = ds
        self.table = table
        self.schema = None if table is None else schema_to_pyarrow(table.schema(), include_field_ids=False)
        self._files: list[DataFile] | None = None

    @property
    def files(self) -> list[DataFile]:
        if self._files is None:
            self._files = self.sink.data_files(self.table)
        return self._files

    def existing_keys(self, keys: tuple[str, ...]) -> pa.RecordBatchReader:
        assert self.table is not None and self.schema is not None
        table, existing, files = self.table, self.schema, self.files
        cols = [*keys, ROW_ID, ROW_INDEX]
        out_schema = pa.schema([existing.field(c) for c in cols]).append(pa.field(FILE_COLUMN, pa.int32()))

        def batches() -> Iterator[pa.RecordBatch]:
            for i, f in enumerate(files):
                for b in _scan(self.sink.file_dataset(table, [f.file_path], existing), cols, None):
                    yield pa.RecordBatch.from_arrays([*b.columns, _constant(i, b.num_rows)], schema=out_schema)

        return pa.RecordBatchReader.from_batches(out_schema, batches())

    def matching_ids(self, expr: Any) -> pa.RecordBatchReader:
        assert self.table is not None and self.schema is not None
        table, schema, files = self.table, self.schema, self.files
        out_schema = pa.schema([pa.field(ROW_ID, pa.large_string()), pa.field(FILE_COLUMN, pa.int32())])

        def batches() -> Iterator[pa.RecordBatch]:
            for i, f in enumerate(files):
                for b in _scan(self.sink.file_dataset(table, [f.file_path], schema), [ROW_ID], expr):
                    yield pa.RecordBatch.from_arrays([b.column(0), _constant(i, b.num_rows)], schema=out_schema)

        return pa.RecordBatchReader.from_batches(out_schema, batches())

    def begin(self, req: WriteRequest, user_schema: pa.Schema, *, replace: bool) -> IcebergWrite:
        return IcebergWrite(self, req, user_schema, replace=replace)


class IcebergWrite(SinkWrite):
    """Parquet data files streamed under the table location, committed as ONE snapshot whose
    summary carries the txn id and the planner's counts (what recovery reads back)."""

    def __init__(self, version: IcebergVersion, req: WriteRequest, user_schema: pa.Schema, *, replace: bool) -> None:
        self.version = version
        self.req = req
        self.txn = version.sink.begin_transaction(req, version.table, with_identity(user_schema), replace=replace)
        self.writer = version.sink.data_file_writer(req, self.txn)
        self.arrow_schema = self.writer.arrow_schema
        self.to_delete: list[DataFile] = list(version.files) if replace else []

    def put(self, batches: Iterable[pa.RecordBatch]) -> int:
        n = 0
        for batch in batches:
            self.writer.write(batch)
            n += batch.num_rows
        return n

    def remove(self, removal: Removal) -> None:
        """Copy-on-write: files holding removed rows are rewritten with the rows that stay."""
        files = self.version.files
        affected = [files[i] for i in removal.affected_files()]
        if not affected:
            return
        assert self.version.table is not None
        rows = _scan(self.version.sink.file_dataset(self.version.table, [f.file_path for f in affected]), None, None)
        self.writer.write_all(conform(b, self.arrow_schema) for b in removal.kept_rows(rows))
        self.to_delete = affected

    def commit(self, counts: WriteCounts) -> Outcome:
        files = self.writer.close()
        failpoint("write.before_commit")
        props = {
            TXN_PROPERTY: str(self.req.txn_id),
            "trident.mode": self.req.mode,
            "trident.created-at": self.req.tau.isoformat(),
            **{f"trident.{k.replace('_', '-')}": str(v) for k, v in asdict(counts).items()},
        }
        snap = self.version.sink.commit_snapshot(self.req, self.txn, files, self.to_delete, props)
        return _summary_outcome(snap, _strip(self.arrow_schema))

    def discard(self) -> None:
        self.writer.discard()


class IcebergSink(Sink):
    name = "iceberg_native"
    tracks_files = True

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
            self.catalog.create_namespace_if_not_exists(ident[:i])

    def schema(self, ds: DatasetRecord) -> pa.Schema:
        return schema_to_pyarrow(self._existing_table(ds).schema(), include_field_ids=False)

    # -- WRITE (storage only: the planner decides the rows) ------------------------------------
    def current(self, ds: DatasetRecord) -> IcebergVersion:
        return IcebergVersion(self, ds, self.table(ds))

    def begin_transaction(self, req: WriteRequest, table: Table | None, target: pa.Schema, *, replace: bool) -> Transaction:
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
            if replace:
                _order_like(txn, target)
        req.note_location(txn.table_metadata.location)
        return txn

    def _create_transaction(self, ident: tuple[str, ...], target: pa.Schema) -> Transaction:
        """Create the table in the same commit as its first data when the catalog supports staged
        creation; otherwise create it empty first (an empty table is no dataset: the control plane
        only knows committed ones, and ``discard`` drops a table that never got a snapshot)."""
        schema = to_iceberg(target)
        properties = {**TABLE_PROPERTIES, "commit.retry.num-retries": str(self.settings.commit_retries)}
        if self._staged_create:
            try:
                return self.catalog.create_table_transaction(ident, schema=schema, properties=properties)
            except (NotImplementedError, RESTError) as exc:
                if "not implemented" not in str(exc).lower() and not isinstance(exc, NotImplementedError):
                    raise
                self._staged_create = False
        return self.catalog.create_table(ident, schema=schema, properties=properties).transaction()

    def data_file_writer(self, req: WriteRequest, txn: Transaction) -> DataFileWriter:
        meta = txn.table_metadata
        return DataFileWriter(
            transaction_io(txn),
            meta.location,
            req.txn_id,
            meta.schema(),
            dict(meta.properties),
            spec_id=meta.default_spec_id,
            target_file_bytes=self.settings.target_file_bytes,
            row_group_bytes=self.settings.row_group_bytes,
            parallelism=self.settings.write_parallelism,
        )

    def data_files(self, table: Table | None, snapshot_id: int | None = None) -> list[DataFile]:
        if table is None or table.current_snapshot() is None:
            return []
        return [task.file for task in table.scan(snapshot_id=snapshot_id).plan_files()]

    def file_dataset(self, table: Table, paths: list[str], schema: pa.Schema | None = None) -> pads.Dataset:
        schema = schema or schema_to_pyarrow(table.schema(), include_field_ids=False)
        if not paths:
            return pads.dataset(pa.Table.from_batches([], schema=schema))
        fs, _ = filesystem_for(table.io, paths[0])
        return pads.dataset([filesystem_for(table.io, p)[1] for p in paths], schema=schema, filesystem=fs, format=_PARQUET)

    def commit_snapshot(
        self, req: WriteRequest, txn: Transaction, files: list[DataFile], to_delete: list[DataFile], props: dict[str, str]
    ) -> Snapshot:
        """Commit ONE snapshot. pyiceberg itself retries a commit that conflicts with a concurrent
        one (table property ``commit.retry.num-retries``); what still conflicts is a named error."""
        try:
            update = txn.update_snapshot(snapshot_properties=props)
            producer = update.overwrite() if to_delete else update.fast_append()
            name_commit_files(producer, req.txn_id)  # so discard finds them if the commit never lands
            with producer as p:
                for f in to_delete:
                    p.delete_data_file(f)
                for f in files:
                    p.append_data_file(f)
            failpoint("commit.before_catalog")
            req.fence()
            committed = txn.commit_transaction()
        except CommitFailedException as exc:
            raise TransactionConflictError(
                f"Iceberg commit of {req.dataset.key!r} conflicted with a concurrent change: {exc}. "
                "Nothing was committed; retry the write"
            ) from exc
        snap = committed.current_snapshot()
        assert snap is not None and snap.summary is not None and snap.summary[TXN_PROPERTY] == str(req.txn_id)
        return snap

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

    def discard(self, ds: DatasetRecord, txn_id: uuid.UUID, location: str | None = None) -> Discarded:
        """Delete the transaction's data files, the manifests of its snapshot commit that never
        landed, and abort its incomplete multipart uploads (a writer killed or cut off mid-file
        leaves one per open file). Without a table (an aborted
        first write) the ledger's ``location`` says where, and its FileIO comes from the catalog."""
        table = self.table(ds)
        if table is not None and self._txn_snapshot(table, txn_id) is not None:
            return Discarded()  # committed: its files are the dataset
        if table is not None and table.current_snapshot() is None:
            self.catalog.drop_table(self.identifier(ds))  # created empty by an aborted first write
        where = location or (table.location() if table is not None else None)
        if not where:
            return Discarded()
        io = table.io if table is not None else load_file_io(dict(self.catalog.properties), where)
        files = list_txn_files(io, where, txn_id)
        delete_paths(io, files + list_txn_metadata(io, where, txn_id))
        uploads = abort_incomplete_uploads(io.properties, where, txn_id=txn_id)
        return Discarded(files=len(files), uploads=uploads)

    # -- READ -------------------------------------------------------------------------------
    def scan(
        self, ds: DatasetRecord, *, columns: list[str] | None, row_filter: str | None, as_of: AsOf
    ) -> pa.RecordBatchReader:
        """Stream rows with pyarrow's dataset scanner over the snapshot's data files.

        pyiceberg plans the files (pruning by column stats); pyarrow reads them with bounded
        read-ahead. pyiceberg's own batch reader materialises every file task at once through its
        thread pool, which is not bounded. There are never delete files (keyed writes are
        copy-on-write), so the data files alone are the rows. ``as_of`` is a snapshot id the
        facade resolved through the ledger; a past version is read by pyiceberg with THAT
        version's schema (columns matched by Iceberg field id, not by name).
        """
        table = self._existing_table(ds)
        current = table.current_snapshot()
        if as_of is not None and (current is None or as_of != current.snapshot_id):
            return self._scan_past(table, int(as_of), columns, row_filter)  # type: ignore[arg-type]
        schema = schema_to_pyarrow(table.schema(), include_field_ids=False)
        check_columns(columns, schema)
        expr = arrow_filter(schema, row_filter) if row_filter else None
        files = [
            t.file.file_path for t in table.scan(row_filter=row_filter or AlwaysTrue()).plan_files()
        ] if current is not None else []
        return _scan(self.file_dataset(table, files, schema), columns or schema.names, expr)

    def _scan_past(self, table: Table, snapshot_id: int, columns: list[str] | None, row_filter: str | None) -> pa.RecordBatchReader:
        if table.snapshot_by_id(snapshot_id) is None:
            raise InvalidReadError(
                f"the dataset has no snapshot {snapshot_id} any more (expired by `trident maintain`)"
            )
        scan = table.scan(snapshot_id=snapshot_id)
        schema = schema_to_pyarrow(scan.projection(), include_field_ids=False)
        check_columns(columns, schema)
        if row_filter:
            arrow_filter(schema, row_filter)  # the same named error as a current read
        scan = table.scan(
            snapshot_id=snapshot_id, row_filter=row_filter or AlwaysTrue(), selected_fields=tuple(columns or ("*",))
        )
        reader = scan.to_arrow_batch_reader()
        wanted = _strip(reader.schema)
        return pa.RecordBatchReader.from_batches(wanted, (conform(b, wanted) for b in reader))

    def arrow_source(self, ds: DatasetRecord) -> Any:
        table = self._existing_table(ds)
        return self.file_dataset(table, [f.file_path for f in self.data_files(table)])

    def maintain(
        self, ds: DatasetRecord, *, older_than: datetime, retain_last: int, uploads_before: datetime | None = None
    ) -> Maintenance:
        """Expire snapshots older than ``older_than`` (always keeping the newest ``retain_last`` and
        the current one), then delete data files no remaining snapshot references, and abort the
        incomplete multipart uploads under the table started before ``uploads_before``. The caller
        holds the dataset's writer lock, so no Trident write has files in flight."""
        table = self._existing_table(ds)
        keep = {s.snapshot_id for s in sorted(table.snapshots(), key=lambda s: s.timestamp_ms)[-max(retain_last, 1):]}
        cutoff = int(older_than.timestamp() * 1000)
        expire = [s.snapshot_id for s in table.snapshots() if s.snapshot_id not in keep and s.timestamp_ms < cutoff]
        current = table.current_snapshot()
        expire = [i for i in expire if current is None or i != current.snapshot_id]
        if expire:
            table.maintenance.expire_snapshots().by_ids(expire).commit()
            table = table.refresh()
        referenced = {t.file.file_path for s in table.snapshots() for t in table.scan(snapshot_id=s.snapshot_id).plan_files()}
        data_dir = f"{table.location().rstrip('/')}/data"
        fs, path = filesystem_for(table.io, data_dir)
        scheme = data_dir.split("://", 1)[0]
        orphans = [
            f"{scheme}://{info.path}"
            for info in fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
            if info.type == pafs.FileType.File and f"{scheme}://{info.path}" not in referenced
        ]
        delete_paths(table.io, orphans)
        uploads = 0
        if uploads_before is not None:
            uploads = abort_incomplete_uploads(table.io.properties, table.location(), initiated_before=uploads_before)
        return Maintenance(key=ds.key, expired_snapshots=len(expire), deleted_files=len(orphans), aborted_uploads=uploads)

    def drop(self, ds: DatasetRecord) -> None:
        try:
            self.catalog.purge_table(self.identifier(ds))
        except NoSuchTableError:
            pass
