"""One run, one publish (``trident/publish: run``): every Trident output of the run is staged into
the run's transaction group and published at once when the run's last step succeeds; a failed
step (a blocking check included) publishes nothing. Downstream steps read what the run staged;
readers outside the run see the previous versions until the run ends."""

from __future__ import annotations

import os
from datetime import date
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa
import pytest

from tests.support.dagster_helpers import resources_for, step_errors
from tests.support.helpers import settings_env
from trident_assets import Node, transform_asset, unique
from trident_resources import Trident, TridentSettings
from trident_resources.core.failpoints import armed
from trident_resources.dagster import TridentOutput, TridentResource, run_group_id, run_publish_tags

SEEN_VARIABLE = "TRIDENT_TEST_RUN_PUBLISH_ROWS"


def _nodes(rows: list[int], seen: list[Any]) -> list[Any]:
    """``rp/src`` (a plain asset, its rows given), ``rp/derived`` (a transform of it, ids must be
    unique: a blocking check in the node's own step), and ``rp/probe``, which records what a
    reader outside the run sees while the run is going, and what the step reads of its input."""

    @dg.asset(key=["rp", "src"])
    def src() -> pa.Table:
        return pa.table({"id": rows})

    derived = transform_asset("rp/derived", "rp/src", "SELECT id, id * 10 AS v FROM source", expectations=[unique("id")])

    @dg.asset(key=["rp", "probe"], deps=[dg.AssetKey(["rp", "derived"])])
    def probe(trident: TridentResource, src: pa.Table) -> pa.Table:
        with Trident(trident.settings()) as outside:  # another client: a reader who is not the run
            published = outside.read("rp/src").column("id").to_pylist() if outside.exists("rp/src") else None
        seen.append({"outside": published, "input": sorted(src.column("id").to_pylist())})
        return pa.table({"n": [src.num_rows]})

    return [src, derived, probe]


def _job(settings: TridentSettings, nodes: list[Any], *, tags: dict[str, str] | None = None) -> dg.JobDefinition:
    assets: list[Any] = []
    for n in nodes:
        assets.extend([n.assets_def, *n.checks] if isinstance(n, Node) else [n])
    job = dg.define_asset_job("rp_job", tags=run_publish_tags() if tags is None else tags)
    return dg.Definitions(assets=assets, jobs=[job], resources=resources_for(settings)).resolve_job_def("rp_job")


def _ids(t: Trident, key: str) -> list[int]:
    return sorted(t.read(key, columns=["id"]).column("id").to_pylist())


def _published(t: Trident, key: str) -> Any:
    return t.describe(key, storage=False).last_txn_id


def _materializations(instance: dg.DagsterInstance, run_id: str) -> dict[str, dict[str, Any]]:
    found = {}
    for rec in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION):
        m = rec.dagster_event.event_specific_data.materialization  # type: ignore[union-attr]
        found[m.asset_key.to_user_string()] = {k: getattr(v, "value", v) for k, v in m.metadata.items()}
    return found


def test_a_run_publishes_every_output_at_once_when_it_ends(settings: TridentSettings, trident: Trident) -> None:
    t = trident
    with dg.instance_for_test() as instance:
        seen: list[Any] = []
        first = _job(settings, _nodes([1, 2, 3], seen)).execute_in_process(instance=instance, raise_on_error=False)
        assert first.success, step_errors(first)
        assert seen == [{"outside": None, "input": [1, 2, 3]}]  # born in the run: nobody saw it before it ended
        assert _ids(t, "rp/src") == [1, 2, 3] and _ids(t, "rp/derived") == [1, 2, 3] and t.staged() == []
        entries = {k: t.history(k)[0] for k in ("rp/src", "rp/derived", "rp/probe")}
        assert {e.group_id for e in entries.values()} == {run_group_id(first.run_id)}
        assert len({e.committed_at for e in entries.values()}) == 1  # one instant: one publish

        seen.clear()
        second = _job(settings, _nodes([4, 5], seen)).execute_in_process(instance=instance, raise_on_error=False)
        assert second.success, step_errors(second)
        # while the run went on, readers saw the previous run's version; the run's steps its own
        assert seen == [{"outside": [1, 2, 3], "input": [4, 5]}]
        assert _ids(t, "rp/src") == [4, 5] and _ids(t, "rp/derived") == [4, 5]
        # the steps recorded no materialization of a staged output; the publish recorded one per asset
        shown = _materializations(instance, second.run_id)
        assert set(shown) == {"rp/src", "rp/derived", "rp/probe"}
        assert shown["rp/derived"]["trident/txn_id"] == str(t.history("rp/derived")[0].txn_id)
        assert shown["rp/src"]["dagster/row_count"] == 2
        staged_obs = [
            rec.dagster_event.event_specific_data.asset_observation  # type: ignore[union-attr]
            for rec in instance.all_logs(second.run_id, of_type=dg.DagsterEventType.ASSET_OBSERVATION)
        ]
        assert {o.asset_key.to_user_string() for o in staged_obs if "trident/staged" in o.metadata} == {
            "rp/src",
            "rp/derived",
            "rp/probe",
        }


