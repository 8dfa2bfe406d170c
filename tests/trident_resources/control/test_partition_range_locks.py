"""Range locks for partition writers (issue 10 item 5): a writer of a wide range of partitions
(a 90-day single-run backfill) locks only that range, so a run of a partition outside it lands at
the default writer wait while the backfill is still writing; a writer inside it waits as before;
a SIGKILLed range writer's locks end with its process and ``reconcile`` settles its transaction.

The range writer runs in its own OS process (its own Trident, pool and lock session), held open
mid-write on a file barrier: its input stream blocks until the test releases it."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from tests.trident_resources.ops.test_partitions import D0, days, window
from trident_resources import ConcurrentWriteError, PartitionFilter, Trident, TridentSettings
from trident_resources.control.range_locks import LockItem, claim
from trident_resources.core.partitions import PartitionDim

REPO = Path(__file__).resolve().parents[3]
DEFAULT_WAIT = TridentSettings.model_fields["writer_wait_seconds"].default
RANGE_WRITER = """
import sys, time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pyarrow as pa
from trident_resources import PartitionFilter, Trident

barrier, txn = Path(sys.argv[1]), sys.argv[2]
d0 = date(2024, 1, 1)
schema = pa.schema([("d", pa.date32()), ("v", pa.int64())])


def batches():
    # first half, then wait (the writer holds its locks and its open ledger row by now)
    yield pa.record_batch([[d0 + timedelta(days=i // 2) for i in range(90)], list(range(1000, 1090))], schema=schema)
    (barrier / "writing").touch()
    deadline = time.monotonic() + 300  # a bound, not an assertion: the test releases it
    while not (barrier / "release").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    yield pa.record_batch([[d0 + timedelta(days=45 + i // 2) for i in range(90)], list(range(1090, 1180))], schema=schema)


with Trident.from_env() as t:
    t.write("rl/x", pa.RecordBatchReader.from_batches(schema, batches()), txn_id=txn,
            partition=PartitionFilter.time_window("d", d0, d0 + timedelta(days=90), "day"))
"""


@contextmanager
def range_writer(settings: TridentSettings, barrier: Path, txn: uuid.UUID) -> Iterator[subprocess.Popen[str]]:
    """A process writing days [D0, D0+90) of ``rl/x``, stopped mid-write until ``release``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIDENT_")}
    env |= {  # no TRIDENT_WRITER_WAIT_SECONDS: the default wait
        "TRIDENT_HOME": str(settings.home),
        "TRIDENT_PG_DSN": settings.pg_dsn.get_secret_value() if settings.pg_dsn else "",
        "TRIDENT_WORKSPACE": settings.workspace,
        "PYTHONPATH": str(REPO),
    }
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(RANGE_WRITER), str(barrier), str(txn)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        yield proc
    finally:
        (barrier / "release").touch()
        if proc.poll() is None:
            proc.communicate(timeout=300)


def wait_until_writing(t: Trident, proc: subprocess.Popen[str], barrier: Path, txn: uuid.UUID) -> None:
    """Until the range writer is mid-write: its ledger row is open (INTENT comes after its locks)
    and its input stream is parked on the barrier."""
    deadline = time.monotonic() + 120  # a bound on a hung child, not an assertion on speed
    while not ((barrier / "writing").exists() and any(e.txn_id == txn for e in t.control.open_entries())):
        assert proc.poll() is None, proc.communicate()[0][-4000:]
        assert time.monotonic() < deadline, "the range writer never started writing"
        time.sleep(0.05)


def seed(t: Trident) -> None:
    t.write("rl/x", days(D0, 120, 1), partition=window(D0, 120))  # partitioned already: one row a day


def test_a_day_outside_a_wide_range_write_lands_while_one_inside_waits(settings: TridentSettings, tmp_path: Path) -> None:
    with Trident(settings) as t:
        seed(t)
    txn = uuid.uuid4()
    with (
        range_writer(settings, tmp_path, txn) as proc,
        Trident(settings.model_copy(update={"writer_wait_seconds": DEFAULT_WAIT})) as t,
    ):
        wait_until_writing(t, proc, tmp_path, txn)
        outside = t.write("rl/x", days(D0 + timedelta(days=100), 1, 5, base=5000), partition=window(D0 + timedelta(days=100)))
        assert outside.rows_written == 5
        with Trident(settings.model_copy(update={"writer_wait_seconds": 0.5})) as impatient:
            with pytest.raises(ConcurrentWriteError, match=str(txn)):  # names the range writer it waits for
                impatient.write("rl/x", days(D0 + timedelta(days=45), 1, 1, base=7000), partition=window(D0 + timedelta(days=45)))
            with pytest.raises(ConcurrentWriteError):  # a whole-dataset writer conflicts with every slice
                impatient.write("rl/x", days(D0, 1, 1), mode="append")
        (tmp_path / "release").touch()
        out = proc.communicate(timeout=300)[0]
        assert proc.returncode == 0, out[-4000:]
    with Trident(settings) as t:
        rows = t.read("rl/x").to_pylist()
        by_day: dict[date, list[int]] = {}
        for r in rows:
            by_day.setdefault(r["d"], []).append(r["v"])
        assert sorted(by_day[D0]) == [1000, 1001] and sorted(by_day[D0 + timedelta(days=89)]) == [1178, 1179]
        assert sorted(by_day[D0 + timedelta(days=100)]) == list(range(5000, 5005))
        assert by_day[D0 + timedelta(days=90)] == [90] and by_day[D0 + timedelta(days=119)] == [119]  # untouched
        assert len(rows) == 90 * 2 + 5 + 29 and t.describe("rl/x").row_count == len(rows)
        assert len({r["__row_index"] for r in rows}) == len(rows)  # no index stamped twice
        history = t.history("rl/x")
        assert [e.status for e in history] == ["committed"] * 3
        ended = {e.txn_id: e.ended_at or datetime.min.replace(tzinfo=UTC) for e in history}
        assert ended[txn] > ended[outside.txn_id]  # the backfill, started first, committed after the outside day


def test_a_sigkilled_range_writer_blocks_nobody_and_is_reconciled(settings: TridentSettings, tmp_path: Path) -> None:
    with Trident(settings) as t:
        seed(t)
        before = t.describe("rl/x")
    txn = uuid.uuid4()
    with (
        range_writer(settings, tmp_path, txn) as proc,
        Trident(settings.model_copy(update={"writer_wait_seconds": DEFAULT_WAIT})) as t,
    ):
        wait_until_writing(t, proc, tmp_path, txn)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        inside = t.write("rl/x", days(D0 + timedelta(days=45), 1, 3, base=7000), partition=window(D0 + timedelta(days=45)))
        assert inside.rows_written == 3
        assert [e.txn_id for e in t.control.open_entries()] == [txn]  # the dead writer's row, until reconcile
        report = t.reconcile()
        assert report.aborted == [txn] and report.still_running == []
        rows = t.read("rl/x").to_pylist()
        assert sorted(r["v"] for r in rows) == sorted([v for v in range(120) if v != 45] + [7000, 7001, 7002])
        assert t.describe("rl/x").row_count == before.row_count + 2
        status = {e.txn_id: e.status for e in t.history("rl/x")}
        assert status.pop(txn) == "aborted" and status.pop(inside.txn_id) == "committed"
        assert list(status.values()) == ["committed"]  # the seed


# -- the lock rule itself: conflict exactly when slices overlap --------------------------------

SCHEMA = pa.schema([("d", pa.date32()), ("region", pa.string()), ("t", pa.timestamp("us", tz="UTC"))])


def _conflict(a: list[LockItem], b: list[LockItem]) -> bool:
    mine = {i.key: i.shared for i in a}
    return any(i.key in mine and not (mine[i.key] and i.shared) for i in b)


def _claim(f: PartitionFilter) -> list[LockItem]:
    items = claim(f.bind(SCHEMA))
    assert items is not None
    return items


def _days(start: int, n: int) -> PartitionFilter:
    return PartitionFilter.time_window("d", D0 + timedelta(days=start), D0 + timedelta(days=start + n), "day")


def test_day_ranges_conflict_exactly_when_they_overlap() -> None:
    rng = random.Random(10)
    for _ in range(3000):
        s1, n1 = rng.randint(-40_000, 40_000), rng.randint(1, 3000)
        s2, n2 = (
            (s1 + rng.randint(-3001, 3001), rng.randint(1, 3000)) if rng.random() < 0.7 else (rng.randint(-40_000, 40_000), 1)
        )
        overlap = s1 < s2 + n2 and s2 < s1 + n1
        assert _conflict(_claim(_days(s1, n1)), _claim(_days(s2, n2))) == overlap, (s1, n1, s2, n2)
    assert len(_claim(_days(0, 1))) <= 20 and len(_claim(_days(0, 90))) <= 40 and len(_claim(_days(0, 3650))) <= 50


def test_hour_and_month_ranges_and_values_per_dimension() -> None:
    def hours(a: int, n: int) -> PartitionFilter:
        start = datetime(2024, 1, 1, tzinfo=UTC) + timedelta(hours=a)
        return PartitionFilter.time_window("t", start, start + timedelta(hours=n), "hour")

    assert _conflict(_claim(hours(0, 24 * 90)), _claim(hours(24 * 90 - 1, 1)))
    assert not _conflict(_claim(hours(0, 24 * 90)), _claim(hours(24 * 90, 1)))
    month = PartitionFilter.time_window("d", date(2024, 1, 1), date(2024, 4, 1), "month")
    assert _conflict(_claim(month), _claim(PartitionFilter.time_window("d", date(2024, 3, 1), date(2024, 4, 1), "month")))
    assert not _conflict(_claim(month), _claim(PartitionFilter.time_window("d", date(2024, 4, 1), date(2024, 5, 1), "month")))
    eu, us = PartitionFilter.of_values("region", "eu"), PartitionFilter.of_values("region", "us")
    both = PartitionFilter.of_values("region", "us", "eu")
    assert _conflict(_claim(eu & _days(0, 90)), _claim(_days(10, 1) & both))  # same value, overlapping days
    assert not _conflict(_claim(eu & _days(0, 90)), _claim(us & _days(10, 1)))  # another value
    assert not _conflict(_claim(eu & _days(0, 90)), _claim(eu & _days(90, 1)))  # same value, other days
    assert not _conflict(_claim(eu), _claim(us)) and _conflict(_claim(both), _claim(us))
    # far outside the tree's span: clamped onto its edge, so they conflict more, never less
    assert _conflict(_claim(_days(-200_000, 1)), _claim(_days(-100_000, 1)))
    # a slice that cannot be locked by parts has no claim: its writer locks the whole dataset
    identity_range = PartitionFilter((PartitionDim("region", "identity", start="a", end="b"),))
    assert claim(identity_range.bind(SCHEMA)) is None


def _advisory_locks(t: Trident) -> int:
    with t.control.pool.connection() as conn:
        row = conn.execute("SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND granted").fetchone()
    assert row is not None
    return int(row["n"])


def test_a_refused_overlapping_claim_keeps_no_lock_it_took_on_the_way(trident: Trident) -> None:
    """Locks are taken in one round trip up to the first one held elsewhere; a writer that gives
    up releases every one it took (they would otherwise outlive it on a pooled session)."""
    seed(trident)
    ds, schema = trident.dataset_record("rl/x"), trident.schema("rl/x")
    baseline = _advisory_locks(trident)  # other tests' sessions may hold some
    held = claim(window(D0, 90).bind(schema))
    inside = claim(window(D0 + timedelta(days=45)).bind(schema))
    assert held is not None and inside is not None
    with trident.control.partition_lock(ds, held, 1):
        assert _advisory_locks(trident) == baseline + len(held) + 1  # + the dataset's lock, shared
        with pytest.raises(ConcurrentWriteError), trident.control.partition_lock(ds, inside, 0):
            pass
        assert _advisory_locks(trident) == baseline + len(held) + 1
    assert _advisory_locks(trident) == baseline
