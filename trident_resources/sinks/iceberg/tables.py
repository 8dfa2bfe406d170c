"""The Iceberg tables of the ``iceberg_native`` sink: one layer that both its write side (commits,
write-audit-publish, compaction) and its read side (scans) sit on.

It names a dataset's table in the catalog, loads it (checking that this control plane owns it)
and binds it to the storage access mode, lists a version's data files and opens them as a pyarrow
dataset, and keeps what the process remembers of tables (``TableCaches``): the table a commit of
ours just left, the parsed metadata a read reuses while the catalog names the same file, each
snapshot's file list and statistics.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.dataset as pads
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.manifest import DataFile, DataFileContent, ManifestContent
from pyiceberg.table import Table

from ...control.plane import DatasetRecord
from ...core.errors import DatasetNotFoundError, StorageUnavailableError, TableOwnershipError
from ...core.keys import iceberg_identifier
from ...core.partitions import BoundPartition
from ...core.pyiceberg_compat import is_sql_catalog, plan_live_files, sql_catalog_metadata_location
from ...core.settings import TridentSettings
from ..contract import VersionStats
from .credentials import StorageAccess
from .files import filesystem_for
from .partition_spec import iceberg_expr, matches_spec
from .snapshots import published_schema

OWNER_PROPERTY = "trident.dataset-id"

# Scans of this format (ours, or DuckDB's through arrow_source) read one row group at a time:
# pre-buffering would hold whole files' compressed bytes in memory.
PARQUET_FORMAT = pads.ParquetFileFormat(default_fragment_scan_options=pads.ParquetFragmentScanOptions(pre_buffer=False))
# ... except on object storage, where each column chunk read on its own is a request of its own:
# there the chunks a row group's scan reads are fetched together, coalesced into few ranged GETs,
# when the scan reaches that row group (lazy: still about one row group in memory, not a file).
REMOTE_PARQUET_FORMAT = pads.ParquetFileFormat(
    default_fragment_scan_options=pads.ParquetFragmentScanOptions(
        pre_buffer=True, cache_options=pa.CacheOptions(lazy=True, prefetch_limit=1)
    )
)


SNAPSHOT_FILES_CACHED = 256  # snapshots whose data file lists scan_plan remembers (immutable, so never stale)


@dataclass
class TableCaches:
    """What the process remembers of a sink's tables. A sink serves every thread of its ``Trident``, so
    the entries filled concurrently (files, tables) change under ``lock``."""

    locations: dict[uuid.UUID, str] = field(default_factory=dict)  # dataset id -> table location (scan_path)
    files_by_snapshot: dict[tuple[str, int], tuple[str, ...]] = field(default_factory=dict)  # (table uuid, snapshot) -> files
    read_tables: dict[uuid.UUID, tuple[str, Table]] = field(default_factory=dict)  # dataset id -> (metadata file, table)
    # (dataset id, snapshot, published?) -> its statistics: a snapshot never changes, and a step's
    # checks ask for the same version's statistics once per check. A dropped dataset's
    # key is never reused: a dataset written again after a drop is a new dataset id.
    stats_by_snapshot: dict[tuple[uuid.UUID, int, bool], VersionStats] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def remember(self, entries: dict[Any, Any], key: Any, value: Any) -> None:
        """Keep ``value`` in one of these caches, dropping its oldest entries beyond
        ``SNAPSHOT_FILES_CACHED`` (each holds immutable things, or checks its entry's freshness)."""
        with self.lock:
            entries[key] = value
            while len(entries) > SNAPSHOT_FILES_CACHED:
                entries.pop(next(iter(entries)))


class IcebergTables:
    """The catalog's tables of one sink, and what is remembered of them."""

    def __init__(self, catalog: Catalog, settings: TridentSettings) -> None:
        self.catalog = catalog
        self.settings = settings
        self.access = StorageAccess(settings)
        self.caches = TableCaches()
        self._nested = (
            settings.catalog_nested_namespaces if settings.catalog_nested_namespaces is not None else bool(settings.catalog_uri)
        )

    # -- tables -----------------------------------------------------------------------------
    def identifier(self, ds: DatasetRecord) -> tuple[str, ...]:
        """``(<root>, <workspace>, *dirs, table)``; folded into one namespace level for catalogs
        without nested namespaces (pyiceberg's SQL catalog)."""
        parts = iceberg_identifier(self.settings.namespace_root, ds.workspace, ds.key)
        if self._nested:
            return parts
        return (".".join(parts[:-1]), parts[-1])

    def table(self, ds: DatasetRecord) -> Table | None:
        ident = self.identifier(ds)
        try:
            table = self.catalog.load_table(ident)
        except NoSuchTableError:
            return None
        except (OSError, ConnectionError) as exc:
            raise StorageUnavailableError(f"Iceberg catalog unavailable: {type(exc).__name__}: {exc}") from exc
        self.check_owner(ds, table)
        return self.access.bind(table, reload=lambda: self.catalog.load_table(ident))

    def check_owner(self, ds: DatasetRecord, table: Table) -> None:
        """Never write to (nor clean up, nor read as a dataset) a table this control plane did not
        create: its ``__row_index`` and files are someone else's."""
        owner = table.properties.get(OWNER_PROPERTY)
        if owner != str(ds.dataset_id):
            whose = f"dataset {owner}, not this control plane's {ds.dataset_id}" if owner else "no Trident dataset"
            raise TableOwnershipError(
                f"the Iceberg table {'.'.join(self.identifier(ds))} for {ds.key!r} belongs to {whose}; "
                f"Trident will not write over it. If this control plane should own it, run `trident adopt {ds.key}`"
            )

    def existing_table(self, ds: DatasetRecord) -> Table:
        """The dataset's table, which must exist (``DatasetNotFoundError``): the read side and
        write-audit-publish start from it."""
        table = self.table(ds)
        if table is None:
            raise DatasetNotFoundError(ds.key, ds.workspace)
        return table

    def data_files(self, table: Table | None, snapshot_id: int | None = None, row_filter: Any = None) -> list[DataFile]:
        """The data files of the current (or ``snapshot_id``'s) version; with ``row_filter`` only
        those that may hold matching rows (pruned by partition and column statistics)."""
        if table is None or (snapshot_id is None and table.current_snapshot() is None):
            return []
        scan = table.scan(snapshot_id=snapshot_id, row_filter=row_filter if row_filter is not None else AlwaysTrue())
        return [task.file for task in plan_live_files(scan)]  # manifests of only removed files unread

    def partition_scope(self, table: Table, bound: BoundPartition, snapshot_id: int | None = None) -> list[DataFile]:
        """The data files of the current (or ``snapshot_id``'s: an environment's) version that a
        write of one partition (or range) can touch: those that may hold its rows (pyiceberg
        prunes manifests by their partition summaries, then entries by partition and column
        statistics), plus every file of another partitioning, which such a write rewrites whole
        (see ``IcebergVersion.partition_files``)."""
        files = self.data_files(table, snapshot_id, row_filter=iceberg_expr(bound))
        schema = table.schema()
        foreign = {i for i, spec in table.specs().items() if not matches_spec(spec, schema, bound.filter.spec)}
        snap = table.snapshot_by_id(snapshot_id) if snapshot_id is not None else table.current_snapshot()
        if foreign and snap is not None:
            seen = {f.file_path for f in files}
            for m in snap.manifests(table.io):
                if m.content == ManifestContent.DATA and m.partition_spec_id in foreign:
                    live = (e.data_file for e in m.fetch_manifest_entry(table.io, discard_deleted=True))
                    files += [f for f in live if f.content == DataFileContent.DATA and f.file_path not in seen]
        return files

    def file_dataset(
        self, table: Table, paths: list[str], schema: pa.Schema | None = None, fmt: pads.ParquetFileFormat = PARQUET_FORMAT
    ) -> pads.Dataset:
        schema = schema or published_schema(table)
        if not paths:
            return pads.dataset(pa.Table.from_batches([], schema=schema))
        fs, _ = filesystem_for(table.io, paths[0])
        if fmt is PARQUET_FORMAT and not paths[0].startswith(("file:", "/")):
            fmt = REMOTE_PARQUET_FORMAT
        return pads.dataset([filesystem_for(table.io, p)[1] for p in paths], schema=schema, filesystem=fs, format=fmt)

    def table_to_read(self, ds: DatasetRecord) -> Table:
        """The table for ``scan_plan`` (read only, never committed through): on the SQL catalog
        the parsed metadata is reused while the catalog still names the same metadata file
        (one small query instead of ``load_table``'s query and parse: the per-query cost)."""
        location = sql_catalog_metadata_location(self.catalog, self.identifier(ds))
        with self.caches.lock:
            hit = self.caches.read_tables.get(ds.dataset_id)
        if location is not None and hit is not None and hit[0] == location:
            return hit[1]
        table = self.existing_table(ds)
        if location is not None and table.metadata_location == location:
            self.caches.remember(self.caches.read_tables, ds.dataset_id, (location, table))
        return table

    def remember_committed(self, ds: DatasetRecord, table: Table) -> None:
        """Keep the table a commit of ours just left (pyiceberg updates it in place to the metadata
        it wrote) as ``table_to_read``'s entry: the staged version's checks and the ``describe``
        after a publish then find it under the metadata file the catalog names, instead of loading
        the table again (two table loads less per write). Checked like every entry, by the
        catalog's current metadata file, so a later commit by anyone is seen at once. A copy is
        kept: the committed table object may be committed through again by its holder."""
        if not isinstance(table.metadata_location, str) or not is_sql_catalog(self.catalog):
            return  # only the SQL catalog's reads consult the entry
        kept = Table(table.name(), table.metadata, table.metadata_location, table.io, table.catalog)
        self.caches.remember(self.caches.read_tables, ds.dataset_id, (table.metadata_location, kept))

    def last_known_table(self, ds: DatasetRecord) -> Table | None:
        """The table as this process last saw it (a commit of its own, or a read's look-up), NOT
        checked against the catalog: only for a commit, which the catalog checks anyway (a changed
        table fails it, and the caller then loads the table). A copy, so the commit through it
        leaves the kept entry as it was."""
        with self.caches.lock:
            hit = self.caches.read_tables.get(ds.dataset_id)
        if hit is None:
            return None
        table = hit[1]
        return Table(table.name(), table.metadata, table.metadata_location, table.io, table.catalog)
