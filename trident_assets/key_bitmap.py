"""An exact, linear-time proof that integer key columns repeat no key, for ``expectations.unique``.

Why: ``unique`` is a GROUP BY over every key, a hash aggregate of the whole dataset: ~1-2 CPU
seconds over the 6M line items of the example pipeline at SF1 (its two such checks are the
largest cost of its checks, measured). When every key column is an integer, the key
``(k1, ..., kn)`` maps one-to-one onto ``sum((ki - min_i) * stride_i)``, a number below the
product of the columns' ranges; when that product is small enough, one pass over the key columns
with a bitmap of that many bytes (a byte per possible key) sees every repeat: a key seen in an
earlier batch is a set byte, a key repeated inside a batch is caught by sorting the batch (skipped
when the batch is already strictly increasing, as written data usually is). ~0.3 CPU s for those
6M keys.

The pass only ever proves "no repeated key". A NULL in a key, a non-integer column, a range too
wide for ``MAX_BITMAP_BYTES``, a value outside the bounds read first (the dataset changed between
the two reads), or a repeated key all answer False, and the caller runs the exact query, whose
count is the check's result: the check means exactly what it meant before.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from trident_resources import Trident, VersionStats

MAX_BITMAP_BYTES = 64 * 1024 * 1024  # the pass's memory bound: one byte per possible key
MIN_ROWS = 65_536  # below this the GROUP BY is as cheap as the bounds query


def _q(c: str) -> str:
    return '"' + c.replace('"', '""') + '"'


def _integer(t: pa.DataType) -> bool:
    """An integer type whose values fit an int64 (uint64 may not)."""
    return pa.types.is_integer(t) and not pa.types.is_uint64(t)


def _bounds(
    t: Trident,
    key: str,
    columns: Sequence[str],
    staged: uuid.UUID | None,
    version_stats: Callable[[], VersionStats | None] | None = None,
) -> list[tuple[int, int]] | None:
    """Each key column's (min, max), or None when the pass cannot prove anything: a NULL in a
    key, a non-integer column, too few rows to be worth it, or too many possible keys.

    From the version's data-file statistics when they record every key column's null count and
    bounds (no scan: the SQL below costs 0.03-0.17 s per check of the example pipeline);
    otherwise (the pg sink, a file without a column's bounds) from that SQL. Bounds the files
    claim too narrowly are caught by the pass, which then proves nothing."""
    stats = version_stats() if version_stats is not None else t.version_stats(key, staged=staged)
    if stats is not None and stats.rows < MIN_ROWS:
        return None  # the files' row count is exact: too few rows to be worth a pass (nor the query below)
    if stats is not None and all(c in stats.integer_bounds and c in stats.null_counts for c in columns):
        rows = stats.rows
        if rows < MIN_ROWS or any(stats.null_counts[c] for c in columns):
            return None
        return _small_enough([stats.integer_bounds[c] for c in columns])
    aggs = ", ".join(f"min({_q(c)}), max({_q(c)}), count({_q(c)})" for c in columns)
    table = t.sql(f'SELECT {aggs}, count(*) FROM "{key}"', staged={key: staged} if staged else None)
    if any(not _integer(table.schema.field(3 * i).type) for i in range(len(columns))):
        return None
    row = [table.column(i)[0].as_py() for i in range(table.num_columns)]
    rows = row[-1]
    if rows < MIN_ROWS or any(row[3 * i + 2] != rows for i in range(len(columns))):
        return None  # small, or a NULL in a key (NULLs group together: the exact query counts them)
    return _small_enough([(row[3 * i], row[3 * i + 1]) for i in range(len(columns))])


def _small_enough(bounds: list[tuple[int, int]]) -> list[tuple[int, int]] | None:
    """``bounds`` when the bitmap of every possible key fits ``MAX_BITMAP_BYTES``, else None."""
    size = 1
    for lo, hi in bounds:
        size *= hi - lo + 1
    return bounds if size <= MAX_BITMAP_BYTES else None


def no_repeated_key(
    t: Trident,
    key: str,
    columns: Sequence[str],
    staged: uuid.UUID | None = None,
    stats: Callable[[], VersionStats | None] | None = None,
) -> bool:
    """True only when no key ``columns`` value repeats in ``key``'s version (the staged one with
    ``staged``); False means "not proven" (see the module docstring). ``stats``: the version's
    ``Trident.version_stats`` when the caller has already looked them up (a step's checks share one)."""
    bounds = _bounds(t, key, columns, staged, stats)
    if bounds is None:
        return False
    strides, size = [], 1
    for lo, hi in reversed(bounds):
        strides.append(size)
        size *= hi - lo + 1
    strides.reverse()
    seen = np.zeros(size, dtype=np.bool_)
    for batch in t.stream(key, columns=list(columns), staged=staged):
        if batch.num_rows == 0:
            continue
        packed = np.zeros(batch.num_rows, dtype=np.int64)
        for i, (lo, hi) in enumerate(bounds):
            col = batch.column(columns[i])
            if col.null_count or not _integer(col.type):
                return False
            low, high = pc.min_max(col).values()
            if low.as_py() < lo or high.as_py() > hi:  # another version than the bounds': not proven
                return False
            packed += (col.to_numpy().astype(np.int64) - lo) * strides[i]
        if seen[packed].any():
            return False
        seen[packed] = True
        if not (packed[1:] > packed[:-1]).all():
            ordered = np.sort(packed)
            if (ordered[1:] == ordered[:-1]).any():
                return False
    return True
