"""Commits by Dagster runs that this instance does not know reach it: ``dagster asset materialize``
or a script's ``materialize()`` on a throwaway instance used to leave the UI's assets "Never
materialized", because the ledger sensor skipped every commit that carried a run id. A run the
instance knows is still skipped (it recorded its own materialization); a partition run is reported
per partition, so the UI's partitions are filled in."""

# no `from __future__ import annotations`: Dagster reads the asset's `context` annotation at definition time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import dagster as dg
import pyarrow as pa
import pytest

from tests.support.dagster_helpers import ledger_sensor_tick, resources_for
from trident_resources import Trident, TridentSettings
from trident_sensors.commits import LedgerCursor, commit_events

DAILY = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-02-01")
PLAIN = dg.AssetKey(["ur", "plain"])
BY_DAY = dg.AssetKey(["ur", "by_day"])


@dg.asset(key=PLAIN)
def plain() -> pa.Table:
    return pa.table({"id": [1, 2, 3]})


@dg.asset(key=BY_DAY, partitions_def=DAILY, metadata={"partition_expr": "day"})
def by_day(context: dg.AssetExecutionContext) -> pa.Table:
    window = context.partition_time_window
    days = [(window.start + timedelta(days=i)).date() for i in range((window.end - window.start).days)]
    return pa.table({"day": pa.array(days, pa.date32()), "v": list(range(len(days)))})


@pytest.fixture
def ui_instance() -> Iterator[dg.DagsterInstance]:
    with dg.instance_for_test() as inst:  # the UI's instance (real, temporary)
        yield inst


def _tick(instance: dg.DagsterInstance, settings: TridentSettings, cursor: str | None = None) -> dg.SensorResult:
    return ledger_sensor_tick(instance, settings, cursor)


def test_runs_on_another_instance_are_reported_per_partition(
    settings: TridentSettings, trident: Trident, ui_instance: dg.DagsterInstance
) -> None:
    resources = resources_for(settings)
    with dg.instance_for_test() as elsewhere:  # `dagster asset materialize` without DAGSTER_HOME
        assert dg.materialize([plain], resources=resources, instance=elsewhere).success
        tags = {"dagster/asset_partition_range_start": "2024-01-03", "dagster/asset_partition_range_end": "2024-01-05"}
        assert dg.materialize([by_day], resources=resources, instance=elsewhere, tags=tags).success
    assert dg.materialize([plain], resources=resources, instance=ui_instance).success  # a run the UI knows

    result = _tick(ui_instance, settings)
    reported = sorted((e.asset_key.to_user_string(), e.partition) for e in result.asset_events)
    # the UI's own run is not reported again; the two foreign runs are, the range once per partition
    assert reported == [("ur/by_day", "2024-01-03"), ("ur/by_day", "2024-01-04"), ("ur/by_day", "2024-01-05"), ("ur/plain", None)]
    assert ui_instance.get_materialized_partitions(BY_DAY) == {"2024-01-03", "2024-01-04", "2024-01-05"}
    [foreign] = [e for e in result.asset_events if e.asset_key == PLAIN]
    run = (foreign.description or "").split("by Dagster run ", 1)[-1].split(",", 1)[0]
    assert "which this instance does not know" in (foreign.description or ""), foreign.description
    assert run and run not in {r.run_id for r in ui_instance.get_runs()}  # which run it was, for whoever looks
    again = _tick(ui_instance, settings, result.cursor)
    assert again.asset_events == []  # each commit once


def test_every_run_is_known_when_the_caller_does_not_say(trident: Trident) -> None:
    """``commit_events`` without ``known_runs`` keeps its contract: a commit with a run id is Dagster's."""
    trident.write("ur/x", pa.table({"id": [1]}), metadata={"dagster_run_id": "r1"})
    commits = trident.commits_since(0)
    later = datetime.now(UTC) + timedelta(hours=1)
    assert commit_events(commits, LedgerCursor(), later)[0] == []
    assert len(commit_events(commits, LedgerCursor(), later, known_runs=set())[0]) == 1
