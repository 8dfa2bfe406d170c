"""A step run a second time in the same run (a redelivered Celery task, a retry) writes once.

Each test runs the same Dagster step twice under one run id (``execute_in_process(run_id=...)``
on a fresh instance, as a second attempt of the step in another process would), the first
attempt failing after its write was committed (or staged, or mid-commit in a process that is
killed for real), and checks that the dataset is as one run of the step leaves it: the same rows
with the same identity, one ledger transaction of the run, whose id is the step's
(``step_txn_id``)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from datetime import date
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa
import pytest

from tests.support.dagster_helpers import materialized, resources_for, step_errors, succeeded
from tests.support.helpers import settings_env
from trident_assets import Node, row_count_between, strategies, transform_asset
from trident_resources import LedgerEntry, Trident, TridentSettings
from trident_resources.core.failpoints import armed
from trident_resources.dagster import RUN_ID, step_txn_id

REPO = Path(__file__).resolve().parents[2]
DAILY = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-03-01")
SQL = "SELECT id, price FROM source"

STRATEGIES: dict[str, strategies.Strategy] = {
    "replace": strategies.replace(),
    "snapshot_replace": strategies.snapshot_replace(["id"]),
    "append_always": strategies.append_always(),
    "upsert": strategies.upsert(["id"]),
    "append_new": strategies.append_new(["id"]),
    "delta": strategies.delta(),
    "delta_keys": strategies.delta(keys=["id"]),
}


def items(start: int, n: int, price: float = 1.0) -> pa.Table:
    return pa.table({"id": list(range(start, start + n)), "price": [price * i for i in range(start, start + n)]})


def _job(settings: TridentSettings, nodes: list[Node] | list[Any]) -> dg.JobDefinition:
    assets: list[Any] = []
    for n in nodes:
        assets.extend([n.assets_def, *n.checks] if isinstance(n, Node) else [n])
    return dg.Definitions(assets=assets, resources=resources_for(settings)).resolve_implicit_global_asset_job_def()


def _state(t: Trident, key: str) -> list[dict[str, Any]]:
    """Every row with Trident's identity columns, in row-index order."""
    return t.read(key).sort_by("__row_index").to_pylist()


def _of_run(t: Trident, key: str, run_id: str) -> list[LedgerEntry]:
    return [e for e in t.history(key) if (e.metadata or {}).get(RUN_ID) == run_id]


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_a_step_run_again_after_its_commit_writes_nothing_more(settings: TridentSettings, trident: Trident, name: str) -> None:
    trident.write("src/items", items(0, 10))
    node = transform_asset("out/rerun", "src/items", SQL, strategy=STRATEGIES[name])
    job = _job(settings, [node])
    succeeded(job.execute_in_process(raise_on_error=False))  # an earlier run: the output exists, delta has a watermark
    trident.write("src/items", items(10, 5, price=2.0), mode="append")  # new rows for this run to write
    run_id = str(uuid.uuid4())
    with armed("io_manager.after_write"):  # the first attempt commits, then its step fails before reporting it
        crashed = job.execute_in_process(run_id=run_id, raise_on_error=False)
    assert not crashed.success and "injected fault at io_manager.after_write" in "\n".join(step_errors(crashed))
    [first] = _of_run(trident, "out/rerun", run_id)
    assert first.status == "committed" and first.txn_id == step_txn_id(run_id, "out__rerun", "out__rerun")
    once = _state(trident, "out/rerun")

    again = succeeded(job.execute_in_process(run_id=run_id, raise_on_error=False))
    assert _state(trident, "out/rerun") == once  # no row twice, identity (row ids, indexes, instants) unchanged
    assert _of_run(trident, "out/rerun", run_id) == [first]  # one transaction of the run, still the first
    shown = materialized(again)["out/rerun"]
    assert shown["trident/txn_id"] == str(first.txn_id) and shown["dagster/row_count"] == len(once)


def test_a_gated_step_run_again_replaces_its_first_staging(settings: TridentSettings, trident: Trident) -> None:
    """The first attempt staged an append (blocking checks in other steps gate it) and failed
    before its checks ran; the second attempt's staging replaces it, the checks pass, and the
    rows are appended once."""
    trident.write("gated/log", items(0, 3))

    @dg.asset(key=["gated", "log"], metadata={"trident/mode": "append"})
    def log() -> pa.Table:
        return items(100, 4)

    @dg.asset_check(asset=log, blocking=True)
    def four_more(log: pa.Table) -> dg.AssetCheckResult:
        return dg.AssetCheckResult(passed=log.num_rows == 7, metadata={"rows": log.num_rows})

    job = _job(settings, [log, four_more])
    run_id = str(uuid.uuid4())
    with armed("io_manager.after_write"):
        assert not job.execute_in_process(run_id=run_id, raise_on_error=False).success
    [(_, staged)] = trident.staged("gated/log")
    assert (staged.metadata or {}).get(RUN_ID) == run_id and trident.read("gated/log").num_rows == 3

    succeeded(job.execute_in_process(run_id=run_id, raise_on_error=False))
    assert trident.staged() == []
    assert sorted(trident.read("gated/log")["id"].to_pylist()) == [0, 1, 2, 100, 101, 102, 103]
    [entry] = _of_run(trident, "gated/log", run_id)
    assert entry.txn_id == staged.txn_id and entry.status == "committed"


