"""Prober 2: the SQL guard counted a CTE name as readable everywhere in the query, but DuckDB
binds a name to a CTE only inside the query that defines it (and after its own definition).
Outside that scope, in the CTE's own body, in an earlier CTE, or behind a schema
(``main.x``, ``information_schema.x``), the same name reads the catalog: the node's raw
``__trident_src_*`` view (a case variant of the internal prefix slipped past the CTE filter), or
DuckDB's own views (``duckdb_views`` shows every view's SQL and data file paths). A parse tree
nested deeper than Python's JSON decoder died with a raw RecursionError."""

from __future__ import annotations

import pyarrow as pa
import pytest

from trident_assets.compute import open_session
from trident_assets.strategies import replace
from trident_resources import SqlNotAllowedError, Trident

CATALOG_ESCAPES = [
    # the CTE's own body: a non-recursive CTE does not see itself
    "with duckdb_views as (select * from duckdb_views) select sql from duckdb_views",
    "with recursive duckdb_views as (select * from duckdb_views) select sql from duckdb_views",
    # an earlier CTE does not see a later one
    "with a as (select * from duckdb_views), duckdb_views as (select 1) select sql from a",
    # a nested CTE used outside its subquery
    "select sql from (with duckdb_views as (select 1) select 1) x, duckdb_views",
    # a qualified name never binds to a CTE
    "with tables as (select 1) select table_name from information_schema.tables",
    "with duckdb_views as (select 1) select sql from main.duckdb_views",
]


def test_sql_cte_names_count_only_in_their_scope(trident: Trident) -> None:
    t = trident
    t.write("d/g", pa.table({"a": [1, 2, 3]}))
    for query in CATALOG_ESCAPES:
        with pytest.raises(SqlNotAllowedError):
            t.sql(f'select * from "d/g", ({query}) as x')


def test_sql_scoped_ctes_still_run(trident: Trident) -> None:
    t = trident
    t.write("d/h", pa.table({"a": [1, 2, 3]}))
    ok = {
        'with a as (select * from "d/h"), b as (select * from a) select count(*) as n from b, a': 9,
        'with a as (select * from "d/h") select count(*) as n from (select * from a union all select * from a)': 6,
        'select (with a as (select * from "d/h") select max(a) from a) as n': 3,
        'select count(*) as n from "d/h" o, lateral (select o.a + 1 as b) t where t.b > 2': 2,
        "with recursive r(n) as (select 1 union all select n + 1 from r where n < 3) select count(*) as n from r": 3,
        'select count(*) as n from main."d/h"': 3,
    }
    for query, n in ok.items():
        assert t.sql(query).column("n").to_pylist() == [n], query


def test_a_node_cannot_read_its_raw_view_through_a_case_variant_cte(trident: Trident) -> None:
    t = trident
    t.write("d/s2", pa.table({"id": [1, 2]}))
    session = open_session(t, "d/o2", {"source": "d/s2"}, replace())
    try:
        for query in [
            'select __row_id as rid from (with "__TRIDENT_SRC_0" as (select 1) select 1) x, __trident_src_0',
            'with "__Trident_src_0" as (select 1) select __row_id as rid from main.__trident_src_0',
            "with source as (select 1) select * from temp.main.__trident_src_0",
        ]:
            with pytest.raises(SqlNotAllowedError):
                session.stream(query)
        assert session.stream("select id from source order by id").read_all().column("id").to_pylist() == [1, 2]
    finally:
        session.close()


def test_a_too_deeply_nested_query_is_refused_by_name(trident: Trident) -> None:
    t = trident
    t.write("d/deep", pa.table({"a": [1]}))
    for query in (
        "select " + " + ".join(["a"] * 600) + ' as s from "d/deep"',
        "select * from " + "(select * from " * 600 + '"d/deep"' + ") x" * 600,
    ):
        with pytest.raises(SqlNotAllowedError, match=r"nested too deeply|could not be checked"):
            t.sql(query)


def test_sql_cannot_read_the_sandbox_settings(trident: Trident) -> None:
    """current_setting('allowed_paths') listed every data file behind the views (and
    home/temp directories the machine's layout): settings are refused like duckdb_settings()."""
    t = trident
    t.write("d/set", pa.table({"a": [1]}))
    for query in (
        "select current_setting('allowed_paths') as p from \"d/set\"",
        "select CURRENT_SETTING('home_directory') as p",
        "select a from \"d/set\" where getvariable('x') is null",
    ):
        with pytest.raises(SqlNotAllowedError):
            t.sql(query)
    assert t.sql('select current_date is not null as ok, a from "d/set"').column("ok").to_pylist() == [True]
