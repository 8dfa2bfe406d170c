"""Write-audit-publish in Dagster (issue 11): a node with a blocking check writes a staged version,
its checks audit that version, and only a passing one is published; a failing one leaves the
previous version current for every reader, fails the step naming the check and the staged txn,
and waits for an operator's publish or discard."""

from __future__ import annotations

import logging
import os
from concurrent.futures import ThreadPoolExecutor
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa
import pytest
from dagster._core.events import AssetObservationData, DagsterEventType

from tests.support.dagster_helpers import materialize_nodes, materialized, resources_for, step_errors, succeeded
from tests.support.helpers import settings_env
from tests.trident_resources.transaction.test_transactions import _txn_files
from trident_assets import expectations as ex
from trident_assets.factories import split_asset, transform_asset
from trident_resources import PartitionFilter, Trident, TridentSettings
from trident_resources.core.failpoints import armed
from trident_resources.dagster import TridentResource
from trident_resources.dagster.gate import GATE_META, settle
from trident_sensors.commits import trident_commits


def _observed(result: dg.ExecuteInProcessResult) -> list[Any]:
    return [e.event_specific_data for e in result.all_events if e.event_type == DagsterEventType.ASSET_OBSERVATION]


def _level(level: int | str) -> int:
    return level if isinstance(level, int) else int(logging.getLevelName(level))


def _ks(t: Trident, key: str, **kw: object) -> list[int]:
    return sorted(t.read(key, **kw).column("k").to_pylist())  # type: ignore[arg-type]


def test_a_failing_blocking_check_never_reaches_readers(settings: TridentSettings, trident: Trident) -> None:
    t = trident
    t.write("wap/src", pa.table({"k": [1, 2, 3]}))
    node = transform_asset("wap/out", "wap/src", "SELECT k FROM source", expectations=[ex.unique("k")])
    downstream = transform_asset("wap/down", "wap/out", "SELECT k FROM source")

    ok = materialize_nodes(settings, [node])
    assert ok.success, step_errors(ok)
    shown = materialized(ok)["wap/out"]  # what the UI shows: the published version's numbers
    assert shown["dagster/row_count"] == 3 and "dagster/column_schema" in shown
    assert "trident/staged_txn" not in shown  # the materialization is the published version
    published = t.history("wap/out")[0]
    assert published.status == "committed" and _ks(t, "wap/out") == [1, 2, 3]
    assert t.describe("wap/out").snapshot_id == published.snapshot_id  # exactly the audited snapshot
    assert t.staged("wap/out") == []

    t.write("wap/src", pa.table({"k": [3]}), mode="append")  # a duplicate key upstream
    bad = materialize_nodes(settings, [node, downstream])
    assert not bad.success
    errors = "\n".join(step_errors(bad))
    assert "ChecksFailedError" in errors or "unique_k" in errors, errors
    assert "unique_k" in errors
    # every reader still sees the previous version
    assert _ks(t, "wap/out") == [1, 2, 3]
    assert t.sql('select count(*) as n from "wap/out"').column("n").to_pylist() == [3]
    assert not t.exists("wap/down")  # downstream did not run
    # the check result was recorded in Dagster, failed
    evals = [e for e in bad.get_asset_check_evaluations() if e.check_name == "unique_k"]
    assert evals and not evals[0].passed
    # the staged version holds the bad rows; an operator can publish it
    [(key, staged)] = t.staged("wap/out")
    assert key == "wap/out" and _ks(t, "wap/out", staged=staged.txn_id) == [1, 2, 3, 3]
    # what Dagster recorded is true: no materialization (nothing new is current), the failure and an
    # observation name the staged txn
    assert "wap/out" not in materialized(bad)
    assert str(staged.txn_id) in errors and "ChecksFailedError" in errors
    [obs] = [e.asset_observation for e in _observed(bad) if e.asset_observation.asset_key == dg.AssetKey(["wap", "out"])]
    assert obs.metadata["trident/staged_txn"].value == str(staged.txn_id)
    t.publish("wap/out", staged.txn_id)
    assert _ks(t, "wap/out") == [1, 2, 3, 3]


