"""Issue 28 item 3: Trident's own maintenance snapshots (compaction, with the bounds repair it
carries) hold the same data version as the snapshot they were made from. Every check of "is the
table still at the version I started from" must treat a compaction between the two points as no
change: one test per such check, each with a compaction landing in between."""

from __future__ import annotations

import threading
import time
from datetime import date, timedelta

import pyarrow as pa
import pytest

from tests.support.helpers import iceberg_table
from trident_assets.strategies import Strategy, plan_output
from trident_resources import PartitionFilter, StagedVersionConflictError, Trident
from trident_resources.core.failpoints import armed
from trident_resources.sinks.iceberg.sink import OWNER_PROPERTY
from trident_resources.sinks.iceberg.snapshots import DATA_VERSION_PROPERTY, data_version, is_maintenance

pytestmark = pytest.mark.usefixtures("iceberg_writes")  # about what each Iceberg commit leaves

D0 = date(2024, 1, 1)
D1 = date(2024, 1, 2)


def _six_small_writes(t: Trident, key: str) -> None:
    t.write(key, pa.table({"k": [0]}))
    for i in range(1, 6):
        t.write(key, pa.table({"k": [i]}), mode="append")


def _compact(t: Trident, key: str) -> None:
    """``maintain`` that compacts (and keeps every snapshot), asserting a compaction snapshot landed."""
    report = t.maintain(key)
    assert report.compacted_files >= 5, report
    head = iceberg_table(t, key).current_snapshot()
    assert head is not None and is_maintenance(head)


def _ks(t: Trident, key: str, **kw: object) -> list[int]:
    return sorted(t.read(key, **kw).column("k").to_pylist())  # type: ignore[arg-type]


def test_a_compaction_snapshot_records_the_data_version_it_holds(trident: Trident) -> None:
    t = trident
    _six_small_writes(t, "mv/dv")
    last = t.describe("mv/dv").snapshot_id
    _compact(t, "mv/dv")
    table = iceberg_table(t, "mv/dv")
    head = table.current_snapshot()
    assert head is not None and head.summary is not None
    assert head.summary[DATA_VERSION_PROPERTY] == str(last)
    assert data_version(table, head.snapshot_id) == last
    t.write("mv/dv", pa.table({"k": [6, 7, 8, 9, 10, 11]}), mode="append")  # small again, five more
    for i in range(12, 16):
        t.write("mv/dv", pa.table({"k": [i]}), mode="append")
    newest = t.describe("mv/dv").snapshot_id
    _compact(t, "mv/dv")
    table = iceberg_table(t, "mv/dv")
    head = table.current_snapshot()
    assert head is not None and data_version(table, head.snapshot_id) == newest


def test_staged_after_a_compaction_publishes(trident: Trident) -> None:
    """The issue's repro: six small writes, maintain compacts, stage, publish."""
    t = trident
    _six_small_writes(t, "mv/after")
    _compact(t, "mv/after")
    staged = t.write("mv/after", pa.table({"k": [100]}), mode="append", stage=True)
    t.publish("mv/after", staged.txn_id)
    assert _ks(t, "mv/after") == [0, 1, 2, 3, 4, 5, 100]
    assert t.describe("mv/after").last_txn_id == staged.txn_id


def test_staged_before_a_compaction_publishes(trident: Trident) -> None:
    t = trident
    _six_small_writes(t, "mv/before")
    staged = t.write("mv/before", pa.table({"k": [100]}), mode="append", stage=True)
    _compact(t, "mv/before")
    assert _ks(t, "mv/before") == [0, 1, 2, 3, 4, 5]
    t.publish("mv/before", staged.txn_id)
    assert _ks(t, "mv/before") == [0, 1, 2, 3, 4, 5, 100]


def test_publish_after_a_real_change_is_still_refused(trident: Trident) -> None:
    """A compaction is no change; a write landing after it still is."""
    t = trident
    _six_small_writes(t, "mv/real")
    staged = t.write("mv/real", pa.table({"k": [100]}), mode="append", stage=True)
    _compact(t, "mv/real")
    t.write("mv/real", pa.table({"k": [7]}), mode="append")
    with pytest.raises(StagedVersionConflictError, match="changed since"):
        t.publish("mv/real", staged.txn_id)


def _day(d: date, values: list[int]) -> pa.Table:
    return pa.table({"d": [d] * len(values), "k": values})


