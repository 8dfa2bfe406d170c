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
"""

from __future__ import annotations

import io
import threading
from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

TRIAL_MIN_ROWS = 1024  # below this the trial says nothing useful about the next row groups
# The trial encodes its rows twice, on a lane's thread, and every other lane of the write waits for
# its answer: at 65,536 rows that was 0.1-0.3 s of a TPC-H SF1 write with one core idle (customer,
# orders, lineitem and each half of the split; issue 12). 16,384 rows give the same choice on
# lineitem and customer and on orders all but ``o_shippriority``, a constant int whose two
# encodings are a few bytes apart; 8,192 rows already drop the date columns of lineitem. A column
# at the border may go plain, which costs next to nothing in size and encodes faster.
TRIAL_MAX_ROWS = 16_384


def _encode(table: pa.Table, dictionary: bool, writer_kwargs: dict[str, Any]) -> pq.FileMetaData:
    sink = io.BytesIO()
    with pq.ParquetWriter(
        sink, table.schema, use_dictionary=dictionary, store_decimal_as_integer=True, **writer_kwargs
    ) as writer:
        writer.write_table(table, row_group_size=max(table.num_rows, 1))
    return pq.read_metadata(pa.BufferReader(sink.getbuffer()))


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
    parquet_schema = _encode(schema.empty_table(), True, {}).schema
    paths = (parquet_schema.column(i).path for i in range(len(parquet_schema)))
    return [p for p in paths if p.split(".", 1)[0] not in never]


def dictionary_columns(
    table: pa.Table, never: Iterable[str], writer_kwargs: dict[str, Any], always: Iterable[str] = ()
) -> list[str]:
    """The leaf columns of ``table`` whose dictionary encoding is no larger than plain encoding,
    both compressed as the table's properties say, judged on its first ``TRIAL_MAX_ROWS`` rows;
    ``never`` columns (unique by construction) are out, ``always`` columns (a few values by
    construction) are in without a trial. A table too small to tell keeps a dictionary everywhere
    else (pyarrow's default)."""
    never, always = frozenset(never), frozenset(always)
    kept = [name for name in always if name in table.schema.names]
    candidates = [name for name in table.schema.names if name not in never and name not in always]
    if not candidates:
        return kept
    if table.num_rows < TRIAL_MIN_ROWS:
        return leaf_paths(table.schema, never)
    trial = table.select(candidates).slice(0, TRIAL_MAX_ROWS)
    with_dictionary = _leaf_bytes(_encode(trial, True, writer_kwargs))
    plain = _leaf_bytes(_encode(trial, False, writer_kwargs))
    return kept + [path for path, size in with_dictionary.items() if size <= plain.get(path, 0)]


class DictionaryChoice:
    """The dictionary decision of one transaction's writer, made once, from the first row group
    any of its files writes, and shared by every file after it (lanes encode in parallel threads,
    so the first one decides under a lock and the others wait for its answer)."""

    def __init__(self, never: Iterable[str], writer_kwargs: dict[str, Any], always: Iterable[str] = ()) -> None:
        self._never = frozenset(never)
        self._always = frozenset(always)
        self._writer_kwargs = writer_kwargs
        self._lock = threading.Lock()
        self._columns: list[str] | None = None
        self._undecided: list[str] | None = None  # every leaf but ``never``: for files too small to decide

    def columns(self, first: pa.Table) -> list[str]:
        with self._lock:
            if self._columns is None:
                if first.num_rows < TRIAL_MIN_ROWS:
                    # too small to decide for the whole transaction; ask again next time. A backfill
                    # opens thousands of such files (one per small partition): their answer is the
                    # same every time, so it is worked out once
                    if self._undecided is None:
                        self._undecided = leaf_paths(first.schema, self._never)
                    return self._undecided
                self._columns = dictionary_columns(first, self._never, self._writer_kwargs, self._always)
            return self._columns
