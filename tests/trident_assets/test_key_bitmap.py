"""Issue 12: ``unique`` over integer keys is first proven by one bitmap pass over the key columns
(``key_bitmap``), and only what the pass cannot prove reaches the GROUP BY; whatever path a check
takes, its result is the exact query's."""

from __future__ import annotations

import uuid
from typing import Any

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


def _query_bounds(t: Trident, key: str, cols: list[str], staged: uuid.UUID | None = None) -> list[tuple[int, int]]:
    aggs = ", ".join(f"min({c}), max({c})" for c in cols)
    row = t.sql(f'SELECT {aggs} FROM "{key}"', staged={key: staged} if staged else None).to_pylist()[0]
    values = list(row.values())
    return [(values[2 * i], values[2 * i + 1]) for i in range(len(cols))]


class _Queries:
    """Counts the SQL queries a check runs (the real ``Trident.sql`` answers them)."""

    def __init__(self, t: Trident) -> None:
        self.t, self.run, self.count = t, t.sql, 0

    def __call__(self, query: str, **kwargs: object) -> pa.Table:
        self.count += 1
        return self.run(query, **kwargs)  # type: ignore[arg-type]


def test_key_bounds_come_from_the_files_statistics_without_a_query(trident: Trident, monkeypatch: object) -> None:
    """Issue 12: the bounds of integer keys are what the data files record (no min/max scan),
    and they are exactly the query's; the staged version's are its own."""
    t = trident
    order = np.arange(N) // 4 + 1_000_000
    line = (np.arange(N) % 4 + 1).astype(np.int32)
    t.write("kb/stats", pa.table({"o": order, "l": line, "s": [f"x{i}" for i in range(N)]}))
    stats = t.version_stats("kb/stats")
    assert stats is not None
    assert [stats.integer_bounds["o"], stats.integer_bounds["l"]] == _query_bounds(t, "kb/stats", ["o", "l"])
    assert "s" not in stats.integer_bounds  # integers only
    staged = t.write("kb/stats", pa.table({"o": [7], "l": pa.array([9], pa.int32()), "s": ["y"]}), mode="append", stage=True)
    staged_stats = t.version_stats("kb/stats", staged=staged.txn_id)
    assert staged_stats is not None and staged_stats.integer_bounds["o"] == (7, order.max())
    assert staged_stats.integer_bounds["l"] == (1, 9)

    queries = _Queries(t)
    monkeypatch.setattr(t, "sql", queries)  # type: ignore[attr-defined]
    assert key_bitmap._bounds(t, "kb/stats", ["o", "l"], None) == _query_bounds(t, "kb/stats", ["o", "l"])
    assert key_bitmap._bounds(t, "kb/stats", ["o", "l"], staged.txn_id) == [(7, order.max()), (1, 9)]
    queries.count = 0
    assert key_bitmap._bounds(t, "kb/stats", ["o", "l"], staged.txn_id) is not None
    assert key_bitmap.no_repeated_key(t, "kb/stats", ["o", "l"])
    assert queries.count == 0  # proven from the statistics and one pass: no query at all
    monkeypatch.undo()  # type: ignore[attr-defined]
    assert _check(t, "kb/stats", ["o", "l"]) == (True, 0)
    assert _check(t, "kb/stats", ["o", "l"], staged.txn_id) == (True, 0)


def test_key_bounds_fall_back_to_the_query_without_statistics(trident: Trident) -> None:
    """A column whose files record no bounds (metrics mode ``counts``), and the pg sink (no
    statistics at all): the bounds come from the query, the same answer, and the check is exact."""
    t = trident
    t.write("kb/nobounds", pa.table({"k": np.arange(N, dtype=np.int64)}))
    sink = t.driver.sink("iceberg_native")
    table = sink.tables.table(t.dataset_record("kb/nobounds"))  # type: ignore[attr-defined]
    with table.transaction() as txn:
        txn.set_properties({"write.metadata.metrics.column.k": "counts"})
    ids = np.arange(N, dtype=np.int64)
    ids[-1] = 3  # a repeat: the pass must see it
    t.write("kb/nobounds", pa.table({"k": ids}))
    stats = t.version_stats("kb/nobounds")
    assert stats is not None and "k" not in stats.integer_bounds and stats.null_counts["k"] == 0
    assert key_bitmap._bounds(t, "kb/nobounds", ["k"], None) == [(0, N - 2)]
    assert not key_bitmap.no_repeated_key(t, "kb/nobounds", ["k"])
    assert _check(t, "kb/nobounds", ["k"]) == (False, 1)

    t.router.set_pin("kb/pg", "pg")
    t.write("kb/pg", pa.table({"k": np.arange(N, dtype=np.int64) + 5}))
    assert t.version_stats("kb/pg") is None
    assert key_bitmap._bounds(t, "kb/pg", ["k"], None) == [(5, N + 4)]
    assert key_bitmap.no_repeated_key(t, "kb/pg", ["k"])
    assert _check(t, "kb/pg", ["k"]) == (True, 0)


def test_statistics_are_read_once_per_version(trident: Trident, monkeypatch: object) -> None:
    """A step's checks ask for one version's statistics once per check: the snapshot's are
    remembered (it never changes), and a new version gets its own; a staged version's, asked
    again, need not even a look-up of the table."""
    from trident_resources.sinks.iceberg.tables import IcebergTables

    t = trident
    t.write("kb/once", pa.table({"k": [1, 2, 3]}))
    first = t.version_stats("kb/once")
    assert first is not None and t.version_stats("kb/once") is first
    t.write("kb/once", pa.table({"k": [1, 2, 3, None]}), mode="replace")
    second = t.version_stats("kb/once")
    assert second is not None and second is not first and second.rows == 4 and second.null_counts["k"] == 1
    staged = t.write("kb/once", pa.table({"k": [5]}), mode="append", stage=True)
    third = t.version_stats("kb/once", staged=staged.txn_id)
    assert third is not None and third.rows == 5
    lookups: list[object] = []
    real = IcebergTables.table_to_read

    def counting(*args: Any) -> Any:
        lookups.append(args)
        return real(*args)

    monkeypatch.setattr(IcebergTables, "table_to_read", counting)  # type: ignore[attr-defined]
    assert t.version_stats("kb/once", staged=staged.txn_id) is third and lookups == []
    assert t.version_stats("kb/once") is second and len(lookups) == 1  # the published one: is it still current?
