"""Every commit is an event Dagster sees: the ledger sensor reports commits made outside Dagster as
runless materializations, and an eager delta node reacts to them, on a real DagsterInstance."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tests.support.dagster_helpers import ledger_sensor_tick, materialized, resources_for, step_errors
from trident_assets import delta, transform_asset
from trident_resources import Trident, TridentSettings
from trident_resources.control.plane import LedgerEntry
from trident_sensors.commits import LedgerCursor, commit_events, trident_commits

DOUBLED = dg.AssetKey(["out", "doubled"])
ITEMS = dg.AssetKey(["src", "items"])


def items(start: int, n: int) -> pa.Table:
    return pa.table({"id": list(range(start, start + n)), "price": [1.5 * i for i in range(start, start + n)]})


@pytest.fixture
def instance() -> Iterator[dg.DagsterInstance]:
    with dg.instance_for_test() as inst:  # a real (temporary, sqlite-backed) instance: runs, events, ticks
        yield inst


def sensor_tick(
    defs: dg.Definitions, instance: dg.DagsterInstance, settings: TridentSettings, cursor: str | None
) -> dg.SensorResult:
    """One tick as the daemon runs it: evaluate the sensor, then store its asset events."""
    return ledger_sensor_tick(instance, settings, cursor, defs)


def test_an_outside_append_is_reported_and_the_eager_delta_node_runs_on_exactly_the_new_rows(
    settings: TridentSettings, trident: Trident, instance: dg.DagsterInstance
) -> None:
    trident.write("src/items", items(0, 100))  # ingest.api: outside Dagster
    node = transform_asset(
        "out/doubled",
        "src/items",
        "SELECT id, price * 2 AS price2 FROM source",
        strategy=delta(),
        automation_condition=dg.AutomationCondition.eager(),
    )
    defs = dg.Definitions(
        assets=[dg.AssetSpec(ITEMS), node.assets_def],
        sensors=[trident_commits],
        resources=resources_for(settings),
    )
    job = defs.get_implicit_global_asset_job_def()

    first = sensor_tick(defs, instance, settings, None)
    [created] = first.asset_events
    assert created.asset_key == ITEMS and write_of(created)["mode"] == "replace"
    assert job.execute_in_process(instance=instance, asset_selection=[DOUBLED]).success  # the node's first run: a full build
    baseline = dg.evaluate_automation_conditions(defs=defs, instance=instance)
    assert baseline.total_requested == 0

    appended = trident.write("src/items", items(100, 7), mode="append")  # outside Dagster again
    unseen = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=baseline.cursor)
    assert unseen.total_requested == 0  # Dagster cannot know of the append until the sensor reports it
    second = sensor_tick(defs, instance, settings, first.cursor)
    [reported] = second.asset_events
    meta = {k: getattr(v, "value", v) for k, v in reported.metadata.items()}
    assert reported.asset_key == ITEMS
    assert meta["trident/txn_id"] == str(appended.txn_id) and write_of(reported)["writer"] == "ingest.api"
    assert write_of(reported)["mode"] == "append" and meta["dagster/row_count"] == 107 and write_of(reported)["rows_written"] == 7
    latest = instance.get_latest_materialization_event(ITEMS)
    assert latest is not None and latest.asset_materialization is not None
    assert latest.asset_materialization.metadata["trident/txn_id"].value == str(appended.txn_id)  # the asset's history shows it

    ticked = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=unseen.cursor)
    assert ticked.total_requested == 1 and ticked.get_requested_partitions(DOUBLED) == {None}

    run = job.execute_in_process(instance=instance, asset_selection=[DOUBLED], raise_on_error=False)
    assert run.success, step_errors(run)
    out = materialized(run)["out/doubled"]
    assert (
        out["trident/write"]["mode"] == "append" and out["trident/write"]["rows_written"] == 7 and out["dagster/row_count"] == 107
    )
    created_at = trident.history("out/doubled")[0].started_at  # the transaction's τ, its rows' __created_at
    written = trident.read("out/doubled", row_filter=f"__created_at == '{created_at.isoformat()}'")
    assert sorted(written["id"].to_pylist()) == list(range(100, 107))  # exactly the appended rows' results
    assert written.sort_by("id")["price2"].to_pylist() == [3.0 * i for i in range(100, 107)]
    assert pc.count_distinct(trident.read("out/doubled")["id"]).as_py() == 107

    # the node's own commit came from a Dagster run: the sensor does not report it again
    third = sensor_tick(defs, instance, settings, second.cursor)
    assert third.asset_events == [] and third.skip_reason is not None
    again = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=ticked.cursor)
    assert again.total_requested == 0


def _entry(ended_at: datetime, run_id: str | None = None) -> LedgerEntry:
    return LedgerEntry(
        txn_id=uuid.uuid4(),
        dataset_id=uuid.uuid4(),
        status="committed",
        mode="append",
        writer="ingest.api",
        sink="iceberg_native",
        started_at=ended_at,
        committed_at=ended_at,
        ended_at=ended_at,
        rows_written=1,
        row_count=1,
        snapshot_id=2**62 + 1,
        metadata={"dagster_run_id": run_id} if run_id else {},
    )


def test_the_cursor_reports_each_commit_once_even_when_commits_become_visible_out_of_order() -> None:
    """Two writers committing at once can make sequence 2 visible after 3; the cursor only moves
    past settled commits and remembers the newer ones it reported."""
    now = datetime(2026, 1, 1, 12, tzinfo=UTC)
    old, fresh = now - timedelta(minutes=5), now - timedelta(seconds=1)
    c1, c2, c3 = (1, "a/x", _entry(old)), (2, "a/y", _entry(fresh)), (3, "a/z", _entry(fresh))

    events, cur = commit_events([c1, c3], LedgerCursor(), now)  # 2 is not visible yet
    assert [e.asset_key.to_user_string() for e in events] == ["a/x", "a/z"]
    assert cur == LedgerCursor(after=1, seen=frozenset({3}))
    assert events[1].metadata["trident/snapshot_id"].value == str(2**62 + 1)  # ids as text

    events, cur = commit_events([c2, c3], LedgerCursor.parse(cur.serialize()), now)  # 2 shows up late
    assert [e.asset_key.to_user_string() for e in events] == ["a/y"]
    events, cur = commit_events([c2, c3], cur, now + timedelta(minutes=5))  # all settled: the cursor moves on
    assert events == [] and cur == LedgerCursor(after=3)

    from_a_run = (4, "a/x", _entry(old, run_id="r-1"))
    events, cur = commit_events([from_a_run], cur, now)
    assert events == [] and cur.after == 4  # Dagster recorded that one itself


def write_of(event: dg.AssetMaterialization | dg.AssetObservation | dg.AssetCheckEvaluation) -> dict[str, Any]:
    """The write's details a materialization shows in its one ``trident/write`` JSON entry."""
    value = event.metadata["trident/write"].value
    assert isinstance(value, dict)
    return value
