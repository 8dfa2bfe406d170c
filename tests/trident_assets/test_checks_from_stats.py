"""Issue 12: ``not_null`` and ``row_count_between`` are answered from what the version's data files
record (``Trident.version_stats``: the counts the write computed from the Parquet footers it
wrote), without a scan; where the statistics cannot say it exactly (a file without a column's
count, NULLs over several columns, the pg sink) the query runs. Either way the result is the
query's."""

from __future__ import annotations

import uuid

import pyarrow as pa

from trident_assets import expectations as ex
from trident_resources import Trident


def _sql(t: Trident, query: str, key: str, staged: uuid.UUID | None = None) -> int:
    return int(t.sql(query.format(dataset=f'"{key}"'), staged={key: staged} if staged else None).column(0)[0].as_py())


def _agrees(t: Trident, e: ex.Expectation, key: str, staged: uuid.UUID | None = None) -> tuple[bool, int]:
    passed, value, meta = e.evaluate(t, key, staged)
    assert value == _sql(t, e.sql, key, staged), meta
    return passed, value


def test_version_stats_are_the_files_row_and_null_counts(trident: Trident) -> None:
    t = trident
    t.write("st/a", pa.table({"k": [1, 2, None, 4], "f": [float("nan"), 1.0, None, None], "s": ["x", None, "y", "z"]}))
    stats = t.version_stats("st/a")
    assert stats is not None and stats.rows == 4
    # NaN is not NULL (as in SQL); identity columns are never NULL
    assert {c: stats.null_counts[c] for c in ("k", "f", "s", "__row_id")} == {"k": 1, "f": 2, "s": 1, "__row_id": 0}

    staged = t.write("st/a", pa.table({"k": pa.array([None], pa.int64()), "f": [2.0], "s": ["w"]}), mode="append", stage=True)
    staged_stats = t.version_stats("st/a", staged=staged.txn_id)
    assert staged_stats is not None and staged_stats.rows == 5 and staged_stats.null_counts["k"] == 2
    assert t.version_stats("st/a") == stats  # the published version is unchanged


def test_not_null_and_row_counts_from_statistics_agree_with_the_query(trident: Trident) -> None:
    t = trident
    t.write("st/b", pa.table({"a": [1, None, 3, None], "b": [None, None, 3, 4], "c": [1, 2, 3, 4]}))
    assert _agrees(t, ex.not_null("c"), "st/b") == (True, 0)
    assert _agrees(t, ex.not_null("a"), "st/b") == (False, 2)
    assert _agrees(t, ex.not_null(["a", "b"]), "st/b") == (False, 3)  # row 2 is NULL in both: counted once
    assert _agrees(t, ex.row_count_between(1, 10), "st/b") == (True, 4)
    assert _agrees(t, ex.row_count_between(5), "st/b") == (False, 4)

    # a column added by an append: the older file records no count for it, yet it reads NULL there
    staged = t.write("st/b", pa.table({"c": [5], "d": [1]}), mode="append", stage=True)
    stats = t.version_stats("st/b", staged=staged.txn_id)
    assert stats is not None and "d" not in stats.null_counts
    assert _agrees(t, ex.not_null("d"), "st/b", staged.txn_id) == (False, 4)
    assert _agrees(t, ex.row_count_between(5, 5), "st/b", staged.txn_id) == (True, 5)


def test_the_pg_sink_keeps_no_statistics_and_its_checks_run_the_query(trident: Trident) -> None:
    t = trident
    t.router.set_pin("st/pg", "pg")
    t.write("st/pg", pa.table({"a": [1, None, 3]}))
    assert t.version_stats("st/pg") is None
    assert _agrees(t, ex.not_null("a"), "st/pg") == (False, 1)
    assert _agrees(t, ex.row_count_between(1), "st/pg") == (True, 3)
