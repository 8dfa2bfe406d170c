"""The ``iceberg_native`` sink: Parquet data files in object storage, one Iceberg snapshot per
transaction, copy-on-write for keyed writes (no delete files, so every reader stays simple)."""

from __future__ import annotations

import contextlib
import itertools
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import ForbiddenError, NoSuchNamespaceError, NoSuchTableError, RESTError
from pyiceberg.io import load_file_io
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.manifest import DataFile, DataFileContent, ManifestContent
from pyiceberg.table import Table, Transaction
from pyiceberg.table.snapshots import Snapshot, ancestors_of
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import DateType, TimestampType, TimestamptzType

from ...control.plane import DatasetRecord, Outcome
from ...core.errors import (
    DatasetNotFoundError,
    PartitionError,
    TableOwnershipError,
)
from ...core.failpoints import failpoint
from ...core.filters import filter_schema
from ...core.identity import CREATED_AT, FILE_COLUMN, ROW_ID, ROW_ID_STORED, ROW_INDEX, convert_ids
from ...core.partitions import BoundPartition, PartitionFilter
from ...core.pyiceberg_compat import (
    create_branch_in,
    manage_snapshots,
    memoized_creation,
    transaction,
    transaction_io,
    transaction_table,
    use_schema_in,
)
from ...core.schemas import compatible, conform, describe_schema, promotable, to_iceberg, widened, with_identity
from ...core.settings import TridentSettings
from ..contract import (
    AsOf,
    Discarded,
    Maintenance,
    RefMove,
    Removal,
    ScanPath,
    ScanPlan,
    Sink,
    SinkWrite,
    StorageInfo,
    StoredVersion,
    VersionStats,
    WriteCounts,
    WriteRequest,
)
from . import committer, refs, scans, wap
from .catalog import ensure_namespace
from .files import DataFileWriter, PartitionedDataFileWriter, delete_paths, list_txn_files, list_txn_metadata
from .partition_spec import Partitioner, contains_record, describe_spec, iceberg_transform, matches_spec, transform_name
from .purge import purge_files, still_needed, unreferenced_files
from .s3_housekeeping import abort_incomplete_uploads
from .scans import scan_batches, snapshot_schema
from .snapshots import (
    ENV_BRANCH_PREFIX,
    TXN_PROPERTY,
    audit_branch,
    carries_txn,
    data_version,
    env_branch,
    published_schema,
    summary_number,
    summary_outcome,
    without_metadata,
)
from .tables import OWNER_PROPERTY, IcebergTables

"""Table property naming the control-plane dataset that created (or adopted) the table."""


@dataclass(frozen=True)
class TableOwnership:
    """What a table says about its owner and its current snapshot's transaction (see ``ownership``)."""

    identifier: str
    owner: str | None
    snapshot_id: int | None
    txn_id: uuid.UUID | None


# Old metadata files go as soon as they leave the metadata log (at the commit that drops them):
# without it every commit's metadata.json stayed forever. The log is what maintenance reads to find
# files of snapshots an earlier, interrupted run expired (``purge.py``), so it stays long.
METADATA_PROPERTIES = {
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "10",
}
TABLE_PROPERTIES = {"format-version": "2", "write.parquet.compression-codec": "zstd", **METADATA_PROPERTIES}


_MANIFEST_CACHE = 1024  # manifests whose entries ``partition_stats`` keeps (at most ~100 files each when we wrote them)


def _constant(value: int, n: int) -> pa.Array:
    return pa.array(np.full(n, value, dtype=np.int32))


def pc_invert(expr: Any) -> Any:
    """Rows NOT in the partition (a null partition column counts as outside it, so it is kept)."""
    import pyarrow.compute as pc

    return pc.invert(expr) | pc.is_null(expr)


def _human(field: Any, schema: Any, value: Any) -> Any:
    """A partition value as people read it (2024-01-01, 2024-01, 2024-01-01-05, or the value)."""
    if value is None:
        return None
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if not isinstance(value, int) or isinstance(value, bool):
        return value
    try:
        source = schema.find_field(field.source_id).field_type
        if isinstance(field.transform, IdentityTransform) and not isinstance(source, (DateType, TimestampType, TimestamptzType)):
            return value  # an identity value is itself, except dates and times stored as numbers
        return field.transform.to_human_string(source, value)
    except (ValueError, TypeError, OverflowError):  # a value the transform cannot render: show it raw
        return value


def _order_like(txn: Transaction, target: pa.Schema) -> None:
    """A replace makes the dataset exactly its input, column order included (the pg sink does the
    same); ``union_by_name`` keeps the old order and appends new columns, so move them."""
    names = [f.name for f in txn.table_metadata.schema().fields]
    if names == target.names:
        return
    with txn.update_schema() as upd:
        upd.move_first(target.names[0])
        for before, name in itertools.pairwise(target.names):
            upd.move_after(name, before)


def table_row_id_type(table: Table | None) -> pa.DataType:
    """The ``__row_id`` type of ``table`` as Arrow: its own column's (``pa.uuid()`` for a uuid
    column, text for a table created before uuid ids or adopted with string ids), or
    ``ROW_ID_STORED`` when there is no table yet (a new dataset gets uuid ids)."""
    if table is None:
        return ROW_ID_STORED
    schema = published_schema(table)
    i = schema.get_field_index(ROW_ID)
    return schema.field(i).type if i >= 0 else ROW_ID_STORED


