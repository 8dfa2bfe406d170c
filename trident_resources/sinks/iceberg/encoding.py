"""Which columns of a data file get a Parquet dictionary, decided from the data itself.

pyarrow dictionary-encodes every column by default and only falls back to plain encoding when a
row group's dictionary outgrows ``dictionary_pagesize_limit``. In row groups sized for bounded
memory (``TRIDENT_ROW_GROUP_BYTES``) a mostly-unique column (keys, prices, free text) never
reaches that limit, so every row group stores a dictionary about as large as the column plus the
indices into it: larger files (lineitem: 66 MiB vs 53 MiB) and slower encoding. parquet-mr
(Iceberg's Java writer) guards against this by keeping a dictionary only when it makes the page
smaller; pyarrow has no such check, so this module does it once per transaction: the first row
group is encoded both ways in memory (with the table's compression), and a column keeps its
dictionary only where that encoding is no larger. Columns known never to repeat skip the trial.

A column without a dictionary is PLAIN, except one stored as a Parquet integer (ints, dates,
times, timestamps, decimals of up to 18 digits): DELTA_BINARY_PACKED, which stores the deltas
between values bit-packed. On TPC-H lineitem at SF1 (6M rows, zstd) it is smaller than PLAIN
and cheaper to write and to read on every such column: ``l_orderkey`` (sorted) 1.3 vs 2.0 MB,
``l_partkey`` (random, bounded) 14.5 vs 18.9 MB written in 0.08 vs 0.19 CPU s, a counting column
0.03 vs 6.1 MB; eight integer columns read back in 0.10 s instead of 0.29 s by DuckDB and
0.10-0.12 s instead of 0.23-0.30 s by pyarrow, since zstd has little left to undo. It is a
standard encoding that DuckDB, pyarrow (pyiceberg) and Iceberg's Java reader read. The trial
weighs the dictionary against it rather than against PLAIN for those columns.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

TRIAL_MIN_ROWS = 1024  # below this the trial says nothing useful about the next row groups
# The trial encodes its rows twice, on a lane's thread, and every other lane of the write waits for
# its answer: at 65,536 rows that is 0.1-0.3 s of a TPC-H SF1 write with one core idle (customer,
# orders, lineitem and each half of the split). 16,384 rows give the same choice on
# lineitem and customer and on orders all but ``o_shippriority``, a constant int whose two
# encodings are a few bytes apart; 8,192 rows already drop the date columns of lineitem. A column
# at the border may go plain, which costs next to nothing in size and encodes faster.
TRIAL_MAX_ROWS = 16_384


DELTA = "DELTA_BINARY_PACKED"


def _encode(
    table: pa.Table, dictionary: bool, writer_kwargs: dict[str, Any], column_encoding: Mapping[str, str] | None = None
) -> pq.FileMetaData:
    sink = io.BytesIO()
    with pq.ParquetWriter(
        sink,
        table.schema,
        use_dictionary=dictionary,
        store_decimal_as_integer=True,
        column_encoding=dict(column_encoding) if column_encoding else None,
        **writer_kwargs,
    ) as writer:
        writer.write_table(table, row_group_size=max(table.num_rows, 1))
    return pq.read_metadata(pa.BufferReader(sink.getbuffer()))


def _parquet_schema(schema: pa.Schema) -> pq.ParquetSchema:
    """How Parquet stores ``schema`` (as the data files do: decimals as integers where they fit)."""
    return _encode(schema.empty_table(), True, {}).schema


def _leaf_bytes(metadata: pq.FileMetaData) -> dict[str, int]:
    """Compressed bytes per leaf column path (dictionary page included)."""
    sizes: dict[str, int] = {}
    for i in range(metadata.num_row_groups):
        group = metadata.row_group(i)
        for j in range(group.num_columns):
            chunk = group.column(j)
            sizes[chunk.path_in_schema] = sizes.get(chunk.path_in_schema, 0) + chunk.total_compressed_size
    return sizes


def leaf_paths(schema: pa.Schema, never: Iterable[str]) -> list[str]:
    """Every Parquet leaf column path of ``schema`` (``s.a``, ``l.list.element``) outside the
    top-level columns ``never``: what pyarrow's ``use_dictionary`` list names."""
    never = frozenset(never)
    parquet_schema = _parquet_schema(schema)
    paths = (parquet_schema.column(i).path for i in range(len(parquet_schema)))
    return [p for p in paths if p.split(".", 1)[0] not in never]


