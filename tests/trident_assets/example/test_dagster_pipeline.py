"""The example pipeline materialized in-process at TPC-H SF 0.01, checked against DuckDB on the
same Parquet files; then ``trident check`` and the Definitions as ``dagster definitions validate``
loads them."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import duckdb
import pyarrow.compute as pc
import pytest
from click.testing import CliRunner

from tests.conftest import make_settings
from tests.support.dagster_helpers import materialized
from trident_assets.definitions import build_definitions
from trident_assets.example.pipeline import Q3_SQL
from trident_assets.example.tpch import ensure_tpch
from trident_resources import Trident, TridentSettings
from trident_resources.dagster import TridentResource

SCALE = "0.01"
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def run(
    trident_home: Path, pg_dsn: str
) -> Iterator[tuple[TridentSettings, Trident, dg.ExecuteInProcessResult, Path, dg.DagsterInstance]]:
    settings = make_settings(trident_home, pg_dsn, tpch_scale=SCALE)
    defs = build_definitions(TridentResource.from_settings(settings))
    with dg.instance_for_test() as instance:  # the run publishes once: its materializations are in its event log
        result = defs.resolve_job_def("tpch_pipeline").execute_in_process(raise_on_error=False, instance=instance)
        t = Trident(settings)
        yield settings, t, result, ensure_tpch(settings.home, SCALE), instance
        t.close()


def parquet(folder: Path, table: str) -> str:
    return str(folder / f"{table}.parquet")


def test_the_whole_graph_materializes_with_its_checks(run: Any) -> None:
    _, _, result, _, instance = run
    assert result.success
    assert materialized(result) == {}  # the run published once, at its end: no step recorded one
    meta = materialized(result, instance)
    assert set(meta) == {
        "tpch/customer",
        "tpch/orders",
        "tpch/lineitem",
        "sales/building_customers",
        "sales/q3_revenue",
        "sales/urgent_orders",
        "sales/routine_orders",
        "ml/lineitem_scores",
        "sales/lineitem_revenue",
    }
    for key, m in meta.items():
        for name in (
            "dagster/row_count",
            "dagster/column_schema",
            "dagster/table_name",
            "trident/txn_id",
            "trident/snapshot_id",
            "trident/committed_at",
            "trident/write",
            "trident/provenance",
        ):
            assert name in m, (key, name)
        assert m["trident/write"]["sink"] == "iceberg_native" and m["trident/write"]["schema_version"] >= 1
        # the rest is in trident/write (the few: txn, snapshot, committed_at, provenance, column
        # lineage, inlined_rows, write)
        assert len([k for k in m if k.startswith("trident/")]) <= 7, sorted(m)
    evaluations = result.get_asset_check_evaluations()
    assert len(evaluations) == 20 and all(e.passed for e in evaluations)


def test_row_counts_identity_and_ledger(run: Any) -> None:
    _, t, _result, folder, _ = run
    con = duckdb.connect()
    for table in ("customer", "orders", "lineitem"):
        expected = con.execute(f"SELECT count(*) FROM '{parquet(folder, table)}'").fetchall()[0][0]
        d = t.describe(f"tpch/{table}")
        assert d.row_count == expected
        [entry] = t.history(f"tpch/{table}")
        assert entry.status == "committed" and entry.writer == "ingest.api" and entry.row_count == expected
    building = con.execute(f"SELECT count(*) FROM '{parquet(folder, 'customer')}' WHERE c_mktsegment = 'BUILDING'").fetchall()[0][
        0
    ]
    assert t.describe("sales/building_customers").row_count == building
    for key in ("sales/q3_revenue", "ml/lineitem_scores", "sales/lineitem_revenue"):
        [entry] = t.history(key)
        assert entry.writer == "pipeline.output" and entry.status == "committed"
        rows = t.read(key, columns=["__row_index", "__row_id", "__created_at"])
        assert sorted(rows["__row_index"].to_pylist()) == list(range(rows.num_rows))
        assert pc.count_distinct(rows["__row_id"]).as_py() == rows.num_rows
        assert set(rows["__created_at"].to_pylist()) == {entry.started_at}
        assert sorted(entry.source_refs) == sorted(
            t.describe(key).provenance["lineage"][i]["key"] for i in range(len(entry.source_refs))
        )


def test_provenance_is_merged_downstream(run: Any) -> None:
    _, t, result, _, instance = run
    prov = t.describe("sales/q3_revenue").provenance
    assert prov["counterparty"] == "Transaction Processing Performance Council"
    assert prov["contract"].startswith("TPC-H EULA")
    assert {"tpch", "synthetic", "sales", "revenue"} <= set(prov["tags"])
    assert prov["upstream"] == ["sales/building_customers", "tpch/customer", "tpch/lineitem", "tpch/orders"]
    assert {x["key"] for x in prov["lineage"]} == {"sales/building_customers", "tpch/orders", "tpch/lineitem"}
    assert prov["source_files"] == ["customer.parquet", "orders.parquet", "lineitem.parquet"] or set(prov["source_files"]) == {
        "customer.parquet",
        "orders.parquet",
        "lineitem.parquet",
    }
    assert materialized(result, instance)["sales/q3_revenue"]["trident/provenance"]["counterparty"] == prov["counterparty"]
    assert t.describe("ml/lineitem_scores").provenance["model"] == "late_risk v1"


def test_q3_join_equals_duckdb_on_the_parquet_files(run: Any) -> None:
    _, t, _, folder, _ = run
    con = duckdb.connect()
    for table in ("customer", "orders", "lineitem"):
        con.execute(f"CREATE VIEW {table} AS SELECT * FROM '{parquet(folder, table)}'")
    direct = con.execute(
        Q3_SQL.replace("FROM customer", "FROM (SELECT * FROM customer WHERE c_mktsegment = 'BUILDING') customer")
    ).fetchall()
    ours = t.sql('SELECT l_orderkey, revenue, o_orderdate, o_shippriority FROM "sales/q3_revenue"').to_pylist()
    assert len(direct) > 0
    assert sorted(direct) == sorted(tuple(r.values()) for r in ours)


def test_split_partitions_its_input_exactly(run: Any) -> None:
    _, t, _, _, _ = run
    orders = set(t.read("tpch/orders", columns=["o_orderkey"])["o_orderkey"].to_pylist())
    urgent = t.read("sales/urgent_orders", columns=["o_orderkey", "o_orderpriority"])
    routine = t.read("sales/routine_orders", columns=["o_orderkey", "o_orderpriority"])
    u, r = set(urgent["o_orderkey"].to_pylist()), set(routine["o_orderkey"].to_pylist())
    assert not (u & r) and u | r == orders and len(u) + len(r) == len(orders)
    assert set(urgent["o_orderpriority"].to_pylist()) == {"1-URGENT", "2-HIGH"}
    assert t.describe("sales/urgent_orders").sink == t.describe("sales/routine_orders").sink


def test_model_rows_join_back_to_their_source_rows(run: Any) -> None:
    _, t, _, _, _ = run
    mismatched = t.sql(
        'SELECT count(*) AS n FROM "ml/lineitem_scores" s LEFT JOIN "tpch/lineitem" l ON s.__source_row_index__ = l.__row_index '
        "WHERE l.__row_index IS NULL OR l.l_orderkey <> s.l_orderkey OR l.l_linenumber <> s.l_linenumber"
    )["n"][0].as_py()
    assert mismatched == 0
    assert t.describe("ml/lineitem_scores").row_count == t.describe("tpch/lineitem").row_count


def test_trident_check_exits_zero_then_one_when_a_blocking_check_fails(run: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from trident_cli.main import cli

    settings, t, _, _, _ = run
    monkeypatch.setenv("TRIDENT_HOME", str(settings.home))
    monkeypatch.setenv("TRIDENT_WORKSPACE", settings.workspace)
    monkeypatch.setenv("TRIDENT_PG_DSN", settings.pg_dsn.get_secret_value())
    ok = CliRunner().invoke(cli, ["check", "--select", "sales/*"])
    assert ok.exit_code == 0, ok.output
    assert "14 passed, 0 blocking failure(s)" in " ".join(ok.output.split())
    # break the data: a duplicate order in the urgent half
    t.write(
        "sales/urgent_orders",
        t.read("sales/urgent_orders").drop_columns(["__row_index", "__row_id", "__created_at"]).slice(0, 1),
        mode="append",
    )
    bad = CliRunner().invoke(cli, ["check", "--select", "sales/urgent_orders"])
    assert bad.exit_code == 1, bad.output
    assert "failed" in bad.output and "unique_o_orderkey" in bad.output.replace("\n", "").replace(" ", "").replace("│", "")


def test_definitions_load_cleanly() -> None:
    """The root a Dagster engineer looks for, loaded as ``dagster dev`` loads it: from
    workspace.yaml, and from pyproject's [tool.dagster] with no arguments at all."""
    from trident_assets.definitions import defs

    dg.Definitions.validate_loadable(defs)
    repo = defs.get_repository_def()
    repo.load_all_definitions()
    assert (
        repo.has_job("tpch_pipeline")
        and repo.has_job("tpch_daily")
        and repo.get_sensor_def("trident_reconciler")
        and repo.get_schedule_def("tpch_pipeline_rebuild")
    )
    assert repo.get_sensor_def("trident_ledger_commits")
    assert defs.assets is not None and defs.asset_checks is not None
    conditions = {
        k.to_user_string(): c
        for a in defs.assets
        if isinstance(a, dg.AssetsDefinition)
        for k, c in a.automation_conditions_by_key.items()
    }
    assert conditions == {"sales/lineitem_revenue": dg.AutomationCondition.eager()}  # the example's delta node
    in_step = [a for a in defs.assets or [] if isinstance(a, dg.AssetsDefinition)]  # checks are the assets' own
    checked = {spec.asset_key for c in [*(defs.asset_checks or []), *in_step] for spec in c.check_specs}
    for asset in defs.assets:
        assert isinstance(asset, dg.AssetsDefinition)
        for key in asset.keys:
            assert key in checked, f"{key.to_user_string()} has no checks"
            spec = asset.specs_by_key[key]
            assert spec.kinds and spec.group_name, key
    for args in (["-w", "workspace.yaml"], []):
        done = subprocess.run(
            [str(Path(sys.executable).with_name("dagster")), "definitions", "validate", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": "/tmp"},
        )
        assert done.returncode == 0, (args, done.stdout + done.stderr)
        assert "Validation successful for code location trident." in done.stdout + done.stderr, args


def test_the_daily_partitioned_part_materializes_two_days_and_its_downstream(run: Any) -> None:
    """The example's partitioned datasets (issue 10): two days of ``daily/lineitem`` (line items by
    ship day, delta per day) and ``daily/shipments`` below them, each a run of the ``tpch_daily``
    job with one partition key; row counts match DuckDB on the same Parquet file. Re-running a day
    reads only what that day has not consumed (nothing here)."""
    settings, t, _, folder, _ = run
    defs = build_definitions(TridentResource.from_settings(settings))
    job = defs.resolve_job_def("tpch_daily")
    con = duckdb.connect()
    days = ("1995-03-15", "1995-03-16")
    expected = {
        day: con.execute(f"SELECT count(*) FROM '{parquet(folder, 'lineitem')}' WHERE l_shipdate = DATE '{day}'").fetchall()[0][0]
        for day in days
    }
    assert all(n > 0 for n in expected.values())
    for day in days:
        result = job.execute_in_process(partition_key=day, raise_on_error=False)
        assert result.success, [e.message for e in result.all_events if e.is_step_failure]
        meta = materialized(result)
        assert set(meta) == {"daily/lineitem", "daily/shipments"}
        assert meta["daily/lineitem"]["dagster/row_count"] == expected[day]  # this day's rows
        assert meta["daily/lineitem"]["trident/write"]["mode"] == "replace"  # the day's first run rebuilds it
        assert meta["daily/shipments"]["dagster/row_count"] == 1
        assert all(e.passed for e in result.get_asset_check_evaluations())
    assert t.describe("daily/lineitem").row_count == sum(expected.values())
    parts = t.describe("daily/lineitem").partitions
    assert [(p["partition"]["day(l_shipdate)"], p["row_count"]) for p in parts] == [(d, expected[d]) for d in days]
    totals = t.sql("SELECT strftime(l_shipdate, '%Y-%m-%d') AS day, lines FROM \"daily/shipments\" ORDER BY day").to_pylist()
    assert totals == [{"day": d, "lines": expected[d]} for d in days]

    again = job.execute_in_process(partition_key=days[0], raise_on_error=False)
    assert again.success
    rerun = materialized(again)["daily/lineitem"]
    assert rerun["trident/write"]["incremental"] == "true" and rerun["trident/write"]["rows_written"] == 0
    assert t.describe("daily/lineitem").row_count == sum(expected.values())

    from trident_cli.check import run_checks  # `trident check` runs the partitioned datasets' checks too

    outcomes = run_checks(defs, ("daily/*",))
    assert len(outcomes) == 4 and all(o.status == "passed" for o in outcomes), outcomes
