"""A ``PartitionFilter`` as Iceberg sees it: the table's partition spec (which transforms, built
and compared), a slice as a pyiceberg row filter (so scans prune by partition), whether a data
file's partition record lies inside a slice, and the rows of a write split by the spec into one
piece per partition (so no data file ever mixes two). ``core/partitions.py`` keeps the
sink-neutral slice; this is the Iceberg sink's reading of it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions import AlwaysTrue, And, BooleanExpression, GreaterThanOrEqual, In, LessThan
from pyiceberg.partitioning import PartitionSpec, partition_record_value
from pyiceberg.schema import Schema
from pyiceberg.transforms import DayTransform, HourTransform, IdentityTransform, MonthTransform, Transform
from pyiceberg.typedef import Record

from ...core.errors import PartitionError
from ...core.partitions import TRANSFORMS, BoundPartition, TransformName, partition_values


def iceberg_expr(bound: BoundPartition) -> BooleanExpression:
    """The slice as a pyiceberg row filter: rows inside every dimension."""
    out: BooleanExpression = AlwaysTrue()
    for d in bound.dims:
        if d.values is not None:
            dim: BooleanExpression = In(d.column, list(d.values))  # type: ignore[misc, call-arg]  # pydantic plugin hides pyiceberg's positional __init__
        else:
            dim = And(GreaterThanOrEqual(d.column, d.start), LessThan(d.column, d.end))  # type: ignore[misc, call-arg]  # as above
        out = And(out, dim)
    return out


def contains_record(bound: BoundPartition, spec: PartitionSpec, schema: Schema, record: Record) -> bool:
    """Is the data file with partition ``record`` (of ``spec``) wholly inside the slice?"""
    by_source = {schema.find_column_name(f.source_id): (i, f) for i, f in enumerate(spec.fields)}
    for d in bound.dims:
        hit = by_source.get(d.column)
        if hit is None or transform_name(hit[1].transform) != d.transform:
            return False
        if not d.contains(record[hit[0]]):
            return False
    return True


def matches_spec(spec: PartitionSpec, schema: Schema, wanted: Sequence[tuple[str, TransformName]]) -> bool:
    """Is the table partitioned exactly as ``wanted`` (same columns and transforms, any order)?"""
    have = {(schema.find_column_name(f.source_id), transform_name(f.transform)) for f in spec.fields}
    return have == set(wanted) and len(spec.fields) == len(wanted)


def describe_spec(spec: PartitionSpec, schema: Schema) -> list[str]:
    return [f"{transform_name(f.transform)}({schema.find_column_name(f.source_id)})" for f in spec.fields]


def iceberg_transform(name: TransformName) -> Transform[Any, Any]:
    return {"identity": IdentityTransform(), "hour": HourTransform(), "day": DayTransform(), "month": MonthTransform()}[name]


def transform_name(t: Transform[Any, Any]) -> str:
    """The word Trident uses for a pyiceberg transform (``identity``, ``day``...): specs here and
    the sink's ``partitioning``/``partition_stats`` speak the same names."""
    return {IdentityTransform: "identity", HourTransform: "hour", DayTransform: "day", MonthTransform: "month"}.get(
        type(t), repr(t)
    )


def _split(table: pa.Table, keys: list[pa.Array]) -> Iterator[tuple[tuple[Any, ...], pa.Table]]:
    """``table`` cut into one piece per distinct combination of ``keys`` (one array per field).
    Rows already grouped by partition (a clustered backfill) are cut into zero-copy slices;
    otherwise each piece is gathered with one ``take``."""
    if table.num_rows == 0:
        return
    codes = np.zeros(table.num_rows, dtype=np.int64)
    dicts = []
    for k in keys:
        enc = pc.dictionary_encode(k, null_encoding="encode")
        if isinstance(enc, pa.ChunkedArray):
            enc = enc.combine_chunks()
        dicts.append(enc.dictionary)
        codes = codes * len(enc.dictionary) + enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    sizes = [len(d) for d in dicts]

    def key_of(code: int) -> tuple[Any, ...]:
        parts = []
        for size in reversed(sizes):
            code, p = divmod(code, size)
            parts.append(p)
        parts.reverse()
        return tuple(dicts[i][p].as_py() for i, p in enumerate(parts))

    cuts = np.flatnonzero(np.diff(codes)) + 1
    run_codes = codes[np.concatenate([[0], cuts]).astype(np.int64)]
    if len(np.unique(run_codes)) == len(run_codes):  # every partition's rows are contiguous
        bounds = [0, *cuts.tolist(), table.num_rows]
        for code, s, e in zip(run_codes.tolist(), bounds, bounds[1:], strict=False):
            yield key_of(code), table.slice(s, e - s)
        return
    order = np.argsort(codes, kind="stable")
    ordered = codes[order]
    cuts = np.flatnonzero(np.diff(ordered)) + 1
    starts = np.concatenate([[0], cuts])
    ends = np.concatenate([cuts, [len(ordered)]])
    takeable = _without_views(table)
    for s, e in zip(starts, ends, strict=True):
        piece = takeable.take(pa.array(order[s:e]))
        yield key_of(int(ordered[s])), piece if takeable is table else piece.cast(table.schema)


def _without_views(table: pa.Table) -> pa.Table:
    """``table`` with its ``string_view`` columns (how a write's text reaches its files,
    ``files.file_schema``) as ``large_string``: pyarrow's ``take`` has no kernel for views. Cast
    once per split, and each piece back to views (which copies no bytes)."""
    if not any(pa.types.is_string_view(f.type) for f in table.schema):
        return table
    return table.cast(pa.schema([f.with_type(pa.large_string()) if pa.types.is_string_view(f.type) else f for f in table.schema]))


class Partitioner:
    """Splits rows by a table's partition spec: every write to a partitioned table goes through
    it (a partition run, a full replace, an upsert's rewritten files), so that no data file ever
    holds rows of two partitions and each ``DataFile.partition`` says which one it holds."""

    def __init__(self, spec: PartitionSpec, schema: Schema) -> None:
        self.spec = spec
        self.schema = schema
        self.fields: list[tuple[str, TransformName]] = []
        for f in spec.fields:
            name = schema.find_column_name(f.source_id)
            t = transform_name(f.transform)
            if name is None or t not in TRANSFORMS:
                raise PartitionError(f"partition field {f.name!r} ({f.transform}) is not one Trident writes")
            self.fields.append((name, t))

    def split(self, table: pa.Table) -> Iterator[tuple[tuple[Any, ...], pa.Table]]:
        """(partition key, rows) per partition present in ``table``."""
        keys = [partition_values(t, table.column(c)) for c, t in self.fields]
        yield from _split(table, keys)

    def record(self, key: Sequence[Any]) -> Record:
        """The Iceberg partition record of partition ``key`` (a value per spec field)."""
        values = []
        for f, v in zip(self.spec.fields, key, strict=True):
            values.append(partition_record_value(f, v, self.schema) if isinstance(f.transform, IdentityTransform) else v)
        return Record(*values)