def test_a_failed_blocking_check_publishes_nothing_of_the_run(settings: TridentSettings, trident: Trident) -> None:
    t = trident
    with dg.instance_for_test() as instance:
        ok = _job(settings, _nodes([1, 2], [])).execute_in_process(instance=instance, raise_on_error=False)
        assert ok.success, step_errors(ok)
        before = {k: _published(t, k) for k in ("rp/src", "rp/derived", "rp/probe")}
        bad = _job(settings, _nodes([7, 7, 8], [])).execute_in_process(instance=instance, raise_on_error=False)
        assert not bad.success  # rp/derived's unique(id) failed
        # rp/src staged fine and passed everything of its own, yet is not published: the run publishes all or none
        assert _ids(t, "rp/src") == [1, 2] and _ids(t, "rp/derived") == [1, 2]
        assert {k: _published(t, k) for k in before} == before
        assert t.staged() == []  # discarded, files gone with them
        discarded = [e for e in t.history("rp/src") if e.group_id == run_group_id(bad.run_id)]
        assert [e.status for e in discarded] == ["rejected"]
        assert _materializations(instance, bad.run_id) == {}
        assert not [e for k in before for e in t.history(k) if e.status == "open"]


def test_a_failed_run_is_kept_for_audit_when_set_and_only_a_person_decides_it(settings: TridentSettings) -> None:
    """TRIDENT_FAILED_RUN_STAGED=keep: a failed run publishes nothing, yet its staged versions stay
    (listed by `trident staged` with why, readable staged); neither a later step nor the
    reconciler sensor discards them; `trident discard GROUP` does."""
    from click.testing import CliRunner

    from trident_cli.main import cli
    from trident_sensors.reconciler import trident_reconciler

    keeping = settings.model_copy(update={"failed_run_staged": "keep"})
    with Trident(keeping) as t, dg.instance_for_test() as instance:
        ok = _job(keeping, _nodes([1, 2], [])).execute_in_process(instance=instance, raise_on_error=False)
        assert ok.success, step_errors(ok)
        bad = _job(keeping, _nodes([7, 7, 8], [])).execute_in_process(instance=instance, raise_on_error=False)
        assert not bad.success  # rp/derived's unique(id) failed
        assert _ids(t, "rp/src") == [1, 2]  # readers: the previous run's
        group = run_group_id(bad.run_id)
        kept = {k: e for k, e in t.staged() if e.group_id == group}
        assert set(kept) == {"rp/src", "rp/derived"}  # rp/derived as its failed check left it
        assert sorted(t.read("rp/src", staged=kept["rp/src"].txn_id).column("id").to_pylist()) == [7, 7, 8]
        assert "failed" in t.transaction_group(group).metadata["kept"]
        observed = [
            rec.dagster_event.event_specific_data.asset_observation.metadata["trident/status"].value  # type: ignore[union-attr]
            for rec in instance.all_logs(bad.run_id, of_type=dg.DagsterEventType.ASSET_OBSERVATION)
            if "trident/status" in rec.dagster_event.event_specific_data.asset_observation.metadata  # type: ignore[union-attr]
        ]
        assert "kept for audit: the run published nothing" in observed

        with dg.build_sensor_context(instance=instance, resources={"trident": TridentResource.from_settings(keeping)}) as ctx:
            trident_reconciler(ctx)
        assert {k for k, e in t.staged() if e.group_id == group} == set(kept)  # still kept

        assert t.reconcile().aborted == []  # younger than TRIDENT_STAGED_MAX_AGE_DAYS: left to a person
        assert {k for k, e in t.staged() if e.group_id == group} == set(kept)
        env = settings_env(keeping)
        listed = CliRunner().invoke(cli, ["staged"], env=env)
        assert listed.exit_code == 0, listed.output
        assert f"group {group}" in listed.output and "kept for audit" in listed.output
        gone = CliRunner().invoke(cli, ["discard", str(group)[:8]], env=env)
        assert gone.exit_code == 0, gone.output
        assert t.staged() == [] and _ids(t, "rp/src") == [1, 2]

        # kept past the staged age, the reconciler discards it
        again = _job(keeping, _nodes([9, 9], [])).execute_in_process(instance=instance, raise_on_error=False)
        assert not again.success and {k for k, _ in t.staged()} == {"rp/src", "rp/derived"}
        with Trident(keeping.model_copy(update={"staged_max_age_days": 0})) as old:
            assert len(old.reconcile().aborted) == 2
        assert t.staged() == [] and _ids(t, "rp/src") == [1, 2]