class IcebergVersion(StoredVersion):
    """The table as loaded once for this write; ``files`` is the current snapshot's data files,
    whose positions are the ``__file`` numbers of ``existing_keys``."""

    def __init__(self, sink: IcebergSink, ds: DatasetRecord, table: Table | None) -> None:
        self.sink = sink
        self.ds = ds
        self.table = table
        # an environment's write builds on the environment's version (``ds.snapshot_id``: its
        # branch head, or production's snapshot it forks), never on main
        self.snapshot_id = ds.snapshot_id if ds.environment is not None else None
        if table is not None and ds.environment is not None and self.snapshot_id is None:
            self.schema = None  # born in the environment: nothing of the table is its yet
        elif table is not None and self.snapshot_id is not None:
            self.schema = snapshot_schema(table, self.snapshot_id)
        else:
            self.schema = None if table is None else published_schema(table)
        # the table decides its id type, never a setting: uuid for new tables, the string of a
        # table created before uuid ids (Iceberg cannot promote string to uuid)
        self.row_id_type = table_row_id_type(table)
        self._files: list[DataFile] | None = None

    @property
    def files(self) -> list[DataFile]:
        if self._files is None:
            if self.ds.environment is not None and self.snapshot_id is None:
                self._files = []  # born in the environment: no version of it yet
            else:
                self._files = self.sink.tables.data_files(self.table, self.snapshot_id)
        return self._files

    def existing_keys(self, keys: tuple[str, ...], partition: PartitionFilter | None = None) -> pa.RecordBatchReader:
        assert self.table is not None and self.schema is not None
        table, existing = self.table, self.schema
        cols = [*keys, ROW_ID, ROW_INDEX]
        out_schema = pa.schema([existing.field(c) for c in cols]).append(pa.field(FILE_COLUMN, pa.int32()))
        expr = None
        if partition is not None:  # a partition write merges against that partition's rows only
            bound = partition.bind(existing)
            expr = bound.arrow_expr()
            wanted: Iterable[int] = self._scope(bound)
            files = self.files
        else:
            files = self.files
            wanted = range(len(files))

        def batches() -> Iterator[pa.RecordBatch]:
            for i in wanted:
                f = files[i]
                for b in scan_batches(self.sink.tables.file_dataset(table, [f.file_path], existing), cols, expr):
                    yield pa.RecordBatch.from_arrays([*b.columns, _constant(i, b.num_rows)], schema=out_schema)

        return pa.RecordBatchReader.from_batches(out_schema, batches())

    def matching_ids(self, expr: Any) -> pa.RecordBatchReader:
        assert self.table is not None and self.schema is not None
        table, schema, files = self.table, self.schema, self.files
        out_schema = pa.schema([pa.field(ROW_ID, self.row_id_type), pa.field(FILE_COLUMN, pa.int32())])

        read_as = filter_schema(schema)  # what ``expr`` (arrow_filter) compares: 16-byte ids as bytes
        row_id_type = self.row_id_type

        def batches() -> Iterator[pa.RecordBatch]:
            for i, f in enumerate(files):
                for b in scan_batches(self.sink.tables.file_dataset(table, [f.file_path], read_as), [ROW_ID], expr):
                    ids = b.column(0)
                    ids = convert_ids(ids, row_id_type) if not ids.type.equals(row_id_type) else ids
                    yield pa.RecordBatch.from_arrays([ids, _constant(i, b.num_rows)], schema=out_schema)

        return pa.RecordBatchReader.from_batches(out_schema, batches())

    def begin(self, req: WriteRequest, user_schema: pa.Schema, *, replace: bool) -> IcebergWrite:
        return IcebergWrite(self, req, user_schema, replace=replace)

    def partition_files(self, bound: BoundPartition) -> tuple[list[DataFile], list[DataFile]]:
        """The current data files a replace of ``bound`` affects: (wholly inside the partition:
        deleted; holding rows inside and outside: rewritten without the inside rows). Files of
        another partitioning (written before the dataset gained its spec) are always rewritten,
        so that afterwards no data file mixes partitions."""
        if self.table is None:
            return [], []
        specs = self.table.specs()
        schema = self.table.schema()
        wanted = bound.filter.spec
        inside: list[DataFile] = []
        partial: list[DataFile] = []
        for i in self._scope(bound):
            f = self.files[i]
            spec = specs[f.spec_id]
            if not matches_spec(spec, schema, wanted):
                partial.append(f)
            elif contains_record(bound, spec, schema, f.partition):
                inside.append(f)
            else:
                partial.append(f)
        return inside, partial

    def _scope(self, bound: BoundPartition) -> list[int]:
        """Positions in ``files`` of the files a write of ``bound`` can touch. When nothing has
        listed this version's files yet, ``files`` becomes just those: a partition write never
        plans (nor reads the manifest entries of) the whole table."""
        assert self.table is not None
        # production's partition writers scope on main (they re-base onto it at their commit); an
        # environment's write on its own version, which main is not
        at = self.snapshot_id if self.ds.environment is not None else None
        if self.ds.environment is not None and at is None:
            return []  # born in the environment: no version of it yet
        if self._files is None:
            self._files = self.sink.tables.partition_scope(self.table, bound, at)
            return list(range(len(self._files)))
        scope = {f.file_path for f in self.sink.tables.partition_scope(self.table, bound, at)}
        return [i for i, f in enumerate(self._files) if f.file_path in scope]


