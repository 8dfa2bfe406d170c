"""Partitions: which slice of a dataset a write replaces, in terms every sink shares.

A ``PartitionFilter`` names the partition(s) a write is about: per dimension a column, a transform
(``identity``, ``hour``, ``day``, ``month``) and either the key values (``values``) or a half-open
range ``[start, end)`` of the column's values. The transforms are the dataset's partitioning (an
Iceberg partition spec, one field per dimension); the values or range are the slice. So a daily
partition run is ``PartitionFilter.time_window("d", day, day + 1 day, "day")``, a 30-day backfill
the same with a 30-day range, a static partition ``PartitionFilter.of_values("region", "eu")``,
and a multi-partition the two combined with ``&``.

Transforms are computed here with pyarrow (pyiceberg's own Arrow transforms need the optional
``pyiceberg-core`` wheel) and produce exactly Iceberg's partition values: days / hours / months
since the epoch, or the value itself for identity.

How a slice maps onto an Iceberg table (its partition spec, a pyiceberg row filter, data files'
partition records) is the Iceberg sink's: ``trident_resources/sinks/iceberg/partition_spec.py``.
This module is engine code: it never imports Dagster (``trident_resources/dagster/partition_mapping.py``
maps a Dagster ``partitions_def`` onto it).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any, Literal, get_args

import pyarrow as pa
import pyarrow.compute as pc

from .errors import PartitionError

TransformName = Literal["identity", "hour", "day", "month"]
TRANSFORMS: tuple[TransformName, ...] = get_args(TransformName)
_EPOCH = date(1970, 1, 1)
_US_PER = {"hour": 3_600_000_000, "day": 86_400_000_000}


@dataclass(frozen=True)
class PartitionDim:
    """One dimension of a partition filter: ``transform(column)`` is the Iceberg partition field;
    ``values`` (identity keys) or ``[start, end)`` (a range of column values) is the slice."""

    column: str
    transform: TransformName = "identity"
    values: tuple[Any, ...] | None = None
    start: Any = None
    end: Any = None

    def __post_init__(self) -> None:
        _filter_column(self.column)  # refused before any write: its partitions could never be read one by one
        if self.transform not in TRANSFORMS:
            raise PartitionError(f"unknown partition transform {self.transform!r}; use one of {list(TRANSFORMS)}")
        has_range = self.start is not None or self.end is not None
        if (self.values is None) == (not has_range):
            raise PartitionError(
                f"partition dimension {self.column!r} needs either values=(...) or a range start=..., end=... (not both)"
            )
        if has_range and (self.start is None or self.end is None or not self.start < self.end):
            raise PartitionError(f"partition range of {self.column!r} must have start < end, got [{self.start}, {self.end})")
        if self.values is not None and self.transform != "identity":
            raise PartitionError(
                f"partition dimension {self.column!r} with transform {self.transform!r} takes a range "
                "[start, end), not values; identity partitions take values"
            )

    def describe(self) -> str:
        what = f"{self.transform}({self.column})" if self.transform != "identity" else self.column
        if self.values is not None:
            return f"{what} in {[_plain(v) for v in self.values]}"
        return f"{what} in [{_plain(self.start)}, {_plain(self.end)})"


@dataclass(frozen=True)
class PartitionFilter:
    """The partition(s) one write replaces: dimensions combined with AND (see module docstring).

    ``declared_in`` is where the caller declared it, so that an error tells them what to change in
    their own terms: a plain ``read``/``write`` caller built a ``PartitionFilter`` and never saw
    Dagster's ``partition_expr``; the Dagster layer sets ``"dagster"``. It takes no part in equality."""

    dims: tuple[PartitionDim, ...]
    declared_in: Literal["python", "dagster"] = field(default="python", compare=False)

    def __post_init__(self) -> None:
        if not self.dims:
            raise PartitionError("a partition filter needs at least one dimension")
        cols = [d.column for d in self.dims]
        if len(set(cols)) != len(cols):
            raise PartitionError(f"a partition filter names a column twice: {cols}")

    @classmethod
    def time_window(
        cls, column: str, start: date | datetime, end: date | datetime, transform: TransformName = "day"
    ) -> PartitionFilter:
        return cls((PartitionDim(column, transform, start=start, end=end),))

    @classmethod
    def of_values(cls, column: str, *values: Any) -> PartitionFilter:
        return cls((PartitionDim(column, "identity", values=tuple(values)),))

    def __and__(self, other: PartitionFilter) -> PartitionFilter:
        return PartitionFilter(self.dims + other.dims, declared_in=self.declared_in)

    @property
    def columns(self) -> list[str]:
        return [d.column for d in self.dims]

    @property
    def spec(self) -> tuple[tuple[str, TransformName], ...]:
        """The dataset partitioning this filter implies: (column, transform) per dimension."""
        return tuple((d.column, d.transform) for d in self.dims)

    def describe(self) -> str:
        return " and ".join(d.describe() for d in self.dims)

    def as_metadata(self) -> dict[str, Any]:
        """How the ledger records it (JSON-safe)."""
        return {
            "spec": [f"{t}({c})" for c, t in self.spec],
            "filter": self.describe(),
            "dims": [
                {
                    "column": d.column,
                    "transform": d.transform,
                    **(
                        {"values": [_plain(v) for v in d.values]}
                        if d.values is not None
                        else {"start": _plain(d.start), "end": _plain(d.end)}
                    ),
                }
                for d in self.dims
            ],
        }

    def bind(self, schema: pa.Schema) -> BoundPartition:
        """Check the filter against the rows' Arrow schema and type its values like the columns."""
        return BoundPartition(self, tuple(_bind_dim(d, schema, self.declared_in) for d in self.dims))

    def redeclare_hint(self) -> str:
        """What to change when this filter's partitioning is not the dataset's, in the caller's terms."""
        if self.declared_in == "dagster":
            return "declare the dataset's partitioning (partitions_def and partition_expr)"
        return "write with a PartitionFilter on the dataset's partition columns and transforms"

    @classmethod
    def from_metadata(cls, meta: dict[str, Any]) -> PartitionFilter:
        """The filter ``as_metadata`` recorded in a ledger row (values as text: ``bind`` types them)."""
        return cls(
            tuple(
                PartitionDim(d["column"], d["transform"], values=tuple(d["values"]))
                if "values" in d
                else PartitionDim(d["column"], d["transform"], start=d["start"], end=d["end"])
                for d in meta["dims"]
            )
        )