def test_without_the_tag_each_step_publishes_on_its_own(settings: TridentSettings, trident: Trident) -> None:
    seen: list[Any] = []
    result = _job(settings, _nodes([1, 2], seen), tags={}).execute_in_process(raise_on_error=False)
    assert result.success, step_errors(result)
    assert seen == [{"outside": [1, 2], "input": [1, 2]}]  # rp/src was published before the probe ran
    assert trident.history("rp/src")[0].group_id is None


DAYS = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-05")


@dg.asset(
    key=["rp", "daily"], partitions_def=DAYS, metadata={"partition_expr": "day"}, backfill_policy=dg.BackfillPolicy.single_run()
)
def daily(context) -> pa.Table:  # (Dagster refuses a string annotation under __future__ annotations)
    keys = context.partition_keys
    days = pa.array([date.fromisoformat(k) for k in keys], pa.date32())
    return pa.table({"day": days, "n": [1] * len(keys)})


def test_a_partitioned_backfill_run_is_one_group(settings: TridentSettings, trident: Trident) -> None:
    job = dg.define_asset_job("rp_daily", selection=[daily], tags=run_publish_tags(), partitions_def=DAYS)
    defs = dg.Definitions(assets=[daily], jobs=[job], resources=resources_for(settings))
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def("rp_daily").execute_in_process(
            instance=instance,
            raise_on_error=False,
            tags={"dagster/asset_partition_range_start": "2024-01-01", "dagster/asset_partition_range_end": "2024-01-03"},
        )
        assert result.success, step_errors(result)
        assert trident.read("rp/daily").num_rows == 3 and trident.staged() == []
        [entry] = [e for e in trident.history("rp/daily") if e.status == "committed"]
        assert entry.group_id == run_group_id(result.run_id)
        mats = [
            rec.dagster_event.event_specific_data.materialization.partition  # type: ignore[union-attr]
            for rec in instance.all_logs(result.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION)
        ]
        assert sorted(str(m) for m in mats) == ["2024-01-01", "2024-01-02", "2024-01-03"]

        # a run of one partition replaces that partition only, and publishes with its run
        one = defs.resolve_job_def("rp_daily").execute_in_process(
            instance=instance, raise_on_error=False, partition_key="2024-01-02"
        )
        assert one.success, step_errors(one)
        assert trident.read("rp/daily").num_rows == 3 and trident.staged() == []
        assert trident.history("rp/daily")[0].group_id == run_group_id(one.run_id)


# -- steps in processes of their own (multiprocess executor) ----------------------------------------


def run_publish_job() -> dg.JobDefinition:
    """Module-level, so that ``dg.reconstructable`` rebuilds it in each step's process; settings
    and rows from the environment the test sets."""
    rows = [int(v) for v in os.environ[SEEN_VARIABLE].split(",")]
    job = dg.define_asset_job("rp_multi", executor_def=dg.multiprocess_executor, tags=run_publish_tags())
    assets: list[Any] = []
    for n in _nodes(rows, []):
        assets.extend([n.assets_def, *n.checks] if isinstance(n, Node) else [n])
    return dg.Definitions(assets=assets, jobs=[job], resources=resources_for(TridentSettings())).resolve_job_def("rp_multi")