def test_a_checked_step_whose_publish_died_is_rolled_forward_not_written_again(
    settings: TridentSettings, trident: Trident
) -> None:
    """A checked asset stages, audits and publishes in its own step; the first attempt's publish
    moved the table and died before the ledger followed (Trident's readers still see the version
    the control plane records). The second attempt finds its id published: it records it
    committed and appends nothing more (discarding it would delete the files the table now reads)."""
    trident.write("src/items", items(0, 5))
    node = transform_asset(
        "out/checked", "src/items", SQL, strategy=strategies.append_always(), expectations=[row_count_between(1, 100)]
    )
    job = _job(settings, [node])
    succeeded(job.execute_in_process(raise_on_error=False))  # an earlier run
    run_id = str(uuid.uuid4())
    with armed("publish.before_ledger"):
        assert not job.execute_in_process(run_id=run_id, raise_on_error=False).success
    [(_, staged)] = trident.staged("out/checked")
    assert len(_state(trident, "out/checked")) == 5  # reads follow the control plane, not the moved table
    once = trident.read("out/checked", staged=staged.txn_id).sort_by("__row_index").to_pylist()
    assert len(once) == 10

    again = succeeded(job.execute_in_process(run_id=run_id, raise_on_error=False))
    assert _state(trident, "out/checked") == once
    assert trident.staged() == []
    [entry] = _of_run(trident, "out/checked", run_id)
    assert entry.txn_id == staged.txn_id and entry.status == "committed"
    assert materialized(again)["out/checked"]["dagster/row_count"] == 10


def test_the_engine_replaces_a_staged_version_written_again_under_its_id(trident: Trident) -> None:
    txn = uuid.uuid4()
    trident.write("wap/log", items(0, 2))
    trident.write("wap/log", items(10, 3), mode="append", stage=True, txn_id=txn)
    again = trident.write("wap/log", items(20, 4), mode="append", stage=True, txn_id=txn)
    assert again.staged and again.txn_id == txn
    [(_, staged)] = trident.staged("wap/log")
    assert staged.txn_id == txn and sorted(trident.read("wap/log", staged=txn)["id"].to_pylist()) == [0, 1, 20, 21, 22, 23]
    trident.publish("wap/log", txn)
    assert sorted(trident.read("wap/log")["id"].to_pylist()) == [0, 1, 20, 21, 22, 23]
    assert trident.write("wap/log", items(30, 1), mode="append", txn_id=txn).noop  # committed: a no-op
    assert trident.read("wap/log").num_rows == 6


# -- a partition's step killed for real between its table commit and its ledger commit ------------


def partition_node() -> Node:
    return transform_asset(
        "dpr/out",
        "dpr/src",
        "SELECT day, v * 10 AS v10 FROM source",
        strategy=strategies.delta(),
        partitions_def=DAILY,
        metadata={"partition_expr": "day"},
    )


def run_partition(day: str, run_id: str | None = None) -> dg.ExecuteInProcessResult:
    """Materialize ``day`` of ``dpr/out`` (settings from the environment: also a child's entry)."""
    job = _job(TridentSettings(), [partition_node()])
    return job.execute_in_process(partition_key=day, run_id=run_id, raise_on_error=False)


def _src(day: date, vs: list[int]) -> pa.Table:
    return pa.table({"day": [day] * len(vs), "v": vs})


def test_a_partition_step_killed_mid_commit_is_settled_by_its_second_attempt(
    settings: TridentSettings, trident: Trident, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Delta per day: the day's increment is committed to the table, then the step's process is
    killed (os._exit) before the ledger COMMIT. The second attempt of the step (same run) holds
    that day's lock, so the first attempt's writer is gone: it rolls that transaction forward
    and writes nothing more (a fresh write would append the increment a second time)."""
    for name, value in settings_env(settings).items():
        monkeypatch.setenv(name, value)
    d1, d2 = date(2024, 1, 1), date(2024, 1, 2)
    trident.write("dpr/src", pa.concat_tables([_src(d1, [1, 2]), _src(d2, [3, 4])]))
    succeeded(run_partition("2024-01-01"))
    succeeded(run_partition("2024-01-02"))
    trident.write("dpr/src", _src(d2, [5, 6]), mode="append")
    run_id = str(uuid.uuid4())
    child = subprocess.run(
        [sys.executable, "-c", f"from {__name__} import run_partition; run_partition('2024-01-02', {run_id!r})"],
        env={**os.environ, "TRIDENT_FAILPOINTS": "commit.before_ledger=exit", "PYTHONPATH": str(REPO)},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == 137, child.stdout[-2000:] + child.stderr[-2000:]
    [orphan] = _of_run(trident, "dpr/out", run_id)
    assert orphan.status == "open"

    again = succeeded(run_partition("2024-01-02", run_id))
    rows = trident.read("dpr/out").to_pylist()
    assert sorted(r["v10"] for r in rows if r["day"] == d2) == [30, 40, 50, 60]  # the increment once
    assert sorted(r["v10"] for r in rows if r["day"] == d1) == [10, 20]
    [entry] = _of_run(trident, "dpr/out", run_id)
    assert entry.txn_id == orphan.txn_id and entry.status == "committed" and entry.rows_written == 2
    assert materialized(again)["dpr/out"]["trident/txn_id"] == str(orphan.txn_id)
