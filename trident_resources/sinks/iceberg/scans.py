"""The read side of the ``iceberg_native`` sink: streamed and whole scans of the current or a past
snapshot, the DuckDB scan plan (a snapshot's exact data files and field ids) and which path
(native or Arrow) a query takes. Plain functions of the sink; the caches they fill (table
locations, parsed tables, each snapshot's file list) are a ``ReadCaches`` the sink holds."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.dataset as pads
from pyiceberg.conversions import from_bytes
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.table import Table
from pyiceberg.types import IntegerType, LongType

from ...control.plane import DatasetRecord
from ...core.errors import InvalidReadError
from ...core.filters import arrow_filter, check_columns, filter_schema
from ...core.identity import ROW_ID, is_row_id_bytes
from ...core.partitions import BoundPartition
from ...core.schemas import conform
from ..contract import AsOf, ScanPath, ScanPlan, VersionStats
from .partition_spec import iceberg_expr
from .snapshots import published_iceberg_schema, published_schema, snapshot_to_read, without_metadata
from .tables import IcebergTables

# ``read()`` holds the whole result anyway: pre-buffer each file's column chunks (fewer, larger
# reads; what pyiceberg's own to_arrow does) and let pyarrow read files in parallel.
_PARQUET_PARALLEL = pads.ParquetFileFormat(default_fragment_scan_options=pads.ParquetFragmentScanOptions(pre_buffer=True))


def scan_batches(dataset: pads.Dataset, columns: list[str] | None, expr: Any) -> pa.RecordBatchReader:
    """A bounded-memory scan: pyarrow's default read-ahead (16 batches x 4 files) holds far more
    than a row group in flight, which is what made keyed writes grow with the data."""
    if _filters_ids(dataset, expr):
        late = dataset.scanner(batch_size=65_536, batch_readahead=1, fragment_readahead=1).to_reader()
        wanted = columns or dataset.schema.names
        schema = pa.schema([dataset.schema.field(c) for c in wanted])
        return pa.RecordBatchReader.from_batches(schema, (b.filter(expr).select(wanted) for b in late))
    return dataset.scanner(
        columns=columns,
        filter=expr,
        batch_size=65_536,
        batch_readahead=1,
        fragment_readahead=1,
    ).to_reader()


def _filters_ids(dataset: pads.Dataset, expr: Any) -> bool:
    """Does ``expr`` compare 16-byte ids? Then it is applied to the batches read, not pushed into
    the scan: pyarrow prunes row groups by statistics in the files' own Arrow type, ``arrow.uuid``,
    for which it has no comparison kernels (it failed on ``__row_id = '...'``). Only such filters
    (rare: a lookup by id) give up pruning by row-group statistics; the files are still pruned by
    their Iceberg bounds when planned."""
    if expr is None or ROW_ID not in dataset.schema.names or not is_row_id_bytes(dataset.schema.field(ROW_ID).type):
        return False
    return ROW_ID in str(expr)


def _local_path(location: str) -> str:
    """``file:///a/b.parquet`` (or a bare path) as the filesystem path DuckDB is allowed to read."""
    if location.startswith("file://"):
        return unquote(urlparse(location).path)
    return location


def _duckdb_version() -> str:
    import duckdb

    return str(duckdb.__version__)


def scan(
    tables: IcebergTables, ds: DatasetRecord, *, columns: list[str] | None, row_filter: str | None, as_of: AsOf
) -> pa.RecordBatchReader:
    """Stream rows with pyarrow's dataset scanner over the snapshot's data files.

    pyiceberg plans the files (pruning by column stats); pyarrow reads them with bounded
    read-ahead. pyiceberg's own batch reader materialises every file task at once through its
    thread pool, which is not bounded. There are never delete files (keyed writes are
    copy-on-write), so the data files alone are the rows. ``as_of`` is a snapshot id the
    read layer resolved through the ledger (``read/versions.py``); a past version is read by pyiceberg with THAT
    version's schema (columns matched by Iceberg field id, not by name).
    """
    table = tables.table_to_read(ds)
    current = table.current_snapshot()
    as_of = _to_read(table, as_of) if as_of is not None else published_version(table, ds)
    if as_of is not None and (current is None or as_of != current.snapshot_id):
        return _scan_past(table, as_of, columns, row_filter)
    schema, expr, files = _plan_current(tables, table, columns, row_filter)
    return scan_batches(tables.file_dataset(table, files, filter_schema(schema)), columns or schema.names, expr)