@dataclass(frozen=True)
class _BoundDim:
    dim: PartitionDim
    arrow_type: pa.DataType
    values: tuple[Any, ...] | None
    start: Any
    end: Any

    @property
    def column(self) -> str:
        return self.dim.column

    @property
    def transform(self) -> TransformName:
        return self.dim.transform

    # -- rows ---------------------------------------------------------------------------------
    def arrow_expr(self) -> pc.Expression:
        f = pc.field(self.column)
        if self.values is not None:
            return f.isin(pa.array(self.values, type=self.arrow_type))
        return (f >= pa.scalar(self.start, type=self.arrow_type)) & (f < pa.scalar(self.end, type=self.arrow_type))

    def all_inside(self, column: pa.Array) -> bool:
        """Every value inside the slice, decided from the column's min and max (or set membership):
        the common case of ``check``, without building and evaluating an expression per batch."""
        if column.null_count or not column.type.equals(self.arrow_type):
            return False  # the exact check decides (and names the rows)
        if self.values is not None:
            return bool(pc.all(pc.is_in(column, value_set=pa.array(self.values, type=self.arrow_type))).as_py())
        mm = pc.min_max(column)
        lo, hi = mm["min"], mm["max"]
        if not lo.is_valid:
            return True  # no rows
        start, end = pa.scalar(self.start, type=self.arrow_type), pa.scalar(self.end, type=self.arrow_type)
        return bool(pc.greater_equal(lo, start).as_py() and pc.less(hi, end).as_py())

    def keys(self, column: pa.Array | pa.ChunkedArray) -> pa.Array:
        """Iceberg partition values of a column (days/hours/months since epoch, or the value)."""
        return partition_values(self.transform, column)

    # -- partitions ---------------------------------------------------------------------------
    def unit_range(self) -> tuple[int, int] | None:
        """For a time transform, the partition values [lo, hi) wholly inside the range."""
        if self.transform == "identity":
            return None
        lo = _unit(self.transform, self.start)
        if _unit_start(self.transform, lo, self.start) != self.start:
            lo += 1  # the first unit is only partly inside
        return lo, _unit(self.transform, self.end)

    def touched_units(self) -> tuple[int, int] | None:
        """For a time transform, the partition values [lo, hi) the range touches at all."""
        if self.transform == "identity":
            return None
        lo = _unit(self.transform, self.start)
        hi = _unit(self.transform, self.end)
        if _unit_start(self.transform, hi, self.end) != self.end:
            hi += 1
        return lo, hi

    def contains(self, value: Any) -> bool:
        """Is the whole partition with Iceberg partition value ``value`` inside the slice?"""
        if value is None:
            return False
        if self.transform != "identity":
            lo, hi = self.unit_range()  # type: ignore[misc]
            return lo <= int(value) < hi
        if self.values is not None:
            return any(_same(value, v) for v in self.values)
        return _order(self.start) <= _order(value) < _order(self.end)

    def units(self, limit: int | None = None) -> list[str] | None:
        """Names of every partition the slice touches (None: not enumerable, or more than
        ``limit``)."""
        if self.values is not None:
            return [f"{self.column}={_unit_name(v)}" for v in self.values]
        if self.transform == "identity":
            return None
        lo, hi = self.touched_units()  # type: ignore[misc]
        if limit is not None and hi - lo > limit:
            return None
        return [f"{self.transform}({self.column})={u}" for u in range(lo, hi)]


