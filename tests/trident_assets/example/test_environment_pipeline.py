"""The example pipeline run in environment ``pr-1`` while a production writer appends to
``tpch/lineitem`` (issue 30): production's readers never see ``pr-1``'s rows, ``pr-1``'s readers
see its versions and production's for what it did not write, its materializations name it, the diff
says production moved ``tpch/lineitem``, and the promotion is refused whole (the environment
replaced what production appended to), changing nothing; dropping ``pr-1`` leaves every ref of
every table readable."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pytest

from tests.conftest import make_settings
from tests.support.dagster_helpers import materialized
from trident_assets.definitions import build_definitions
from trident_resources import EnvironmentConflictError, Trident
from trident_resources.dagster import TridentResource
from trident_resources.sinks.iceberg.snapshots import env_branch


def test_the_example_pipeline_in_an_environment_beside_a_production_writer(trident_home: Path, pg_dsn: str) -> None:
    settings = make_settings(trident_home, pg_dsn, tpch_scale="0.01")
    in_env = settings.model_copy(update={"environment": "pr-1"})
    with dg.instance_for_test() as instance, Trident(settings) as prod, Trident(in_env) as env:
        first = build_definitions(TridentResource.from_settings(settings)).resolve_job_def("tpch_pipeline")
        assert first.execute_in_process(raise_on_error=False, instance=instance).success
        prod.write("other/untouched", pa.table({"id": [1, 2]}))
        base = prod.describe("tpch/lineitem").row_count
        before = {d.key: d.last_txn_id for d in prod.datasets()}
        sample = prod.read("tpch/lineitem").slice(0, 1)
        row = sample.select([c for c in sample.column_names if not c.startswith("__")])
        appended: list[int] = []

        def production_writer() -> None:
            for _ in range(3):
                prod.write("tpch/lineitem", row, mode="append")
                appended.append(1)
                time.sleep(0.5)

        writer = threading.Thread(target=production_writer)
        writer.start()
        job = build_definitions(TridentResource.from_settings(in_env)).resolve_job_def("tpch_pipeline")
        result = job.execute_in_process(raise_on_error=False, instance=instance)
        writer.join()
        assert result.success
        prod.write("tpch/lineitem", row, mode="append")  # production keeps writing after the environment forked
        appended.append(1)
        meta = materialized(result, instance)
        assert meta and all(m["trident/environment"] == "pr-1" for m in meta.values())
        run = instance.get_run_by_id(result.run_id)
        assert run is not None and run.tags["trident/environment"] == "pr-1"
        # production: its own versions only (the appends, nothing of pr-1)
        assert prod.describe("tpch/lineitem").row_count == base + len(appended) == base + 4
        after = {d.key: d.last_txn_id for d in prod.datasets()}
        assert {k for k in after if after[k] != before.get(k)} == {"tpch/lineitem"}
        env_txns = {d.txn_id for d in prod.environments.show("pr-1").datasets}
        assert not env_txns & set(after.values())
        # pr-1: its versions, and production's for what it did not write
        assert env.describe("tpch/lineitem").row_count == base
        assert env.read("other/untouched").num_rows == 2
        assert env.describe("sales/q3_revenue").last_txn_id in env_txns
        diff = {d.key: d for d in prod.environments.diff("pr-1").datasets}
        assert diff["tpch/lineitem"].production_moved
        assert not any(d.production_moved for k, d in diff.items() if k != "tpch/lineitem")
        with pytest.raises(EnvironmentConflictError, match="tpch/lineitem"):
            prod.environments.promote("pr-1")
        assert {d.key: d.last_txn_id for d in prod.datasets()} == after  # refused whole: nothing changed
        prod.environments.drop("pr-1")
        sink = prod.engine.sink("iceberg_native")
        for ds in prod.control.all_datasets(prod.workspace):
            table = sink.tables.table(ds)  # type: ignore[attr-defined]
            if table is None:
                continue
            assert env_branch("pr-1") not in table.metadata.refs
            for ref in table.metadata.refs.values():
                table.scan(snapshot_id=ref.snapshot_id).to_arrow()  # every file it reads is there
        assert prod.describe("tpch/lineitem").row_count == base + 4