def published_version(table: Table, ds: DatasetRecord) -> int | None:
    """The snapshot holding the version the control plane says is published (``ds.snapshot_id``,
    read with every other record of the same read in one Postgres snapshot), when that is not
    main's: ``None`` when main holds it (the usual case, read as the current version).

    The control plane, not the table's ``main``, says what is published: a transaction group
    flips every member's version in ONE Postgres transaction and moves the tables' ``main`` refs
    after it, so a reader following ``main`` could see half a group, and a reader following the
    control plane never does. A version this table does not have (a table changed outside
    Trident) reads main, as before."""
    want = ds.snapshot_id
    current = table.current_snapshot()
    if want is None or (current is not None and current.snapshot_id == want):
        return None
    snap = snapshot_to_read(table, want)
    if (current is not None and snap == current.snapshot_id) or table.snapshot_by_id(snap) is None:
        return None
    return snap


def _to_read(table: Table, as_of: AsOf) -> int | None:
    """The snapshot that holds the data version ``as_of`` (a snapshot id the read layer resolved
    through the ledger): a compaction of it when that is what main is at or all that is left."""
    return None if as_of is None else snapshot_to_read(table, int(as_of))  # type: ignore[arg-type]


def _plan_current(
    tables: IcebergTables, table: Table, columns: list[str] | None, row_filter: str | None
) -> tuple[pa.Schema, Any, list[str]]:
    """The published version's schema, the filter as a pyarrow expression, and the data files
    that may hold matching rows (pruned by partition and column statistics). Without a filter
    that is the snapshot's whole file list, remembered per snapshot as for ``scan_plan``: a
    table with a long history (1,000 appends, then compaction) otherwise re-plans its manifests
    on every read. The files are read with ``filter_schema`` (16-byte ids as
    ``fixed_size_binary(16)``, which the filter compares); readers get the ids as text (``identity.public``)."""
    schema = published_schema(table)
    check_columns(columns, schema)
    expr = arrow_filter(schema, row_filter) if row_filter else None
    current = table.current_snapshot()
    if current is None:
        return schema, expr, []
    if not row_filter:
        return schema, expr, _snapshot_files(tables, table, current.snapshot_id)
    return schema, expr, [f.file_path for f in tables.data_files(table, row_filter=row_filter)]


def read(tables: IcebergTables, ds: DatasetRecord, *, columns: list[str] | None, row_filter: str | None, as_of: AsOf) -> pa.Table:
    """The whole result at once (the caller holds it in memory anyway), so every file is read
    in parallel with pre-buffered I/O (pyarrow's threaded ``to_table``), unlike ``scan``,
    which keeps one file and one batch in flight to stay bounded. The parsed table is reused
    while the catalog names the same metadata file (``table_to_read``): a table's metadata
    file grows with every snapshot it keeps (1 MiB after 1,000 appends), and parsing it is
    most of a compacted table's read beyond the one-go table's."""
    table = tables.table_to_read(ds)
    current = table.current_snapshot()
    as_of = _to_read(table, as_of) if as_of is not None else published_version(table, ds)
    if as_of is not None and (current is None or as_of != current.snapshot_id):
        return _scan_past(table, as_of, columns, row_filter).read_all()
    schema, expr, files = _plan_current(tables, table, columns, row_filter)
    dataset = tables.file_dataset(table, files, filter_schema(schema), fmt=_PARQUET_PARALLEL)
    if _filters_ids(dataset, expr):  # (see ``_filters_ids``)
        return dataset.to_table(use_threads=True).filter(expr).select(columns or schema.names)
    return dataset.to_table(columns=columns or schema.names, filter=expr, use_threads=True)


def scan_staged(
    tables: IcebergTables, ds: DatasetRecord, snapshot_id: int, *, columns: list[str] | None, row_filter: str | None
) -> pa.RecordBatchReader:
    """A staged snapshot streamed like the current version: its own schema, its data files (pruned
    by the filter), pyarrow's bounded scanner, columns matched by name as ``arrow_source`` (the
    SQL of a staged version over Arrow) matches them. That is exact here: a staged version is a
    child of the table as it is, and the trident never renames a column nor keeps an older file
    through a change of a column's type or id (a replace rewrites every file). pyiceberg's
    time-travel reader (``_scan_past``) read it before at about twice the CPU, and
    write-audit-publish checks stream every staged version."""
    table = tables.existing_table(ds)
    if table.snapshot_by_id(snapshot_id) is None:
        raise InvalidReadError(f"the dataset has no snapshot {snapshot_id} any more (expired by `trident maintain`)")
    schema = snapshot_schema(table, snapshot_id)
    check_columns(columns, schema)
    expr = arrow_filter(schema, row_filter) if row_filter else None
    files = [f.file_path for f in tables.data_files(table, snapshot_id=snapshot_id, row_filter=row_filter or None)]
    return scan_batches(tables.file_dataset(table, files, filter_schema(schema)), columns or schema.names, expr)