def test_a_discarded_staged_version_leaves_no_file(settings: TridentSettings, trident: Trident) -> None:
    t = trident
    t.write("wap2/src", pa.table({"k": [1, 1]}))
    node = transform_asset("wap2/out", "wap2/src", "SELECT k FROM source", expectations=[ex.unique("k")])
    t.write("wap2/out", pa.table({"k": [9]}))
    bad = materialize_nodes(settings, [node])
    assert not bad.success
    [(_, staged)] = t.staged("wap2/out")
    t.discard("wap2/out", staged.txn_id)
    assert _txn_files(t, "wap2/out", staged.txn_id) == []
    assert _ks(t, "wap2/out") == [9]


def test_non_blocking_failures_publish(settings: TridentSettings, trident: Trident) -> None:
    t = trident
    t.write("wap3/src", pa.table({"k": [1, 1]}))
    node = transform_asset(
        "wap3/out", "wap3/src", "SELECT k FROM source", expectations=[ex.unique("k", blocking=False), ex.not_null("k")]
    )
    res = materialize_nodes(settings, [node])
    assert res.success, step_errors(res)
    assert _ks(t, "wap3/out") == [1, 1] and t.staged("wap3/out") == []


def test_an_asset_without_blocking_checks_writes_directly(settings: TridentSettings, trident: Trident) -> None:
    t = trident
    t.write("wap4/src", pa.table({"k": [1]}))
    node = transform_asset("wap4/out", "wap4/src", "SELECT k FROM source")
    res = materialize_nodes(settings, [node])
    assert res.success, step_errors(res)
    assert [e.status for e in t.history("wap4/out")] == ["committed"]
    assert all("trident.staged" not in e.metadata for e in t.history("wap4/out"))


# -- plain @assets through the IO manager, their blocking @asset_checks in steps of their own ------


def _plain_defs(rows: list[int]) -> list[Any]:
    """An ordinary asset stored by TridentIOManager, two blocking checks the normal Dagster way
    (one reads its input through the IO manager, one is an expectation querying through the
    resource), a downstream that loads it and one that only declares it and reads the dataset."""

    @dg.asset(key="gated_out")
    def gated_out() -> pa.Table:
        return pa.table({"k": rows})

    @dg.asset_check(asset=gated_out, blocking=True)
    def unique_k(gated_out: pa.Table) -> dg.AssetCheckResult:
        ks = gated_out.column("k").to_pylist()
        return dg.AssetCheckResult(passed=len(ks) == len(set(ks)), metadata={"rows": len(ks)})

    @dg.asset(key="gated_down")
    def gated_down(gated_out: pa.Table) -> pa.Table:
        return gated_out

    @dg.asset(key="gated_seen", deps=[gated_out])
    def gated_seen(trident: TridentResource) -> pa.Table:
        return pa.table({"n": [trident.get_client().read("gated_out").num_rows]})

    return [gated_out, unique_k, *ex.build_checks("gated_out", [ex.not_null("k")]), gated_down, gated_seen]


def _run(settings: TridentSettings, defs: list[Any], instance: dg.DagsterInstance, **kw: Any) -> dg.ExecuteInProcessResult:
    return dg.materialize(defs, resources=resources_for(settings), instance=instance, raise_on_error=False, **kw)


def _observations(instance: dg.DagsterInstance, run_id: str, key: str) -> list[dict[str, Any]]:
    out = []
    for rec in instance.all_logs(run_id, of_type=DagsterEventType.ASSET_OBSERVATION):
        event = rec.dagster_event
        assert event is not None
        data = event.event_specific_data
        assert isinstance(data, AssetObservationData)
        obs = data.asset_observation
        if obs.asset_key == dg.AssetKey(key) and "trident/gate" in obs.metadata:  # the gate's reports
            out.append({k: getattr(v, "value", v) for k, v in obs.metadata.items()})
    return out


