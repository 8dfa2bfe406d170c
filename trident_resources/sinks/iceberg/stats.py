"""Iceberg data-file statistics from a Parquet footer, the same values as pyiceberg's, per write.

pyiceberg's ``data_file_statistics_from_parquet_metadata`` (and ``DataFileStatistics``'s bounds)
rebuild, for EVERY file, what is the same for every file of one write: each column's metrics mode,
a ``StatsAggregator`` (with its physical-type check), the truncation transform and the ``to_bytes``
dispatch, comparing pydantic singletons along the way. That is ~0.6 ms of Python per file, under
the GIL: a backfill of 2,526 small daily files spent about 1.5 CPU s there, serialising the writer
threads. ``FileStats`` works all of that out once per write (and per Parquet leaf on the first
file) and then only reads each file's column chunks: the same bytes, a fraction of the time.

One deliberate difference: a row group holding values but no min/max (Parquet omits a bound
longer than its statistics limit, and the bounds of an all-NaN float chunk) leaves the column
without file bounds. pyiceberg takes the other row groups' bounds as the file's, and a filtered
read then prunes a file that holds matching rows (``test_stats_missing_bounds.py``).

Otherwise what it produces is, by construction, pyiceberg's meaning: the same plan
(``compute_statistics_plan``), the same type check (a ``StatsAggregator`` built once per column and
physical type), the same conversions (``unscaled_to_decimal``, ``TruncateTransform``,
``truncate_upper_bound_*``, ``to_bytes``). ``tests/trident_resources/sinks/iceberg/test_file_stats.py`` compares
both on files of every kind of column so that the two cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.conversions import to_bytes
from pyiceberg.io.pyarrow import (
    MetricModeTypes,
    StatsAggregator,
    compute_statistics_plan,
    parquet_path_to_id_mapping,
)
from pyiceberg.schema import Schema
from pyiceberg.transforms import TruncateTransform
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    PrimitiveType,
    StringType,
    TimestampType,
    TimestamptzType,
)
from pyiceberg.utils.decimal import unscaled_to_decimal
from pyiceberg.utils.truncate import truncate_upper_bound_binary_string, truncate_upper_bound_text_string

_NONE, _COUNTS = MetricModeTypes.NONE, MetricModeTypes.COUNTS
_RAW, _UTF8 = "raw", "utf8"  # how a leaf's bounds are read (else: pyarrow's logical ``min``/``max``)


def _reading(t: PrimitiveType, column: Any) -> str | None:
    """Whether a Parquet leaf's raw statistics ARE the value ``to_bytes`` takes (pyarrow's
    ``Statistics.min``/``max`` each convert BOTH bounds to logical Python objects, a date, a
    datetime, with the GIL held: twice the work, on every column of every file). Only where the
    two agree exactly: signed integers, days, microsecond timestamps, floats, booleans, and
    UTF-8 strings decoded from their bytes."""
    physical, logical = column.physical_type, column.logical_type
    kind = logical.type
    signed = kind == "NONE" or (kind == "INT" and '"isSigned":true' in logical.to_json())
    if isinstance(t, BooleanType) and physical == "BOOLEAN":
        return _RAW
    if isinstance(t, IntegerType) and physical == "INT32" and signed:
        return _RAW
    if isinstance(t, LongType) and physical in ("INT32", "INT64") and signed:
        return _RAW
    if isinstance(t, DateType) and physical == "INT32" and kind == "DATE":
        return _RAW
    if (
        isinstance(t, (TimestampType, TimestamptzType))
        and physical == "INT64"
        and kind == "TIMESTAMP"
        and '"timeUnit":"microseconds"' in logical.to_json()
    ):
        return _RAW
    if isinstance(t, (FloatType, DoubleType)) and physical in ("FLOAT", "DOUBLE") and kind == "NONE":
        return _RAW
    if isinstance(t, StringType) and physical == "BYTE_ARRAY" and kind == "STRING":
        return _UTF8
    return None


@dataclass(frozen=True)
class _Column:
    """What one column's statistics need, worked out once per write."""

    field_id: int
    name: str
    iceberg_type: PrimitiveType
    mode: MetricModeTypes
    trunc: int | None
    lower: Callable[[Any], bytes | None]
    upper: Callable[[Any], bytes | None]


def _column(field_id: int, collector: Any) -> _Column:
    t: PrimitiveType = collector.iceberg_type
    trunc: int | None = collector.mode.length
    serialize = to_bytes.dispatch(type(t))  # what ``to_bytes(t, v)`` calls

    def ser(value: Any) -> bytes:
        return serialize(t, value)

    # exactly StatsAggregator.min_as_bytes / max_as_bytes, the type decisions taken once
    cut = TruncateTransform(width=trunc).transform(t) if trunc is not None else None

    def lower(value: Any) -> bytes | None:
        return None if value is None else ser(value if cut is None else cut(value))

    if t == StringType():

        def upper(value: Any) -> bytes | None:
            if value is None:
                return None
            if not isinstance(value, str):
                raise ValueError("Expected the current_max to be a string")
            r = truncate_upper_bound_text_string(value, trunc)
            return ser(r) if r is not None else None

    elif t == BinaryType():

        def upper(value: Any) -> bytes | None:
            if value is None:
                return None
            if not isinstance(value, bytes):
                raise ValueError("Expected the current_max to be bytes")
            r = truncate_upper_bound_binary_string(value, trunc)
            return ser(r) if r is not None else None

    else:
        if trunc is not None:
            raise ValueError(f"{t} cannot be truncated")

        def upper(value: Any) -> bytes | None:
            return None if value is None else ser(value)

    return _Column(field_id, collector.column_name, t, collector.mode.type, trunc, lower, upper)


