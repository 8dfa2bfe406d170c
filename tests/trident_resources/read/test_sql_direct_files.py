"""Issue 12's hole: the sandbox must allow the data files behind its native views (DuckDB opens
them at every bind), so a query could read one of them itself, ``read_parquet('<file>')``,
and see past what the view shapes: a node's delta window, its hidden identity columns, the raw
``__trident_src_*`` view. User SQL (``Trident.sql`` and a node's SQL) may now read only the
views it was given; the views still read the files natively."""

from __future__ import annotations

import pyarrow as pa
import pytest

from trident_assets.compute import open_session
from trident_assets.strategies import replace
from trident_resources import SqlNotAllowedError, Trident


def _file(t: Trident, key: str) -> str:
    plan = t.scan_plan(key)
    assert plan.path == "native" and plan.files
    return plan.files[0]


def _direct_reads(path: str) -> list[str]:
    """Every way found to reach a data file (or other SQL) without going through a view."""
    folder = path.rsplit("/", 1)[0]
    return [
        f"select count(*) from read_parquet('{path}')",
        f"select count(*) from parquet_scan(['{path}'])",
        f"select count(*) from '{path}'",
        f'select count(*) from "{path}"',
        f"from '{path}'",
        f"select * from parquet_metadata('{path}')",
        f"select * from parquet_schema('{path}')",
        f"select * from read_blob('{path}')",
        f"select * from glob('{folder}/*')",
        f"describe '{path}'",
        f"summarize '{path}'",
        f"select * from query('select count(*) from read_parquet(''{path}'')')",
        f"select (select count(*) from read_parquet('{path}')) as n",
        f"select * from (select 1) where exists (select 1 from read_parquet('{path}'))",
        # a CTE named like the file, used outside its scope, falls through to a replacement scan
        f'select * from (with "{path}" as (select 1) select * from "{path}"), "{path}"',
        "select * from duckdb_views()",
        "select * from duckdb_settings()",
        "select * from information_schema.tables",
        "select * from plan",  # a Python variable of the caller's frame (DuckDB's Python replacement scan)
    ]


def test_sql_cannot_read_the_named_datasets_own_files_directly(trident: Trident) -> None:
    t = trident
    t.write("d/own", pa.table({"a": [1, 2, 3]}))
    path = _file(t, "d/own")
    for query in _direct_reads(path):
        with pytest.raises(SqlNotAllowedError):
            t.sql(f'select * from "d/own", ({query}) as x' if query.startswith("select") else query)
        with pytest.raises(SqlNotAllowedError):  # and with the dataset named elsewhere in the query
            t.sql(f'with k as (select * from "d/own") {query}' if query.startswith("select") else query)
    # the view itself still reads the files, natively
    assert t.sql('select sum(a) as s from "d/own"').column("s").to_pylist() == [6]


def test_ordinary_queries_still_run(trident: Trident) -> None:
    t = trident
    t.write("d/q", pa.table({"a": [1, 2, 3], "b": ["x", "y", "x"]}))
    assert t.sql("with w as (select a from \"d/q\" where b = 'x') select sum(a) as s from w").column("s").to_pylist() == [4]
    assert t.sql("select count(*) as n from range(5)").column("n").to_pylist() == [5]
    assert t.sql("select sum(x) as s from generate_series(1, 3) t(x)").column("s").to_pylist() == [6]
    assert t.sql("select * from unnest([1, 2]) t(x)").num_rows == 2
    assert t.sql('select a from "D/Q" where a > (select min(a) from "d/q") order by a').column("a").to_pylist() == [2, 3]
    assert "a" in t.sql('describe "d/q"').column(0).to_pylist()
    assert t.sql(
        "with recursive r(n) as (select 1 union all select n + 1 from r where n < 3) select count(*) as c from r"
    ).column("c").to_pylist() == [3]


def test_a_node_cannot_read_its_sources_files_or_raw_views(trident: Trident) -> None:
    t = trident
    t.write("d/src", pa.table({"id": [1, 2]}))
    t.write("d/src", pa.table({"id": [3]}), mode="append")
    path = _file(t, "d/src")
    session = open_session(t, "d/out", {"source": "d/src"}, replace())
    try:
        assert session.stream("select id from source order by id").read_all().column("id").to_pylist() == [1, 2, 3]
        refused = [
            *_direct_reads(path),
            # identity renamed past the leak check, straight from the file or the raw view
            f"select __row_id as rid from read_parquet('{path}')",
            "select __row_id as rid, __created_at as at from __trident_src_0",
            "select * from memory.main.__trident_src_0",
            "with __trident_src_0 as (select 1 as x) select * from (select 1), __trident_src_0",
        ]
        for query in refused:
            with pytest.raises(SqlNotAllowedError):
                session.stream(query)
    finally:
        session.close()