def test_a_plain_asset_is_gated_by_its_own_blocking_checks(settings: TridentSettings, trident: Trident) -> None:
    t = trident
    instance = dg.DagsterInstance.ephemeral()
    ok = succeeded(_run(settings, _plain_defs([1, 2, 3]), instance))
    published = t.history("gated_out")[0]
    assert published.status == "committed" and published.metadata[GATE_META] == ["not_null_k", "unique_k"]
    assert t.describe("gated_out").snapshot_id == published.snapshot_id  # exactly the audited snapshot
    assert t.staged() == [] and _ks(t, "gated_down") == [1, 2, 3]
    assert t.read("gated_seen").column("n").to_pylist() == [3]  # published before the downstream read it
    shown = materialized(ok)["gated_out"]
    assert shown["trident/staged_txn"] == str(published.txn_id) and shown["dagster/row_count"] == 3
    assert [o["trident/status"] for o in _observations(instance, ok.run_id, "gated_out")] == ["published"]

    down_versions = len(t.history("gated_down"))
    bad = _run(settings, _plain_defs([1, 2, 3, 3]), instance)
    assert not bad.success
    assert "unique_k" in "\n".join(step_errors(bad))
    # every reader still sees the previous version
    assert _ks(t, "gated_out") == [1, 2, 3]
    assert t.sql('select count(*) as n from "gated_out"').column("n").to_pylist() == [3]
    assert len(t.history("gated_down")) == down_versions and t.read("gated_seen").column("n").to_pylist() == [3]
    # the checks audited the staged version (the published rows are unique) and are recorded
    evals = {e.check_name: e.passed for e in bad.get_asset_check_evaluations()}
    assert evals == {"unique_k": False, "not_null_k": True}
    [(_, staged)] = t.staged("gated_out")
    assert _ks(t, "gated_out", staged=staged.txn_id) == [1, 2, 3, 3]
    # Dagster says what happened: the materialization was a staged version, the run names it
    shown = materialized(bad)["gated_out"]
    assert shown["trident/staged_txn"] == str(staged.txn_id) and shown["trident/status"].startswith("staged")
    [rejected] = _observations(instance, bad.run_id, "gated_out")
    assert rejected["trident/staged_txn"] == str(staged.txn_id) and rejected["trident/failed_checks"] == ["unique_k"]
    errors = [r.message for r in instance.all_logs(bad.run_id) if _level(r.level) >= logging.ERROR]
    assert any(str(staged.txn_id) in m and "unique_k" in m for m in errors), errors

    # a later downstream IO-manager load sees the previous version too
    succeeded(_run(settings, _plain_defs([1]), instance, selection=dg.AssetSelection.assets("gated_down")))
    assert _ks(t, "gated_down") == [1, 2, 3]
    t.publish("gated_out", staged.txn_id)
    assert _ks(t, "gated_out") == [1, 2, 3, 3]


def test_a_plain_asset_without_its_blocking_checks_in_the_run_writes_directly(
    settings: TridentSettings, trident: Trident
) -> None:
    t = trident
    instance = dg.DagsterInstance.ephemeral()
    selection = dg.AssetSelection.assets("gated_out").without_checks()
    succeeded(_run(settings, _plain_defs([1, 1]), instance, selection=selection))
    assert t.staged() == [] and _ks(t, "gated_out") == [1, 1]
    assert GATE_META not in t.history("gated_out")[0].metadata

    @dg.asset(key="plain_free")
    def plain_free() -> pa.Table:
        return pa.table({"k": [1]})

    @dg.asset_check(asset=plain_free)  # not blocking: no gate
    def warn_only(plain_free: pa.Table) -> dg.AssetCheckResult:
        return dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.WARN)

    succeeded(_run(settings, [plain_free, warn_only], instance))
    assert [e.status for e in t.history("plain_free")] == ["committed"] and t.staged() == []
    assert GATE_META not in t.history("plain_free")[0].metadata


