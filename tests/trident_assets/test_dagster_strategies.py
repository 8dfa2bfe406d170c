"""Output strategies, delta, the join guard, split sinks and model lineage on small synthetic data."""

from __future__ import annotations

from typing import TYPE_CHECKING

import dagster as dg
import duckdb
import pyarrow as pa
import pytest

from tests.support.dagster_helpers import materialize_nodes, materialized, step_errors, succeeded
from trident_assets import (
    append_always,
    append_new,
    delta,
    join_asset,
    model_asset,
    row_count_between,
    snapshot_replace,
    split_asset,
    transform_asset,
    unique,
    upsert,
)
from trident_resources import DatasetNotFoundError, Trident, TridentSettings

if TYPE_CHECKING:
    from trident_assets.compute import Session
    from trident_assets.join_guard import SourceStats


def items(start: int, n: int, price: float = 1.0) -> pa.Table:
    return pa.table({"id": list(range(start, start + n)), "price": [price * i for i in range(start, start + n)]})


def test_delta_reads_only_new_rows_and_rebuilds_after_a_source_replace(settings: TridentSettings, trident: Trident) -> None:
    trident.write("src/items", items(0, 100))
    node = transform_asset("out/doubled", "src/items", "SELECT id, price * 2 AS price2 FROM source", strategy=delta())

    first = materialized(succeeded(materialize_nodes(settings, [node])))["out/doubled"]
    assert first["trident/write"]["mode"] == "replace" and first["dagster/row_count"] == 100
    src = trident.describe("src/items")
    assert trident.watermarks("out/doubled") == {"src/items": src.committed_at}

    appended = trident.write("src/items", items(100, 7), mode="append")
    second = materialized(succeeded(materialize_nodes(settings, [node])))["out/doubled"]
    assert second["trident/write"]["mode"] == "append"
    assert second["trident/write"]["rows_written"] == 7 and second["dagster/row_count"] == 107
    assert trident.watermarks("out/doubled")["src/items"] == appended.committed_at
    out = trident.read("out/doubled")
    assert sorted(out["id"].to_pylist()) == list(range(107))  # nothing twice, nothing lost

    quiet = materialized(succeeded(materialize_nodes(settings, [node])))["out/doubled"]
    assert quiet["trident/write"]["rows_written"] == 0 and quiet["dagster/row_count"] == 107

    trident.write("src/items", items(0, 5, price=10.0))  # replace inside the window
    rebuilt = materialized(succeeded(materialize_nodes(settings, [node])))["out/doubled"]
    assert rebuilt["trident/write"]["mode"] == "replace" and "replace" in rebuilt["trident/write"]["plan"]
    assert trident.read("out/doubled").sort_by("id")["price2"].to_pylist() == [20.0 * i for i in range(5)]


def test_delta_after_an_upsert_of_the_source_rebuilds(settings: TridentSettings, trident: Trident) -> None:
    trident.write("src/items", items(0, 10))
    node = transform_asset("out/copy", "src/items", "SELECT * FROM source", strategy=delta())
    succeeded(materialize_nodes(settings, [node]))
    trident.write("src/items", items(5, 10, price=3.0), mode="upsert", keys=["id"])
    meta = materialized(succeeded(materialize_nodes(settings, [node])))["out/copy"]
    assert meta["trident/write"]["mode"] == "replace" and meta["dagster/row_count"] == 15


def test_delta_with_keys_upserts_each_increment(settings: TridentSettings, trident: Trident) -> None:
    trident.write("src/items", items(0, 10))
    node = transform_asset("out/keyed", "src/items", "SELECT id, price FROM source", strategy=delta(keys=["id"]))
    succeeded(materialize_nodes(settings, [node]))
    trident.write("src/items", items(10, 3), mode="append_new", keys=["id"])
    meta = materialized(succeeded(materialize_nodes(settings, [node])))["out/keyed"]
    assert meta["trident/write"]["mode"] == "upsert" and meta["dagster/row_count"] == 13