def _scan_past(table: Table, snapshot_id: int, columns: list[str] | None, row_filter: str | None) -> pa.RecordBatchReader:
    if table.snapshot_by_id(snapshot_id) is None:
        raise InvalidReadError(f"the dataset has no snapshot {snapshot_id} any more (expired by `trident maintain`)")
    scan = table.scan(snapshot_id=snapshot_id)
    schema = schema_to_pyarrow(scan.projection(), include_field_ids=False)
    check_columns(columns, schema)
    if row_filter:
        arrow_filter(schema, row_filter)  # the same named error as a current read
    scan = table.scan(snapshot_id=snapshot_id, row_filter=row_filter or AlwaysTrue(), selected_fields=tuple(columns or ("*",)))
    reader = scan.to_arrow_batch_reader()
    wanted = without_metadata(reader.schema)
    return pa.RecordBatchReader.from_batches(wanted, (conform(b, wanted) for b in reader))


def arrow_source(
    tables: IcebergTables, ds: DatasetRecord, partition: BoundPartition | None = None, snapshot_id: int | None = None
) -> Any:
    table = tables.existing_table(ds)
    if snapshot_id is None:
        snapshot_id = published_version(table, ds)
    expr = iceberg_expr(partition) if partition is not None else None
    files = [f.file_path for f in tables.data_files(table, snapshot_id=snapshot_id, row_filter=expr)]
    return tables.file_dataset(table, files, None if snapshot_id is None else snapshot_schema(table, snapshot_id))


def snapshot_iceberg_schema(table: Table, snapshot_id: int) -> Any:
    """The Iceberg schema a past snapshot was written with (time travel, publishing a staged one)."""
    return table.scan(snapshot_id=snapshot_id).projection()


def snapshot_schema(table: Table, snapshot_id: int) -> pa.Schema:
    """``snapshot_iceberg_schema`` as an Arrow schema."""
    return schema_to_pyarrow(snapshot_iceberg_schema(table, snapshot_id), include_field_ids=False)


def scan_path(tables: IcebergTables, ds: DatasetRecord) -> tuple[ScanPath, str]:
    """``native`` when the table's files are on the local filesystem; on object storage the
    Arrow path, because DuckDB's S3 reader (httpfs) is not built into the pinned DuckDB and
    no wheel of it matches that version, and loading one would be a download at run time.
    A table's location never changes, so it is looked up once per dataset."""
    location = tables.caches.locations.get(ds.dataset_id)
    if location is None and not tables.settings.catalog_uri:
        location = tables.settings.warehouse  # the SQL catalog puts every table under it
    if location is None:  # a REST catalog decides where tables live: ask it once
        location = tables.existing_table(ds).location()
        tables.caches.locations[ds.dataset_id] = location
    scheme = location.split("://", 1)[0] if "://" in location else "file"
    if scheme == "file":
        return "native", "local warehouse: DuckDB read_parquet over the snapshot's data files"
    return "arrow", (
        f"{scheme}:// storage: DuckDB's S3 reader (httpfs) cannot be loaded without a download "
        f"for DuckDB {_duckdb_version()}, so pyarrow reads the files and DuckDB scans Arrow"
    )


