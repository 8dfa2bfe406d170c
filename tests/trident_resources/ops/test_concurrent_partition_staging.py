"""Writers of different partitions of one dataset staging at the same time (a backfill of a checked
partitioned asset, one run per day on a Celery fleet) all land.

A staged version is a snapshot on an audit branch: it moves the table's metadata (its last
sequence number) without moving main. A writer that loaded the table before another staged, and
commits after it, must build its snapshot on the table as it is then, not only when main moved;
else the catalog refuses it ("Cannot add snapshot with sequence number N older than last sequence
number N", a 422 from a REST catalog)."""

from __future__ import annotations

import threading
import uuid
from datetime import date, timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from tests.conftest import BACKENDS, backend_settings
from trident_resources import PartitionFilter, Trident
from trident_resources.core.failpoints import armed

D0 = date(2024, 1, 1)


def days(start: date, n: int, per_day: int, base: int = 0) -> pa.Table:
    ds = [start + timedelta(days=i) for i in range(n) for _ in range(per_day)]
    return pa.table({"d": ds, "v": list(range(base, base + len(ds)))})


def window(start: date) -> PartitionFilter:
    return PartitionFilter.time_window("d", start, start + timedelta(days=1), "day")


@pytest.mark.parametrize("backend", BACKENDS)
def test_partitions_staged_at_the_same_time_all_land(
    request: pytest.FixtureRequest, trident_home: Path, pg_dsn: str, backend: str
) -> None:
    settings = backend_settings(request, backend, trident_home, pg_dsn)
    with Trident(settings) as t:
        t.write("ps/days", days(D0, 3, 2), partition=PartitionFilter.time_window("d", D0, D0 + timedelta(days=3), "day"))
    errors: list[BaseException] = []
    staged: dict[int, uuid.UUID] = {}
    barrier = threading.Barrier(3)

    def run(i: int) -> None:
        try:
            with Trident(settings) as t:
                barrier.wait()
                day = D0 + timedelta(days=i)
                staged[i] = t.write("ps/days", days(day, 1, 10, base=100 * (i + 1)), partition=window(day), stage=True).txn_id
        except BaseException as exc:
            errors.append(exc)

    # every writer loads the table, then stalls while writing its files, so each commits on a
    # table the others' staged snapshots moved after it was loaded
    with armed("write.file_flushed", "sleep:2"):
        threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    assert not errors, errors
    with Trident(settings) as t:
        for txn in staged.values():
            t.publish("ps/days", txn)
        rows = t.read("ps/days").to_pylist()
        assert sorted(r["v"] for r in rows) == sorted(v for i in range(3) for v in range(100 * (i + 1), 100 * (i + 1) + 10))
        assert t.describe("ps/days").row_count == 30 and t.staged() == []
