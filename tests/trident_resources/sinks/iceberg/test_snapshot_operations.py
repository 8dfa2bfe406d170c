"""Every snapshot Trident commits records the Iceberg operation that says what it did to the rows
(issue 28 item 5): ``append`` adds rows only, ``delete`` removes rows only, ``overwrite`` removes
and adds, ``replace`` rewrites rows without changing them (compaction, bounds repair). Streaming
and incremental readers (Spark, Flink) act on it: they read an ``append``'s new files, may skip a
``replace`` and a ``delete``, and fail or re-read on an ``overwrite``. Checked on the snapshot
summaries another engine reads (pyiceberg's ``StaticTable`` over the table's metadata file)."""

from __future__ import annotations

from datetime import date

import pyarrow as pa
import pytest
from pyiceberg.table import StaticTable

from tests.support.helpers import table
from trident_resources import PartitionFilter, Trident

pytestmark = pytest.mark.usefixtures("iceberg_writes")  # about what each Iceberg commit leaves

D1, D2, D3 = date(2024, 1, 1), date(2024, 1, 2), date(2024, 1, 3)


def _static(t: Trident, key: str) -> StaticTable:
    ds = t.control.dataset(t.workspace, key)
    live = t.driver.sinks["iceberg_native"].tables.table(ds)  # type: ignore[attr-defined]
    return StaticTable.from_metadata(live.metadata_location)


def _operation(t: Trident, key: str, snapshot_id: int | None = None) -> str:
    """The operation of ``snapshot_id`` (default: main's current snapshot)."""
    st = _static(t, key)
    snap = st.current_snapshot() if snapshot_id is None else st.snapshot_by_id(snapshot_id)
    assert snap is not None and snap.summary is not None
    return snap.summary.operation.value


def test_each_write_mode_records_what_it_did(trident: Trident) -> None:
    t = trident
    k = "ops/modes"
    assert _operation(t, k, t.write(k, table(id=[1, 2, 3], v=["a", "b", "c"])).snapshot_id) == "append"
    assert _operation(t, k, t.write(k, table(id=[4], v=["d"]), mode="append").snapshot_id) == "append"
    assert _operation(t, k, t.write(k, table(id=[1, 2, 3, 4], v=["a", "b", "c", "d"])).snapshot_id) == "overwrite"
    # an upsert that only inserts adds files and removes none; one that updates rewrites them
    assert _operation(t, k, t.write(k, table(id=[5], v=["e"]), mode="upsert", keys="id").snapshot_id) == "append"
    assert _operation(t, k, t.write(k, table(id=[5], v=["E"]), mode="upsert", keys="id").snapshot_id) == "overwrite"
    assert _operation(t, k, t.write(k, table(id=[5, 6], v=["x", "f"]), mode="append_new", keys="id").snapshot_id) == "append"
    assert _operation(t, k, t.update_rows(k, table(id=[6], v=["F"]), keys="id").snapshot_id) == "overwrite"
    # pure deletes: by key, and by filter (copy-on-write keeps the other rows of the files, unchanged)
    assert _operation(t, k, t.delete_rows(k, table(id=[1]), keys="id").snapshot_id) == "delete"
    assert _operation(t, k, t.delete_rows(k, where="id = 2").snapshot_id) == "delete"
    assert _operation(t, k, t.write(k, None, mode="delete", row_filter="id >= 5").snapshot_id) == "delete"
    assert sorted(t.read(k).column("id").to_pylist()) == [3, 4]
    # a replace by nothing removes every row and adds none
    empty = pa.table({"id": pa.array([], pa.int64()), "v": pa.array([], pa.string())})
    assert _operation(t, k, t.write(k, empty).snapshot_id) == "delete"
    assert t.read(k).num_rows == 0


def test_compaction_is_a_replace_with_the_same_rows(trident: Trident) -> None:
    t = trident
    k = "ops/compact"
    t.write(k, table(id=[0], v=["x0"]))
    for i in range(1, 7):
        t.write(k, table(id=[i], v=[f"x{i}"]), mode="append")
    before = t.read(k).sort_by("__row_index")
    report = t.maintain(k)
    assert report.compacted_files >= 5
    snap = _static(t, k).current_snapshot()
    assert snap is not None and snap.summary is not None
    assert snap.summary.operation.value == "replace"
    # the totals are those of the table before: nothing added or removed, only rewritten
    assert snap.summary["total-records"] == "7" and snap.summary["added-records"] == snap.summary["deleted-records"] == "7"
    assert t.read(k).sort_by("__row_index") == before


def test_partition_writes_and_their_publishes_record_what_they_did(trident: Trident) -> None:
    t = trident
    k = "ops/parts"

    def day(d: date) -> PartitionFilter:
        return PartitionFilter.time_window("d", d, date.fromordinal(d.toordinal() + 1), "day")

    assert _operation(t, k, t.write(k, pa.table({"d": [D1], "v": [1]}), partition=day(D1)).snapshot_id) == "append"
    assert _operation(t, k, t.write(k, pa.table({"d": [D2], "v": [2]}), partition=day(D2)).snapshot_id) == "append"
    assert _operation(t, k, t.write(k, pa.table({"d": [D1], "v": [10]}), partition=day(D1)).snapshot_id) == "overwrite"

    # staged whole-dataset replace: published by moving main to the staged snapshot itself
    staged = t.write(k, pa.table({"d": [D1, D2], "v": [11, 12]}), stage=True)
    assert _operation(t, k, staged.snapshot_id) == "overwrite"
    t.publish(k, staged.txn_id)
    assert _operation(t, k) == "overwrite"

    # a staged partition write published after another partition's commit: re-based onto it as a
    # new snapshot, which records the staged snapshot's operation (not pyiceberg's default)
    staged = t.write(k, pa.table({"d": [D1], "v": [21]}), partition=day(D1), stage=True)
    t.write(k, pa.table({"d": [D3], "v": [3]}), partition=day(D3))
    published = t.publish(k, staged.txn_id)
    assert published.snapshot_id != staged.snapshot_id  # re-based
    assert _operation(t, k) == "overwrite"
    staged = t.write(k, pa.table({"d": [D2], "v": [22]}), mode="append", partition=day(D2), stage=True)
    t.write(k, pa.table({"d": [D3], "v": [33]}), partition=day(D3))
    published = t.publish(k, staged.txn_id)
    assert published.snapshot_id != staged.snapshot_id and _operation(t, k) == "append"
    assert sorted(t.read(k).column("v").to_pylist()) == [12, 21, 22, 33]