def test_keyed_strategies(settings: TridentSettings, trident: Trident) -> None:
    trident.write("src/items", items(0, 10))
    nodes = {
        "out/snap": transform_asset(
            "out/snap", "src/items", "SELECT * FROM source WHERE id < 5", strategy=snapshot_replace(["id"])
        ),
        "out/always": transform_asset("out/always", "src/items", "SELECT * FROM source", strategy=append_always()),
        "out/new": transform_asset("out/new", "src/items", "SELECT * FROM source", strategy=append_new(["id"])),
        "out/up": transform_asset("out/up", "src/items", "SELECT id, price FROM source", strategy=upsert(["id"])),
    }
    succeeded(materialize_nodes(settings, list(nodes.values())))
    ids_before = {r["id"]: r["__row_id"] for r in trident.read("out/snap", columns=["id", "__row_id"]).to_pylist()}
    trident.write("src/items", items(0, 12, price=2.0))
    meta = materialized(succeeded(materialize_nodes(settings, list(nodes.values()))))
    assert meta["out/snap"]["trident/write"]["preserved"] == 5
    ids_after = {r["id"]: r["__row_id"] for r in trident.read("out/snap", columns=["id", "__row_id"]).to_pylist()}
    assert ids_after == ids_before  # identity kept across the snapshot replace
    assert meta["out/always"]["dagster/row_count"] == 22
    assert meta["out/new"]["trident/write"]["skipped"] == 10 and meta["out/new"]["dagster/row_count"] == 12
    assert meta["out/up"]["dagster/row_count"] == 12
    assert trident.read("out/up", row_filter="id == 3")["price"].to_pylist() == [6.0]


def test_join_guard_refuses_a_cross_join_and_allows_a_key_join(settings: TridentSettings, trident: Trident) -> None:
    trident.write("src/a", pa.table({"k": list(range(1000)), "a": list(range(1000))}))
    trident.write("src/b", pa.table({"k": list(range(1000)), "b": list(range(1000))}))
    sources = {"a": "src/a", "b": "src/b"}
    cross = join_asset("out/cross", sources, "SELECT a.a, b.b FROM a, b", max_rows=100_000)
    keyed = join_asset("out/keyed", sources, "SELECT a.k, a.a, b.b FROM a JOIN b ON a.k = b.k", max_rows=100_000)
    result = materialize_nodes(settings, [cross, keyed])
    assert not result.success  # the cross join's step is refused
    errors = step_errors(result)
    assert any("JoinTooLargeError" in e or "refused" in e for e in errors), errors
    assert "1,000,000" in errors[0] and "max_rows" in errors[0]
    meta = materialized(result)
    assert "out/cross" not in meta and not trident.exists("out/cross")
    assert meta["out/keyed"]["dagster/row_count"] == 1000


def test_join_guard_allows_a_cross_join_within_the_bound_of_sources_sharing_column_names(
    settings: TridentSettings, trident: Trident
) -> None:
    """Issue 9.3: scans were matched to sources by column names, so two sources sharing them made
    a 300 x 200 cross join look like 300 x 300 = 90,000 rows."""
    trident.write("src/a", pa.table({"k": [1] * 300, "v": list(range(300))}))
    trident.write("src/b", pa.table({"k": [1] * 200, "v": list(range(200))}))
    node = join_asset("out/cross", {"a": "src/a", "b": "src/b"}, "SELECT a.v AS av, b.v AS bv FROM a, b", max_rows=60_000)
    result = materialize_nodes(settings, [node])
    assert result.success, step_errors(result)
    meta = materialized(result)["out/cross"]
    assert meta["dagster/row_count"] == 60_000 and meta["trident/write"]["join_estimate"] == 60_000


