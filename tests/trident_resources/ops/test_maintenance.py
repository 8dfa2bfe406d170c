"""Table maintenance: old snapshots expire, the files only they used are deleted, the data stays."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pyarrow as pa
import pytest

from tests.support.helpers import cli_env, table, user_rows
from trident_resources import InvalidArgumentError, InvalidReadError, Trident
from trident_resources.sinks.iceberg.files import filesystem_for


def _data_files(t: Trident, key: str) -> int:
    ds = t.control.dataset(t.workspace, key)
    tbl = t.driver.sinks["iceberg_native"].tables.table(ds)  # type: ignore[attr-defined]
    fs, path = filesystem_for(tbl.io, f"{tbl.location()}/data")
    import pyarrow.fs as pafs

    return sum(1 for i in fs.get_file_info(pafs.FileSelector(path)) if i.type == pafs.FileType.File)


@pytest.mark.usefixtures("iceberg_writes")  # each append its own snapshot and file
def test_maintain_expires_old_snapshots_and_their_files(trident: Trident) -> None:
    t = trident
    first = t.write("m/x", table(k=[1, 2]))
    t.write("m/x", table(k=[3, 4]))
    t.write("m/x", table(k=[5]), mode="append")
    assert _data_files(t, "m/x") == 3
    kept = t.maintain("m/x", older_than=timedelta(days=1))  # nothing is a day old yet
    assert (kept.expired_snapshots, kept.deleted_files) == (0, 0)

    report = t.maintain("m/x", older_than=timedelta(0), retain_last=1)
    assert report.expired_snapshots == 2 and report.deleted_files == 1  # the first replace's file
    assert _data_files(t, "m/x") == 2
    assert user_rows(t, "m/x", "k") == [{"k": 3}, {"k": 4}, {"k": 5}]
    with pytest.raises(InvalidReadError, match="no snapshot"):
        t.read("m/x", as_of=first.txn_id)
    assert t.write("m/x", table(k=[6]), mode="append").row_count == 4


def test_dagster_maintenance_and_canary_jobs(trident: Trident) -> None:
    """The jobs in trident_sensors run through the same facade and report what they did."""
    from tests.support.dagster_helpers import resources_for
    from trident_sensors.maintenance import canary_job, table_maintenance_job

    t = trident
    t.write("j/ice", table(k=[1]))
    t.write("j/ice", table(k=[2]))
    t.router.set_pin("j/legacy", "pg")
    t.write("j/legacy", table(k=[1, 2, 3]))
    t.router.clear_pin("j/legacy")
    resources = {"trident": resources_for(t.settings)["trident"]}

    result = table_maintenance_job.execute_in_process(
        run_config={"ops": {"maintain_tables": {"config": {"older_than_days": 0, "retain_last": 1}}}},
        resources=resources,
    )
    assert result.success
    meta = maintained(result)
    assert meta == 2  # every dataset: the iceberg one, and the pg one (its row blocks)
    assert user_rows(t, "j/ice", "k") == [{"k": 2}]

    result = canary_job.execute_in_process(run_config={"ops": {"canary": {"config": {"key": "j/legacy"}}}}, resources=resources)
    assert result.success
    assert t.describe("j/legacy").sink == "iceberg_native"
    assert user_rows(t, "j/legacy", "k") == [{"k": 1}, {"k": 2}, {"k": 3}]


@pytest.mark.usefixtures("iceberg_writes")  # each append its own small file, for the job to compact
def test_dagster_maintenance_skips_a_dataset_with_an_open_write(trident: Trident) -> None:
    """The nightly job succeeds while a write of one dataset is open: that dataset is reported as
    skipped (with the open transaction), the others are maintained, and the next run compacts it."""
    from tests.support.dagster_helpers import resources_for, succeeded
    from tests.trident_resources.sinks.iceberg.test_compaction import _open_write
    from trident_sensors.maintenance import table_maintenance_job

    t = trident
    for key in ("j/busy", "j/idle"):
        for i in range(6):
            t.write(key, pa.table({"id": [i]}), mode="append" if i else "replace")
    resources = {"trident": resources_for(t.settings)["trident"]}
    stream = _open_write(t, "j/busy")
    try:
        result = table_maintenance_job.execute_in_process(resources=resources)
        succeeded(result)
        assert maintained(result) == 1
        output = next(e for e in result.all_node_events if e.is_successful_output)
        skipped = output.step_output_data.metadata
        assert skipped["skipped"].value == 1
        reasons = skipped["skipped_datasets"].value
        assert isinstance(reasons, dict) and list(reasons) == ["j/busy"] and "write of it is open" in reasons["j/busy"]
        assert skipped["compacted_files"].value == 6  # j/idle
    finally:
        stream.__exit__(None, None, None)
    result = table_maintenance_job.execute_in_process(resources=resources)
    succeeded(result)
    assert maintained(result) == 2
    assert len(t.scan_plan("j/busy").files) == 1


def test_cli_maintain(trident: Trident) -> None:
    from click.testing import CliRunner

    from trident_cli.main import cli

    trident.write("c/m", table(k=[1]))
    trident.write("c/m", table(k=[2]))
    res = CliRunner().invoke(cli, ["maintain", "--older-than-days", "0", "--retain-last", "1"], env=cli_env(trident.settings))
    assert res.exit_code == 0, res.output
    assert "1 snapshots expired, 1 files deleted" in res.output
    assert user_rows(trident, "c/m", "k") == [{"k": 2}]


def test_maintain_reports_the_inlined_rows_it_flushed_per_dataset(trident: Trident) -> None:
    """With inlining on (the default), ``maintain`` flushes each dataset's tail into one snapshot
    and says how many rows it moved, per dataset: in its report, the CLI's lines and its JSON."""
    import json
    import re

    from click.testing import CliRunner

    from trident_cli.main import cli

    t = trident
    for key, small in (("fl/a", 3), ("fl/b", 2)):
        t.write(key, table(k=[0]))
        for i in range(small):
            t.write(key, table(k=[i + 1]), mode="append")
        assert t.describe(key).inlined_rows == small
    t.write("fl/c", table(k=[0]))  # nothing inlined: nothing flushed, and the line says none
    first = t.maintain("fl/a")
    assert first.flushed_rows == 3 and t.describe("fl/a").inlined_rows == 0
    assert t.maintain("fl/a").flushed_rows == 0  # idempotent: the tail is in Iceberg now
    assert user_rows(t, "fl/a", "k") == [{"k": 0}, {"k": 1}, {"k": 2}, {"k": 3}]

    t.write("fl/a", table(k=[4]), mode="append")
    res = CliRunner().invoke(cli, ["maintain", "fl/a", "fl/b", "fl/c"], env=cli_env(t.settings))
    assert res.exit_code == 0, res.output
    assert re.search(r"fl/a\W+1 inlined rows flushed, ", res.output), res.output
    assert re.search(r"fl/b\W+2 inlined rows flushed, ", res.output), res.output
    assert re.search(r"fl/c\W+0 small files compacted", res.output), res.output  # no tail: not mentioned
    assert t.describe("fl/b").inlined_rows == 0 and user_rows(t, "fl/b", "k") == [{"k": 0}, {"k": 1}, {"k": 2}]

    t.write("fl/b", table(k=[3]), mode="append")
    res = CliRunner().invoke(cli, ["maintain", "fl/b", "--json"], env=cli_env(t.settings))
    assert res.exit_code == 0, res.output
    [report] = json.loads(res.output)
    assert report["key"] == "fl/b" and report["flushed_rows"] == 1