def scan_plan(tables: IcebergTables, ds: DatasetRecord, snapshot_id: int | None = None) -> ScanPlan:
    """The current snapshot's exact data files, its schema and each column's field id.

    The trident never writes delete files, so these files ARE the dataset; DuckDB matches
    columns by field id (as Iceberg does), so a column added later reads NULL in older files."""
    path, reason = scan_path(tables, ds)
    table = tables.table_to_read(ds)
    if snapshot_id is None:
        snapshot_id = published_version(table, ds)
    snap = table.current_snapshot() if snapshot_id is None else table.snapshot_by_id(snapshot_id)
    iceberg_schema = published_iceberg_schema(table) if snapshot_id is None else snapshot_iceberg_schema(table, snapshot_id)
    schema = schema_to_pyarrow(iceberg_schema, include_field_ids=False)
    if path != "native":
        return ScanPlan(
            key=ds.key, path=path, schema=schema, reason=reason, snapshot_id=None if snap is None else snap.snapshot_id
        )
    locations = _snapshot_files(tables, table, snap.snapshot_id if snap is not None else None)
    if any("://" in p and not p.startswith("file://") for p in locations):  # a file written elsewhere
        return ScanPlan(
            key=ds.key,
            path="arrow",
            schema=schema,
            snapshot_id=None if snap is None else snap.snapshot_id,
            reason="some data files are not on the local filesystem: pyarrow reads them",
        )
    files = tuple(_local_path(p) for p in locations)
    return ScanPlan(
        key=ds.key,
        path="native",
        schema=schema,
        reason=reason,
        snapshot_id=None if snap is None else snap.snapshot_id,
        files=files,
        field_ids=tuple(f.field_id for f in iceberg_schema.fields),
    )


def version_stats(tables: IcebergTables, ds: DatasetRecord, snapshot_id: int | None = None) -> VersionStats | None:
    """Row count, null counts and integer bounds of a snapshot from its data files' records (the
    statistics the write computed from the Parquet footers it wrote). The trident never writes
    delete files, so the files' record counts sum to the version's rows. A column's null count
    (bounds) is given only when every file records one (both) for its field id (see
    ``VersionStats``); NaN is not NULL here, as in SQL. Remembered per snapshot: it never changes,
    so a named (staged) snapshot seen before needs not even the table."""
    if snapshot_id is not None:
        with tables.caches.lock:
            hit = tables.caches.stats_by_snapshot.get((ds.dataset_id, snapshot_id, False))
        if hit is not None:
            return hit
    table = tables.table_to_read(ds)
    snap = table.current_snapshot() if snapshot_id is None else table.snapshot_by_id(snapshot_id)
    if snap is None:
        return None
    key = (ds.dataset_id, snap.snapshot_id, snapshot_id is None)
    with tables.caches.lock:
        hit = tables.caches.stats_by_snapshot.get(key)
    if hit is not None:
        return hit
    schema = published_iceberg_schema(table) if snapshot_id is None else snapshot_iceberg_schema(table, snapshot_id)
    files = tables.data_files(table, snapshot_id=snap.snapshot_id)
    nulls: dict[str, int] = {}
    bounds: dict[str, tuple[int, int]] = {}
    for column in schema.fields:
        if not column.field_type.is_primitive:
            continue  # Iceberg records null counts of leaf fields only
        counts = [(f.null_value_counts or {}).get(column.field_id) for f in files]
        if all(c is not None for c in counts):
            nulls[column.name] = sum(c for c in counts if c is not None)
        if isinstance(column.field_type, (IntegerType, LongType)) and files:
            lows = [(f.lower_bounds or {}).get(column.field_id) for f in files]
            highs = [(f.upper_bounds or {}).get(column.field_id) for f in files]
            if all(b is not None for b in lows) and all(b is not None for b in highs):
                bounds[column.name] = (
                    min(int(from_bytes(column.field_type, b)) for b in lows if b is not None),
                    max(int(from_bytes(column.field_type, b)) for b in highs if b is not None),
                )
    stats = VersionStats(rows=sum(f.record_count for f in files), null_counts=nulls, integer_bounds=bounds)
    tables.caches.remember(tables.caches.stats_by_snapshot, key, stats)
    return stats


def _snapshot_files(tables: IcebergTables, table: Table, snapshot_id: int | None) -> list[str]:
    """The data file paths of one snapshot, remembered: a snapshot never changes, and reading
    its manifests is a third of a small SQL query's fixed cost. Keyed by the
    table's uuid too, so a dropped and recreated table never reuses another's entry."""
    if snapshot_id is None:
        return []
    key = (str(table.metadata.table_uuid), snapshot_id)
    with tables.caches.lock:
        hit = tables.caches.files_by_snapshot.get(key)
    if hit is not None:
        return list(hit)
    files = tuple(f.file_path for f in tables.data_files(table, snapshot_id=snapshot_id))
    tables.caches.remember(tables.caches.files_by_snapshot, key, files)
    return list(files)