def test_a_run_of_step_processes_publishes_once(
    settings: TridentSettings, trident: Trident, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name, value in settings_env(settings).items():
        monkeypatch.setenv(name, value)
    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        monkeypatch.setenv(SEEN_VARIABLE, "1,2,3")
        with dg.execute_job(dg.reconstructable(run_publish_job), instance=instance) as ok:
            assert ok.success, [e.message for e in ok.all_events if e.is_failure]
            run_id = ok.run_id
        assert _ids(trident, "rp/src") == [1, 2, 3] and _ids(trident, "rp/derived") == [1, 2, 3]
        assert {trident.history(k)[0].group_id for k in ("rp/src", "rp/derived", "rp/probe")} == {run_group_id(run_id)}
        assert set(_materializations(instance, run_id)) == {"rp/src", "rp/derived", "rp/probe"}

        monkeypatch.setenv(SEEN_VARIABLE, "9,9")
        with dg.execute_job(dg.reconstructable(run_publish_job), instance=instance) as bad:
            assert not bad.success
        assert _ids(trident, "rp/src") == [1, 2, 3] and trident.staged() == []


def test_a_step_retried_in_the_run_publishes_once(settings: TridentSettings, trident: Trident) -> None:
    """The first attempt of ``rp/flaky`` stages its output, then fails (after the write); Dagster
    retries the step in the same run: the second attempt stages under the same id (replacing the
    first), and the run publishes one version, in one ledger transaction."""

    @dg.asset(key=["rp", "flaky"], retry_policy=dg.RetryPolicy(max_retries=1))
    def flaky(context) -> TridentOutput:  # (Dagster refuses a string annotation under __future__ annotations)
        def after_write() -> None:
            if context.retry_number == 0:
                raise RuntimeError("the first attempt dies after its write")

        return TridentOutput(pa.table({"id": [1, 2, 3]}), mode="append", on_done=after_write)

    with dg.instance_for_test() as instance:
        result = _job(settings, [flaky]).execute_in_process(instance=instance, raise_on_error=False)
        assert result.success, step_errors(result)
        retried = instance.all_logs(result.run_id, of_type=dg.DagsterEventType.STEP_UP_FOR_RETRY)
        assert len(retried) == 1  # the first attempt did fail after writing
        assert _ids(trident, "rp/flaky") == [1, 2, 3]
        entries = trident.history("rp/flaky")
        assert [(e.status, e.group_id) for e in entries] == [("committed", run_group_id(result.run_id))]
        assert set(_materializations(instance, result.run_id)) == {"rp/flaky"}


@pytest.mark.parametrize("fails", [False, True])
def test_the_reconciler_sensor_settles_a_run_that_ended_without_its_last_step_doing_it(
    settings: TridentSettings, trident: Trident, fails: bool
) -> None:
    """The run's last step could not settle it (a fault at that very point: its process died
    there, or the control plane was away), so the run ended with its group open. The reconciler
    sensor's tick settles it from what Dagster recorded: published when every step succeeded,
    discarded when one failed."""
    from trident_sensors.reconciler import trident_reconciler

    with dg.instance_for_test() as instance:
        with armed("run_group.settle"):
            result = _job(settings, _nodes([5, 5] if fails else [1, 2], [])).execute_in_process(
                instance=instance, raise_on_error=False
            )
        assert result.success is not fails
        assert {k for k, _ in trident.staged()} == {"rp/src", "rp/derived"} | (set() if fails else {"rp/probe"})
        assert not trident.exists("rp/src")  # nothing published yet
        with dg.build_sensor_context(instance=instance, resources={"trident": TridentResource.from_settings(settings)}) as ctx:
            tick = trident_reconciler(ctx)
        assert "1 ended run(s) settled" in str(tick.skip_message)  # type: ignore[union-attr]
        assert trident.staged() == []
        if fails:
            assert not trident.exists("rp/src") and _materializations(instance, result.run_id) == {}
        else:
            assert _ids(trident, "rp/src") == [1, 2] and _ids(trident, "rp/derived") == [1, 2]
            assert set(_materializations(instance, result.run_id)) == {"rp/src", "rp/derived", "rp/probe"}


def test_a_run_in_an_environment_publishes_into_it_at_once_and_production_sees_nothing(
    settings: TridentSettings, trident: Trident
) -> None:
    prod = trident
    prod.write("rp/src", pa.table({"id": [1]}))
    in_env = settings.model_copy(update={"environment": "pr-run"})
    assert run_publish_tags(in_env.environment) == run_publish_tags()  # an environment's runs publish once too
    with dg.instance_for_test() as instance, Trident(in_env) as env:
        seen: list[Any] = []
        ok = _job(in_env, _nodes([4, 5], seen)).execute_in_process(instance=instance, raise_on_error=False)
        assert ok.success, step_errors(ok)
        # a reader of the environment outside the run saw production's version until the run ended
        assert seen == [{"outside": [1], "input": [4, 5]}]
        assert _ids(env, "rp/src") == [4, 5] and _ids(env, "rp/derived") == [4, 5] and env.staged() == []
        heads = env.control.env_heads(env.workspace, "pr-run")
        assert len({h.committed_at for h in heads.values()}) == 1 and len(heads) == 3  # one publish
        assert {env.history(k)[0].group_id for k in ("rp/src", "rp/derived", "rp/probe")} == {run_group_id(ok.run_id)}
        assert _materializations(instance, ok.run_id)["rp/src"]["trident/environment"] == "pr-run"
        before = {h.dataset_id: h.snapshot_id for h in heads.values()}
        bad = _job(in_env, _nodes([7, 7], [])).execute_in_process(instance=instance, raise_on_error=False)
        assert not bad.success  # unique(id) failed: nothing of the run reaches the environment
        after = env.control.env_heads(env.workspace, "pr-run")
        assert {h.dataset_id: h.snapshot_id for h in after.values()} == before and env.staged() == []
    assert _ids(prod, "rp/src") == [1] and not prod.exists("rp/derived")  # production never saw either run
