"""Dagster partitions through TridentIOManager and the node factories (issue 10)."""

import subprocess
import sys
from datetime import date, timedelta
from pathlib import Path
from typing import cast

import dagster as dg
import pyarrow as pa

from tests.support.dagster_helpers import cli_env, materialized, resources_for, step_errors, succeeded
from trident_resources import PartitionFilter, Trident, TridentSettings
from trident_resources.sinks.iceberg.sink import IcebergSink

REPO = Path(__file__).resolve().parents[3]
DAILY = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-03-01")


def _rows(day: str, n: int, base: int = 0) -> pa.Table:
    d = date.fromisoformat(day)
    return pa.table({"day": [d] * n, "v": list(range(base, base + n))})


def test_a_partitioned_asset_without_partition_expr_is_refused_and_writes_nothing(
    settings: TridentSettings, trident: Trident
) -> None:
    @dg.asset(key=["dp", "undeclared"], partitions_def=DAILY)
    def undeclared(context: dg.AssetExecutionContext) -> pa.Table:
        return _rows(context.partition_key, 2)

    result = dg.materialize([undeclared], partition_key="2024-01-01", resources=resources_for(settings), raise_on_error=False)
    assert not result.success
    assert any("PartitionError" in e or "partition_expr" in e for e in step_errors(result))
    assert not trident.exists("dp/undeclared")


def test_two_daily_partitions_are_both_kept_and_rematerializing_one_replaces_only_it(
    settings: TridentSettings, trident: Trident
) -> None:
    calls: dict[str, int] = {}

    @dg.asset(key=["dp", "daily"], partitions_def=DAILY, metadata={"partition_expr": "day"})
    def daily(context: dg.AssetExecutionContext) -> pa.Table:
        k = context.partition_key
        calls[k] = calls.get(k, 0) + 1
        return _rows(k, 3 if k.endswith("01") else 2, base=100 * calls[k])

    for key in ("2024-01-01", "2024-01-02"):
        result = dg.materialize([daily], partition_key=key, resources=resources_for(settings), raise_on_error=False)
        assert result.success, step_errors(result)
    assert trident.describe("dp/daily").row_count == 5
    meta = materialized(result)["dp/daily"]
    assert meta["dagster/row_count"] == 2 and meta["trident/write"]["dataset_row_count"] == 5
    other = {r["v"]: r for r in trident.read("dp/daily").to_pylist() if r["day"] == date(2024, 1, 2)}
    result = dg.materialize([daily], partition_key="2024-01-01", resources=resources_for(settings), raise_on_error=False)
    assert result.success, step_errors(result)
    rows = trident.read("dp/daily").to_pylist()
    assert sorted(r["v"] for r in rows if r["day"] == date(2024, 1, 1)) == [200, 201, 202]
    assert {r["v"]: r for r in rows if r["day"] == date(2024, 1, 2)} == other
    parts = trident.describe("dp/daily").partitions
    assert [(p["partition"]["day(day)"], p["row_count"]) for p in parts] == [("2024-01-01", 3), ("2024-01-02", 2)]


def test_a_partition_run_straying_outside_its_window_is_refused(settings: TridentSettings, trident: Trident) -> None:
    @dg.asset(key=["dp", "stray"], partitions_def=DAILY, metadata={"partition_expr": "day"})
    def stray(context: dg.AssetExecutionContext) -> pa.Table:
        return _rows("2024-01-05", 2) if context.partition_key == "2024-01-02" else _rows(context.partition_key, 1)

    assert dg.materialize([stray], partition_key="2024-01-01", resources=resources_for(settings)).success
    before = trident.describe("dp/stray")
    result = dg.materialize([stray], partition_key="2024-01-02", resources=resources_for(settings), raise_on_error=False)
    assert not result.success and any("outside the partition" in e for e in step_errors(result))
    after = trident.describe("dp/stray")
    assert (after.snapshot_id, after.row_count) == (before.snapshot_id, 1)


