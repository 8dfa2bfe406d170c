"""The transaction core under faults, races and time travel (issues 8 and 15): each test here
failed before its fix."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import psycopg
import pyarrow as pa
import pytest

from tests.support.helpers import table
from tests.trident_resources.transaction.test_transactions import _run_child
from trident_resources import (
    InvalidReadError,
    InvalidWriteError,
    MigrationError,
    SinkMismatchError,
    Trident,
    TridentError,
    TridentSettings,
)


# -- issue 8.4: a transaction id belongs to one dataset -------------------------------------------
def test_a_txn_id_committed_on_one_dataset_is_refused_on_another(trident: Trident) -> None:
    t = trident
    r = t.write("tx/a", table(k=[1, 2, 3]))
    with pytest.raises(InvalidWriteError, match="tx/a"):
        t.write("tx/b", table(k=[9]), txn_id=r.txn_id)
    assert not t.exists("tx/b")
    # the same id on its own dataset stays an idempotent retry
    again = t.write("tx/a", table(k=[1, 2, 3]), txn_id=r.txn_id)
    assert again.noop and again.row_count == 3


# -- issue 8.6: as_of tells the truth -------------------------------------------------------------
def test_as_of_unknown_versions_are_named_errors(trident: Trident) -> None:
    t = trident
    t.write("tt/a", table(k=[1]))
    for bad in (123456789, -1, "not-a-uuid", uuid.uuid4()):
        with pytest.raises(InvalidReadError):
            t.read("tt/a", as_of=bad)


def test_as_of_the_committed_instant_reads_that_version(trident: Trident) -> None:
    t = trident
    first = t.write("tt/b", table(k=[1]))
    r2 = t.write("tt/b", table(k=[2, 3]), mode="append")
    t.write("tt/b", table(k=[4]), mode="append")
    assert sorted(t.read("tt/b", as_of=r2.committed_at).column("k").to_pylist()) == [1, 2, 3]
    assert sorted(t.read("tt/b", as_of=r2.txn_id).column("k").to_pylist()) == [1, 2, 3]
    if r2.snapshot_id == first.snapshot_id:  # r2 was inlined: it made no snapshot, its id names the first's version
        assert sorted(t.read("tt/b", as_of=r2.snapshot_id).column("k").to_pylist()) == [1]
        t.flush("tt/b")  # now a snapshot holds r2's and the third write's rows
        flushed = t.describe("tt/b").snapshot_id
        assert flushed != first.snapshot_id
        assert sorted(t.read("tt/b", as_of=flushed).column("k").to_pylist()) == [1, 2, 3, 4]
    else:
        assert sorted(t.read("tt/b", as_of=r2.snapshot_id).column("k").to_pylist()) == [1, 2, 3]


def test_as_of_an_aborted_transaction_is_refused(trident: Trident) -> None:
    from trident_resources.core.failpoints import InjectedFault, armed

    t = trident
    t.write("tt/c", table(k=[1]))
    txn = uuid.uuid4()
    with armed("commit.before_ledger"), pytest.raises(InjectedFault):
        t.write("tt/c", table(k=[2]), mode="append", txn_id=txn)
    with pytest.raises(InvalidReadError, match=r"aborted|not committed"):
        t.read("tt/c", as_of=txn)


# -- issue 8.3: a past version reads with that version's schema -------------------------------------
def test_time_travel_after_schema_changes_reads_the_old_schema(trident: Trident) -> None:
    t = trident
    first = t.write("tt/s", pa.table({"k": [1, 2], "v": ["123", "x"]}))
    t.write("tt/s", pa.table({"k": [3], "w": [1.5]}))  # replace drops v, adds w
    old = t.read("tt/s", as_of=first.txn_id)
    assert [c for c in old.column_names if not c.startswith("__")] == ["k", "v"]
    assert sorted(old.column("v").to_pylist()) == ["123", "x"]
    t.write("tt/s", pa.table({"k": [4], "v": [7]}))  # v comes back as int64
    old = t.read("tt/s", as_of=first.txn_id)
    assert old.schema.field("v").type in (pa.string(), pa.large_string())
    assert sorted(old.column("v").to_pylist()) == ["123", "x"]


# -- issue 8.9: a retry after a crashed keyed write ----------------------------------------------
def test_retrying_a_crashed_keyed_write_with_its_txn_id_works(trident: Trident) -> None:
    t = trident
    t.write("kr/a", table(k=[1, 2], v=["a", "b"]))
    txn = uuid.uuid4()
    child = _run_child(
        t.settings,
        "write.before_commit=exit",
        f"t.write('kr/a', pa.table({{'k': [2, 3], 'v': ['B', 'c']}}), mode='upsert', keys=['k'], txn_id='{txn}')",
    )
    assert child.returncode == 137, child.stderr
    r = t.write("kr/a", table(k=[2, 3], v=["B", "c"]), mode="upsert", keys=["k"], txn_id=txn)
    assert not r.noop and r.row_count == 3
    assert not (t.settings.home / "tmp" / str(txn)).exists()


# -- issue 8.8: Postgres going away under a writer ----------------------------------------------
def _slow(batches: int, delay: float, started: threading.Event | None = None) -> Iterator[pa.RecordBatch]:
    for i in range(batches):
        if started is not None and i == 1:
            started.set()
        time.sleep(delay)
        yield pa.record_batch({"k": pa.array(range(i * 1000, (i + 1) * 1000), pa.int64())})


def test_a_writer_whose_lock_session_dies_fails_named_and_commits_nothing(trident: Trident, pg_dsn: str) -> None:
    # not inlined: a write that may be inlined reads its first rows before it takes the lock
    with Trident(trident.settings.model_copy(update={"inline_max_rows": 0})) as t:
        t.write("lk/a", table(k=[-1]))
        before = t.describe("lk/a")
        started = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            try:
                reader = pa.RecordBatchReader.from_batches(pa.schema([("k", pa.int64())]), _slow(6, 0.3, started))
                t.write("lk/a", reader, mode="append")
            except BaseException as exc:
                errors.append(exc)

        th = threading.Thread(target=run)
        th.start()
        assert started.wait(20)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            killed = conn.execute(
                "select pg_terminate_backend(pid) from pg_locks where locktype = 'advisory' and granted and pid <> pg_backend_pid()"
            ).fetchall()
        assert killed, "the writer's lock session was not found"
        th.join(60)
        assert errors, "the write committed although its lock session died"
        assert isinstance(errors[0], TridentError), f"raw error: {type(errors[0]).__name__}: {errors[0]}"
        t.reconcile()
        after = t.describe("lk/a")
        assert (after.row_count, after.snapshot_id) == (before.row_count, before.snapshot_id)
        assert t.read("lk/a").column("k").to_pylist() == [-1]


# -- issue 15.1: after the lock, the routing decision is made again --------------------------------
def test_a_manifest_write_queued_behind_a_first_iceberg_write_is_refused(trident: Trident) -> None:
    t = trident
    started = threading.Event()
    results: list[object] = []

    def first() -> None:
        results.append(t.write("rc/files", _slow_manifest(started), mode="append"))

    th = threading.Thread(target=first)
    th.start()
    assert started.wait(20)
    with pytest.raises(SinkMismatchError):
        t.write_manifest("rc/files", [{"object_key": "m1", "size": 1, "checksum": "c", "content_type": "x"}])
    th.join(60)
    assert results, "the first write failed"
    d = t.describe("rc/files")
    assert d.sink == "iceberg_native" and d.row_count == t.read("rc/files").num_rows == 2000


def _slow_manifest(started: threading.Event) -> pa.RecordBatchReader:
    schema = pa.schema([("object_key", pa.string()), ("size", pa.int64())])

    def gen() -> Iterator[pa.RecordBatch]:
        for i in range(4):
            if i == 1:
                started.set()
            time.sleep(0.4)
            yield pa.record_batch({"object_key": [f"o{i}-{j}" for j in range(500)], "size": list(range(500))}, schema=schema)

    return pa.RecordBatchReader.from_batches(schema, gen())


# -- issue 15.2: a canary killed before its flip is undone, never committed -------------------------
def test_a_canary_killed_during_verification_is_aborted_by_reconcile(trident: Trident, settings: TridentSettings) -> None:
    t = trident
    t.router.set_pin("cn/a", "pg")
    t.write("cn/a", table(k=list(range(100)), v=[str(i) for i in range(100)]))
    before = t.describe("cn/a")
    child = _run_child(settings, "canary.verify=exit", "t.migrate('cn/a')")
    assert child.returncode == 137, child.stderr
    report = t.reconcile()
    assert len(report.aborted) == 1 and not report.rolled_forward
    after = t.describe("cn/a")
    assert (after.sink, after.last_txn_id, after.row_count) == ("pg", before.last_txn_id, 100)
    assert t.driver.sinks["iceberg_native"].tables.table(t.dataset_record("cn/a")) is None  # type: ignore[attr-defined]
    assert sorted(t.read("cn/a").column("k").to_pylist()) == list(range(100))


# -- issue 15.3: a canary never moves a dataset its writer cannot follow ---------------------------
def test_a_canary_refuses_to_move_a_manifest_dataset(trident: Trident) -> None:
    t = trident
    t.write_manifest("files/raw", [{"object_key": "a", "size": 1, "checksum": "c", "content_type": "x"}])
    with pytest.raises(MigrationError, match=r"dataset\.manifest"):
        t.migrate("files/raw")
    assert t.describe("files/raw").sink == "pg"
    t.write_manifest("files/raw", [{"object_key": "b", "size": 2, "checksum": "d", "content_type": "y"}])
    assert t.describe("files/raw").row_count == 2


def test_an_edit_queued_behind_a_canary_follows_the_dataset_to_its_new_sink(trident: Trident) -> None:
    from trident_resources.core.failpoints import armed

    t = trident
    t.router.set_pin("rc/edit", "pg")
    t.write("rc/edit", table(k=[1, 2, 3], v=["a", "b", "c"]))
    done: list[object] = []
    with armed("canary.verify", "sleep:2"):
        canary = threading.Thread(target=lambda: done.append(t.migrate("rc/edit")))
        canary.start()
        deadline = time.monotonic() + 20
        while not any(e.writer == "canary" and e.status == "open" for e in t.history("rc/edit")):
            assert time.monotonic() < deadline, "the canary never opened its transaction"
            time.sleep(0.05)
        r = t.update_rows("rc/edit", pa.table({"k": [2], "v": ["B"]}), keys=["k"])
        canary.join(30)
    assert done and done[0].flipped  # type: ignore[attr-defined]
    assert r.sink == "iceberg_native"
    d = t.describe("rc/edit")
    assert (d.sink, d.row_count) == ("iceberg_native", 3)
    rows = {row["k"]: row for row in t.read("rc/edit").to_pylist()}
    assert rows[2]["v"] == "B" and rows[2]["__row_index"] == 1
    appended = t.write("rc/edit", table(k=[4], v=["d"]), mode="append")
    assert appended.row_count == 4
    assert sorted(row["__row_index"] for row in t.read("rc/edit").to_pylist()) == [0, 1, 2, 3]