@pytest.mark.parametrize(
    "kwargs",
    [{"retain_last": 0}, {"retain_last": -1}, {"older_than": timedelta(days=-1)}, {"uploads_older_than": timedelta(hours=-1)}],
)
def test_maintenance_knobs_that_would_delete_more_than_asked_are_refused(trident: Trident, kwargs: dict[str, object]) -> None:
    """A negative age put the cut-off in the future and ``retain_last`` below 1 kept nothing: both
    were accepted silently, so one typo could expire every version but the current one."""
    trident.write("c/knobs", table(k=[1]))
    trident.write("c/knobs", table(k=[2]))
    with pytest.raises(InvalidArgumentError):
        trident.maintain("c/knobs", **kwargs)  # type: ignore[arg-type]
    assert len([e for e in trident.history("c/knobs") if e.status == "committed"]) == 2
    assert trident.read("c/knobs", as_of=trident.history("c/knobs")[-1].txn_id).column("k").to_pylist() == [1]


@pytest.mark.parametrize("args", [["--retain-last", "0"], ["--older-than-days", "-1"]])
def test_cli_maintain_refuses_out_of_range_knobs(trident: Trident, args: list[str]) -> None:
    from click.testing import CliRunner

    from trident_cli.main import cli

    trident.write("c/knobs", table(k=[1]))
    res = CliRunner().invoke(cli, ["maintain", *args], env=cli_env(trident.settings))
    assert res.exit_code == 2 and "Invalid value" in res.output, res.output


def maintained(result: Any) -> int:
    """How many datasets the maintenance op maintained (its output's metadata: the output itself
    is Nothing, so no IO manager stores it)."""
    [output] = [e for e in result.all_node_events if e.is_successful_output]
    return int(output.step_output_data.metadata["maintained"].value)