def _on(d: date) -> PartitionFilter:
    return PartitionFilter.time_window("d", d, d + timedelta(days=1), "day")


def _partitioned(t: Trident, key: str) -> None:
    """Six small files in D0, one in D1."""
    t.write(key, _day(D0, [0]), partition=_on(D0))
    for i in range(1, 6):
        t.write(key, _day(D0, [i]), mode="append", partition=_on(D0))
    t.write(key, _day(D1, [10]), partition=_on(D1))


def _rows(t: Trident, key: str) -> list[tuple[date, int]]:
    return sorted((r["d"], r["k"]) for r in t.read(key).to_pylist())


def test_a_staged_partition_replace_rebases_over_a_compaction_of_its_partition(trident: Trident) -> None:
    """Partition rebase: main moved by another partition's write AND a compaction of the staged
    partition's own files; the partition's rows are what it was staged on."""
    t = trident
    _partitioned(t, "mv/part")
    staged = t.write("mv/part", _day(D0, [50, 51]), partition=_on(D0), stage=True)
    _compact(t, "mv/part")
    t.write("mv/part", _day(D1, [20]), mode="append", partition=_on(D1))  # another partition meanwhile
    t.publish("mv/part", staged.txn_id)
    assert _rows(t, "mv/part") == [(D0, 50), (D0, 51), (D1, 10), (D1, 20)]
    assert t.describe("mv/part").row_count == 4


def test_a_staged_partition_append_rebases_over_a_compaction_of_its_partition(trident: Trident) -> None:
    t = trident
    _partitioned(t, "mv/parta")
    staged = t.write("mv/parta", _day(D0, [50]), mode="append", partition=_on(D0), stage=True)
    _compact(t, "mv/parta")
    t.write("mv/parta", _day(D1, [20]), mode="append", partition=_on(D1))
    t.publish("mv/parta", staged.txn_id)
    assert _rows(t, "mv/parta") == [(D0, i) for i in range(6)] + [(D0, 50), (D1, 10), (D1, 20)]


def test_a_staged_partition_is_still_refused_when_a_write_changed_it_after_the_compaction(trident: Trident) -> None:
    t = trident
    _partitioned(t, "mv/partx")
    staged = t.write("mv/partx", _day(D0, [50]), partition=_on(D0), stage=True)
    _compact(t, "mv/partx")
    t.write("mv/partx", _day(D0, [7]), mode="append", partition=_on(D0))
    with pytest.raises(StagedVersionConflictError, match="partition"):
        t.publish("mv/partx", staged.txn_id)


def test_describe_snapshot_id_still_reads_after_its_snapshot_is_expired(trident: Trident) -> None:
    """``describe().snapshot_id`` names the data version; after compaction and expiry of the
    transaction's own snapshot, reading that version (by snapshot id, txn id or instant) reads
    the compaction that holds it."""
    t = trident
    _six_small_writes(t, "mv/describe")
    d = t.describe("mv/describe")
    report = t.maintain("mv/describe", older_than=timedelta(0), retain_last=1)
    assert report.compacted_files >= 5 and report.expired_snapshots >= 6
    assert t.describe("mv/describe").snapshot_id == d.snapshot_id
    assert d.snapshot_id is not None and iceberg_table(t, "mv/describe").snapshot_by_id(d.snapshot_id) is None
    assert _ks(t, "mv/describe", as_of=d.snapshot_id) == list(range(6))
    assert _ks(t, "mv/describe", as_of=d.last_txn_id) == list(range(6))
    assert t.stream("mv/describe", as_of=d.snapshot_id).read_all().num_rows == 6
    assert d.committed_at is not None
    assert _ks(t, "mv/describe", as_of=d.committed_at + timedelta(milliseconds=1)) == list(range(6))


def test_adopt_stamps_an_unowned_table_whose_head_is_a_compaction(trident: Trident) -> None:
    """Ownership/adoption: the head is a compaction (no txn id), the ledger's version is what it holds."""
    t = trident
    _six_small_writes(t, "mv/adopt")
    _compact(t, "mv/adopt")
    table = iceberg_table(t, "mv/adopt")
    with table.transaction() as txn:
        txn.remove_properties(OWNER_PROPERTY)
    d = t.adopt("mv/adopt")
    assert d.row_count == 6 and t.history("mv/adopt")[0].mode == "adopt"
    assert _ks(t, "mv/adopt") == list(range(6))


