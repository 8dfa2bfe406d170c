"""The data-file statistics Trident computes per write (``sinks/iceberg/stats.py``, built once for
a write's thousands of files instead of per file) are exactly pyiceberg's: the same column sizes,
value and null counts, lower/upper bounds (truncation rules included) and split offsets, for every
kind of column and metrics mode, so the two cannot drift apart on a pyiceberg upgrade."""

from __future__ import annotations

import io
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.io.pyarrow import (
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
    schema_to_pyarrow,
)
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    ListType,
    LongType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
)

from trident_resources.core.pyiceberg_compat import parquet_writer_kwargs
from trident_resources.sinks.iceberg.stats import FileStats

SCHEMA = Schema(
    NestedField(1, "i32", IntegerType(), required=False),
    NestedField(2, "i64", LongType(), required=True),
    NestedField(3, "dec_small", DecimalType(9, 2), required=False),  # INT32 (store_decimal_as_integer)
    NestedField(4, "dec_mid", DecimalType(18, 4), required=False),  # INT64
    NestedField(5, "dec_big", DecimalType(30, 3), required=False),  # FIXED_LEN_BYTE_ARRAY
    NestedField(6, "day", DateType(), required=False),
    NestedField(7, "ts_tz", TimestamptzType(), required=False),
    NestedField(8, "ts", TimestampType(), required=False),
    NestedField(9, "s", StringType(), required=False),
    NestedField(10, "long_s", StringType(), required=False),
    NestedField(11, "b", BinaryType(), required=False),
    NestedField(12, "flag", BooleanType(), required=False),
    NestedField(13, "f32", FloatType(), required=False),
    NestedField(14, "f64", DoubleType(), required=False),
    NestedField(15, "all_null", StringType(), required=False),
    NestedField(16, "st", StructType(NestedField(17, "x", LongType(), required=False)), required=False),
    NestedField(18, "l", ListType(19, StringType(), element_required=False), required=False),
)


def _rows(n: int, offset: int) -> dict[str, list[Any]]:
    t0 = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)
    return {
        "i32": [None if i % 7 == 0 else (i + offset) * (-1) ** i for i in range(n)],
        "i64": [(i + offset) * 1_000_003 - 5 for i in range(n)],
        "dec_small": [None if i % 5 == 0 else Decimal(f"{i + offset}.{i % 100:02d}") for i in range(n)],
        "dec_mid": [Decimal(f"-{i + offset}.{i % 10000:04d}") for i in range(n)],
        "dec_big": [Decimal(f"{(i + offset) * 10**20}.{i % 1000:03d}") for i in range(n)],
        "day": [date(2020, 1, 1) + timedelta(days=i + offset) for i in range(n)],
        "ts_tz": [None if i == 3 else t0 + timedelta(seconds=17 * (i + offset), microseconds=i) for i in range(n)],
        "ts": [(t0 + timedelta(minutes=i + offset)).replace(tzinfo=None) for i in range(n)],
        "s": [f"w{(i + offset) % 13}" for i in range(n)],
        # longer than the default truncate(16), some ending in the largest code point (no upper bound
        # can be made by incrementing it) and some multi-byte
        "long_s": [
            "\U0010ffff" * 20 if i == n - 1 else f"{'é' * (i % 3)}lorem ipsum dolor sit amet {i + offset:06d}" for i in range(n)
        ],
        "b": [bytes([i % 256]) * (20 + i % 5) if i % 4 else b"\xff" * 30 for i in range(n)],
        "flag": [i % 3 == 0 for i in range(n)],
        "f32": [float(i + offset) / 3 for i in range(n)],
        "f64": [None if i % 6 == 0 else -(i + offset) / 7 for i in range(n)],
        "all_null": [None] * n,
        "st": [{"x": i + offset} for i in range(n)],
        "l": [[f"e{i}", None] for i in range(n)],
    }


def _footer(properties: dict[str, str], row_groups: int = 1, n: int = 200) -> pq.FileMetaData:
    """A data file written the way ``files._ParquetFile`` writes one, and its footer."""
    arrow_schema = schema_to_pyarrow(SCHEMA, include_field_ids=True)
    sink = io.BytesIO()
    with pq.ParquetWriter(
        sink, arrow_schema, store_decimal_as_integer=True, use_dictionary=["s", "flag"], **parquet_writer_kwargs(properties)
    ) as writer:
        for g in range(row_groups):
            writer.write_table(pa.Table.from_pydict(_rows(n, offset=g * 1000), schema=arrow_schema), row_group_size=n)
    return writer.writer.metadata


def _pyiceberg(metadata: pq.FileMetaData, properties: dict[str, str]) -> dict[str, Any]:
    return data_file_statistics_from_parquet_metadata(
        parquet_metadata=metadata,
        stats_columns=compute_statistics_plan(SCHEMA, properties),
        parquet_column_mapping=parquet_path_to_id_mapping(SCHEMA),
    ).to_serialized_dict()


@pytest.mark.parametrize(
    "properties",
    [
        {},  # pyiceberg's default: truncate(16)
        {"write.metadata.metrics.default": "full"},
        {"write.metadata.metrics.default": "truncate(4)", "write.metadata.metrics.column.i64": "none"},
        {"write.metadata.metrics.default": "counts", "write.metadata.metrics.column.long_s": "truncate(2)"},
        {"write.parquet.compression-codec": "snappy"},
    ],
    ids=["default", "full", "truncate4-none", "counts-truncate2", "snappy"],
)
@pytest.mark.parametrize("row_groups", [1, 3])
def test_same_statistics_as_pyiceberg(properties: dict[str, str], row_groups: int) -> None:
    stats = FileStats(SCHEMA, properties)
    for _ in range(2):  # the per-write caches give the same answer for the next file too
        metadata = _footer(properties, row_groups)
        ours, theirs = stats.of(metadata), _pyiceberg(metadata, properties)
        assert ours == theirs
    if properties == {}:
        # long strings: the lower bound truncated to 16 code points, no upper bound past U+10FFFF...
        assert theirs["lower_bounds"][10] == b"lorem ipsum dolo" and 10 not in theirs["upper_bounds"]
        assert theirs["upper_bounds"][9] == b"w9"  # ...short ones whole
        assert 15 not in theirs["lower_bounds"] and theirs["null_value_counts"][15] == 200 * row_groups
        assert set(theirs["lower_bounds"]) >= {1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14}


def test_mismatched_physical_type_is_refused_like_pyiceberg() -> None:
    """A file whose Parquet type does not fit the Iceberg type is refused with pyiceberg's error."""
    schema = Schema(NestedField(1, "v", IntegerType(), required=False))
    wrong = pa.schema([pa.field("v", pa.string(), metadata={b"PARQUET:field_id": b"1"})])
    sink = io.BytesIO()
    with pq.ParquetWriter(sink, wrong) as writer:
        writer.write_table(pa.table({"v": ["a", "b"]}, schema=wrong))
    with pytest.raises(ValueError, match=r"Unexpected physical type BYTE_ARRAY .* for column 'v'"):
        FileStats(schema, {}).of(writer.writer.metadata)