def integer_columns(schema: pa.Schema) -> list[str]:
    """The top-level columns of ``schema`` that Parquet stores as INT32 or INT64: the ones
    DELTA_BINARY_PACKED can encode (pyarrow takes a column_encoding for top-level columns only)."""
    parquet_schema = _parquet_schema(schema)
    leaves = (parquet_schema.column(i) for i in range(len(parquet_schema)))
    return [c.path for c in leaves if "." not in c.path and c.physical_type in ("INT32", "INT64")]


def column_encodings(schema: pa.Schema, dictionary: Iterable[str], fixed: Mapping[str, str]) -> dict[str, str]:
    """The ``column_encoding`` of a data file of ``schema``: ``fixed`` for the columns it names that
    the file has, DELTA_BINARY_PACKED for its other integer columns without a dictionary (pyarrow
    refuses a column_encoding for a column the schema lacks or one also dictionary-encoded)."""
    dictionary = frozenset(dictionary)
    chosen = {name: enc for name, enc in fixed.items() if name in schema.names and name not in dictionary}
    return chosen | {c: DELTA for c in integer_columns(schema) if c not in dictionary and c not in chosen}


def dictionary_columns(
    table: pa.Table, never: Iterable[str], writer_kwargs: dict[str, Any], always: Iterable[str] = ()
) -> list[str]:
    """The leaf columns of ``table`` whose dictionary encoding is no larger than their encoding
    without one (PLAIN, or DELTA_BINARY_PACKED for integers), both compressed as the table's
    properties say, judged on its first ``TRIAL_MAX_ROWS`` rows; ``never`` columns (unique by
    construction) are out, ``always`` columns (a few values by construction) are in without a
    trial. A table too small to tell keeps a dictionary everywhere else (pyarrow's default)."""
    never, always = frozenset(never), frozenset(always)
    kept = [name for name in always if name in table.schema.names]
    candidates = [name for name in table.schema.names if name not in never and name not in always]
    if not candidates:
        return kept
    if table.num_rows < TRIAL_MIN_ROWS:
        return leaf_paths(table.schema, never)
    trial = table.select(candidates).slice(0, TRIAL_MAX_ROWS)
    with_dictionary = _leaf_bytes(_encode(trial, True, writer_kwargs))
    without = _leaf_bytes(_encode(trial, False, writer_kwargs, column_encodings(trial.schema, (), {})))
    return kept + [path for path, size in with_dictionary.items() if size <= without.get(path, 0)]


Encodings = tuple[list[str], dict[str, str]]  # pyarrow's use_dictionary and column_encoding


class EncodingChoice:
    """The encoding decision of one transaction's writer, made once, from the first row group
    any of its files writes, and shared by every file after it (lanes encode in parallel threads,
    so the first one decides under a lock and the others wait for its answer). ``fixed`` are
    encodings decided by what a column holds (the identity columns'), never tried."""

    def __init__(
        self,
        never: Iterable[str],
        writer_kwargs: dict[str, Any],
        always: Iterable[str] = (),
        fixed: Mapping[str, str] | None = None,
    ) -> None:
        self._never = frozenset(never)
        self._always = frozenset(always)
        self._fixed = dict(fixed or {})
        self._writer_kwargs = writer_kwargs
        self._lock = threading.Lock()
        self._chosen: Encodings | None = None
        self._undecided: Encodings | None = None  # a dictionary on every leaf but ``never``: files too small to decide

    def _encodings(self, schema: pa.Schema, dictionary: list[str]) -> Encodings:
        return dictionary, column_encodings(schema, dictionary, self._fixed)

    def choose(self, first: pa.Table) -> Encodings:
        with self._lock:
            if self._chosen is None:
                if first.num_rows < TRIAL_MIN_ROWS:
                    # too small to decide for the whole transaction; ask again next time. A backfill
                    # opens thousands of such files (one per small partition): their answer is the
                    # same every time, so it is worked out once
                    if self._undecided is None:
                        self._undecided = self._encodings(first.schema, leaf_paths(first.schema, self._never))
                    return self._undecided
                dictionary = dictionary_columns(first, self._never, self._writer_kwargs, self._always)
                self._chosen = self._encodings(first.schema, dictionary)
            return self._chosen