def test_join_guard_refuses_a_many_to_many_equi_join_before_writing(settings: TridentSettings, trident: Trident) -> None:
    """Issue 9.3: every equi-join was assumed to be a key join (bounded by its larger side), so a
    join where every row has k=1 wrote 60,000 rows under max_rows=50,000."""
    trident.write("src/a", pa.table({"k": [1] * 300, "v": list(range(300))}))
    trident.write("src/b", pa.table({"k": [1] * 200, "v": list(range(200))}))
    sql = "SELECT a.v AS av, b.v AS bv FROM a JOIN b ON a.k = b.k"
    result = materialize_nodes(settings, [join_asset("out/m2m", {"a": "src/a", "b": "src/b"}, sql, max_rows=50_000)])
    assert not result.success
    [error] = step_errors(result)
    assert "JoinTooLargeError" in error and "60,000 rows" in error and "50,000" in error, error
    assert "k = k (1 x 1 distinct)" in error, error  # it says why: one distinct key on both sides
    with pytest.raises(DatasetNotFoundError):
        trident.history("out/m2m")  # refused before the write began: no ledger row, no dataset


def _orders_lines_customers(trident: Trident) -> tuple[Session, list[SourceStats]]:
    """Three sources of the join guard's tests (1,000 orders of 50 customers, 4 lines per order),
    a node session over them as ``o``, ``l`` and ``c``, and their recorded row counts."""
    from trident_assets.compute import open_session
    from trident_assets.join_guard import SourceStats
    from trident_assets.strategies import replace

    trident.write("src/orders", pa.table({"o_id": list(range(1000)), "cust": [i % 50 for i in range(1000)]}))
    trident.write("src/lines", pa.table({"l_order": [i // 4 for i in range(4000)], "qty": list(range(4000))}))
    trident.write("src/cust", pa.table({"c_id": list(range(50)), "seg": ["x"] * 50}))
    names = {"o": "src/orders", "l": "src/lines", "c": "src/cust"}
    session = open_session(trident, "out/x", names, replace())
    stats = [SourceStats(n, k, trident.describe(k).row_count) for n, k in names.items()]
    return session, stats


def test_join_guard_estimates_from_the_data(settings: TridentSettings, trident: Trident) -> None:
    """Key joins, foreign-key fan-out, a renamed key, a grouped side and an IN-subquery, against the
    true row counts (within the HyperLogLog error of the distinct counts)."""
    from trident_assets.join_guard import check_join

    session, stats = _orders_lines_customers(trident)
    try:

        def est(sql: str) -> int:
            return check_join(session.con, sql, stats, 10**12, "out/x").rows

        def true(sql: str) -> int:
            return int(session.con.execute(f"SELECT count(*) FROM ({sql})").fetchall()[0][0])

        for sql in (
            "SELECT * FROM o JOIN l ON o.o_id = l.l_order",  # 1:4 fan-out
            "SELECT * FROM o JOIN l ON o.o_id = l.l_order JOIN c ON c.c_id = o.cust",  # three-way
            "SELECT * FROM (SELECT o_id AS id FROM o) x JOIN l ON x.id = l.l_order",  # renamed key
            "SELECT * FROM (SELECT cust, count(*) n FROM o GROUP BY cust) g JOIN c ON g.cust = c.c_id",
            "SELECT * FROM o WHERE o_id IN (SELECT l_order FROM l)",  # semi join
        ):
            assert abs(est(sql) - true(sql)) <= 0.05 * true(sql), (sql, est(sql), true(sql))
        assert abs(est("SELECT * FROM o JOIN c ON o.cust = c.c_id") - 1000) <= 50  # a key join: about its larger side
        assert est("SELECT * FROM o, c") == 50_000 == true("SELECT * FROM o, c")
        assert est("SELECT * FROM o JOIN l ON o.o_id < l.qty") == 4_000_000  # no equality: the product
    finally:
        session.close()


class _CountingConnection:
    """A DuckDB connection that records the SQL it is given (DuckDB's own class cannot be patched)."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con
        self.queries: list[str] = []

    def execute(self, sql: str, *args: object) -> duckdb.DuckDBPyConnection:
        self.queries.append(sql)
        return self.con.execute(sql, *args)


def test_join_guard_scans_each_source_once_for_all_its_key_columns(settings: TridentSettings, trident: Trident) -> None:
    """Issue 12: a distinct count per key column was a scan per column (TPC-H Q3: seven scans, four
    of ``orders``), and a source's unknown row count one more; the guard now counts all of a
    source's key columns, and its rows when needed, in one scan, same estimate."""
    from trident_assets.join_guard import SourceStats, check_join

    session, stats = _orders_lines_customers(trident)
    sql = "SELECT cust, count(*) FROM o JOIN l ON o.o_id = l.l_order JOIN c ON c.c_id = o.cust GROUP BY cust"
    try:
        counting = _CountingConnection(session.con)
        estimate = check_join(counting, sql, stats, 10**12, "out/x")  # type: ignore[arg-type]
        scans = [q for q in counting.queries if "approx_count_distinct" in q]
        assert len(scans) == 3, scans  # o (o_id and cust), l, c
        assert abs(estimate.rows - 4000) <= 200
        # rows the control plane has no count of (a delta slice): counted in the same scan
        counting = _CountingConnection(session.con)
        unknown = [SourceStats(known.name, known.key, None) for known in stats]
        assert check_join(counting, sql, unknown, 10**12, "out/x").rows == estimate.rows  # type: ignore[arg-type]
        scans = [q for q in counting.queries if not q.startswith("DESCRIBE")]
        assert len(scans) == 3 and all("count(*)" in q for q in scans), scans
    finally:
        session.close()


def test_split_refuses_outputs_in_different_sinks(settings: TridentSettings, trident: Trident) -> None:
    trident.write("src/items", items(0, 10))
    trident.router.set_pin("out/low", "pg")
    node = split_asset("out/high", "out/low", "src/items", "price >= 5")
    result = materialize_nodes(settings, [node])
    assert not result.success
    assert any("different sinks" in e for e in step_errors(result))
    assert not trident.exists("out/high") and not trident.exists("out/low")


def test_split_can_be_subset(settings: TridentSettings, trident: Trident) -> None:
    """Issue 9.1: materializing one output of a split (the UI's "Materialize" on one asset) runs
    only that output and its checks, and the run succeeds."""
    trident.write("src/items", pa.table({"id": [1, 2, 3, 4], "flag": [True, False, None, True]}))
    node = split_asset("out/yes", "out/no", "src/items", "flag", expectations={"out/no": [unique("id")]})
    result = materialize_nodes(settings, [node], selection=["out/no"])
    assert result.success, step_errors(result)
    assert set(materialized(result)) == {"out/no"}
    assert sorted(trident.read("out/no")["id"].to_pylist()) == [2, 3]  # FALSE and NULL are unmatched
    [check] = result.get_asset_check_evaluations()
    assert check.asset_key == dg.AssetKey(["out", "no"]) and check.passed
    assert not trident.exists("out/yes")


def test_the_unmatched_side_of_a_split_is_described_as_rows_where_the_predicate_is_not_true() -> None:
    """Issue 9.7: NULLs go to the unmatched half, so it is not ``NOT (pred)``."""
    specs = split_asset("out/high", "out/low", "src/items", "price >= 5").assets_def.specs_by_key
    low = specs[dg.AssetKey(["out", "low"])].description or ""
    high = specs[dg.AssetKey(["out", "high"])].description or ""
    assert "NOT (" not in low
    assert low == "rows of src/items where (price >= 5) is not true: false or NULL"
    assert high == "rows of src/items where (price >= 5) is true"


def test_every_factory_passes_its_automation_condition_to_dagster() -> None:
    eager = dg.AutomationCondition.eager()
    nodes = [
        transform_asset("out/t", "src/a", "SELECT * FROM source", automation_condition=eager),
        join_asset("out/j", {"a": "src/a", "b": "src/b"}, "SELECT * FROM a, b", automation_condition=eager),
        split_asset("out/s1", "out/s2", "src/a", "x > 1", automation_condition=eager),
        model_asset("out/m", "src/a", lambda b: b, automation_condition=eager),
    ]
    conditions = {k.to_user_string(): c for n in nodes for k, c in n.assets_def.automation_conditions_by_key.items()}
    assert conditions == {k: eager for k in ("out/t", "out/j", "out/s1", "out/s2", "out/m")}
    assert transform_asset("out/t", "src/a", "SELECT 1").assets_def.automation_conditions_by_key == {}


def test_model_rows_must_say_which_source_row_they_came_from(settings: TridentSettings, trident: Trident) -> None:
    trident.write("src/items", items(0, 10))

    def halve(batch: pa.RecordBatch) -> pa.Table:
        return pa.Table.from_batches([batch]).slice(0, batch.num_rows // 2).select(["id"])

    result = materialize_nodes(settings, [model_asset("out/bad", "src/items", halve)])
    assert not result.success
    assert any("__source_row_index__" in e for e in step_errors(result))
    assert not trident.exists("out/bad")


def test_a_failing_blocking_check_stops_downstream(settings: TridentSettings, trident: Trident) -> None:
    trident.write("src/items", items(0, 10))
    up = transform_asset("out/up", "src/items", "SELECT * FROM source", expectations=[row_count_between(max_rows=5)])
    down = transform_asset("out/down", "out/up", "SELECT * FROM source")
    result = materialize_nodes(settings, [up, down])
    assert not result.success  # the blocking check fails the step (its version is not published)
    [evaluation] = result.get_asset_check_evaluations()
    assert not evaluation.passed
    assert set(materialized(result)) == set()  # staged, never published: Dagster records no new version
    assert not trident.exists("out/down")


def test_a_non_blocking_check_only_warns(settings: TridentSettings, trident: Trident) -> None:
    trident.write("src/items", items(0, 10))
    up = transform_asset(
        "out/up", "src/items", "SELECT * FROM source", expectations=[row_count_between(max_rows=5, blocking=False)]
    )
    down = transform_asset("out/down", "out/up", "SELECT * FROM source")
    result = materialize_nodes(settings, [up, down])
    assert result.success, step_errors(result)
    assert set(materialized(result)) == {"out/up", "out/down"}


@pytest.mark.parametrize("sql", ["SELECT * FROM nowhere", "SELEC 1"])
def test_bad_sql_fails_before_anything_is_written(settings: TridentSettings, trident: Trident, sql: str) -> None:
    trident.write("src/items", items(0, 3))
    result = materialize_nodes(settings, [transform_asset("out/x", "src/items", sql)])
    assert not result.success
    assert any("the node's SQL failed" in e for e in step_errors(result))
    assert not trident.exists("out/x")


def test_the_join_guard_plans_on_a_database_opened_ahead(trident: Trident, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 12: the guard planned the node's SQL on a DuckDB database it opened itself (~15-20 ms
    of the step); it now takes a sandbox on a spare one, opened ahead on a helper thread, and
    still refuses what it refused."""
    import threading

    import duckdb

    from trident_assets.compute import open_session
    from trident_assets.join_guard import JoinTooLargeError, SourceStats, check_join
    from trident_assets.strategies import replace
    from trident_resources.sql.sandbox import PARSER_DATABASE, SPARES

    trident.write("src/a", pa.table({"k": [1] * 300, "v": list(range(300))}))
    trident.write("src/b", pa.table({"k": [1] * 200, "v": list(range(200))}))
    session = open_session(trident, "out/x", {"a": "src/a", "b": "src/b"}, replace())
    stats = [SourceStats("a", "src/a", 300), SourceStats("b", "src/b", 200)]
    opened: list[str] = []
    real = duckdb.connect

    def connect(*args: object, **kwargs: object) -> duckdb.DuckDBPyConnection:
        opened.append(threading.current_thread().name)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    def spare_ready() -> None:
        SPARES.prepare(*PARSER_DATABASE)
        while PARSER_DATABASE not in SPARES._spares:  # being opened on its helper thread
            threading.Event().wait(0.01)

    try:
        monkeypatch.setattr(duckdb, "connect", connect)
        sql = "SELECT a.v AS av, b.v AS bv FROM a JOIN b ON a.k = b.k"
        spare_ready()
        assert check_join(session.con, sql, stats, 60_000, "out/x").rows == 60_000
        spare_ready()
        with pytest.raises(JoinTooLargeError):
            check_join(session.con, sql, stats, 50_000, "out/x")
        assert threading.main_thread().name not in opened  # only helpers opened databases (the next spares)
    finally:
        session.close()