# -- already right: checked here so a change that breaks them shows -------------------------------


def test_a_keyed_merge_after_a_compaction_keeps_identity(trident: Trident) -> None:
    """Keyed merges match existing rows by key in the current files: a compaction in between
    changes nothing (their identity columns are the rows' own)."""
    t = trident
    _six_small_writes(t, "mv/merge")
    before = {r["k"]: r["__row_id"] for r in t.read("mv/merge").to_pylist()}
    _compact(t, "mv/merge")
    t.write("mv/merge", pa.table({"k": [2, 3, 99]}), mode="upsert", keys=["k"])
    after = {r["k"]: r["__row_id"] for r in t.read("mv/merge").to_pylist()}
    assert sorted(after) == [0, 1, 2, 3, 4, 5, 99]
    assert all(after[k] == before[k] for k in (0, 1, 4, 5))


def test_a_delta_plan_stays_incremental_over_a_compaction_of_its_source(trident: Trident) -> None:
    """Delta watermarks: the source's compaction is no commit, so the next run reads only new rows."""
    t = trident
    _six_small_writes(t, "mv/src")
    src = t.describe("mv/src")
    assert src.committed_at is not None
    t.write("mv/out", pa.table({"k": list(range(6))}), watermarks={"mv/src": (src.committed_at, src.last_txn_id)})
    _compact(t, "mv/src")
    t.write("mv/src", pa.table({"k": [6]}), mode="append")
    plan = plan_output(t, "mv/out", ["mv/src"], Strategy(kind="delta"))
    assert plan.incremental, plan.reason
    assert plan.since["mv/src"] == src.committed_at


def test_canary_parity_holds_after_a_compaction(trident: Trident) -> None:
    """Canary parity compares the copy with the ledger's row count and the source's checksum,
    never a snapshot id: a compacted source migrates."""
    t = trident
    _six_small_writes(t, "mv/canary")
    _compact(t, "mv/canary")
    report = t.migrate("mv/canary", "pg")
    assert report.flipped, report
    assert _ks(t, "mv/canary") == list(range(6))


def test_maintenance_never_lands_inside_a_stream_ingest_session(trident: Trident) -> None:
    """Stream ingest sessions hold the writer lock from their first batch to their one commit,
    so a compaction cannot land between their start and their commit: maintain skips."""
    t = trident
    _six_small_writes(t, "mv/stream")
    with t.ingest_stream("mv/stream", mode="append") as s:
        s.append(pa.table({"k": [6]}))
        ds = t.control.dataset(t.workspace, "mv/stream")
        assert ds is not None
        deadline = time.monotonic() + 30
        while not t.control.open_entries(ds.dataset_id) and time.monotonic() < deadline:
            time.sleep(0.05)  # the session's writer thread opens its transaction (under the lock)
        assert t.control.open_entries(ds.dataset_id)
        skipped: list[str | None] = []
        th = threading.Thread(target=lambda: skipped.append(t.maintain("mv/stream").skipped))
        th.start()
        th.join()
        assert skipped and skipped[0] is not None
    assert _ks(t, "mv/stream") == list(range(7))
    _compact(t, "mv/stream")


def test_maintenance_never_lands_inside_a_partition_write(trident: Trident) -> None:
    """A partition writer re-bases its commit onto other partitions' commits (``commits._rebased``);
    a compaction cannot land meanwhile: partition writers hold the dataset's lock shared, and
    maintain, which takes it exclusive without waiting, skips."""
    t = trident
    _partitioned(t, "mv/pw")
    ds = t.control.dataset(t.workspace, "mv/pw")
    assert ds is not None
    errors: list[BaseException] = []

    def write() -> None:
        try:
            t.write("mv/pw", _day(D1, [30]), mode="append", partition=_on(D1))
        except BaseException as exc:
            errors.append(exc)

    with armed("write.before_commit", "sleep:3"):
        th = threading.Thread(target=write)
        th.start()
        deadline = time.monotonic() + 30
        while not t.control.open_entries(ds.dataset_id) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert t.control.open_entries(ds.dataset_id)
        report = t.maintain("mv/pw")
        th.join()
    assert not errors and report.skipped is not None
    assert _rows(t, "mv/pw") == [(D0, i) for i in range(6)] + [(D1, 10), (D1, 30)]
