"""Column lineage of SQL nodes: derived from the node's SQL (sqlglot, DuckDB dialect), kept in the
output's provenance per column, reported to Dagster as ``dagster/column_lineage``; a column it
cannot trace is said to be untraced, never given a plausible source."""

from __future__ import annotations

import dagster as dg
import pyarrow as pa

from tests.support.dagster_helpers import materialize_nodes, materialized, succeeded
from trident_assets import join_asset, split_asset, transform_asset
from trident_assets.column_lineage import column_lineage
from trident_assets.example.pipeline import Q3_SQL
from trident_resources import Trident, TridentSettings

Q3_SOURCES = {"customer": "sales/building_customers", "orders": "tpch/orders", "lineitem": "tpch/lineitem"}
Q3_COLUMNS = {
    "customer": ["c_custkey", "c_name", "c_mktsegment"],
    "orders": ["o_orderkey", "o_custkey", "o_orderdate", "o_shippriority"],
    "lineitem": ["l_orderkey", "l_extendedprice", "l_discount", "l_shipdate"],
}


def test_q3_columns_trace_to_the_tables_they_read() -> None:
    out = column_lineage(Q3_SQL, Q3_SOURCES, Q3_COLUMNS, ["l_orderkey", "revenue", "o_orderdate", "o_shippriority"])
    assert out["l_orderkey"] == {"sources": [{"key": "tpch/lineitem", "column": "l_orderkey"}]}
    assert sorted(s["column"] for s in out["revenue"]["sources"]) == ["l_discount", "l_extendedprice"]
    assert out["o_orderdate"] == {"sources": [{"key": "tpch/orders", "column": "o_orderdate"}]}


def test_what_cannot_be_traced_is_said_untraced() -> None:
    src, cols = {"source": "src/items"}, {"source": ["id", "price"]}
    out = column_lineage("SELECT 1 AS one, count(*) AS n, id FROM source GROUP BY id", src, cols, ["one", "n", "id"])
    assert "untraced" in out["one"] and "untraced" in out["n"] and out["id"]["sources"] == [{"key": "src/items", "column": "id"}]
    # a column the sources do not have, and SQL the parser cannot follow: untraced, with the reason
    missing = column_lineage("SELECT nope FROM source", src, cols, ["nope"])["nope"]
    assert missing["untraced"].startswith("untraced:") and "sources" not in missing
    broken = column_lineage("SELECT FROM WHERE", src, cols, ["x"])["x"]
    assert "could not be followed" in broken["untraced"]
    # through a CTE, an alias and DuckDB's folding of unquoted names
    cte = column_lineage("WITH t AS (SELECT PRICE * 2 AS p FROM source s) SELECT p + 1 AS q FROM t", src, cols, ["q"])
    assert cte["q"] == {"sources": [{"key": "src/items", "column": "price"}]}


def test_sql_nodes_report_column_lineage_to_dagster_and_keep_it_in_provenance(
    settings: TridentSettings, trident: Trident
) -> None:
    trident.write("src/items", pa.table({"id": [1, 2, 3], "price": [1.0, 2.0, 3.0], "cat": ["a", "b", "a"]}))
    trident.write("src/cats", pa.table({"cat": ["a", "b"], "label": ["Apples", "Bananas"]}))
    nodes = [
        transform_asset("out/priced", "src/items", "SELECT id, price * 2 AS price2, 'eur' AS currency FROM source"),
        join_asset(
            "out/labelled",
            {"i": "src/items", "c": "src/cats"},
            "SELECT i.id, c.label, count(*) OVER () AS total FROM i JOIN c ON i.cat = c.cat",
        ),
        split_asset("out/cheap", "out/dear", "src/items", "price < 2"),
    ]
    meta = materialized(succeeded(materialize_nodes(settings, nodes)))

    lineage = meta["out/labelled"]["dagster/column_lineage"]
    assert isinstance(lineage, dg.TableColumnLineage)
    deps = {c: [(d.asset_key.to_user_string(), d.column_name) for d in ds] for c, ds in lineage.deps_by_column.items()}
    assert deps == {"id": [("src/items", "id")], "label": [("src/cats", "label")]}  # total: untraced, so absent
    provenance = trident.provenance("out/labelled")["column_lineage"]
    assert provenance["label"] == {"sources": [{"key": "src/cats", "column": "label"}]}
    assert provenance["total"]["untraced"].startswith("untraced")

    priced = trident.provenance("out/priced")["column_lineage"]
    assert priced["price2"] == {"sources": [{"key": "src/items", "column": "price"}]} and "untraced" in priced["currency"]
    for half in ("out/cheap", "out/dear"):  # SELECT * of a split: every column from its own source column
        cols = meta[half]["dagster/column_lineage"].deps_by_column
        assert {c: [d.column_name for d in ds] for c, ds in cols.items()} == {"id": ["id"], "price": ["price"], "cat": ["cat"]}


def test_column_lineage_is_the_datasets_own_not_merged_downstream(settings: TridentSettings, trident: Trident) -> None:
    trident.write("src/items", pa.table({"id": [1, 2], "price": [1.0, 2.0]}))
    first = transform_asset("out/a", "src/items", "SELECT id, price AS p FROM source")
    second = transform_asset("out/b", "out/a", "SELECT id, p * 10 AS p10 FROM source")
    succeeded(materialize_nodes(settings, [first, second]))
    lineage = trident.provenance("out/b")["column_lineage"]
    assert set(lineage) == {"id", "p10"}  # not out/a's columns carried along
    assert lineage["p10"] == {"sources": [{"key": "out/a", "column": "p"}]}


def test_the_materialization_shows_the_column_lineage_in_its_own_entry(settings: TridentSettings, trident: Trident) -> None:
    """Kept out of ``trident/provenance`` (a long provenance is folded away in the UI), shown per
    column, traced or not, as ``trident/column_lineage``."""
    trident.write("src/items", pa.table({"id": [1, 2], "price": [1.0, 2.0]}))
    node = transform_asset("out/c", "src/items", "SELECT id, 1 AS one FROM source")
    meta = materialized(succeeded(materialize_nodes(settings, [node])))["out/c"]
    assert "column_lineage" not in meta["trident/provenance"]
    shown = meta["trident/column_lineage"]
    assert shown["id"] == {"sources": [{"key": "src/items", "column": "id"}]} and "untraced" in shown["one"]
    assert trident.provenance("out/c")["column_lineage"] == shown
