"""Issue 10 item 5 as a Dagster user meets it: a 90-day single-run backfill of a daily asset is
still writing (its output stream parked on a file barrier) while a one-day run of a partition
outside the backfill's range lands at the default writer wait. Both are real ``dagster asset
materialize`` processes, each with its own Trident, pool and lock session."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import date, timedelta
from pathlib import Path

import pyarrow as pa

from tests.support.dagster_helpers import cli_env
from trident_resources import PartitionFilter, Trident, TridentSettings

REPO = Path(__file__).resolve().parents[3]

DEFS = """
import time
from datetime import date, timedelta
from pathlib import Path

import dagster as dg
import pyarrow as pa

from trident_resources.dagster import TridentIOManager, TridentResource

BARRIER = Path({barrier!r})
SCHEMA = pa.schema([("day", pa.date32()), ("v", pa.int64())])


@dg.asset(key=["rlb", "daily"], partitions_def=dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-06-01"),
          metadata={{"partition_expr": "day"}}, backfill_policy=dg.BackfillPolicy.single_run())
def daily(context: dg.AssetExecutionContext) -> pa.RecordBatchReader:
    window = context.partition_time_window
    first, last = window.start.date(), window.end.date()
    n = (last - first).days

    def batches():
        for i in range(n):
            if i == n // 2 and n > 1:  # a backfill parks mid-stream: it holds its locks and its open txn
                (BARRIER / "writing").touch()
                deadline = time.monotonic() + 300  # a bound, not an assertion: the test releases it
                while not (BARRIER / "release").exists() and time.monotonic() < deadline:
                    time.sleep(0.05)
            day = first + timedelta(days=i)
            yield pa.record_batch([[day] * 10, list(range(day.toordinal() * 10, day.toordinal() * 10 + 10))], schema=SCHEMA)

    return pa.RecordBatchReader.from_batches(SCHEMA, batches())


trident = TridentResource()
defs = dg.Definitions(assets=[daily], resources={{"trident": trident, "io_manager": TridentIOManager(trident=trident)}})
"""


def test_a_one_day_run_lands_while_a_90_day_single_run_backfill_is_writing(
    settings: TridentSettings, trident: Trident, tmp_path: Path
) -> None:
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    (tmp_path / "defs.py").write_text(DEFS.format(barrier=str(barrier)))
    may = date(2024, 5, 1)
    seed = {"day": [may - timedelta(days=1)] * 3, "v": [1, 2, 3]}
    trident.write(  # partitioned already (a dataset's first partitioned write locks it whole)
        "rlb/daily", pa.table(seed), partition=PartitionFilter.time_window("day", may - timedelta(days=1), may, "day")
    )
    env = cli_env(settings, REPO)  # no TRIDENT_WRITER_WAIT_SECONDS: the default wait
    dagster = str(Path(sys.executable).with_name("dagster"))

    def materialize(*selection: str) -> subprocess.Popen[str]:
        args = [dagster, "asset", "materialize", "-f", str(tmp_path / "defs.py"), "--select", "rlb/daily", *selection]
        return subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    backfill = materialize("--partition-range", "2024-01-01...2024-03-30")  # 90 days, one run
    try:
        deadline = time.monotonic() + 300  # a bound on a hung run, not an assertion on speed
        while not ((barrier / "writing").exists() and trident.control.open_entries()):
            assert backfill.poll() is None, backfill.communicate()[0][-4000:]
            assert time.monotonic() < deadline, "the backfill never started writing"
            time.sleep(0.1)
        day_run = materialize("--partition", "2024-05-01")
        out = day_run.communicate(timeout=600)[0]
        assert day_run.returncode == 0 and "RUN_SUCCESS" in out, out[-4000:]
        assert (
            trident.read("rlb/daily", partition=PartitionFilter.time_window("day", may, may + timedelta(days=1))).num_rows == 10
        )
        assert trident.control.open_entries()  # the backfill is still writing
    finally:
        (barrier / "release").touch()
        out = backfill.communicate(timeout=600)[0]
    assert backfill.returncode == 0 and "RUN_SUCCESS" in out, out[-4000:]
    d = trident.describe("rlb/daily")
    assert d.row_count == 90 * 10 + 10 + 3 and len(d.partitions) == 92
    rows = trident.read("rlb/daily").to_pylist()
    assert len({r["__row_index"] for r in rows}) == len(rows)  # no index stamped twice
    history = trident.history("rlb/daily")
    assert [e.status for e in history] == ["committed"] * 3
    assert len({e.metadata.get("dagster_run_id") for e in history[:2]}) == 2  # two separate Dagster runs
