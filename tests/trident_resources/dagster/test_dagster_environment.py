"""A code location started in an environment (``TridentResource(environment=...)``): its runs are
tagged ``trident/environment``, every materialization names the environment, the IO manager loads
the environment's versions, and production sees none of it."""

from __future__ import annotations

import dagster as dg
import pyarrow as pa

from tests.support.dagster_helpers import step_errors
from trident_resources import Trident, TridentSettings
from trident_resources.dagster.io_manager import TridentIOManager
from trident_resources.dagster.resource import TridentResource


@dg.asset(key=["envd", "up"])
def up() -> pa.Table:
    return pa.table({"id": [1, 2, 3]})


@dg.asset(key=["envd", "down"], deps=[])
def down(up: pa.Table) -> pa.Table:
    return pa.table({"n": [up.num_rows]})


def test_a_run_in_an_environment_is_tagged_and_its_materializations_say_so(settings: TridentSettings, trident: Trident) -> None:
    trident.write("envd/up", pa.table({"id": [1]}))  # production's version: the run must not read it
    r = TridentResource.from_settings(settings.model_copy(update={"environment": "pr-9"}))
    instance = dg.DagsterInstance.ephemeral()
    result = dg.materialize(
        [up, down], resources={"trident": r, "io_manager": TridentIOManager(trident=r)}, instance=instance, raise_on_error=False
    )
    assert result.success, step_errors(result)
    run = instance.get_run_by_id(result.run_id)
    assert run is not None and run.tags.get("trident/environment") == "pr-9"
    events = result.get_asset_materialization_events()
    assert len(events) == 2
    for event in events:
        assert event.materialization.metadata["trident/environment"].value == "pr-9"
    with Trident(settings.model_copy(update={"environment": "pr-9"})) as env:
        assert env.read("envd/down").column("n").to_pylist() == [3]  # loaded the environment's version of up
    assert trident.read("envd/up").column("id").to_pylist() == [1]
    assert not trident.exists("envd/down")


def test_a_production_run_carries_no_environment(settings: TridentSettings, trident: Trident) -> None:
    r = TridentResource.from_settings(settings)
    instance = dg.DagsterInstance.ephemeral()
    result = dg.materialize([up], resources={"trident": r, "io_manager": TridentIOManager(trident=r)}, instance=instance)
    assert result.success
    run = instance.get_run_by_id(result.run_id)
    assert run is not None and "trident/environment" not in run.tags
    [event] = result.get_asset_materialization_events()
    assert "trident/environment" not in event.materialization.metadata