def test_a_plain_asset_with_a_warn_severity_blocking_failure_publishes(settings: TridentSettings, trident: Trident) -> None:
    t = trident
    instance = dg.DagsterInstance.ephemeral()

    @dg.asset(key="warned")
    def warned() -> pa.Table:
        return pa.table({"k": [1, 1]})

    @dg.asset_check(asset=warned, blocking=True)
    def soft(warned: pa.Table) -> dg.AssetCheckResult:
        return dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.WARN)

    succeeded(_run(settings, [warned, soft], instance))
    assert _ks(t, "warned") == [1, 1] and t.staged() == []
    assert t.history("warned")[0].metadata[GATE_META] == ["soft"]


# -- the same gate under Dagster's multiprocess executor: every step is a process of its own --------

ROWS_VARIABLE = "TRIDENT_TEST_GATED_ROWS"


def gated_job() -> dg.JobDefinition:
    """Module-level, so that ``dg.reconstructable`` can rebuild it in each step's process; the
    Trident settings come from the environment the test sets."""
    rows = [int(v) for v in os.environ[ROWS_VARIABLE].split(",")]
    job = dg.define_asset_job("gated_job", executor_def=dg.multiprocess_executor)
    defs = dg.Definitions(assets=_plain_defs(rows), jobs=[job], resources=resources_for(TridentSettings()))
    return defs.resolve_job_def("gated_job")


