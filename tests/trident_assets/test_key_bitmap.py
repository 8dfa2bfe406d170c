"""Issue 12: ``unique`` over integer keys is first proven by one bitmap pass over the key columns
(``key_bitmap``), and only what the pass cannot prove reaches the GROUP BY; whatever path a check
takes, its result is the exact query's."""

from __future__ import annotations

import uuid

import numpy as np
import pyarrow as pa

from trident_assets import expectations as ex
from trident_assets import key_bitmap
from trident_resources import Trident

N = 150_000  # more than two of the stream's 65,536-row batches, and over key_bitmap.MIN_ROWS


def _exact(t: Trident, key: str, cols: list[str], staged: uuid.UUID | None = None) -> int:
    group = ", ".join(cols)
    sql = f'SELECT count(*) FROM (SELECT {group} FROM "{key}" GROUP BY {group} HAVING count(*) > 1)'
    return int(t.sql(sql, staged={key: staged} if staged else None).column(0)[0].as_py())


def _check(t: Trident, key: str, cols: list[str], staged: uuid.UUID | None = None) -> tuple[bool, int]:
    passed, value, _ = (ex.unique(cols) if len(cols) > 1 else ex.unique(cols[0])).evaluate(t, key, staged)
    assert value == _exact(t, key, cols, staged)
    return passed, value


def test_integer_keys_are_proven_unique_by_the_bitmap_pass(trident: Trident) -> None:
    t = trident
    order = np.arange(N) // 4 + 1_000_000  # four lines per order, like TPC-H line items
    line = (np.arange(N) % 4 + 1).astype(np.int32)
    t.write("kb/lines", pa.table({"o": order, "l": line, "v": np.ones(N)}))
    assert key_bitmap.no_repeated_key(t, "kb/lines", ["o", "l"])
    assert _check(t, "kb/lines", ["o", "l"]) == (True, 0)

    shuffled = np.random.default_rng(7).permutation(N)  # no order at all: every batch is sorted to look inside it
    t.write("kb/shuffled", pa.table({"o": order[shuffled], "l": line[shuffled]}))
    assert key_bitmap.no_repeated_key(t, "kb/shuffled", ["o", "l"])
    assert _check(t, "kb/shuffled", ["o", "l"]) == (True, 0)

    # the same proof on a staged version (write-audit-publish audits those)
    staged = t.write("kb/lines", pa.table({"o": [1_000_000], "l": pa.array([9], pa.int32())}), mode="append", stage=True)
    assert key_bitmap.no_repeated_key(t, "kb/lines", ["o", "l"], staged.txn_id)
    assert _check(t, "kb/lines", ["o", "l"], staged.txn_id) == (True, 0)


def test_what_the_pass_cannot_prove_is_counted_by_the_exact_query(trident: Trident) -> None:
    t = trident
    ids = np.arange(N, dtype=np.int64)

    across = ids.copy()
    across[N - 1] = 5  # a repeat in another batch than its first occurrence
    t.write("kb/across", pa.table({"k": across}))
    assert not key_bitmap.no_repeated_key(t, "kb/across", ["k"])
    assert _check(t, "kb/across", ["k"]) == (False, 1)

    inside = np.random.default_rng(3).permutation(ids)
    inside[10] = inside[20]  # a repeat inside one unordered batch
    t.write("kb/inside", pa.table({"k": inside}))
    assert not key_bitmap.no_repeated_key(t, "kb/inside", ["k"])
    assert _check(t, "kb/inside", ["k"]) == (False, 1)

    # NULLs group together in GROUP BY: two NULL keys are one repeated key
    t.write("kb/nulls", pa.table({"k": pa.array([*range(N), None, None], pa.int64())}))
    assert not key_bitmap.no_repeated_key(t, "kb/nulls", ["k"])
    assert _check(t, "kb/nulls", ["k"]) == (False, 1)

    # strings, and integers too far apart for the bitmap: not proven, still exact
    t.write("kb/strings", pa.table({"k": [f"k{i}" for i in range(N)]}))
    assert not key_bitmap.no_repeated_key(t, "kb/strings", ["k"])
    assert _check(t, "kb/strings", ["k"]) == (True, 0)
    t.write("kb/wide", pa.table({"k": ids * 1_000_000_007}))
    assert not key_bitmap.no_repeated_key(t, "kb/wide", ["k"])
    assert _check(t, "kb/wide", ["k"]) == (True, 0)

    # a staged version with a repeat fails while the published one passes
    staged = t.write("kb/wide", pa.table({"k": [0]}), mode="append", stage=True)
    assert _check(t, "kb/wide", ["k"], staged.txn_id) == (False, 1)
    assert _check(t, "kb/wide", ["k"]) == (True, 0)