@dataclass(frozen=True)
class BoundPartition:
    """A ``PartitionFilter`` typed against the rows it applies to."""

    filter: PartitionFilter
    dims: tuple[_BoundDim, ...]
    _cache: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def columns(self) -> list[str]:
        return [d.column for d in self.dims]

    def arrow_expr(self) -> pc.Expression:
        out = self.dims[0].arrow_expr()
        for d in self.dims[1:]:
            out = out & d.arrow_expr()
        return out

    def key_arrays(self, batch: pa.RecordBatch) -> list[pa.Array]:
        """Each row's Iceberg partition value, one array per dimension (what files are split by)."""
        return [d.keys(batch.column(d.column)) for d in self.dims]

    def check(self, batch: pa.RecordBatch, dataset: str) -> None:
        """Refuse a batch holding any row outside the slice (a null partition column is outside)."""
        if all(d.all_inside(batch.column(d.column)) for d in self.dims):
            return
        table = pa.Table.from_batches([batch]).select(self.columns)  # (other columns may be views, which filter takes not)
        inside = pc.fill_null(_evaluate(table, self.arrow_expr()), False)
        if pc.all(inside).as_py() is not False:
            return
        outside = table.filter(pc.invert(inside))
        example = {c: _plain(outside.column(c)[0].as_py()) for c in self.columns}
        raise PartitionError(
            f"{outside.num_rows} row(s) of this batch written to {dataset!r} fall outside the partition being "
            f"written ({self.filter.describe()}), e.g. {example}; a partition run may only write rows of its "
            "own partition. Nothing was written"
        )

    def to_row_filter(self) -> str:
        """The slice in pyiceberg's row-filter syntax: reads take partitions through the normal
        ``row_filter`` (so pyiceberg prunes by partition and only those files are opened)."""
        parts = []
        for d in self.dims:
            c = _filter_column(d.column)
            if d.values is not None:
                parts.append(f"{c} in ({', '.join(_filter_literal(v) for v in d.values)})")
            else:
                parts.append(f"{c} >= {_filter_literal(d.start)} and {c} < {_filter_literal(d.end)}")
        return " and ".join(f"({p})" for p in parts)

    def watermark_keys(self) -> list[str]:
        """The name of every partition the slice covers, uncapped (dimensions in column order):
        a delta node keeps one watermark per output partition under these names, so a run of a
        range records each day's mark and a later run of one day finds its own."""
        per_dim = [d.units(limit=None) for d in sorted(self.dims, key=lambda d: d.column)]
        if any(u is None for u in per_dim):
            raise PartitionError(
                f"a delta write of {self.filter.describe()} needs partitions it can name one by one (identity "
                "values or a time transform), since its watermark is kept per partition; write identity "
                "partitions by value"
            )
        return ["/".join(c) for c in itertools.product(*per_dim)]  # type: ignore[arg-type]

    def disjoint(self, other: BoundPartition) -> bool:
        """Do the two slices share no row? True when, on some column both name, their values or
        ranges do not meet (both bound to the same schema); False when that cannot be told."""
        theirs = {d.column: d for d in other.dims}
        for d in self.dims:
            o = theirs.get(d.column)
            if o is not None and _dims_disjoint(d, o):
                return True
        return False

    def fanout(self) -> int | None:
        """How many partitions the write may produce (None: unknown), to decide whether the
        input must be clustered before it is split into files."""
        n = 1
        for d in self.dims:
            if d.values is not None:
                n *= len(d.values)
            elif d.transform != "identity":
                lo, hi = d.touched_units()  # type: ignore[misc]
                n *= hi - lo
            else:
                return None
        return n