class IcebergWrite(SinkWrite):
    """Parquet data files streamed under the table location, committed as ONE snapshot whose
    summary carries the txn id and the planner's counts (what recovery reads back)."""

    def __init__(self, version: IcebergVersion, req: WriteRequest, user_schema: pa.Schema, *, replace: bool) -> None:
        self.version = version
        self.req = req
        target = with_identity(user_schema, version.row_id_type)
        self.txn = version.sink.begin_transaction(req, version.table, target, replace=replace)
        self.writer = version.sink.data_file_writer(req, self.txn)
        self.arrow_schema = self.writer.arrow_schema
        self.to_delete: list[DataFile] = list(version.files) if replace and req.partition is None else []
        self.partial: list[DataFile] = []
        if replace and req.partition is not None:  # replace exactly the partition's rows
            self.bound = req.partition.bind(without_metadata(self.writer.table_schema))
            self.to_delete, self.partial = version.partition_files(self.bound)

    def put(self, batches: Iterable[pa.RecordBatch], *, clustered: bool = False) -> int:
        n = 0
        for batch in batches:
            self.writer.write(batch, clustered=clustered)
            n += batch.num_rows
        return n

    def remove(self, removal: Removal) -> None:
        """Copy-on-write: files holding removed rows are rewritten with the rows that stay."""
        files = self.version.files
        affected = [files[i] for i in removal.affected_files()]
        if not affected:
            return
        assert self.version.table is not None
        rows = scan_batches(
            self.version.sink.tables.file_dataset(self.version.table, [f.file_path for f in affected]), None, None
        )
        self.writer.write_all(conform(b, self.arrow_schema) for b in removal.kept_rows(rows))
        self.to_delete = affected

    def _rewrite_partial(self) -> None:
        """Copy-on-write of files holding rows on both sides of the partition: their rows outside
        it are kept (identity unchanged), split by partition like every other row."""
        if not self.partial:
            return
        assert self.version.table is not None
        old = self.version.schema
        keep = pc_invert(self.bound.arrow_expr())
        rows = scan_batches(
            self.version.sink.tables.file_dataset(self.version.table, [f.file_path for f in self.partial], old), None, keep
        )
        self.writer.write_all(conform(b, self.arrow_schema) for b in rows)
        self.to_delete = [*self.to_delete, *self.partial]

    def commit(self, counts: WriteCounts) -> Outcome:
        self._rewrite_partial()
        files = self.writer.close()
        failpoint("write.before_commit")
        props = {
            TXN_PROPERTY: str(self.req.txn_id),
            "trident.mode": self.req.mode,
            "trident.created-at": self.req.tau.isoformat(),
            **{f"trident.{k.replace('_', '-')}": str(v) for k, v in asdict(counts).items()},
        }
        if self.req.dataset.environment is not None:
            base_id = self.version.snapshot_id
        else:
            base = self.version.table.current_snapshot() if self.version.table is not None else None
            base_id = base.snapshot_id if base else None
        snap = committer.commit_snapshot(
            self.version.sink.tables,
            self.req,
            self.txn,
            files,
            self.to_delete,
            props,
            base_snapshot_id=base_id,
        )
        return summary_outcome(snap, without_metadata(self.writer.table_schema))

    def discard(self) -> None:
        self.writer.discard()


