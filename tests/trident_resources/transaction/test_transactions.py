"""INTENT -> WRITE -> COMMIT: failures at each step, crashes, concurrent writers, conflicts, retries."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from tests.conftest import backend_settings, make_settings
from tests.support.helpers import table, user_rows
from trident_resources import ConcurrentWriteError, Trident, TridentSettings
from trident_resources.core.failpoints import InjectedFault, armed
from trident_resources.sinks.contract import WriteMode
from trident_resources.sinks.iceberg.files import list_txn_files

STEPS = ["intent.after", "write.file_flushed", "write.before_commit", "commit.before_catalog", "commit.before_ledger"]
# steps only the Iceberg commit path has: a small append stops at them with inlining off (an
# inlined append has intent.after and commit.before_ledger, and its own kill points in
# tests/trident_resources/inline/test_inline_crashes.py)
ICEBERG_STEPS = {"write.file_flushed", "write.before_commit", "commit.before_catalog"}
REPO = Path(__file__).resolve().parents[3]


def _txn_files(t: Trident, key: str, txn_id: uuid.UUID) -> list[str]:
    sink = t.driver.sinks["iceberg_native"]
    ds = t.control.dataset(t.workspace, key)
    assert ds is not None
    table_ = sink.tables.table(ds)  # type: ignore[attr-defined]
    return [] if table_ is None else list_txn_files(table_.io, table_.location(), txn_id)


@pytest.mark.parametrize("backend", ["local", "s3"])
@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize("mode", ["append", "upsert"])
def test_a_failure_at_any_step_leaves_everything_as_it_was(
    request: pytest.FixtureRequest, trident_home: Path, pg_dsn: str, backend: str, step: str, mode: WriteMode
) -> None:
    if step in ICEBERG_STEPS:
        request.getfixturevalue("iceberg_writes")
    with Trident(backend_settings(request, backend, trident_home, pg_dsn)) as t:
        t.write("f/x", table(k=[1, 2], v=["a", "b"]))
        before = t.describe("f/x")
        txn = uuid.uuid4()
        with armed(step), pytest.raises(InjectedFault):
            t.write("f/x", table(k=[2, 3], v=["B", "c"]), mode=mode, keys=["k"] if mode == "upsert" else None, txn_id=txn)
        after = t.describe("f/x")
        assert (after.row_count, after.snapshot_id, after.schema_version) == (before.row_count, before.snapshot_id, 1)
        assert user_rows(t, "f/x", "k") == [{"k": 1, "v": "a"}, {"k": 2, "v": "b"}]
        entry = t.history("f/x")[0]
        assert (entry.txn_id, entry.status) == (txn, "aborted") and f"injected fault at {step}" in (entry.error or "")
        assert _txn_files(t, "f/x", txn) == []
        # and the dataset still takes writes
        t.write("f/x", table(k=[3], v=["c"]), mode="append")
        assert t.describe("f/x").row_count == 3


@pytest.mark.parametrize("step", STEPS)
def test_a_failed_first_write_leaves_no_dataset(trident: Trident, step: str) -> None:
    with armed(step), pytest.raises(InjectedFault):
        trident.write("f/first", table(k=[1]))
    assert not trident.exists("f/first")
    assert trident.history("f/first")[0].status == "aborted"
    r = trident.write("f/first", table(k=[7]))
    assert r.row_count == 1 and r.schema_version == 1


def _run_child(settings: TridentSettings, failpoint: str, code: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIDENT_")}
    env |= {
        "TRIDENT_HOME": str(settings.home),
        "TRIDENT_PG_DSN": settings.pg_dsn.get_secret_value() if settings.pg_dsn else "",
        "TRIDENT_WORKSPACE": settings.workspace,
        "TRIDENT_FAILPOINTS": failpoint,
        "TRIDENT_INLINE_MAX_ROWS": str(settings.inline_max_rows),  # the parent's path (iceberg_writes: the Iceberg one)
        "PYTHONPATH": str(REPO),
    }
    prog = "import pyarrow as pa\nfrom trident_resources import Trident\nt = Trident.from_env()\n" + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", prog], env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.usefixtures("iceberg_writes")  # the Iceberg commit path: its files, snapshot and roll-forward
def test_killed_between_write_and_commit_is_rolled_forward(trident: Trident) -> None:
    trident.write("k/x", table(k=[1, 2]))
    txn = uuid.uuid4()
    child = _run_child(
        trident.settings,
        "commit.before_ledger=exit",
        f"t.write('k/x', pa.table({{'k': [3, 4, 5]}}), mode='append', txn_id='{txn}')",
    )
    assert child.returncode == 137, child.stderr
    entry = trident.history("k/x")[0]
    assert (entry.txn_id, entry.status) == (txn, "open")
    report = trident.reconcile()
    assert report.rolled_forward == [txn] and report.aborted == []
    entry = trident.history("k/x")[0]
    assert entry.status == "committed" and entry.rows_written == 3 and entry.row_count == 5
    d = trident.describe("k/x")
    assert d.row_count == 5 and d.last_txn_id == txn
    assert sorted(trident.read("k/x")["__row_index"].to_pylist()) == [0, 1, 2, 3, 4]
    # the next write numbers rows after the rolled-forward ones
    assert trident.write("k/x", table(k=[6]), mode="append").row_count == 6
    assert max(trident.read("k/x")["__row_index"].to_pylist()) == 5


@pytest.mark.usefixtures("iceberg_writes")  # the Iceberg commit path: its files, snapshot and roll-forward
def test_killed_before_the_snapshot_is_aborted_and_cleaned(trident: Trident) -> None:
    trident.write("k/y", table(k=[1]))
    txn = uuid.uuid4()
    child = _run_child(
        trident.settings,
        "write.before_commit=exit",
        f"t.write('k/y', pa.table({{'k': list(range(1000))}}), mode='append', txn_id='{txn}')",
    )
    assert child.returncode == 137, child.stderr
    assert _txn_files(trident, "k/y", txn), "the child should have left its data files behind"
    report = trident.reconcile()
    assert report.aborted == [txn]
    assert _txn_files(trident, "k/y", txn) == []
    assert trident.history("k/y")[0].status == "aborted" and trident.describe("k/y").row_count == 1


@pytest.mark.usefixtures("iceberg_writes")  # the Iceberg commit path: its files, snapshot and roll-forward
def test_a_crashed_writer_does_not_block_the_next_one(trident: Trident) -> None:
    trident.write("k/z", table(k=[1]))
    child = _run_child(trident.settings, "commit.before_ledger=exit", "t.write('k/z', pa.table({'k': [2]}), mode='append')")
    assert child.returncode == 137
    r = trident.write("k/z", table(k=[3]), mode="append")  # repairs the open row first, then writes
    assert r.row_count == 3
    assert [e.status for e in trident.history("k/z")] == ["committed", "committed", "committed"]


def test_reconcile_leaves_live_writers_alone(trident: Trident) -> None:
    gate, started = threading.Event(), threading.Event()

    def slow() -> Iterator[pa.RecordBatch]:
        yield pa.record_batch({"k": [1]})
        started.set()
        gate.wait(30)
        yield pa.record_batch({"k": [2]})

    worker = threading.Thread(target=lambda: trident.write("live/x", slow()))
    worker.start()
    try:
        assert started.wait(30)
        report = trident.reconcile()
        assert report.rolled_forward == [] and report.aborted == [] and len(report.still_running) == 1
    finally:
        gate.set()
        worker.join(60)
    assert trident.describe("live/x").row_count == 2


def test_a_second_writer_waits_then_fails_clearly(trident_home: Path, pg_dsn: str) -> None:
    # not inlined: a plain small append reads its input before it takes the lock (and commits in
    # one call), so only a write that holds the lock while it reads keeps the second one waiting
    settings = make_settings(trident_home, pg_dsn, writer_wait_seconds=0.5).model_copy(update={"inline_max_rows": 0})
    with Trident(settings) as t:
        t.write("c/x", table(k=[0]))
        gate, started = threading.Event(), threading.Event()
        errors: list[BaseException] = []

        def slow() -> Iterator[pa.RecordBatch]:
            yield pa.record_batch({"k": [1]})
            started.set()
            gate.wait(30)

        def first() -> None:
            try:
                t.write("c/x", slow(), mode="append")
            except BaseException as exc:  # pragma: no cover - surfaced below
                errors.append(exc)

        worker = threading.Thread(target=first)
        worker.start()
        try:
            assert started.wait(30)
            with pytest.raises(ConcurrentWriteError, match=r"being written by (transaction|another writer).* waited"):
                t.write("c/x", table(k=[9]), mode="append")
        finally:
            gate.set()
            worker.join(60)
        assert not errors
        # a writer willing to wait long enough goes through once the first is done
        assert t.write("c/x", table(k=[9]), mode="append").row_count == 3
        statuses = [e.status for e in t.history("c/x")]
        assert statuses == ["committed", "committed", "committed"]  # the refused writer never opened a row


def test_waiting_writer_proceeds_when_the_first_finishes(settings: TridentSettings) -> None:
    with Trident(settings.model_copy(update={"inline_max_rows": 0})) as trident:  # (see the test above)
        _waits_then_proceeds(trident)


def _waits_then_proceeds(trident: Trident) -> None:
    trident.write("c/y", table(k=[0]))
    gate, started = threading.Event(), threading.Event()

    def slow() -> Iterator[pa.RecordBatch]:
        yield pa.record_batch({"k": [1]})
        started.set()
        gate.wait(30)

    worker = threading.Thread(target=lambda: trident.write("c/y", slow(), mode="append"))
    worker.start()
    assert started.wait(30)
    threading.Timer(0.5, gate.set).start()
    r = trident.write("c/y", table(k=[2]), mode="append")  # waits (up to 5 s in tests)
    worker.join(60)
    assert r.row_count == 3 and sorted(trident.read("c/y")["__row_index"].to_pylist()) == [0, 1, 2]


@pytest.mark.usefixtures("iceberg_writes")  # the Iceberg commit path: its files, snapshot and roll-forward
def test_iceberg_commit_conflicts_are_retried_on_a_refreshed_table(trident: Trident) -> None:
    """Another client commits to the same table mid-write; our append retries and both land."""
    t = trident
    t.write("cf/x", table(k=[1]))
    sink = t.driver.sinks["iceberg_native"]
    ds = t.control.dataset(t.workspace, "cf/x")

    def racing() -> Iterator[pa.RecordBatch]:
        yield pa.record_batch({"k": [2]})
        other = sink.catalog.load_table(sink.tables.identifier(ds))  # type: ignore[attr-defined]
        with other.transaction() as txn:  # an outside commit, as another engine would make
            with txn.update_snapshot(snapshot_properties={"who": "outsider"}).fast_append():
                pass

    r = t.write("cf/x", racing(), mode="append")
    assert r.row_count == 2
    snaps = sink.catalog.load_table(sink.tables.identifier(ds)).snapshots()  # type: ignore[attr-defined]
    assert [s.summary.get("who") for s in snaps][-2] == "outsider"


def test_retrying_a_committed_transaction_id_is_a_no_op(trident: Trident) -> None:
    txn = uuid.uuid4()
    first = trident.write("idem/x", table(k=[1, 2]), txn_id=txn)
    again = trident.write("idem/x", table(k=[1, 2]), txn_id=txn)
    assert again.noop and not first.noop
    assert (again.txn_id, again.row_count, again.snapshot_id) == (first.txn_id, 2, first.snapshot_id)
    assert len(trident.history("idem/x")) == 1
    assert trident.describe("idem/x").snapshot_id == first.snapshot_id


def test_retrying_an_aborted_transaction_id_writes(trident: Trident) -> None:
    txn = uuid.uuid4()
    with armed("write.before_commit"), pytest.raises(InjectedFault):
        trident.write("idem/y", table(k=[1]), txn_id=txn)
    r = trident.write("idem/y", table(k=[1]), txn_id=txn)
    assert not r.noop and r.row_count == 1
    assert [(e.txn_id, e.status) for e in trident.history("idem/y")] == [(txn, "committed")]