def test_a_single_run_backfill_of_30_days_is_one_snapshot(settings: TridentSettings, trident: Trident) -> None:
    @dg.asset(
        key=["dp", "backfill"],
        partitions_def=DAILY,
        metadata={"partition_expr": "day"},
        backfill_policy=dg.BackfillPolicy.single_run(),
    )
    def backfill(context: dg.AssetExecutionContext) -> pa.Table:
        window = context.partition_time_window
        n = (window.end - window.start).days
        return pa.table(
            {"day": [window.start.date() + timedelta(days=i) for i in range(n) for _ in range(2)], "v": list(range(2 * n))}
        )

    keys = DAILY.get_partition_keys()[:30]
    result = dg.materialize(
        [backfill],
        resources=resources_for(settings),
        raise_on_error=False,
        tags={"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]},
    )
    assert result.success, step_errors(result)
    assert trident.describe("dp/backfill").row_count == 60
    assert len(trident.describe("dp/backfill").partitions) == 30
    assert [e.status for e in trident.history("dp/backfill")] == ["committed"]  # ONE transaction, one snapshot


def test_a_partitioned_downstream_reads_only_its_partitions(settings: TridentSettings, trident: Trident) -> None:
    @dg.asset(
        key=["dp", "up"], partitions_def=DAILY, metadata={"partition_expr": "day"}, backfill_policy=dg.BackfillPolicy.single_run()
    )
    def up(context: dg.AssetExecutionContext) -> pa.Table:
        w = context.partition_time_window
        n = (w.end - w.start).days
        return pa.table(
            {"day": [w.start.date() + timedelta(days=i) for i in range(n) for _ in range(3)], "v": list(range(3 * n))}
        )

    seen: dict[str, object] = {}

    @dg.asset(
        key=["dp", "down"], partitions_def=DAILY, metadata={"partition_expr": "day"}, ins={"up": dg.AssetIn(key=["dp", "up"])}
    )
    def down(context: dg.AssetExecutionContext, up: pa.Table) -> pa.Table:
        seen["days"] = sorted(set(up.column("day").to_pylist()))
        return up.select(["day", "v"])

    @dg.asset(key=["dp", "all"], ins={"up": dg.AssetIn(key=["dp", "up"])})
    def everything(up: pa.Table) -> pa.Table:
        seen["all"] = up.num_rows
        return up.select(["day"])

    keys = DAILY.get_partition_keys()[:10]
    res = dg.materialize(
        [up],
        resources=resources_for(settings),
        raise_on_error=False,
        tags={"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]},
    )
    assert res.success, step_errors(res)
    opened: list[int] = []
    sink = cast(IcebergSink, trident.driver.sinks["iceberg_native"])
    original = sink.tables.file_dataset

    def counting(table, paths, schema=None):
        opened.append(len(paths))
        return original(table, paths, schema)

    sink.tables.file_dataset = counting  # type: ignore[method-assign, assignment]  # a test double without the fmt parameter
    try:
        from trident_resources.dagster import TridentIOManager, TridentResource

        class Counting(TridentResource):
            def get_client(self) -> Trident:
                return trident

        r = Counting.from_settings(settings)
        resources = {"trident": r, "io_manager": TridentIOManager(trident=r)}
        res = dg.materialize([up, down], selection=[down], partition_key="2024-01-04", resources=resources, raise_on_error=False)
    finally:
        sink.tables.file_dataset = original  # type: ignore[method-assign]
    assert res.success, step_errors(res)
    assert seen["days"] == [date(2024, 1, 4)]
    assert opened == [1]  # the one file of that partition, out of 10
    res = dg.materialize([up, everything], selection=[everything], resources=resources_for(settings), raise_on_error=False)
    assert res.success, step_errors(res)
    assert seen["all"] == 30  # an unpartitioned downstream loads every partition


def test_static_by_daily_multi_partitions(settings: TridentSettings, trident: Trident) -> None:
    multi = dg.MultiPartitionsDefinition({"region": dg.StaticPartitionsDefinition(["eu", "us"]), "date": DAILY})

    @dg.asset(key=["dp", "multi"], partitions_def=multi, metadata={"partition_expr": {"region": "region", "date": "day"}})
    def by_region(context: dg.AssetExecutionContext) -> pa.Table:
        k = context.partition_key.keys_by_dimension
        return pa.table({"region": [k["region"]] * 2, "day": [date.fromisoformat(k["date"])] * 2, "v": [1, 2]})

    for region in ("eu", "us"):
        for day in ("2024-01-01", "2024-01-02"):
            key = dg.MultiPartitionKey({"region": region, "date": day})
            result = dg.materialize([by_region], partition_key=key, resources=resources_for(settings), raise_on_error=False)
            assert result.success, step_errors(result)
    d = trident.describe("dp/multi")
    assert d.row_count == 8 and len(d.partitions) == 4
    result = dg.materialize(
        [by_region],
        partition_key=dg.MultiPartitionKey({"region": "eu", "date": "2024-01-01"}),
        resources=resources_for(settings),
        raise_on_error=False,
    )
    assert result.success and trident.describe("dp/multi").row_count == 8


def test_partitioned_factory_nodes_compute_and_replace_only_their_partition(settings: TridentSettings, trident: Trident) -> None:
    from trident_assets.factories import split_asset, transform_asset

    trident.write("dp/src", pa.table({"day": [date(2024, 1, 1)] * 3 + [date(2024, 1, 2)] * 2, "v": [1, 2, 3, 4, 5]}))
    meta = {"partition_expr": "day"}
    node = transform_asset("dp/doubled", "dp/src", "SELECT day, v * 2 AS v2 FROM source", partitions_def=DAILY, metadata=meta)
    split = split_asset("dp/big", "dp/small", "dp/src", "v > 2", partitions_def=DAILY, metadata=meta)
    for key in ("2024-01-01", "2024-01-02"):
        assets = [node.assets_def, split.assets_def]
        result = dg.materialize(assets, partition_key=key, resources=resources_for(settings), raise_on_error=False)
        assert result.success, step_errors(result)
    assert sorted(r["v2"] for r in trident.read("dp/doubled").to_pylist()) == [2, 4, 6, 8, 10]
    assert sorted(r["v"] for r in trident.read("dp/big").to_pylist()) == [3, 4, 5]
    assert [p["row_count"] for p in trident.describe("dp/doubled").partitions] == [3, 2]
    try:
        transform_asset("dp/undeclared", "dp/src", "SELECT * FROM source", partitions_def=DAILY)
    except Exception as exc:  # refused at definition time
        assert "partition_expr" in str(exc)
    else:
        raise AssertionError("a partitioned node without partition_expr must be refused")


def test_a_partitioned_delta_node_keeps_one_watermark_per_partition(settings: TridentSettings, trident: Trident) -> None:
    """Materializing 2024-01-02 in delta mode neither consumes nor advances 2024-01-01's watermark:
    each day reads exactly the source rows committed after its own last run."""
    from trident_assets import strategies as st
    from trident_assets.factories import transform_asset

    def src_rows(day: date, vs: list[int]) -> pa.Table:
        return pa.table({"day": [day] * len(vs), "v": vs})

    d1, d2 = date(2024, 1, 1), date(2024, 1, 2)
    trident.write("dpd/src", pa.concat_tables([src_rows(d1, [1, 2, 3]), src_rows(d2, [4, 5])]))
    node = transform_asset(
        "dpd/out",
        "dpd/src",
        "SELECT day, v * 10 AS v10 FROM source",
        strategy=st.delta(),
        partitions_def=DAILY,
        metadata={"partition_expr": "day"},
    )

    def run(day: str) -> dict:
        result = dg.materialize([node.assets_def], partition_key=day, resources=resources_for(settings), raise_on_error=False)
        assert result.success, step_errors(result)
        return materialized(result)["dpd/out"]

    first = run("2024-01-01")
    assert first["trident/write"]["mode"] == "replace" and first["dagster/row_count"] == 3  # first run of the day: rebuilt
    trident.write("dpd/src", pa.concat_tables([src_rows(d1, [6]), src_rows(d2, [7, 8])]), mode="append")
    second = run("2024-01-02")
    assert second["trident/write"]["mode"] == "replace" and second["dagster/row_count"] == 4  # its own first run
    third = run("2024-01-01")  # 01-02's run did not advance 01-01's watermark: the new 01-01 row is read now
    assert third["trident/write"]["incremental"] == "true" and third["trident/write"]["mode"] == "append"
    assert third["trident/write"]["rows_written"] == 1 and third["trident/write"]["dataset_row_count"] == 8
    quiet = run("2024-01-02")  # 01-01's run did not advance 01-02's either; nothing new for it
    assert quiet["trident/write"]["mode"] == "append" and quiet["trident/write"]["rows_written"] == 0
    out = trident.read("dpd/out").to_pylist()
    by_day = {d: sorted(r["v10"] for r in out if r["day"] == d) for d in (d1, d2)}
    assert by_day == {d1: [10, 20, 30, 60], d2: [40, 50, 70, 80]}  # nothing twice, nothing lost
    src = trident.describe("dpd/src")
    assert trident.watermarks("dpd/out", _day_filter(d1)) == {"dpd/src": src.committed_at}


def _day_filter(day: date) -> PartitionFilter:
    return PartitionFilter.time_window("day", day, day + timedelta(days=1), "day")


CONCURRENT_DEFS = """
import time
from datetime import date
from pathlib import Path

import dagster as dg
import pyarrow as pa

from trident_resources.dagster import TridentIOManager, TridentResource

BARRIER = Path({barrier!r})


@dg.asset(key=["dpc", "daily"], partitions_def=dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-03-01"),
          metadata={{"partition_expr": "day"}})
def daily(context: dg.AssetExecutionContext) -> pa.Table:
    day = context.partition_key
    (BARRIER / day).touch()
    deadline = time.monotonic() + 300  # a bound, not an assertion: all four runs write at once
    while len(list(BARRIER.iterdir())) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    i = int(day[-2:])
    return pa.table({{"day": [date.fromisoformat(day)] * 1000, "v": list(range(1000 * i, 1000 * i + 1000))}})


trident = TridentResource()
defs = dg.Definitions(assets=[daily], resources={{"trident": trident, "io_manager": TridentIOManager(trident=trident)}})
"""


def test_four_separate_dagster_runs_writing_four_partitions_all_land(
    settings: TridentSettings, trident: Trident, tmp_path: Path
) -> None:
    """Issue 10: four runs in four OS processes (``dagster asset materialize --partition``, each its
    own Trident, pool and writer lock) write four days of one dataset at the same time. All land
    at the default writer wait, no row is lost and no ``__row_index`` is stamped twice."""
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    (tmp_path / "defs.py").write_text(CONCURRENT_DEFS.format(barrier=str(barrier)))
    trident.write("dpc/daily", _rows("2024-01-31", 5), partition=_day_filter(date(2024, 1, 31)))  # partitioned already
    env = cli_env(settings, REPO)  # no TRIDENT_WRITER_WAIT_SECONDS: the default wait
    dagster = str(Path(sys.executable).with_name("dagster"))
    days = ["2024-01-01", "2024-01-02", "2024-01-03", "2024-01-04"]
    procs = [
        subprocess.Popen(
            [dagster, "asset", "materialize", "-f", str(tmp_path / "defs.py"), "--select", "dpc/daily", "--partition", day],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for day in days
    ]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    for day, p, out in zip(days, procs, outputs, strict=True):
        assert p.returncode == 0, f"run of {day} failed:\n{out[-4000:]}"
        assert "RUN_SUCCESS" in out, out[-4000:]
    rows = trident.read("dpc/daily").to_pylist()
    assert len(rows) == 4005 and trident.describe("dpc/daily").row_count == 4005
    assert len({r["__row_index"] for r in rows}) == 4005  # no index stamped twice
    for i, day in enumerate(days, start=1):
        assert sorted(r["v"] for r in rows if r["day"] == date.fromisoformat(day)) == list(range(1000 * i, 1000 * i + 1000))
    assert [p["row_count"] for p in trident.describe("dpc/daily").partitions] == [1000] * 4 + [5]
    history = trident.history("dpc/daily")
    assert [e.status for e in history] == ["committed"] * 5
    assert len({e.metadata.get("dagster_run_id") for e in history[:4]}) == 4  # four separate Dagster runs


def test_a_source_rewrite_of_another_partition_does_not_force_a_delta_rebuild(
    settings: TridentSettings, trident: Trident
) -> None:
    """A partitioned source re-loaded for 2024-01-02 changed no row of 2024-01-01: the next delta
    run of 2024-01-01 still reads only its new rows instead of rebuilding the day."""
    from trident_assets import strategies as st
    from trident_assets.factories import transform_asset

    d1, d2 = date(2024, 1, 1), date(2024, 1, 2)
    trident.write("dps/src", _rows("2024-01-01", 3), partition=_day_filter(d1))
    trident.write("dps/src", _rows("2024-01-02", 2, base=10), partition=_day_filter(d2))
    node = transform_asset(
        "dps/out",
        "dps/src",
        "SELECT * FROM source",
        strategy=st.delta(),
        partitions_def=DAILY,
        metadata={"partition_expr": "day"},
    )

    def run(day: str) -> dict:
        result = dg.materialize([node.assets_def], partition_key=day, resources=resources_for(settings), raise_on_error=False)
        assert result.success, step_errors(result)
        return materialized(result)["dps/out"]

    assert run("2024-01-01")["trident/write"]["mode"] == "replace"
    trident.write("dps/src", _rows("2024-01-02", 4, base=20), partition=_day_filter(d2))  # another day re-loaded
    trident.write("dps/src", _rows("2024-01-01", 1, base=100), mode="append", partition=_day_filter(d1))
    meta = run("2024-01-01")
    assert meta["trident/write"]["mode"] == "append" and meta["trident/write"]["rows_written"] == 1, meta["trident/write"]["plan"]
    trident.write("dps/src", _rows("2024-01-01", 2, base=200), partition=_day_filter(d1))  # its own day replaced
    rebuilt = run("2024-01-01")
    assert rebuilt["trident/write"]["mode"] == "replace" and rebuilt["dagster/row_count"] == 2
    assert sorted(r["v"] for r in trident.read("dps/out").to_pylist()) == [200, 201]


def test_a_partition_column_missing_from_the_output_is_named_in_dagster_terms(
    settings: TridentSettings, trident: Trident
) -> None:
    """The Dagster wording (partition_expr) stays for Dagster users, whose filter the layer built."""

    @dg.asset(key=["dp", "misnamed"], partitions_def=DAILY, metadata={"partition_expr": "shipdate"})
    def misnamed(context: dg.AssetExecutionContext) -> pa.Table:
        return _rows(context.partition_key, 2)

    result = dg.materialize([misnamed], partition_key="2024-01-01", resources=resources_for(settings), raise_on_error=False)
    assert not result.success
    assert any("'shipdate'" in e and "partition_expr" in e for e in step_errors(result)), step_errors(result)
    assert not trident.exists("dp/misnamed")


def test_a_daily_partition_in_a_time_zone_takes_its_days_wall_times_on_a_naive_column(
    settings: TridentSettings, trident: Trident
) -> None:
    """A naive timestamp column holds wall times. The window of a day in America/New_York was
    converted to UTC (05:00 to 05:00), so the day's own 02:00 row was refused as outside the
    partition; a date column already counted by the wall date."""
    from datetime import datetime

    ny = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-10", timezone="America/New_York")

    @dg.asset(key=["dp", "wall"], partitions_def=ny, metadata={"partition_expr": "ts"})
    def wall(context: dg.AssetExecutionContext) -> pa.Table:
        d = date.fromisoformat(context.partition_key)
        times = [datetime(d.year, d.month, d.day, h) for h in (2, 22)]
        return pa.table({"ts": pa.array(times, pa.timestamp("us")), "v": [d.day] * 2})

    @dg.asset(key=["dp", "wall_down"], partitions_def=ny, metadata={"partition_expr": "ts"})
    def wall_down(wall: pa.Table) -> pa.Table:
        return wall

    for key in ("2024-01-02", "2024-01-03"):
        succeeded(dg.materialize([wall], partition_key=key, resources=resources_for(settings)))
    assert sorted(r["v"] for r in trident.read("dp/wall", columns=["v"]).to_pylist()) == [2, 2, 3, 3]
    succeeded(
        dg.materialize(
            [wall, wall_down], partition_key="2024-01-02", selection=[wall_down.key], resources=resources_for(settings)
        )
    )
    assert [r["v"] for r in trident.read("dp/wall_down", columns=["v"]).to_pylist()] == [2, 2]
