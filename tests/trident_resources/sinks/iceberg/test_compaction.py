"""Issue 12: ``Trident.maintain`` compacts small data files into target-size ones, one snapshot,
identity unchanged per row, nothing visible to readers; time travel to before it still works."""

from __future__ import annotations

import time
from datetime import date, timedelta
from typing import Any

import pyarrow as pa
import pytest
from click.testing import CliRunner

from tests.support.helpers import cli_env
from trident_cli.main import cli
from trident_resources import MaintenanceFailedError, Trident, TridentSettings
from trident_resources.core.failpoints import InjectedFault, armed
from trident_resources.core.identity import IDENTITY_COLUMNS
from trident_resources.core.partitions import PartitionFilter
from trident_resources.sinks.iceberg.sink import IcebergSink

pytestmark = pytest.mark.usefixtures("iceberg_writes")  # about what each Iceberg commit leaves


def _rows(t: Trident, key: str, **kwargs: Any) -> list[dict[str, Any]]:
    return sorted(t.read(key, **kwargs).to_pylist(), key=lambda r: r["__row_index"])


def _files(t: Trident, key: str) -> int:
    return len(t.scan_plan(key).files)


def test_two_hundred_small_appends_compact_into_one_file_with_identity_unchanged(trident: Trident) -> None:
    t = trident
    first = t.write("c/many", pa.table({"id": [0], "v": ["x0"]}))
    for i in range(1, 200):
        last = t.write("c/many", pa.table({"id": [i], "v": [f"x{i}"]}), mode="append")
    t.write("c/many", pa.table({"id": [200], "v": ["x200"], "extra": [1.5]}), mode="append")  # evolved schema
    before = _rows(t, "c/many")
    sql_before = t.sql('select count(*) as n, sum(id) as s, count(distinct __row_id) as ids from "c/many"').to_pylist()
    described = t.describe("c/many")
    assert _files(t, "c/many") == 201 and len(before) == 201

    report = t.maintain("c/many")
    assert report.compacted_files == 201 and report.compaction_files_written == 1
    assert (report.data_files_before, report.data_files_after) == (201, 1)
    assert report.expired_snapshots == 0 and report.deleted_files == 0  # the small files still serve time travel
    assert _files(t, "c/many") == 1

    after = _rows(t, "c/many")
    assert after == before  # every row with the same __row_id, __row_index and __created_at
    assert [r["extra"] for r in after][-2:] == [None, 1.5]
    assert t.sql('select count(*) as n, sum(id) as s, count(distinct __row_id) as ids from "c/many"').to_pylist() == sql_before
    now = t.describe("c/many")
    assert (now.row_count, now.last_txn_id, now.snapshot_id) == (
        described.row_count,
        described.last_txn_id,
        described.snapshot_id,
    )
    assert len(t.history("c/many")) == 201  # compaction is not a transaction of the dataset

    # time travel to versions before the compaction still works
    assert [r["id"] for r in _rows(t, "c/many", as_of=last.txn_id)] == list(range(200))
    assert [r["id"] for r in _rows(t, "c/many", as_of=first.txn_id)] == [0]

    # the next write continues as before: identity numbering and appends are unaffected
    nxt = t.write("c/many", pa.table({"id": [201], "v": ["x201"]}), mode="append")
    assert nxt.row_count == 202 and _rows(t, "c/many")[-1]["__row_index"] == 201
    assert _files(t, "c/many") == 2

    # a later maintain that expires old snapshots deletes the small files, and the rows stay
    gone = t.maintain("c/many", older_than=timedelta(0), retain_last=1)
    assert gone.deleted_files >= 201
    assert [r["id"] for r in _rows(t, "c/many")] == list(range(202))


def test_a_few_files_are_left_alone(trident: Trident) -> None:
    t = trident
    t.write("c/few", pa.table({"id": [0]}))
    for i in range(1, 4):
        t.write("c/few", pa.table({"id": [i]}), mode="append")
    report = t.maintain("c/few")
    assert report.compacted_files == 0 and _files(t, "c/few") == 4


