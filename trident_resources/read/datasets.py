"""Reads of a dataset's rows and of how its versions are read: streams, tables, Arrow sources,
scan plans and file statistics, of the current, a past (``as_of``) or a staged version, from
whichever sink holds it.

Every read error a caller sees is named (``core/read_faults.py``): a missing or corrupt data file,
storage or the control plane going away mid-read.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import replace
from typing import Any

import pyarrow as pa

from ..control.plane import DatasetRecord
from ..core import arguments, read_faults
from ..core.errors import DatasetNotFoundError, InvalidReadError
from ..core.identity import ROW_INDEX, public_schema
from ..core.keys import validate_key
from ..core.partitions import PartitionFilter
from ..engine import Engine
from ..sinks.contract import AsOf, ScanPlan, VersionStats
from ..transaction import inline
from . import tail as inlined
from . import versions

log = logging.getLogger("trident")


def stream(
    engine: Engine,
    key: str,
    columns: list[str] | None = None,
    row_filter: str | None = None,
    as_of: AsOf = None,
    partition: PartitionFilter | None = None,
    *,
    staged: uuid.UUID | str | None = None,
) -> pa.RecordBatchReader:
    """``Trident.stream``: the rows as a bounded-memory stream (see there)."""
    columns = arguments.read_columns(columns)
    if columns == []:  # no user columns, as pyarrow's columns=[]: batches that carry only their row counts
        rows = stream(engine, key, [ROW_INDEX], row_filter, as_of, partition, staged=staged)
        return pa.RecordBatchReader.from_batches(pa.schema([]), (b.select([]) for b in rows))
    if staged is not None:
        if as_of is not None:
            raise InvalidReadError("read either a staged version or a past one (as_of), not both")
        ds, entry = versions.staged_entry(engine, key, staged)
        sink = engine.sink(ds.sink)
        row_filter = engine.with_partition(sink, ds, row_filter, partition)
        snapshot = entry.snapshot_id
        if snapshot is None:  # a staged version without a snapshot of its own: the table's current one
            return read_faults.guarded(key, lambda: sink.scan(ds, columns=columns, row_filter=row_filter, as_of=None))
        return read_faults.guarded(key, lambda: sink.scan_staged(ds, snapshot, columns=columns, row_filter=row_filter))
    ds = engine.dataset_record(key)
    sink = engine.sink(ds.sink)
    row_filter = engine.with_partition(sink, ds, row_filter, partition)
    version, tail = _version(engine, ds, as_of)
    reader = read_faults.guarded(key, lambda: sink.scan(ds, columns=columns, row_filter=row_filter, as_of=version))
    if tail is None:
        return reader
    rows = tail.rows_as(_stored(engine, ds), reader.schema, columns, row_filter)
    return inlined.appended(reader, rows)


def _version(engine: Engine, ds: DatasetRecord, as_of: AsOf) -> tuple[AsOf, inlined.Tail | None]:
    """What a read of ``as_of`` asks the sink for, and the version's inlined tail: with a tail,
    the snapshot the tail completes (the current version's as the control plane records it)."""
    if not engine.sink(ds.sink).time_travel:
        return as_of, None
    tail = inlined.of(engine, ds, as_of)
    if tail is not None:
        return tail.snapshot_id, tail
    return versions.version_at(engine, ds, as_of), None


def _stored(engine: Engine, ds: DatasetRecord) -> pa.Schema:
    """The table's stored schema, which inlined rows are decoded as."""
    return inline.target(engine.driver, ds).schema or engine.sink(ds.sink).schema(ds)


def read_table(
    engine: Engine,
    key: str,
    columns: list[str] | None = None,
    row_filter: str | None = None,
    as_of: AsOf = None,
    partition: PartitionFilter | None = None,
    *,
    staged: uuid.UUID | str | None = None,
) -> pa.Table:
    """``Trident.read``: the whole result in memory (see there)."""
    if staged is not None:
        return stream(
            engine, key, columns=columns, row_filter=row_filter, as_of=as_of, partition=partition, staged=staged
        ).read_all()
    columns = arguments.read_columns(columns)
    if columns == []:  # as pyarrow's read_table(columns=[]): no columns, the matching rows' count kept
        return read_table(engine, key, [ROW_INDEX], row_filter, as_of, partition).select([])
    ds = engine.dataset_record(key)
    sink = engine.sink(ds.sink)
    row_filter = engine.with_partition(sink, ds, row_filter, partition)
    version, tail = _version(engine, ds, as_of)
    table = read_faults.read_all(key, lambda: sink.read(ds, columns=columns, row_filter=row_filter, as_of=version))
    if tail is None:
        return table
    return pa.concat_tables([table, tail.rows_as(_stored(engine, ds), table.schema, columns, row_filter)])


def read_record(engine: Engine, ds: DatasetRecord) -> pa.Table:
    """The whole version a record names (identity columns included; production's record with its
    inlined tail): what an environment's diff compares."""
    sink = engine.sink(ds.sink)
    version, tail = _version(engine, ds, None)
    table = read_faults.read_all(ds.key, lambda: sink.read(ds, columns=None, row_filter=None, as_of=version))
    if tail is None:
        return table
    return pa.concat_tables([table, tail.rows_as(_stored(engine, ds), table.schema, None, None)])


def read_many(engine: Engine, keys: list[str], columns: list[str] | None) -> dict[str, pa.Table]:
    """``Trident.read_many``: every record from ONE statement, then each version it names read,
    its inlined tail included (the tail the record names: the same moment)."""
    columns = arguments.read_columns(columns)
    found = engine.control.datasets_by_keys(engine.workspace, [validate_key(k) for k in keys])
    out: dict[str, pa.Table] = {}
    for key in keys:
        ds = found.get(key)
        if ds is None or not ds.exists:
            raise DatasetNotFoundError(key, engine.workspace)
        sink = engine.sink(ds.sink)
        tail = inlined.of(engine, ds) if sink.time_travel else None
        version = None if tail is None else tail.snapshot_id
        table = read_faults.read_all(
            key,
            lambda ds=ds, sink=sink, version=version: sink.read(ds, columns=columns, row_filter=None, as_of=version),  # type: ignore[misc]
        )
        if tail is not None:
            table = pa.concat_tables([table, tail.rows_as(_stored(engine, ds), table.schema, columns, None)])
        out[key] = table
    return out


def schema(engine: Engine, key: str) -> pa.Schema:
    """The dataset's schema as readers get it (``__row_id`` as text, however it is stored)."""
    ds = engine.dataset_record(key)
    return public_schema(engine.sink(ds.sink).schema(ds))


def arrow_source(
    engine: Engine, key: str, partition: PartitionFilter | None = None, *, staged: uuid.UUID | str | None = None
) -> Any:
    """``Trident.arrow_source``: a re-scannable Arrow source (see there)."""
    partition = arguments.partition_filter(partition)
    if staged is not None:
        ds, entry = versions.staged_entry(engine, key, staged)
        sink = engine.sink(ds.sink)
        source = sink.arrow_source(ds, snapshot_id=entry.snapshot_id)
        # a staged version read by partition (a run's downstream step reads what the run staged)
        return source if partition is None else source.filter(partition.bind(sink.schema(ds)).arrow_expr())
    return arrow_source_of(engine, engine.dataset_record(key), partition)


def arrow_source_of(engine: Engine, ds: DatasetRecord, partition: PartitionFilter | None = None) -> Any:
    """``arrow_source`` of the published version ``ds`` (a record the caller read) names, its
    inlined tail included."""
    sink = engine.sink(ds.sink)
    tail = inlined.of(engine, ds)
    snapshot = tail.snapshot_id if tail is not None else None
    bound = None if partition is None else partition.bind(sink.schema(ds))
    if bound is not None and sink.partitions:
        source = sink.arrow_source(ds, partition=bound, snapshot_id=snapshot)
    else:
        source = sink.arrow_source(ds, snapshot_id=snapshot) if snapshot is not None else sink.arrow_source(ds)
    if tail is not None:
        source = inlined.with_tail_dataset(source, tail.table(_stored(engine, ds)))
    return source if bound is None else source.filter(bound.arrow_expr())


def scan_plan(engine: Engine, key: str, *, staged: uuid.UUID | str | None = None) -> ScanPlan:
    """``Trident.scan_plan``: how DuckDB reads a version (see there)."""
    if staged is not None:
        ds, entry = versions.staged_entry(engine, key, staged)
        return scan_plan_of(engine, ds, snapshot_id=entry.snapshot_id)
    return scan_plan_of(engine, engine.dataset_record(key))


def scan_plan_of(engine: Engine, ds: DatasetRecord, *, snapshot_id: int | None = None) -> ScanPlan:
    """``scan_plan`` for a record the caller just read (no second look-up by key)."""
    tail = inlined.of(engine, ds) if snapshot_id is None else None
    if tail is None:
        plan = engine.sink(ds.sink).scan_plan(ds, snapshot_id=snapshot_id)
    else:  # the snapshot the tail completes, and the tail's rows (sql/sandbox.py reads both)
        plan = engine.sink(ds.sink).scan_plan(ds, snapshot_id=tail.snapshot_id)
        plan = replace(plan, tail=tail.table(_stored(engine, ds)), reason=f"{plan.reason}; {tail.rows} inlined rows")
    log.info("trident scan %s path=%s files=%d (%s)", ds.key, plan.path, len(plan.files), plan.reason)
    return plan


def version_stats(engine: Engine, key: str, *, staged: uuid.UUID | str | None = None) -> VersionStats | None:
    """``Trident.version_stats``: what a version's data files record (see there)."""
    if staged is not None:
        ds, entry = versions.staged_entry(engine, key, staged)
        sink, snapshot_id = engine.sink(ds.sink), entry.snapshot_id
    else:
        ds = engine.dataset_record(key)
        sink, snapshot_id = engine.sink(ds.sink), None
        if inlined.rows_count(engine, ds):  # the files record only the snapshot's rows: callers count with SQL
            return None
    try:
        return sink.version_stats(ds, snapshot_id)
    except Exception as exc:
        err = read_faults.named(exc, key)
        if err is exc:
            raise
        raise err from exc