def partition_values(transform: TransformName, column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Iceberg partition values of an Arrow column: days/hours/months since the epoch, or the value."""
    col = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if transform == "identity":
        return col
    t = col.type
    if pa.types.is_date(t):
        days = pc.cast(pc.cast(col, pa.date32()), pa.int32())
        if transform == "day":
            return days
        if transform == "month":
            return _months(col)
        raise PartitionError(f"an hour partition needs a timestamp column, not {t}")
    if pa.types.is_timestamp(t):
        micros = pc.cast(pc.cast(col, pa.timestamp("us", tz=t.tz)), pa.int64())
        if transform == "month":
            return _months(col)
        per = _US_PER[transform]
        return pc.cast(pc.floor(pc.divide(pc.cast(micros, pa.float64()), float(per))), pa.int32())
    raise PartitionError(f"a {transform} partition needs a date or timestamp column, not {t}")


def _months(col: pa.Array) -> pa.Array:
    if pa.types.is_timestamp(col.type) and col.type.tz is not None:
        col = pc.cast(col, pa.timestamp(col.type.unit))  # wall time in UTC
    return pc.cast(pc.add(pc.multiply(pc.subtract(pc.year(col), 1970), 12), pc.subtract(pc.month(col), 1)), pa.int32())


def _bind_dim(d: PartitionDim, schema: pa.Schema, declared_in: str) -> _BoundDim:
    if d.column not in schema.names:
        fix = (
            "declare partition_expr as a column the asset returns"
            if declared_in == "dagster"
            else "build the PartitionFilter on one of these columns"
        )
        raise PartitionError(f"partition column {d.column!r} is not in the rows (columns: {schema.names}); {fix}")
    t = schema.field(d.column).type
    if d.transform != "identity" and not (pa.types.is_date(t) or pa.types.is_timestamp(t)):
        raise PartitionError(f"partition column {d.column!r} is {t}: a {d.transform} partition needs a date or timestamp column")
    if d.transform == "hour" and not pa.types.is_timestamp(t):
        raise PartitionError(f"partition column {d.column!r} is {t}: an hourly partition needs a timestamp column")
    conv = lambda v: _coerce(v, t, d.column)  # noqa: E731
    values = tuple(conv(v) for v in d.values) if d.values is not None else None
    start = conv(d.start) if d.start is not None else None
    end = conv(d.end) if d.end is not None else None
    return _BoundDim(d, t, values, start, end)


def _coerce(v: Any, t: pa.DataType, column: str) -> Any:
    """A filter value typed like the column (a date for a date column, an aware datetime for a
    timestamp column, ...)."""
    try:
        if pa.types.is_date(t):
            if isinstance(v, datetime):
                return v.date()  # the wall date where the window was defined (a Dagster timezone)
            if isinstance(v, str):
                return date.fromisoformat(v[:10])
            return v
        if pa.types.is_timestamp(t):
            if isinstance(v, str):
                v = datetime.fromisoformat(v)
            if isinstance(v, date) and not isinstance(v, datetime):
                v = datetime(v.year, v.month, v.day)
            if t.tz is None:
                # A naive column holds wall times, so an aware bound counts by its wall time, as a
                # date column counts by the wall date: converted to UTC, a Dagster day in
                # America/New_York began at 05:00 and refused that day's own 02:00 rows.
                return v.replace(tzinfo=None)
            return v if v.tzinfo else v.replace(tzinfo=UTC)
        return pa.scalar(v).cast(t).as_py()
    except (ValueError, TypeError, OverflowError, pa.ArrowException) as exc:  # a value no column value can equal
        raise PartitionError(f"partition value {v!r} does not fit column {column!r} of type {t}: {exc}") from exc


def _micros(v: datetime) -> int:
    if v.tzinfo is not None:
        v = v.astimezone(UTC).replace(tzinfo=None)
    delta = v - datetime(1970, 1, 1)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _unit(transform: str, v: Any) -> int:
    if transform == "month":
        return (v.year - 1970) * 12 + v.month - 1
    if isinstance(v, datetime):
        return _micros(v) // _US_PER[transform]
    return (v - _EPOCH).days  # a date, day transform


def _unit_start(transform: str, u: int, like: Any) -> Any:
    """The first column value of partition ``u``, typed like ``like``."""
    if transform == "month":
        y, m = divmod(u, 12)
        first = date(1970 + y, m + 1, 1)
    elif isinstance(like, datetime):
        moment = datetime(1970, 1, 1) + timedelta(microseconds=u * _US_PER[transform])
        return moment.replace(tzinfo=like.tzinfo) if like.tzinfo is None else moment.replace(tzinfo=UTC).astimezone(like.tzinfo)
    else:
        return _EPOCH + timedelta(days=u)
    if isinstance(like, datetime):
        moment = datetime(first.year, first.month, 1)
        return moment if like.tzinfo is None else moment.replace(tzinfo=UTC).astimezone(like.tzinfo)
    return first


def _evaluate(table: pa.Table, expr: pc.Expression) -> pa.ChunkedArray:
    import pyarrow.dataset as pads

    return pads.dataset(table).to_table(columns={"m": expr}).column("m")


def _filter_column(name: str) -> str:
    """``name`` as a column reference in pyiceberg's filter syntax. Always quoted, segment by
    segment (the parser joins dotted segments back into one name): unquoted, a column named
    ``a b``, ``ünï``, ``it's`` or ``and`` made the partition's filter unparsable, so reading a
    partition of such a dataset failed. A ``"`` or an empty dotted segment cannot be written at all."""
    segments = name.split(".")
    if any(not s or '"' in s for s in segments):
        raise PartitionError(
            f"partition column {name!r} cannot be named in a row filter (pyiceberg's filter syntax has no way to "
            "write a '\"' or an empty dotted segment), so its partitions cannot be read one by one; rename the column"
        )
    return ".".join(f'"{s}"' for s in segments)


def _filter_literal(v: Any) -> str:
    if isinstance(v, (date, datetime)):
        return f"'{v.isoformat()}'"
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    if isinstance(v, bool):
        return str(v).lower()
    return repr(v)


def _order(v: Any) -> Any:
    if isinstance(v, datetime):
        return _micros(v)
    if isinstance(v, date):
        return (v - _EPOCH).days
    return v


def _same(a: Any, b: Any) -> bool:
    return _order(a) == _order(b) if isinstance(b, (date, datetime)) else a == b


def _dims_disjoint(a: _BoundDim, b: _BoundDim) -> bool:
    try:
        if a.values is not None and b.values is not None:
            return not any(_same(x, y) for x in a.values for y in b.values)
        if a.values is None and b.values is None:
            return bool(a.end <= b.start or b.end <= a.start)
        values, ranged = (a, b) if a.values is not None else (b, a)
        return not any(ranged.start <= v < ranged.end for v in values.values or () if v is not None)
    except TypeError:  # values that do not compare (mixed types): cannot tell
        return False


def _unit_name(v: Any) -> Any:
    """A partition value as it names the partition (a range lock's key, a watermark's name): one
    name per partition, since writers that name one partition differently take different locks
    and run at once. Equal values written differently (an instant at another UTC offset, -0.0
    and 0.0, a negative decimal zero) are one partition (``_same``), so they get one name."""
    if isinstance(v, datetime) and v.tzinfo is not None:
        return v.astimezone(UTC).isoformat()
    if isinstance(v, float) and v == 0:
        return 0.0
    if isinstance(v, Decimal) and v.is_zero():
        return v.copy_abs()
    return _plain(v)


def _plain(v: Any) -> Any:
    if isinstance(v, (date, datetime)):
        return v.isoformat()
    return v
