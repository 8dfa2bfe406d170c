"""``platform_definitions``: one call gives a user's own Definitions the platform (resources,
reconciler and ledger sensors, maintenance job and schedule); ``iceberg_kinds`` gives plain
IO-manager assets the ``iceberg`` kind; the factories pass Dagster's own fields through."""

from __future__ import annotations

from datetime import timedelta

import dagster as dg
import pyarrow as pa
import pytest

from tests.support.dagster_helpers import step_errors
from trident_assets import iceberg_kinds, platform_definitions, split_asset, transform_asset
from trident_resources import Trident, TridentSettings
from trident_resources.dagster import InvalidAssetKeysError, TridentIOManager, TridentResource


@dg.asset(key=["shop", "orders"])
def orders() -> pa.Table:
    return pa.table({"id": [1, 2, 3]})


@dg.asset(key=["shop", "elsewhere"], io_manager_key="other_io", kinds={"python"})
def elsewhere() -> int:
    return 1


def test_a_users_definitions_merged_with_the_platform_have_it_all(settings: TridentSettings, trident: Trident) -> None:
    mine = dg.Definitions(assets=[orders])
    defs = dg.Definitions.merge(mine, platform_definitions(TridentResource.from_settings(settings)))
    assert {s.name for s in defs.sensors or []} == {"trident_reconciler", "trident_ledger_commits"}
    assert {"table_maintenance_job", "canary_job"} <= {j.name for j in defs.resolve_all_job_defs()}
    assert [s.name for s in defs.schedules or []] == ["table_maintenance_job_schedule"]
    assert isinstance((defs.resources or {})["io_manager"], TridentIOManager)
    result = defs.resolve_implicit_global_asset_job_def().execute_in_process(raise_on_error=False)
    assert result.success, step_errors(result)
    assert trident.read("shop/orders", columns=["id"]).to_pylist() == [{"id": 1}, {"id": 2}, {"id": 3}]
    # the sensors and the maintenance job run on the same resource
    job = defs.resolve_job_def("table_maintenance_job")
    assert job.execute_in_process(raise_on_error=False).success


def test_an_executor_is_only_set_when_given() -> None:
    assert platform_definitions().executor is None  # a user's own executor merges without a conflict
    executor = dg.in_process_executor
    assert platform_definitions(executor=executor).executor is executor


def test_iceberg_kinds_marks_only_the_trident_io_managers_assets() -> None:
    defs = iceberg_kinds(
        dg.Definitions.merge(
            dg.Definitions(assets=[orders, elsewhere], resources={"other_io": dg.InMemoryIOManager()}), platform_definitions()
        )
    )
    kinds = {s.key.to_user_string(): s.kinds for a in defs.resolve_asset_graph().assets_defs for s in a.specs}
    assert kinds["shop/orders"] == {"iceberg"} and kinds["shop/elsewhere"] == {"python"}


def test_a_bad_asset_key_fails_the_definitions_load_not_the_run() -> None:
    @dg.asset(key=["Shop", "BigOrders"])
    def badly_named() -> pa.Table:
        return pa.table({"id": [1]})

    mine = dg.Definitions(assets=[orders, badly_named, elsewhere], resources={"other_io": dg.InMemoryIOManager()})
    with pytest.raises(InvalidAssetKeysError, match="Shop/BigOrders"):
        iceberg_kinds(dg.Definitions.merge(mine, platform_definitions()))
    # another IO manager's asset may have any key
    odd = dg.asset(key=["OtherKey"], io_manager_key="other_io")(lambda: 1)
    iceberg_kinds(
        dg.Definitions.merge(dg.Definitions(assets=[odd], resources={"other_io": dg.InMemoryIOManager()}), platform_definitions())
    )


def test_factories_pass_dagster_fields_through() -> None:
    freshness = dg.FreshnessPolicy.time_window(fail_window=timedelta(hours=6))
    retry = dg.RetryPolicy(max_retries=2, delay=1)
    fields = {
        "owners": ["team:shop", "ann@example.com"],
        "tags": {"tier": "gold"},
        "code_version": "7",
        "freshness_policy": freshness,
        "retry_policy": retry,
        "pool": "warehouse",
    }
    node = transform_asset("shop/big", "shop/orders", "SELECT id FROM source", kinds=("iceberg", "sql"), **fields)  # type: ignore[arg-type]
    [spec] = node.assets_def.specs
    assert spec.owners == ["team:shop", "ann@example.com"] and spec.tags["tier"] == "gold" and spec.code_version == "7"
    assert spec.freshness_policy == freshness and spec.kinds == {"iceberg", "sql"}
    assert node.assets_def.op.retry_policy == retry and node.assets_def.op.pool == "warehouse"

    split = split_asset("shop/small_ids", "shop/large_ids", "shop/orders", "id < 2", owners=["team:shop"], code_version="3")
    assert [s.owners for s in split.assets_def.specs] == [["team:shop"], ["team:shop"]]
    assert {s.code_version for s in split.assets_def.specs} == {"3"}
    assert split.assets_def.op.pool == "trident/shop/small_ids"  # without a pool: the dataset's own

    with pytest.raises(TypeError, match="ownerz"):
        transform_asset("shop/x", "shop/orders", "SELECT 1", ownerz=["me"])  # type: ignore[call-arg]


def test_the_example_declares_owners_and_a_freshness_policy() -> None:
    from trident_assets.definitions import defs

    specs = {s.key.to_user_string(): s for a in defs.resolve_asset_graph().assets_defs for s in a.specs}
    q3 = specs["sales/q3_revenue"]
    assert q3.owners == ["team:sales"] and isinstance(q3.freshness_policy, dg.FreshnessPolicy)
    assert specs["sales/lineitem_revenue"].freshness_policy is not None  # declared in its defs.yaml
