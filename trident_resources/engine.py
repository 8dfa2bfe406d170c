"""``Engine``: what every operation works with — the settings, the control plane, the sinks, the
router, the transaction driver and the SQL sandboxes — and the few decisions they share (which
sink a write lands in, which lock it takes, a dataset's record).

Operations (``ops/``, ``read/``) take an ``Engine``; the public client (``client.Trident``) owns
one and only validates its arguments before calling one operation. So no operation depends on
the client, and the client depends on nothing an operation decides.
"""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager
from typing import Any

from .control import range_locks
from .control.embedded_pg import ensure_embedded_postgres
from .control.plane import PRODUCTION, ControlPlane, DatasetRecord, LedgerEntry
from .control.router import RouteDecision, Router
from .core import arguments
from .core.arrow_memory import use_memory_pool
from .core.errors import DatasetNotFoundError, PartitionError, SinkMismatchError, UnsupportedBySinkError
from .core.keys import validate_key
from .core.partitions import BoundPartition, PartitionFilter
from .core.settings import TridentSettings, usable_home
from .sinks import open_sinks
from .sinks.contract import Sink
from .sql.sandbox import SandboxCache, prepare_spares
from .transaction.driver import PARTITION_META, TransactionDriver

log = logging.getLogger("trident")


class Engine:
    """One per client: it owns the control plane's connection pool and the SQL sandboxes."""

    def __init__(self, settings: TridentSettings) -> None:
        self.settings = s = settings
        usable_home(s.home)
        use_memory_pool(s.arrow_memory_pool)
        dsn = (
            s.pg_dsn.get_secret_value()
            if s.pg_dsn
            else ensure_embedded_postgres(s.home / "pg", idle_minutes=s.embedded_pg_idle_minutes)
        )
        self.control = ControlPlane(dsn, pool_max=s.pg_pool_max)
        self.control.environment = s.environment  # reads resolve this environment's versions
        self.sql_sandboxes = SandboxCache()  # locked DuckDB sandboxes kept for repeated queries
        prepare_spares(s.duckdb_memory_limit, s.duckdb_threads)  # the first sandboxes' databases, opened ahead
        self.router = Router(self.control, s.workspace, s.flag_refresh_seconds)
        try:
            self.driver = TransactionDriver(self.control, open_sinks(s, self.control, dsn), s)
        except BaseException:
            self.control.close()  # an engine that failed to open owns no pool
            raise

    def close(self) -> None:
        self.sql_sandboxes.close()
        self.control.close()

    @property
    def workspace(self) -> str:
        return self.settings.workspace

    @property
    def environment(self) -> str:
        """The environment this engine reads and writes (``main``: production)."""
        return self.settings.environment

    def sink(self, name: str) -> Sink:
        return self.driver.sink(name)

    def dataset_record(self, key: str) -> DatasetRecord:
        """The control plane's record of an existing dataset.

        Raises:
            InvalidDatasetKeyError: ``key`` is not a dataset key.
            DatasetNotFoundError: no dataset ``key`` exists in this workspace.
        """
        ds = self.control.dataset(self.workspace, validate_key(key))
        if ds is None or not ds.exists:
            raise DatasetNotFoundError(key, self.workspace)
        return ds

    def record_with_provenance(self, key: str) -> tuple[DatasetRecord, dict[str, Any]]:
        """``dataset_record(key)`` and its provenance, in one query (raises as ``dataset_record``)."""
        ds, provenance = self.control.dataset_with_provenance(self.workspace, validate_key(key))
        if ds is None or not ds.exists:
            raise DatasetNotFoundError(key, self.workspace)
        return ds, provenance

    def route(self, key: str, writer: str, existing: DatasetRecord | None) -> RouteDecision:
        """The router's decision for a write, refused when it would split the dataset's rows
        across sinks (a dataset's sink only changes through a migration).

        Raises:
            InvalidWriteError: ``writer`` is not a registered writer.
            SinkMismatchError: the dataset lives in another sink than the writer resolves to.
        """
        route = self.router.resolve(writer, key, existing)
        if existing is not None and existing.exists and existing.sink != route.sink:
            raise SinkMismatchError(
                f"dataset {key!r} lives in sink {existing.sink!r} but writer {writer!r} resolves to "
                f"{route.describe()}; the rows would be split. Move it with `trident canary {key}`, "
                f"or pin it: `trident pin set {key} {existing.sink}`"
            )
        return route

    def require_partitions(self, key: str, sink: str) -> None:
        """Raises UnsupportedBySinkError when ``sink`` cannot replace one partition of a dataset."""
        if not self.sink(sink).partitions:
            raise UnsupportedBySinkError(
                f"dataset {key!r} lives in the {sink!r} sink, which cannot replace one partition of a dataset; "
                f"move it to the trident first with `trident canary {key}`, then write partitions"
            )

    def lock(self, ds: DatasetRecord, bound: BoundPartition | None) -> AbstractContextManager[DatasetRecord]:
        """The writer lock a write needs: a partition write of a dataset already partitioned that
        way locks only its slice (range locks: writers of slices that do not overlap it run
        alongside, however wide either is); everything else (whole-dataset writes, a dataset's
        first write or first partitioned write, a slice that cannot be locked by parts) locks the
        whole dataset."""
        if self.environment != PRODUCTION:  # an environment's writes are few: one lock, never production's slices
            return self.driver.locked(ds)
        items = range_locks.claim(bound) if bound is not None else None
        if bound is not None and items is not None and ds.exists:
            have = self.sink(ds.sink).partitioning(ds)
            if have is not None and set(have) == set(bound.filter.spec):
                return self.driver.partition_locked(
                    ds,
                    items,
                    what=f"partitions {bound.filter.describe()}",
                    overlapping=lambda e: range_locks.overlaps(bound, e.metadata.get(PARTITION_META)),
                )
        return self.driver.locked(ds)

    def staged_lock(self, ds: DatasetRecord, entry: LedgerEntry) -> AbstractContextManager[DatasetRecord]:
        """A staged partition write is published under its partitions' locks (like its write), so a
        publish neither waits for nor blocks writers of other partitions; anything else under the
        whole-dataset lock."""
        meta = entry.metadata.get(PARTITION_META)
        if not meta or not ds.exists or self.environment != PRODUCTION:
            return self.driver.locked(ds)
        partition = PartitionFilter.from_metadata(meta)
        try:
            bound = partition.bind(self.sink(ds.sink).schema(ds))
        except PartitionError:  # the partition column is new in the staged version: lock it all
            return self.driver.locked(ds)
        return self.lock(ds, bound)

    def with_partition(self, sink: Sink, ds: DatasetRecord, row_filter: str | None, partition: Any) -> str | None:
        """``row_filter`` narrowed to ``partition``'s rows (raises PartitionError, InvalidArgumentError)."""
        partition = arguments.partition_filter(partition)
        if partition is None:
            return row_filter
        part = partition.bind(sink.schema(ds)).to_row_filter()
        return part if not row_filter else f"({row_filter}) and {part}"