class IcebergSink(Sink):
    name = "iceberg_native"
    tracks_files = True
    stages = True
    partitions = True

    def __init__(self, catalog: Catalog, settings: TridentSettings) -> None:
        self.tables = IcebergTables(catalog, settings)
        self.catalog = catalog
        self.settings = settings
        self.access = self.tables.access
        self._staged_create = not self.access.refreshable_only
        self._manifest_rows: dict[str, list[dict[str, Any]]] = {}  # manifest path -> its live entries (immutable)

    # -- tables (``tables.py``) ------------------------------------------------------------
    def adoptable(self, ds: DatasetRecord) -> Table:
        """The table at ``ds``'s identifier if this control plane may adopt it: unowned (or already
        ours), and carrying Trident's identity columns (a table without them would need every row
        rewritten to gain them: that is a copy, ``write(key, rows)``, not an adoption)."""
        ident = self.tables.identifier(ds)
        try:
            table = self.catalog.load_table(ident)
        except NoSuchTableError:
            raise TableOwnershipError(f"there is no Iceberg table {'.'.join(ident)} to adopt as {ds.key!r}") from None
        owner = table.properties.get(OWNER_PROPERTY)
        if owner and owner != str(ds.dataset_id):
            raise TableOwnershipError(
                f"the Iceberg table {'.'.join(ident)} belongs to Trident dataset {owner} (another control plane "
                "or workspace); two control planes must not own one table"
            )
        names = set(table.schema().column_names)
        missing = [c for c in (ROW_ID, ROW_INDEX, CREATED_AT) if c not in names]
        if missing:
            raise TableOwnershipError(
                f"the Iceberg table {'.'.join(ident)} has no Trident identity column(s) {missing}; adopting it "
                f"would leave rows without identity. Copy it instead: t.write({ds.key!r}, table rows)"
            )
        if table.current_snapshot() is None:
            raise TableOwnershipError(f"the Iceberg table {'.'.join(ident)} has no snapshot: nothing to adopt")
        return self.access.bind(table, reload=lambda: self.catalog.load_table(ident))

    def ownership(self, ds: DatasetRecord) -> TableOwnership:
        """Who the table at ``ds``'s identifier says it belongs to, and which transaction made its
        current snapshot (the snapshot summary's ``trident.txn-id``), read without the ownership
        check: what ``Trident.adopt`` compares with the ledger before it stamps a table that a
        Trident older than the ownership property created. A current snapshot of Trident's own
        maintenance (a compaction) reports the data version it holds and that version's
        transaction: it is the version the ledger committed, in other files."""
        ident = self.tables.identifier(ds)
        try:
            table = self.catalog.load_table(ident)
        except NoSuchTableError:
            raise TableOwnershipError(f"there is no Iceberg table {'.'.join(ident)} to adopt as {ds.key!r}") from None
        head = table.current_snapshot()
        version = data_version(table, head.snapshot_id) if head is not None else None
        snap = table.snapshot_by_id(version) if version is not None else None
        snap = snap if snap is not None else head
        carried = snap.summary.get(TXN_PROPERTY) if snap is not None and snap.summary is not None else None
        txn: uuid.UUID | None = None
        with contextlib.suppress(ValueError, TypeError):
            txn = uuid.UUID(carried) if carried else None
        return TableOwnership(
            identifier=".".join(ident),
            owner=table.properties.get(OWNER_PROPERTY),
            snapshot_id=version,
            txn_id=txn,
        )

    def adopt(self, ds: DatasetRecord, txn_id: uuid.UUID) -> Outcome:
        """Stamp the table as ``ds``'s and report it as a commit: ``__row_index`` continues from the
        table's max + 1, so later appends never reuse an index the adopted rows carry."""
        table = self.adoptable(ds)
        snap = table.current_snapshot()
        assert snap is not None
        schema = without_metadata(schema_to_pyarrow(table.schema(), include_field_ids=False))
        top = -1
        for batch in scan_batches(
            self.tables.file_dataset(table, [f.file_path for f in self.tables.data_files(table)], schema), [ROW_INDEX], None
        ):
            m = pc.max(batch.column(0)).as_py()
            if m is not None and m > top:
                top = m
        with transaction(table) as txn:
            txn.set_properties({OWNER_PROPERTY: str(ds.dataset_id), "trident.adopted-by-txn": str(txn_id)})
        return Outcome(
            rows_written=0,
            row_count=summary_number(snap.summary, "total-records"),
            next_row_index=top + 1,
            snapshot_id=snap.snapshot_id,
            schema=describe_schema(schema),
        )

    def _ensure_namespaces(self, ident: tuple[str, ...]) -> None:
        for i in range(1, len(ident)):
            ensure_namespace(self.catalog, ident[:i])

    def schema(self, ds: DatasetRecord) -> pa.Schema:
        return published_schema(self.tables.existing_table(ds))

    # -- WRITE (storage only: the planner decides the rows) ------------------------------------
    def current(self, ds: DatasetRecord) -> IcebergVersion:
        return IcebergVersion(self, ds, self.tables.table(ds))

    def begin_transaction(self, req: WriteRequest, table: Table | None, target: pa.Schema, *, replace: bool) -> Transaction:
        """Open the Iceberg transaction that creates or evolves the table to ``target``."""
        if table is None:
            ident = self.tables.identifier(req.dataset)
            try:  # the namespace usually exists (a key folder's first dataset creates it): no check first
                txn = self._create_transaction(ident, target, owner=req.dataset.dataset_id)
            except NoSuchNamespaceError:
                self._ensure_namespaces(ident)
                txn = self._create_transaction(ident, target, owner=req.dataset.dataset_id)
        else:
            env = req.dataset.environment
            ref = table.metadata.refs.get(env_branch(env)) if env is not None else None
            if ref is not None and ref.snapshot_id != req.dataset.snapshot_id and not req.stage:
                # the branch is not where the environment's version is (its head was promoted, and
                # the environment now forks production's version again): it starts over there
                manage_snapshots(table).remove_branch(env_branch(env)).commit()  # type: ignore[arg-type]
            head = table.current_snapshot()
            txn = transaction(table)
            # the schema of the version this write builds on (main's, or the environment's) when the
            # table has environments: its current schema may be an environment's (an added column
            # must not reach production, nor production's reach the environment). Without one, the
            # current schema stays (a staged version's evolution is carried by its publish)
            envs = any(name.startswith(ENV_BRANCH_PREFIX) for name in table.metadata.refs)
            base = table.snapshot_by_id(req.dataset.snapshot_id) if env is not None and req.dataset.snapshot_id else head
            moved_on = base is not None and base.schema_id is not None and base.schema_id != table.metadata.current_schema_id
            if (env is not None or envs) and moved_on:
                assert base is not None and base.schema_id is not None
                use_schema_in(txn, base.schema_id)
            if env is not None and req.stage:  # staged in an environment: its audit branch starts at its version
                if req.dataset.snapshot_id is not None:
                    create_branch_in(txn, req.dataset.snapshot_id, audit_branch(req.txn_id))
            elif env is not None and env_branch(env) not in table.metadata.refs and req.dataset.snapshot_id is not None:
                # the environment's first write of an existing dataset: its branch starts at the
                # version it forks (a ref: no file copied), in the same commit as its snapshot
                create_branch_in(txn, req.dataset.snapshot_id, env_branch(env))
            if req.stage and head is not None and env is None:  # the audit branch starts at the published version,
                # created by the same commit as the staged snapshot (one catalog commit, not two)
                create_branch_in(txn, head.snapshot_id, audit_branch(req.txn_id))
            current = schema_to_pyarrow(txn.table_metadata.schema(), include_field_ids=False)
            if replace:  # a column whose type changes is dropped and added again, unless Iceberg
                # can promote it (int -> long...): ``union_by_name`` does that in place, same field id
                gone = [
                    f.name
                    for f in current
                    if f.name not in target.names
                    or not (compatible(target.field(f.name).type, f.type) or promotable(f.type, target.field(f.name).type))
                ]
                if gone:
                    with txn.update_schema(allow_incompatible_changes=True) as upd:
                        for name in gone:
                            upd.delete_column(name)
            if any(f.name not in current.names for f in target) or widened(current, target) or replace:
                with txn.update_schema() as upd:
                    upd.union_by_name(to_iceberg(target))
            if replace:
                _order_like(txn, target)
        if req.partition is not None:
            self._ensure_spec(txn, req)
        req.note_location(txn.table_metadata.location)
        return txn

    def _ensure_spec(self, txn: Transaction, req: WriteRequest) -> None:
        """Partition the table as the write declares: at creation, or evolved in this same commit
        when an unpartitioned dataset gains partitions. A different partitioning is refused (a
        re-partitioning is a rewrite to ask for, not a side effect of one partition run)."""
        assert req.partition is not None
        meta = txn.table_metadata
        spec, schema = meta.spec(), meta.schema()
        wanted = req.partition.spec
        if matches_spec(spec, schema, wanted):
            return
        if spec.fields:
            raise PartitionError(
                f"dataset {req.dataset.key!r} is partitioned by {describe_spec(spec, schema)} but this write declares "
                f"{[f'{t}({c})' for c, t in wanted]}; {req.partition.redeclare_hint()}, or rewrite the dataset "
                "with a full replace under a new key"
            )
        with txn.update_spec() as upd:
            for column, transform in wanted:
                upd.add_field(
                    column, iceberg_transform(transform), f"{column}_{transform}" if transform != "identity" else column
                )

    def _create_transaction(self, ident: tuple[str, ...], target: pa.Schema, *, owner: uuid.UUID) -> Transaction:
        """Create the table in the same commit as its first data when the catalog supports staged
        creation; otherwise create it empty first (an empty table is no dataset: the control plane
        only knows committed ones, and ``discard`` drops a table that never got a snapshot)."""
        schema = to_iceberg(target)
        properties = {
            **TABLE_PROPERTIES,
            "commit.retry.num-retries": str(self.settings.commit_retries),
            OWNER_PROPERTY: str(owner),
        }
        if self._staged_create:
            try:
                txn = memoized_creation(self.catalog.create_table_transaction(ident, schema=schema, properties=properties))
                self.access.bind(transaction_table(txn), reload=None)  # staged: nothing to reload yet
                return txn
            except (NotImplementedError, RESTError) as exc:
                if "not implemented" not in str(exc).lower() and not isinstance(exc, NotImplementedError):
                    raise
                self._staged_create = False
        created = self.catalog.create_table(ident, schema=schema, properties=properties)
        return transaction(self.access.bind(created, reload=lambda: self.catalog.load_table(ident)))

    def data_file_writer(self, req: WriteRequest, txn: Transaction) -> DataFileWriter | PartitionedDataFileWriter:
        meta = txn.table_metadata
        spec = meta.spec()
        if spec.fields:  # a partitioned table: every write splits its rows by partition
            return PartitionedDataFileWriter(
                transaction_io(txn),
                meta.location,
                req.txn_id,
                meta.schema(),
                dict(meta.properties),
                partitioner=Partitioner(spec, meta.schema()),
                spec_id=meta.default_spec_id,
                target_file_bytes=self.settings.target_file_bytes,
                row_group_bytes=self.settings.row_group_bytes,
                parallelism=self.settings.write_parallelism,
            )
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

    def _described_table(self, ds: DatasetRecord) -> Table | None:
        """The table for ``partitioning``/``partition_stats`` (read only; ``None`` when there is
        none): ``describe`` calls both, and the pipeline describes each source of a node three
        times while it starts, so loading and parsing the metadata file each time would cost ~4% of a
        pipeline run's CPU; ``IcebergTables.table_to_read`` reuses it while the catalog names the same file."""
        try:
            return self.tables.table_to_read(ds)
        except DatasetNotFoundError:
            return None

    def partitioning(self, ds: DatasetRecord) -> tuple[tuple[str, str], ...] | None:
        return self._partitioning(self._described_table(ds))

    def partition_stats(self, ds: DatasetRecord) -> list[dict[str, Any]]:
        return self._partition_stats(self._described_table(ds))

    def storage_info(self, ds: DatasetRecord) -> StorageInfo:
        """All from ONE look-up of the table (each costs a catalog query even when the parsed
        table is reused)."""
        table = self._described_table(ds)
        location = table.metadata_location if table is not None else None
        return StorageInfo(self._partitioning(table), self._partition_stats(table), location)

    def _partitioning(self, table: Table | None) -> tuple[tuple[str, str], ...] | None:
        if table is None:
            return None
        schema = table.schema()
        return tuple((schema.find_column_name(f.source_id) or "", transform_name(f.transform)) for f in table.spec().fields)

    def _partition_stats(self, table: Table | None) -> list[dict[str, Any]]:
        """Computed from the current snapshot's data files (not kept in the control plane): the
        files ARE the partitions, so this can never disagree with what a read returns, and the
        concurrent partition writers have no second record to keep in step."""
        if table is None or table.current_snapshot() is None or not table.spec().fields:
            return []
        schema = table.schema()
        spec = table.spec()
        names = [f"{transform_name(f.transform)}({schema.find_column_name(f.source_id)})" for f in spec.fields]
        txn_of = {s.snapshot_id: s.summary.get(TXN_PROPERTY) if s.summary is not None else None for s in table.snapshots()}
        out: dict[tuple[Any, ...], dict[str, Any]] = {}
        for r in self._live_entries(table):
            part = r["partition"]
            key = tuple(part.get(f.name) for f in spec.fields)
            row = out.setdefault(
                key,
                {
                    "partition": {n: _human(f, schema, part.get(f.name)) for n, f in zip(names, spec.fields, strict=False)},
                    "row_count": 0,
                    "files": 0,
                    "last_snapshot_id": None,
                    "last_txn_id": None,
                    "_seq": -1,
                },
            )
            row["row_count"] += r["record_count"]
            row["files"] += 1
            seq = r["sequence_number"] or 0
            if seq > row["_seq"]:
                row["_seq"], row["last_snapshot_id"] = seq, r["snapshot_id"]
                row["last_txn_id"] = txn_of.get(r["snapshot_id"])
        rows = sorted(out.values(), key=lambda r: [str(v) for v in r["partition"].values()])
        for r in rows:
            r.pop("_seq")
        return rows

    def _live_entries(self, table: Table) -> Iterator[dict[str, Any]]:
        """The current snapshot's live data-file entries, reduced to what ``partition_stats`` needs.
        Manifests never change once written, so each one's entries are read once per sink: a
        ``describe`` after a one-partition write (the IO manager reports one per materialization)
        reads the manifests that write added or rewrote, not every entry of the table."""
        snap = table.current_snapshot()
        if snap is None:
            return
        specs = table.specs()
        for m in snap.manifests(table.io):
            if m.content != ManifestContent.DATA:
                continue
            rows = self._manifest_rows.get(m.manifest_path)
            if rows is None:
                names = [f.name for f in specs[m.partition_spec_id].fields]
                rows = [
                    {
                        "partition": {n: e.data_file.partition[i] for i, n in enumerate(names)},
                        "record_count": e.data_file.record_count,
                        "sequence_number": e.sequence_number,
                        "snapshot_id": e.snapshot_id,
                    }
                    for e in m.fetch_manifest_entry(table.io, discard_deleted=True)
                    if e.data_file.content == DataFileContent.DATA
                ]
                if len(self._manifest_rows) >= _MANIFEST_CACHE:
                    self._manifest_rows.clear()
                self._manifest_rows[m.manifest_path] = rows
            yield from rows

    # -- recovery ---------------------------------------------------------------------------
    def _txn_snapshot(self, table: Table, txn_id: uuid.UUID) -> Snapshot | None:
        """The published snapshot (main or its ancestors, or an environment branch's: an
        environment's write is committed there) that ``txn_id`` committed."""
        heads = [table.current_snapshot()] + [
            table.snapshot_by_id(r.snapshot_id) for name, r in table.metadata.refs.items() if name.startswith(ENV_BRANCH_PREFIX)
        ]
        for head in heads:
            found = next((s for s in ancestors_of(head, table.metadata) if carries_txn(s, txn_id)), None)
            if found is not None:
                return found
        return None

    def find_committed(self, ds: DatasetRecord, txn_id: uuid.UUID) -> Outcome | None:
        table = self.tables.table(ds)
        snap = None if table is None else self._txn_snapshot(table, txn_id)
        if snap is None:
            return None
        assert table is not None
        return summary_outcome(snap, schema_to_pyarrow(table.schema(), include_field_ids=False), table)

    def _table_if_ours(self, ds: DatasetRecord) -> Table | None:
        """The dataset's table for a failure path (undo, discard): a table this control plane does
        not own counts as none, so a write refused with TableOwnershipError is still aborted (its
        ledger row must not stay open) and the refused table is left exactly as it was."""
        try:
            return self.tables.table(ds)
        except TableOwnershipError:
            return None

    def undo(self, ds: DatasetRecord, txn_id: uuid.UUID) -> None:
        table = self._table_if_ours(ds)
        if table is None:
            return
        snap = table.current_snapshot()
        if snap is None or snap.summary is None or snap.summary.get(TXN_PROPERTY) != str(txn_id):
            return
        if snap.parent_snapshot_id is None:
            self.catalog.drop_table(self.tables.identifier(ds))
        else:
            manage_snapshots(table).set_current_snapshot(snap.parent_snapshot_id).commit()
        delete_paths(table.io, list_txn_files(table.io, table.location(), txn_id))

    def discard(self, ds: DatasetRecord, txn_id: uuid.UUID, location: str | None = None) -> Discarded:
        """Delete the transaction's data files, the manifests of its snapshot commit that never
        landed, and abort its incomplete multipart uploads (a writer killed or cut off mid-file
        leaves one per open file). Without a table (an aborted
        first write) the ledger's ``location`` says where, and its FileIO comes from the catalog."""
        table = self._table_if_ours(ds)
        if table is not None and self._txn_snapshot(table, txn_id) is not None:
            return Discarded()  # committed: its files are the dataset
        where = location or (table.location() if table is not None else None)
        io = table.io if table is not None else None
        envs = table is not None and any(n.startswith(ENV_BRANCH_PREFIX) for n in table.metadata.refs)
        if table is not None and table.current_snapshot() is None and not envs:
            self.catalog.drop_table(self.tables.identifier(ds))  # created empty (or staged only) by an aborted first write
        elif (
            table is not None and audit_branch(txn_id) in table.metadata.refs and not wap.drop_audit_branch(table, txn_id)
        ):  # its snapshot stays (the catalog keeps it): so do its files
            return Discarded(uploads=abort_incomplete_uploads(table.io.properties, table.location(), txn_id=txn_id))
        if not where:
            return Discarded()
        io = io or load_file_io(dict(self.catalog.properties), where)
        files = list_txn_files(io, where, txn_id)
        delete_paths(io, files + list_txn_metadata(io, where, txn_id))
        uploads = abort_incomplete_uploads(io.properties, where, txn_id=txn_id)
        return Discarded(files=len(files), uploads=uploads)

    # -- write-audit-publish (``wap.py``) ------------------------------------------------------
    def publish(
        self, ds: DatasetRecord, txn_id: uuid.UUID, base_snapshot_id: int | None, partition: PartitionFilter | None = None
    ) -> Outcome:
        """Make a staged version the published one in ONE metadata-only commit (see ``wap.publish``;
        in an environment ``wap.publish_in_environment``: its branch moves, never main)."""
        if ds.environment is not None:
            return wap.publish_in_environment(self.tables, ds, txn_id, base_snapshot_id)
        return wap.publish(self.tables, ds, txn_id, base_snapshot_id, partition)

    def discard_staged(self, ds: DatasetRecord, txn_id: uuid.UUID, location: str | None = None) -> None:
        """Drop a staged version: its branch, its snapshot and the files only it wrote."""
        self.discard(ds, txn_id, location)

    def rebase_staged(self, ds: DatasetRecord, txn_id: uuid.UUID, partition: PartitionFilter) -> Outcome:
        """The audit branch re-based onto main, one metadata commit (see ``wap.rebase_staged``)."""
        return wap.rebase_staged(self.tables, ds, txn_id, partition)

    def move_refs(self, moves: Sequence[RefMove], idempotency_key: str) -> int:
        """Every member table's ``main`` to its published version (see ``refs.move_refs``)."""
        return refs.move_refs(self.tables, moves, idempotency_key)

    # -- READ (``scans.py``) ------------------------------------------------------------------
    def scan(self, ds: DatasetRecord, *, columns: list[str] | None, row_filter: str | None, as_of: AsOf) -> pa.RecordBatchReader:
        """Stream rows with bounded memory (see ``scans.scan``)."""
        return scans.scan(self.tables, ds, columns=columns, row_filter=row_filter, as_of=as_of)

    def scan_staged(
        self, ds: DatasetRecord, snapshot_id: int, *, columns: list[str] | None, row_filter: str | None
    ) -> pa.RecordBatchReader:
        """A staged snapshot streamed like the current version (see ``scans.scan_staged``)."""
        return scans.scan_staged(self.tables, ds, snapshot_id, columns=columns, row_filter=row_filter)

    def read(self, ds: DatasetRecord, *, columns: list[str] | None, row_filter: str | None, as_of: AsOf) -> pa.Table:
        """The whole result at once, files read in parallel (see ``scans.read``)."""
        return scans.read(self.tables, ds, columns=columns, row_filter=row_filter, as_of=as_of)

    def arrow_source(self, ds: DatasetRecord, partition: BoundPartition | None = None, snapshot_id: int | None = None) -> Any:
        return scans.arrow_source(self.tables, ds, partition, snapshot_id)

    def scan_path(self, ds: DatasetRecord) -> tuple[ScanPath, str]:
        """``native`` on a local warehouse, ``arrow`` on object storage (see ``scans.scan_path``)."""
        return scans.scan_path(self.tables, ds)

    def scan_plan(self, ds: DatasetRecord, snapshot_id: int | None = None) -> ScanPlan:
        """A snapshot's exact data files, schema and field ids (see ``scans.scan_plan``)."""
        return scans.scan_plan(self.tables, ds, snapshot_id)

    def version_stats(self, ds: DatasetRecord, snapshot_id: int | None = None) -> VersionStats | None:
        """A snapshot's row and null counts from its data files' records (see ``scans.version_stats``)."""
        return scans.version_stats(self.tables, ds, snapshot_id)

    def compact(self, ds: DatasetRecord) -> Maintenance:
        """Small data files, and files whose bounds lose rows (``bounds_repair.py``), rewritten
        into target-size ones, ONE snapshot, identity unchanged (``compaction.py``);
        ``Trident.maintain`` runs it before expiring snapshots."""
        from .compaction import compact

        done = compact(self.tables, ds, self.tables.existing_table(ds))
        return Maintenance(
            key=ds.key,
            expired_snapshots=0,
            deleted_files=0,
            compacted_files=done.rewritten - done.repaired - done.reencoded,
            compaction_files_written=done.written,
            repaired_files=done.repaired,
            reencoded_files=done.reencoded,
            data_files_before=done.files_before,
            data_files_after=done.files_after,
        )

    def compact_environment(self, ds: DatasetRecord, fork_snapshot_id: int | None) -> tuple[Maintenance, int | None]:
        """An environment's own small files (``ds``: its version, ``ds.environment`` set) rewritten
        on its branch, one snapshot there; ``main`` and the files production reads untouched
        (``compaction.compact_branch``). Returns the report and the branch's new snapshot (the
        same rows: the environment's head moves to it), ``None`` when nothing was rewritten. The
        caller holds the dataset's writer lock.

        Raises:
            TransactionConflictError: the branch moved meanwhile (nothing changed).
            StorageUnavailableError: storage could not be reached (nothing changed).
        """
        from .compaction import compact_branch

        assert ds.environment is not None and ds.snapshot_id is not None
        table = self.tables.existing_table(ds)
        done = compact_branch(self.tables, ds, table, env_branch(ds.environment), ds.snapshot_id, fork_snapshot_id)
        return Maintenance(
            key=ds.key,
            expired_snapshots=0,
            deleted_files=0,
            compacted_files=done.rewritten,
            compaction_files_written=done.written,
            data_files_before=done.files_before,
            data_files_after=done.files_after,
        ), done.snapshot_id if done.rewritten else None

    def maintain(
        self, ds: DatasetRecord, *, older_than: datetime, retain_last: int, uploads_before: datetime | None = None
    ) -> Maintenance:
        """Expire snapshots older than ``older_than`` (always keeping the newest ``retain_last``, the
        current one and what a branch or staged version needs: ``maintenance.still_needed``), then
        delete the data files, manifests, manifest lists and metadata files this table's own
        metadata once referenced and no remaining snapshot, ref or the metadata log uses, and abort the incomplete multipart uploads under the table
        started before ``uploads_before``. Never "every unused file in the folder": a folder may
        hold another dataset's files (see ``purge.py``). The caller holds the dataset's
        writer lock, so no Trident write has files in flight."""
        table = self.tables.existing_table(ds)
        if any(table.properties.get(k) != v for k, v in METADATA_PROPERTIES.items()):  # a table from before them
            with transaction(table) as txn:
                txn.set_properties(METADATA_PROPERTIES)
            table = table.refresh()
        keep = {s.snapshot_id for s in sorted(table.snapshots(), key=lambda s: s.timestamp_ms)[-max(retain_last, 1) :]}
        keep |= still_needed(table)
        cutoff = int(older_than.timestamp() * 1000)
        expire = [s.snapshot_id for s in table.snapshots() if s.snapshot_id not in keep and s.timestamp_ms < cutoff]
        refused = None
        if expire:
            try:
                table.maintenance.expire_snapshots().by_ids(expire).commit()
            except ForbiddenError as exc:  # a catalog that expires snapshots only by its own maintenance
                refused = f"the catalog refused to expire {len(expire)} snapshot(s) ({exc}); its own maintenance expires them"
                expire = []
            table = table.refresh()
        garbage, metadata = unreferenced_files(table)
        delete_paths(table.io, garbage + metadata)
        uploads = 0
        if uploads_before is not None:
            uploads = abort_incomplete_uploads(table.io.properties, table.location(), initiated_before=uploads_before)
        return Maintenance(
            key=ds.key,
            expired_snapshots=len(expire),
            deleted_files=len(garbage),
            deleted_metadata_files=len(metadata),
            aborted_uploads=uploads,
            expiry_refused=refused,
        )

    def drop_branch(
        self, ds: DatasetRecord, environment: str, txn_ids: set[uuid.UUID], *, remove_table: bool
    ) -> tuple[int, bool]:
        """Remove the environment's branch, expire the snapshots its writes (``txn_ids``) made that
        no remaining ref reaches, then delete the files the table's metadata once referenced and
        no retained snapshot reads (``purge.unreferenced_files``: production's and other
        environments' files stay). ``remove_table``: the table was born in this environment and
        nothing else has it: it is dropped with every file (no table at all: nothing is left of the
        dataset either). The caller holds the writer lock."""
        table = self.tables.table(ds)
        if table is None:
            return 0, remove_table
        branch = env_branch(environment)
        if remove_table and all(name == branch for name in table.metadata.refs):
            head = table.metadata.refs.get(branch)
            files = len(self.tables.data_files(table, head.snapshot_id)) if head is not None else 0
            self.catalog.drop_table(self.tables.identifier(ds))
            purge_files(table)
            self.drop(ds)
            return files, True
        if branch in table.metadata.refs:
            manage_snapshots(table).remove_branch(branch).commit()
            table = table.refresh()
        reachable: set[int] = set()
        for ref in table.metadata.refs.values():
            snap = table.snapshot_by_id(ref.snapshot_id)
            while snap is not None and snap.snapshot_id not in reachable:
                reachable.add(snap.snapshot_id)
                snap = table.snapshot_by_id(snap.parent_snapshot_id) if snap.parent_snapshot_id is not None else None
        mine = {str(t) for t in txn_ids}
        orphaned = [
            s.snapshot_id
            for s in table.snapshots()
            if s.snapshot_id not in reachable and s.summary is not None and s.summary.get(TXN_PROPERTY) in mine
        ]
        if orphaned:
            table.maintenance.expire_snapshots().by_ids(orphaned).commit()
            table = table.refresh()
        garbage, metadata = unreferenced_files(table)
        delete_paths(table.io, garbage + metadata)
        return len(garbage), False

    def drop(self, ds: DatasetRecord) -> None:
        self.tables.caches.locations.pop(ds.dataset_id, None)
        with contextlib.suppress(NoSuchTableError):
            table = self.catalog.load_table(self.tables.identifier(ds))
            self.catalog.drop_table(self.tables.identifier(ds))
            purge_files(table)