class FileStats:
    """The statistics of each data file of one write (one Iceberg schema, one set of table
    properties), as the keyword arguments ``DataFile.from_args`` takes for them."""

    def __init__(self, schema: Schema, properties: dict[str, str]) -> None:
        self._plan = compute_statistics_plan(schema, properties)
        self._ids = parquet_path_to_id_mapping(schema)
        self._columns = {fid: _column(fid, c) for fid, c in self._plan.items()}
        self._leaves: list[tuple[_Column, str | None]] | None = None  # by Parquet leaf, from the first footer
        self._checked: set[tuple[int, str]] = set()  # (field id, physical type) pyiceberg accepts

    def _leaves_of(self, metadata: pq.FileMetaData) -> list[tuple[_Column, str | None]]:
        if self._leaves is None or len(self._leaves) != metadata.num_columns:
            schema = metadata.schema
            leaves = []
            for i in range(metadata.num_columns):
                col = self._columns[self._ids[schema.column(i).path]]
                leaves.append((col, _reading(col.iceberg_type, schema.column(i))))
            self._leaves = leaves
        return self._leaves

    def _check(self, col: _Column, physical: str) -> None:
        """pyiceberg's check that the Parquet physical type fits the Iceberg type (once each)."""
        if (col.field_id, physical) not in self._checked:
            try:
                StatsAggregator(col.iceberg_type, physical, col.trunc)
            except ValueError as e:
                raise ValueError(f"{e} for column '{col.name}'") from e
            self._checked.add((col.field_id, physical))

    def of(self, metadata: pq.FileMetaData) -> dict[str, Any]:
        """``record_count``, ``column_sizes``, ``value_counts``, ``null_value_counts``,
        ``nan_value_counts``, ``lower_bounds``, ``upper_bounds`` and ``split_offsets`` of the file
        whose footer is ``metadata``: ``DataFileStatistics.to_serialized_dict()``'s values."""
        leaves = self._leaves_of(metadata)
        column_sizes: dict[int, int] = {}
        value_counts: dict[int, int] = {}
        null_counts: dict[int, int] = {}
        mins: dict[int, Any] = {}
        maxs: dict[int, Any] = {}
        invalid: set[int] = set()
        unbounded: set[int] = set()  # a row group with values but no min/max: no file bounds at all
        split_offsets: list[int] = []
        for r in range(metadata.num_row_groups):
            group = metadata.row_group(r)
            first = group.column(0)
            data_offset, dict_offset = first.data_page_offset, first.dictionary_page_offset
            split_offsets.append(dict_offset if first.has_dictionary_page and dict_offset < data_offset else data_offset)
            for pos, (col, reading) in enumerate(leaves):
                chunk = group.column(pos)
                fid = col.field_id
                column_sizes[fid] = column_sizes.get(fid, 0) + chunk.total_compressed_size
                if col.mode is _NONE:
                    continue
                value_counts[fid] = value_counts.get(fid, 0) + chunk.num_values
                if not chunk.is_stats_set:
                    invalid.add(fid)
                    continue
                try:
                    st = chunk.statistics
                    if st.has_null_count:
                        null_counts[fid] = null_counts.get(fid, 0) + st.null_count
                    if col.mode is _COUNTS:
                        continue
                    physical = st.physical_type
                    self._check(col, physical)
                    if fid not in mins:
                        mins[fid] = maxs[fid] = None
                    if not st.has_min_max and (not st.has_null_count or st.null_count < chunk.num_values):
                        # values, but no bounds: Parquet leaves out a min/max longer than its
                        # statistics limit (4 KiB) and a float chunk of only NaNs. The other row
                        # groups' bounds are not this file's: a filter would prune it and lose rows
                        unbounded.add(fid)
                        continue
                    if isinstance(col.iceberg_type, DecimalType) and physical != "FIXED_LEN_BYTE_ARRAY":
                        scale = col.iceberg_type.scale
                        lo = unscaled_to_decimal(st.min_raw, scale) if st.min_raw is not None else None
                        hi = unscaled_to_decimal(st.max_raw, scale) if st.max_raw is not None else None
                    elif reading is _RAW:
                        lo, hi = (st.min_raw, st.max_raw) if st.has_min_max else (None, None)
                    elif reading is _UTF8 and st.has_min_max:
                        try:
                            lo, hi = st.min_raw.decode(), st.max_raw.decode()
                        except UnicodeDecodeError:
                            lo, hi = st.min, st.max  # as pyiceberg gets them (it fails as it does)
                    else:
                        lo, hi = st.min, st.max
                    if lo is not None:
                        mins[fid] = lo if mins[fid] is None else min(lo, mins[fid])
                    if hi is not None:
                        maxs[fid] = hi if maxs[fid] is None else max(hi, maxs[fid])
                except pa.ArrowNotImplementedError:
                    invalid.add(fid)
        for fid in invalid:
            mins.pop(fid, None)
            null_counts.pop(fid, None)
        for fid in unbounded:
            mins.pop(fid, None)
        lower_bounds: dict[int, bytes] = {}
        upper_bounds: dict[int, bytes] = {}
        for fid, lo in mins.items():
            col = self._columns[fid]
            b = col.lower(lo)
            if b is not None:
                lower_bounds[fid] = b
            b = col.upper(maxs[fid])
            if b is not None:
                upper_bounds[fid] = b
        split_offsets.sort()
        return {
            "record_count": metadata.num_rows,
            "column_sizes": column_sizes,
            "value_counts": value_counts,
            "null_value_counts": null_counts,
            "nan_value_counts": {},
            "lower_bounds": lower_bounds,
            "upper_bounds": upper_bounds,
            "split_offsets": split_offsets,
        }