def _open_write(t: Trident, key: str) -> Any:
    """An ingest stream with a batch in flight: its transaction is open and holds the writer lock."""
    stream = t.ingest_stream(key)
    stream.__enter__()
    stream.append(pa.record_batch({"id": pa.array([99], pa.int64())}))
    deadline = time.monotonic() + 10
    while not [e for e in t.history(key) if e.status == "open"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [e for e in t.history(key) if e.status == "open"]
    return stream


def test_maintain_skips_a_dataset_whose_write_is_open_and_a_later_run_compacts(settings: TridentSettings) -> None:
    """Compaction never waits for (nor fails on) an open write: it is skipped with the reason, and
    the run after the write compacts; the CLI says so and exits 0."""
    with Trident(settings) as t:
        t.write("c/busy", pa.table({"id": [0]}))
        for i in range(1, 6):
            t.write("c/busy", pa.table({"id": [i]}), mode="append")
        stream = _open_write(t, "c/busy")
        try:
            open_txn = next(e.txn_id for e in t.history("c/busy") if e.status == "open")
            report = t.maintain("c/busy")
            assert report.skipped is not None and str(open_txn) in report.skipped
            assert report.compacted_files == 0 and _files(t, "c/busy") == 6
            res = CliRunner().invoke(cli, ["maintain", "c/busy"], env=cli_env(settings))
            assert res.exit_code == 0, res.output
            assert "skipped" in res.output and "write of it is open" in " ".join(res.output.split())
        finally:
            stream.__exit__(None, None, None)
        assert t.history("c/busy")[0].status == "committed"
        later = t.maintain("c/busy")
        assert later.skipped is None and later.compacted_files == 7
        assert sorted(t.read("c/busy", columns=["id"]).column("id").to_pylist()) == [0, 1, 2, 3, 4, 5, 99]


def test_cli_maintain_reports_compaction(trident: Trident, settings: TridentSettings) -> None:
    for i in range(6):
        trident.write("c/cli", pa.table({"id": [i]}), mode="append" if i else "replace")
    res = CliRunner().invoke(cli, ["maintain", "c/cli"], env=cli_env(settings))
    assert res.exit_code == 0, res.output
    assert "6 small files compacted into 1" in res.output
    assert sorted(trident.read("c/cli", columns=["id"]).column("id").to_pylist()) == list(range(6))
    assert set(IDENTITY_COLUMNS) <= set(trident.schema("c/cli").names)


def test_compacted_rows_are_laid_out_in_row_index_order_as_a_one_go_write(trident: Trident) -> None:
    """pyiceberg plans the newest manifest first; compacting in that order wrote the newest
    append's rows first (``__row_index`` descending by blocks, worse delta encodings and bounds
    spanning the whole table). The output is in ``__row_index`` order, as a one-go write."""
    import pyarrow.parquet as pq

    t = trident
    t.write("c/order", pa.table({"id": [0, 1]}))
    for i in range(1, 12):
        t.write("c/order", pa.table({"id": [2 * i, 2 * i + 1]}), mode="append")
    before = {r["__row_index"]: r for r in t.read("c/order").to_pylist()}
    assert t.maintain("c/order").compacted_files == 12
    (only,) = t.scan_plan("c/order").files
    stored = pq.read_table(only)
    assert stored.column("__row_index").to_pylist() == list(range(24))
    assert stored.column("id").to_pylist() == list(range(24))
    assert {r["__row_index"]: r for r in t.read("c/order").to_pylist()} == before  # identity unchanged per row


def _partition_files(t: Trident, key: str) -> list[tuple[int, tuple[Any, ...], int]]:
    """(spec id, partition values, records) of each current data file, sorted."""
    ds = t.control.dataset(t.settings.workspace, key)
    assert ds is not None
    sink = t.driver.sink(ds.sink)
    assert isinstance(sink, IcebergSink)
    files = sink.tables.data_files(sink.tables.existing_table(ds))
    return sorted((f.spec_id, tuple(f.partition[i] for i in range(len(f.partition))), f.record_count) for f in files)


def test_a_partitioned_dataset_compacts_each_partition_into_its_own_files(trident: Trident) -> None:
    """Compaction wrote every small file, whatever its partition, into files of no partition
    under the partitioned spec, and pyiceberg failed on the empty partition record (a raw
    IndexError, nothing compacted). Each partition's files are now compacted into files of that
    partition and spec; a partition written before the spec existed stays in its old spec; a
    partition with one small file is left as it is."""
    t = trident
    for i in range(3):  # before the dataset had a partition spec: unpartitioned small files
        t.write("cp/x", pa.table({"d": pa.array([date(2024, 1, 1)] * 2, pa.date32()), "v": [i, i]}), mode="append")
    for day in (2, 3, 4):
        part = PartitionFilter.time_window("d", date(2024, 1, day), date(2024, 1, day + 1))
        for i in range(2 if day < 4 else 1):
            rows = pa.table({"d": pa.array([date(2024, 1, day)] * 3, pa.date32()), "v": [day * 10 + i] * 3})
            t.write("cp/x", rows, mode="append", partition=part)
    before = _partition_files(t, "cp/x")
    assert len(before) == 8
    rows_before = _rows(t, "cp/x")
    day2 = PartitionFilter.time_window("d", date(2024, 1, 2), date(2024, 1, 3))
    part_before = _rows(t, "cp/x", partition=day2)
    done = t.maintain("cp/x")
    assert done.skipped is None and done.compacted_files == 7 and done.compaction_files_written == 3
    after = _partition_files(t, "cp/x")
    specs = {spec for spec, _, _ in before}
    assert len(specs) == 2 and {spec for spec, _, _ in after} == specs
    # one file per partition now, each holding exactly its partition's rows
    merged: dict[tuple[int, tuple[Any, ...]], int] = {}
    for spec, values, n in before:
        merged[(spec, values)] = merged.get((spec, values), 0) + n
    assert after == sorted((spec, values, n) for (spec, values), n in merged.items())
    assert _rows(t, "cp/x") == rows_before
    assert _rows(t, "cp/x", partition=day2) == part_before and len(part_before) == 6


def test_a_failure_inside_compaction_is_named_and_changes_nothing(trident: Trident) -> None:
    """An error of the table library inside compaction (a raw ``IndexError`` was seen, see the
    partition test) reached the caller unnamed; it is ``MaintenanceFailedError`` with the cause
    chained, the rows and files stay as they were, and the next run compacts."""
    t = trident
    for i in range(6):
        t.write("cp/f", pa.table({"v": [i]}), mode="append")
    before, files = _rows(t, "cp/f"), _files(t, "cp/f")
    with armed("compaction.before_commit"), pytest.raises(MaintenanceFailedError) as caught:
        t.maintain("cp/f")
    assert isinstance(caught.value.__cause__, InjectedFault) and "'cp/f'" in str(caught.value)
    assert _rows(t, "cp/f") == before and _files(t, "cp/f") == files
    assert t.maintain("cp/f").compacted_files == 6 and _rows(t, "cp/f") == before