def _settings_env(settings: TridentSettings, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in settings_env(settings).items():
        monkeypatch.setenv(name, value)


def test_the_gate_under_the_multiprocess_executor(
    settings: TridentSettings, trident: Trident, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The last check step's process publishes (at its resources' teardown) and the downstream
    steps, other processes, read the published version; a failing check leaves it staged."""
    t = trident
    _settings_env(settings, monkeypatch)
    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        monkeypatch.setenv(ROWS_VARIABLE, "1,2,3")
        with dg.execute_job(dg.reconstructable(gated_job), instance=instance) as ok:
            assert ok.success, [e.message for e in ok.all_events if e.is_failure]
        assert t.staged() == [] and _ks(t, "gated_out") == [1, 2, 3] and _ks(t, "gated_down") == [1, 2, 3]
        assert t.read("gated_seen").column("n").to_pylist() == [3]
        assert t.history("gated_out")[0].metadata[GATE_META] == ["not_null_k", "unique_k"]

        monkeypatch.setenv(ROWS_VARIABLE, "5,5")
        with dg.execute_job(dg.reconstructable(gated_job), instance=instance) as bad:
            assert not bad.success
            run_id = bad.run_id
        assert _ks(t, "gated_out") == [1, 2, 3] and _ks(t, "gated_down") == [1, 2, 3]
        [(_, staged)] = t.staged("gated_out")
        assert _ks(t, "gated_out", staged=staged.txn_id) == [5, 5]
        [rejected] = _observations(instance, run_id, "gated_out")
        assert rejected["trident/staged_txn"] == str(staged.txn_id) and rejected["trident/failed_checks"] == ["unique_k"]


def test_two_processes_settling_one_rejected_version_report_it_once(settings: TridentSettings, trident: Trident) -> None:
    """Under the multiprocess executor several step processes of a run settle its gated versions
    (check steps at teardown, downstream steps at setup). Each read the run's events, found no
    report and reported one: a rejection was reported twice (seen as a flaky
    ``test_the_gate_under_the_multiprocess_executor``). The decision is now taken under the staged
    version's lock. Here two threads settle at once, each on its own Postgres session, stalled
    between reading the events and reporting."""
    instance = dg.DagsterInstance.ephemeral()
    with armed("gate.before_report"):  # the run's own settling stops before it reports
        bad = _run(settings, _plain_defs([1, 2, 3, 3]), instance)
    assert not bad.success
    assert _observations(instance, bad.run_id, "gated_out") == []
    with armed("gate.before_report", "sleep:0.5"), ThreadPoolExecutor(2) as pool:
        decided = [f.result() for f in [pool.submit(settle, trident, instance, bad.run_id) for _ in range(2)]]
    assert [[d.outcome for d in ds] for ds in decided] == [["rejected"], ["rejected"]]
    [rejected] = _observations(instance, bad.run_id, "gated_out")
    assert rejected["trident/failed_checks"] == ["unique_k"]


def test_a_split_is_gated_and_its_halves_go_live_together(settings: TridentSettings, trident: Trident) -> None:
    """One staged txn per output; a blocking failure on one half publishes neither."""
    t = trident
    t.write("wsp/src", pa.table({"k": [1, 2, 3, 4]}))
    node = split_asset("wsp/high", "wsp/low", "wsp/src", "k >= 3", expectations={"wsp/high": [ex.unique("k")]})
    ok = materialize_nodes(settings, [node])
    assert ok.success, step_errors(ok)
    assert _ks(t, "wsp/high") == [3, 4] and _ks(t, "wsp/low") == [1, 2] and t.staged() == []
    for key in ("wsp/high", "wsp/low"):  # each published exactly its audited, staged snapshot
        [entry] = t.history(key)
        assert entry.staged_at is not None and t.describe(key).snapshot_id == entry.snapshot_id
        assert materialized(ok)[key]["trident/txn_id"] == str(entry.txn_id)

    t.write("wsp/src", pa.table({"k": [0, 3]}), mode="append")  # a duplicate in the high half
    bad = materialize_nodes(settings, [node])
    assert not bad.success
    assert _ks(t, "wsp/high") == [3, 4] and _ks(t, "wsp/low") == [1, 2]  # neither half went live
    staged = dict(t.staged())
    assert set(staged) == {"wsp/high", "wsp/low"}
    assert _ks(t, "wsp/high", staged=staged["wsp/high"].txn_id) == [3, 3, 4]
    assert _ks(t, "wsp/low", staged=staged["wsp/low"].txn_id) == [0, 1, 2]
    errors = "\n".join(step_errors(bad))
    assert "ChecksFailedError" in errors and "unique_k" in errors
    assert all(str(e.txn_id) in errors for e in staged.values())
    assert materialized(bad) == {}


def test_a_blocking_check_that_raises_rejects_like_a_failing_one(settings: TridentSettings, trident: Trident) -> None:
    t = trident
    t.write("crashy", pa.table({"k": [7]}))
    instance = dg.DagsterInstance.ephemeral()

    @dg.asset(key="crashy")
    def crashy() -> pa.Table:
        return pa.table({"k": [1, 2]})

    @dg.asset_check(asset=crashy, blocking=True)
    def explodes(crashy: pa.Table) -> dg.AssetCheckResult:
        raise RuntimeError("the check itself broke")

    bad = _run(settings, [crashy, explodes], instance)
    assert not bad.success
    assert _ks(t, "crashy") == [7]
    [(_, staged)] = t.staged("crashy")
    [rejected] = _observations(instance, bad.run_id, "crashy")
    assert rejected["trident/staged_txn"] == str(staged.txn_id) and rejected["trident/failed_checks"] == ["explodes"]


def test_an_operator_publish_of_a_rejected_version_is_reported_by_the_ledger_sensor(
    settings: TridentSettings, trident: Trident
) -> None:
    """The rejected run recorded no materialization; the version becomes current when an operator
    publishes it, and the ledger sensor reports that commit (a passing gated run's is not)."""
    t = trident
    t.write("wap5/src", pa.table({"k": [1]}))
    node = transform_asset("wap5/out", "wap5/src", "SELECT k FROM source", expectations=[ex.unique("k")])
    defs = dg.Definitions(assets=[node.assets_def], sensors=[trident_commits], resources=resources_for(settings))
    with dg.instance_for_test() as instance:
        job = defs.resolve_implicit_global_asset_job_def()
        assert job.execute_in_process(instance=instance).success
        t.write("wap5/src", pa.table({"k": [1]}), mode="append")
        assert not job.execute_in_process(instance=instance, raise_on_error=False).success
        [(_, staged)] = t.staged("wap5/out")
        t.publish("wap5/out", staged.txn_id)
        with dg.build_sensor_context(
            instance=instance, definitions=defs, resources={"trident": TridentResource.from_settings(settings)}
        ) as context:
            result = trident_commits(context)
        assert isinstance(result, dg.SensorResult)
        reported = [e for e in result.asset_events or [] if e.asset_key == dg.AssetKey(["wap5", "out"])]
        assert [e.metadata["trident/txn_id"].value for e in reported] == [str(staged.txn_id)]


# -- partition runs are gated too (issue 11 item 4) ------------------------------------------------
DAILY = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-02-01")


def _src_day(day: str, ks: list[int]) -> pa.Table:
    return pa.table({"day": [date.fromisoformat(day)] * len(ks), "k": ks})


def _by_day(t: Trident, key: str, **kw: object) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for r in t.read(key, **kw).to_pylist():  # type: ignore[arg-type]
        out.setdefault(r["day"].isoformat(), []).append(r["k"])
    return {d: sorted(v) for d, v in sorted(out.items())}


def test_a_partition_run_is_staged_audited_and_published(settings: TridentSettings, trident: Trident) -> None:
    t = trident
    for day, ks in (("2024-01-01", [1, 2]), ("2024-01-02", [10, 11])):
        t.write(
            "wapp/src",
            _src_day(day, ks),
            partition=PartitionFilter.time_window("day", date.fromisoformat(day), date.fromisoformat(day) + timedelta(days=1)),
        )
    node = transform_asset(
        "wapp/out",
        "wapp/src",
        "SELECT day, k FROM source",
        expectations=[ex.unique("k")],
        partitions_def=DAILY,
        metadata={"partition_expr": "day"},
    )

    def run(day: str) -> dg.ExecuteInProcessResult:
        return dg.materialize(
            [node.assets_def, *node.checks], partition_key=day, resources=resources_for(settings), raise_on_error=False
        )

    for day in ("2024-01-01", "2024-01-02"):
        ok = succeeded(run(day))
        entry = t.history("wapp/out")[0]
        assert entry.status == "committed" and "trident.staged" in entry.metadata  # staged, then published
        assert t.describe("wapp/out").snapshot_id == entry.snapshot_id  # exactly the audited snapshot
        shown = materialized(ok)["wapp/out"]
        assert "trident/staged_txn" not in shown and shown["trident/write"]["partition"]
    assert _by_day(t, "wapp/out") == {"2024-01-01": [1, 2], "2024-01-02": [10, 11]}
    assert t.staged("wapp/out") == []

    t.write("wapp/src", _src_day("2024-01-01", [2]), mode="append")  # a duplicate key in one partition
    bad = run("2024-01-01")
    assert not bad.success
    errors = "\n".join(step_errors(bad))
    [(_, staged)] = t.staged("wapp/out")
    assert "unique_k" in errors and str(staged.txn_id) in errors
    assert "wapp/out" not in materialized(bad)
    assert _by_day(t, "wapp/out") == {"2024-01-01": [1, 2], "2024-01-02": [10, 11]}  # the previous rows still read
    assert _by_day(t, "wapp/out", staged=staged.txn_id)["2024-01-01"] == [1, 2, 2]
    assert staged.metadata["partition"]["spec"] == ["day(day)"]

    t.write("wapp/src", _src_day("2024-01-02", [12]), mode="append")  # another partition runs and passes
    succeeded(run("2024-01-02"))
    assert _by_day(t, "wapp/out") == {"2024-01-01": [1, 2], "2024-01-02": [10, 11, 12]}
    t.publish("wapp/out", staged.txn_id)  # an operator publishes the rejected one: re-based, nothing lost
    assert _by_day(t, "wapp/out") == {"2024-01-01": [1, 2, 2], "2024-01-02": [10, 11, 12]}


def _plain_daily(rows: dict[str, list[int]]) -> list[Any]:
    @dg.asset(key="gated_daily", partitions_def=DAILY, metadata={"partition_expr": "day"})
    def gated_daily(context) -> pa.Table:  # dagster refuses a string annotation
        return _src_day(context.partition_key, rows[context.partition_key])

    @dg.asset_check(asset=gated_daily, blocking=True)
    def unique_k(gated_daily: pa.Table) -> dg.AssetCheckResult:
        ks = gated_daily.column("k").to_pylist()
        return dg.AssetCheckResult(passed=len(ks) == len(set(ks)))

    return [gated_daily, unique_k]


def test_a_partition_run_of_a_plain_asset_is_gated(settings: TridentSettings, trident: Trident) -> None:
    t = trident
    instance = dg.DagsterInstance.ephemeral()
    good = {"2024-01-01": [1, 2], "2024-01-02": [10]}
    for day in good:
        succeeded(_run(settings, _plain_daily(good), instance, partition_key=day))
        entry = t.history("gated_daily")[0]
        assert entry.status == "committed" and entry.metadata[GATE_META] == ["unique_k"]
        assert t.describe("gated_daily").snapshot_id == entry.snapshot_id
    bad = _run(settings, _plain_daily({**good, "2024-01-01": [1, 1]}), instance, partition_key="2024-01-01")
    assert not bad.success and "unique_k" in "\n".join(step_errors(bad))
    [(_, staged)] = t.staged("gated_daily")
    assert _by_day(t, "gated_daily") == {"2024-01-01": [1, 2], "2024-01-02": [10]}  # the previous rows still read
    assert _by_day(t, "gated_daily", staged=staged.txn_id)["2024-01-01"] == [1, 1]
    succeeded(_run(settings, _plain_daily({**good, "2024-01-02": [10, 11]}), instance, partition_key="2024-01-02"))
    assert _by_day(t, "gated_daily") == {"2024-01-01": [1, 2], "2024-01-02": [10, 11]}
    t.discard("gated_daily", staged.txn_id)
    assert _txn_files(t, "gated_daily", staged.txn_id) == []


@pytest.mark.usefixtures("iceberg_writes")  # six small files (one per Iceberg append) to compact
def test_a_gated_asset_publishes_though_maintenance_compacted_it_before_settling(
    settings: TridentSettings, trident: Trident
) -> None:
    """Issue 28 item 3, the Dagster gate: a nightly compaction landing between the asset's staging
    and the gate's publish is no change of the published version (it was refused as one)."""
    t = trident
    t.write("gated_c", pa.table({"k": [0]}))
    for i in range(1, 6):
        t.write("gated_c", pa.table({"k": [i]}), mode="append")

    @dg.asset(key="gated_c")
    def gated_c() -> pa.Table:
        return pa.table({"k": [10, 11]})

    @dg.asset_check(asset=gated_c, blocking=True)
    def compacted_meanwhile(trident: TridentResource) -> dg.AssetCheckResult:
        report = trident.get_client().maintain("gated_c")  # compacts the published version's six files
        return dg.AssetCheckResult(passed=report.compacted_files == 6, metadata={"compacted": report.compacted_files})

    instance = dg.DagsterInstance.ephemeral()
    succeeded(_run(settings, [gated_c, compacted_meanwhile], instance))
    published = t.history("gated_c")[0]
    assert published.status == "committed" and published.metadata[GATE_META] == ["compacted_meanwhile"]
    assert t.staged() == [] and _ks(t, "gated_c") == [10, 11]
    assert [
        o["trident/status"] for o in _observations(instance, t.history("gated_c")[0].metadata["dagster_run_id"], "gated_c")
    ] == ["published"]
