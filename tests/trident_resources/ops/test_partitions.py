"""Partitioned writes through the facade (issue 10): one snapshot replaces exactly one partition
(or a range), rows outside are refused, identity is kept, Iceberg files never mix partitions,
concurrent writers of different partitions all land, a crash mid-write is reconciled."""

from __future__ import annotations

import threading
from datetime import date, timedelta

import pyarrow as pa
import pytest

from tests.trident_resources.transaction.test_transactions import _run_child
from trident_resources import (
    PartitionError,
    PartitionFilter,
    SchemaMismatchError,
    Trident,
    TridentSettings,
    UnsupportedBySinkError,
)

D0 = date(2024, 1, 1)


def days(start: date, n: int, per_day: int, base: int = 0) -> pa.Table:
    ds = [start + timedelta(days=i) for i in range(n) for _ in range(per_day)]
    return pa.table({"d": ds, "v": list(range(base, base + len(ds)))})


def window(start: date, n: int = 1) -> PartitionFilter:
    return PartitionFilter.time_window("d", start, start + timedelta(days=n), "day")


def _files(t: Trident, key: str) -> list:  # the current snapshot's data files
    sink = t.driver.sinks["iceberg_native"]
    return sink.tables.data_files(sink.tables.table(t.dataset_record(key)))  # type: ignore[attr-defined]


def test_a_partition_replace_touches_only_its_partition(trident: Trident) -> None:
    trident.write("p/x", days(D0, 1, 3), partition=window(D0))
    trident.write("p/x", days(D0 + timedelta(days=1), 1, 2, base=10), partition=window(D0 + timedelta(days=1)))
    other = {r["v"]: r for r in trident.read("p/x", partition=window(D0 + timedelta(days=1))).to_pylist()}
    r = trident.write("p/x", days(D0, 1, 4, base=100), partition=window(D0))
    assert (r.rows_written, r.row_count) == (4, 6)
    rows = trident.read("p/x").to_pylist()
    assert sorted(x["v"] for x in rows) == [10, 11, 100, 101, 102, 103]
    again = {x["v"]: x for x in rows if x["d"] == D0 + timedelta(days=1)}
    assert again == other  # the other partition's rows and identity are untouched
    assert min(x["__row_index"] for x in rows if x["d"] == D0) == 5  # new rows after the dataset's max
    assert len({x["__row_index"] for x in rows}) == 6
    d = trident.describe("p/x")
    assert d.partitioning == ["day(d)"]
    assert [(p["partition"]["day(d)"], p["row_count"]) for p in d.partitions] == [("2024-01-01", 4), ("2024-01-02", 2)]
    assert d.partitions[0]["last_txn_id"] == str(r.txn_id)
    assert trident.history("p/x")[0].metadata["partition"]["spec"] == ["day(d)"]
    files = _files(trident, "p/x")
    assert all(f.partition[0] is not None for f in files) and len(files) == 2


def test_rows_outside_the_partition_are_refused_and_nothing_changes(trident: Trident) -> None:
    trident.write("p/y", days(D0, 2, 2), partition=window(D0, 2))
    before = trident.describe("p/y")
    with pytest.raises(PartitionError, match="outside the partition"):
        trident.write("p/y", days(D0, 2, 1, base=50), partition=window(D0))
    after = trident.describe("p/y")
    assert (after.snapshot_id, after.row_count) == (before.snapshot_id, 4)
    assert trident.history("p/y")[0].status == "aborted"


def test_keyed_replace_in_a_partition_keeps_identity_of_surviving_keys(trident: Trident) -> None:
    trident.write("p/k", pa.table({"d": [D0, D0, D0 + timedelta(days=1)], "id": [1, 2, 3]}), partition=window(D0, 2))
    before = {r["id"]: r["__row_id"] for r in trident.read("p/k").to_pylist()}
    r = trident.write("p/k", pa.table({"d": [D0, D0], "id": [2, 4]}), keys=["id"], partition=window(D0))
    assert r.preserved == 1
    after = {r["id"]: r["__row_id"] for r in trident.read("p/k").to_pylist()}
    assert sorted(after) == [2, 3, 4] and after[2] == before[2] and after[3] == before[3]


def test_an_unpartitioned_dataset_gains_a_spec_in_the_same_commit(trident: Trident) -> None:
    trident.write("p/gain", days(D0, 3, 2))
    r = trident.write("p/gain", days(D0 + timedelta(days=1), 1, 1, base=90), partition=window(D0 + timedelta(days=1)))
    assert r.row_count == 5
    assert sorted(x["v"] for x in trident.read("p/gain").to_pylist()) == [0, 1, 4, 5, 90]
    assert trident.describe("p/gain").partitioning == ["day(d)"]
    assert len(trident.history("p/gain")) == 2  # one transaction, one snapshot
    assert all(f.partition[0] is not None for f in _files(trident, "p/gain"))  # no file mixes partitions


def test_a_backfill_range_is_one_snapshot_with_one_file_per_day(trident: Trident) -> None:
    rows = days(D0, 30, 5)
    shuffled = rows.take(pa.array(list(range(0, 150, 2)) + list(range(1, 150, 2))))
    r = trident.write("p/bf", shuffled, partition=window(D0, 30))
    assert r.row_count == 150 and len(trident.describe("p/bf").partitions) == 30
    assert len(_files(trident, "p/bf")) == 30


def test_a_wide_backfill_is_clustered_before_it_is_split(trident: Trident) -> None:
    rows = days(D0, 100, 3)
    shuffled = rows.take(pa.array([(i * 37) % 300 for i in range(300)]))
    trident.write("p/wide", shuffled, partition=window(D0, 100))
    assert len(_files(trident, "p/wide")) == 100


def test_reading_one_partition_opens_only_its_files(trident: Trident) -> None:
    trident.write("p/read", days(D0, 10, 4), partition=window(D0, 10))
    sink = trident.driver.sinks["iceberg_native"]
    table_ = sink.tables.table(trident.dataset_record("p/read"))  # type: ignore[attr-defined]
    part = window(D0 + timedelta(days=3)).bind(trident.schema("p/read")).to_row_filter()
    assert len(list(table_.scan(row_filter=part).plan_files())) == 1
    assert trident.read("p/read", partition=window(D0 + timedelta(days=3))).num_rows == 4


def test_identity_and_multi_dimension_partitions(trident: Trident) -> None:
    data = pa.table({"region": ["eu", "eu", "us"], "d": [D0, D0, D0], "v": [1, 2, 3]})
    eu = PartitionFilter.of_values("region", "eu") & window(D0)
    us = PartitionFilter.of_values("region", "us") & window(D0)
    trident.write("p/multi", data.slice(0, 2), partition=eu)
    trident.write("p/multi", data.slice(2), partition=us)
    trident.write("p/multi", pa.table({"region": ["eu"], "d": [D0], "v": [9]}), partition=eu)
    assert sorted(r["v"] for r in trident.read("p/multi").to_pylist()) == [3, 9]
    assert sorted(trident.describe("p/multi").partitioning) == ["day(d)", "identity(region)"]


def test_a_different_partitioning_is_refused(trident: Trident) -> None:
    trident.write("p/other", days(D0, 1, 1), partition=window(D0))
    with pytest.raises(PartitionError, match="partitioned by"):
        trident.write("p/other", days(D0, 1, 1), partition=PartitionFilter.time_window("d", D0, date(2024, 2, 1), "month"))


def test_pg_sink_refuses_partition_writes_naming_the_canary(trident: Trident) -> None:
    trident.router.set_pin("p/pg", "pg")
    trident.write("p/pg", days(D0, 1, 1))
    assert trident.describe("p/pg").sink == "pg"
    with pytest.raises(UnsupportedBySinkError, match="canary"):
        trident.write("p/pg", days(D0, 1, 1), partition=window(D0))


def test_four_concurrent_writers_of_four_partitions_all_land(settings: TridentSettings) -> None:
    with Trident(settings) as t:
        t.write("p/conc", days(D0, 4, 2), partition=window(D0, 4))
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def run(i: int) -> None:
        try:
            with Trident(settings) as t:
                barrier.wait()
                day = D0 + timedelta(days=i)
                t.write("p/conc", days(day, 1, 1000, base=1000 * (i + 1)), partition=window(day))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    with Trident(settings) as t:
        rows = t.read("p/conc").to_pylist()
        assert len(rows) == 4000 and t.describe("p/conc").row_count == 4000
        assert len({r["__row_index"] for r in rows}) == 4000  # no index stamped twice
        assert [p["row_count"] for p in t.describe("p/conc").partitions] == [1000] * 4
        assert [e.status for e in t.history("p/conc")] == ["committed"] * 5


def test_sigkill_during_a_partition_write_leaves_the_old_partition_whole(settings: TridentSettings, trident: Trident) -> None:
    trident.write("p/kill", days(D0, 2, 3), partition=window(D0, 2))
    before = sorted(r["v"] for r in trident.read("p/kill").to_pylist())
    code = """
    from datetime import date
    from trident_resources import PartitionFilter
    data = pa.table({"d": [date(2024, 1, 1)] * 5, "v": [70, 71, 72, 73, 74]})
    t.write("p/kill", data, partition=PartitionFilter.time_window("d", date(2024, 1, 1), date(2024, 1, 2), "day"))
    """
    for step in ("write.file_flushed", "commit.before_catalog"):
        child = _run_child(settings, f"{step}=exit", code)
        assert child.returncode == 137, child.stderr[-2000:]
        report = trident.reconcile()
        assert len(report.aborted) == 1
        assert sorted(r["v"] for r in trident.read("p/kill").to_pylist()) == before
    assert trident.describe("p/kill").row_count == 6


def test_watermarks_of_a_partitioned_output_are_kept_per_partition(trident: Trident) -> None:
    """Delta per partition: the watermark a partition write records belongs to that partition of
    the output only; a range has one mark only when its partitions agree; a whole-output write
    and a partition write each make the other scope's marks stale."""
    first = trident.write("wm/src", days(D0, 2, 2))
    d1, d2 = D0, D0 + timedelta(days=1)
    trident.write("wm/out", days(d1, 1, 2), partition=window(d1), watermarks={"wm/src": (first.committed_at, first.txn_id)})
    assert trident.watermarks("wm/out", window(d1)) == {"wm/src": first.committed_at}
    assert trident.watermarks("wm/out", window(d2)) == {}  # not consumed by 2024-01-01's run
    assert trident.watermarks("wm/out") == {}  # nor is the whole output

    later = trident.write("wm/src", days(d2, 1, 1, base=50), mode="append")
    trident.write("wm/out", days(d2, 1, 3), partition=window(d2), watermarks={"wm/src": (later.committed_at, later.txn_id)})
    assert trident.watermarks("wm/out", window(d1)) == {"wm/src": first.committed_at}  # not advanced by 01-02
    assert trident.watermarks("wm/out", window(d2)) == {"wm/src": later.committed_at}
    assert trident.watermarks("wm/out", window(d1, 2)) == {}  # the two days disagree: no single mark

    trident.write("wm/out", days(d1, 2, 1), partition=window(d1, 2), watermarks={"wm/src": (later.committed_at, None)})
    assert trident.watermarks("wm/out", window(d1, 2)) == {"wm/src": later.committed_at}  # a range marks each day
    assert trident.watermarks("wm/out", window(d1)) == {"wm/src": later.committed_at}

    trident.write("wm/out", days(d1, 2, 1), watermarks={"wm/src": (later.committed_at, None)})  # whole output
    assert trident.watermarks("wm/out") == {"wm/src": later.committed_at}
    assert trident.watermarks("wm/out", window(d1)) == {}  # partition marks dropped: they describe old rows
    trident.write("wm/out", days(d1, 1, 1), partition=window(d1), watermarks={"wm/src": (later.committed_at, None)})
    assert trident.watermarks("wm/out") == {}  # and the other way round


def test_a_delta_write_rolled_forward_by_reconcile_records_its_watermarks(settings: TridentSettings, trident: Trident) -> None:
    """A writer killed after its snapshot landed but before COMMIT is rolled forward by
    ``reconcile``; its watermarks (whole output or per partition) must land with it, or the next
    delta run would read the same source rows again and append them twice."""
    src = trident.write("wmr/src", days(D0, 1, 3))
    code = f"""
    from datetime import date, datetime
    import uuid
    from trident_resources import PartitionFilter
    mark = (datetime.fromisoformat({src.committed_at.isoformat()!r}), uuid.UUID({str(src.txn_id)!r}))
    day = PartitionFilter.time_window("d", date(2024, 1, 1), date(2024, 1, 2), "day")
    data = pa.table({{"d": [date(2024, 1, 1)] * 3, "v": [0, 1, 2]}})
    t.write("wmr/out", data, partition=day, watermarks={{"wmr/src": mark}})
    """
    trident.write("wmr/out", days(D0 + timedelta(days=1), 1, 1), partition=window(D0 + timedelta(days=1)))
    child = _run_child(settings, "commit.before_ledger=exit", code)
    assert child.returncode == 137, child.stderr[-2000:]
    assert trident.watermarks("wmr/out", window(D0)) == {}
    report = trident.reconcile()
    assert len(report.rolled_forward) == 1
    assert trident.describe("wmr/out").row_count == 4
    assert trident.watermarks("wmr/out", window(D0)) == {"wmr/src": src.committed_at}

    whole = code.replace(", partition=day", "").replace('"wmr/out"', '"wmr/whole"')
    child = _run_child(settings, "commit.before_ledger=exit", whole)
    assert child.returncode == 137, child.stderr[-2000:]
    assert len(trident.reconcile().rolled_forward) == 1
    assert trident.watermarks("wmr/whole") == {"wmr/src": src.committed_at}


def test_a_partition_write_of_an_incompatible_column_says_what_fits_a_partition(trident: Trident) -> None:
    """A partition run already replaces (its partition): "use mode='replace'" was no way out."""
    trident.write("p/typed", days(D0, 1, 2), partition=window(D0))
    bad = pa.table({"d": [D0], "v": ["not a number"]})
    with pytest.raises(SchemaMismatchError) as caught:
        trident.write("p/typed", bad, partition=window(D0))
    message = str(caught.value)
    assert "partition write replaces only its partition(s)" in message and "without a partition" in message
    assert "use mode='replace' to redefine" not in message
    with pytest.raises(SchemaMismatchError, match="use mode='replace' to redefine"):  # an append: the replace hint fits
        trident.write("p/typed", bad, mode="append")


@pytest.mark.parametrize("kind", [pa.string_view(), pa.large_string(), pa.string()])
def test_text_columns_of_any_arrow_type_go_through_an_unclustered_split_and_the_partition_check(
    trident: Trident, kind: pa.DataType
) -> None:
    """A partition write's text reaches the partitioned writer as views (``files.file_schema``):
    interleaved days (split with a ``take``, which has no kernel for views) and a row outside the
    partition (the check's ``filter``) work, and are refused by name, whatever text type came in."""
    ds = [D0 + timedelta(days=i % 3) for i in range(30)]  # interleaved: not clustered by day
    data = pa.table({"d": ds, "s": pa.array([f"text {i}" for i in range(30)], kind), "v": list(range(30))})
    trident.write("p/text", data, partition=window(D0, 3))
    got = trident.read("p/text").sort_by("v")
    assert got.column("s").to_pylist() == [f"text {i}" for i in range(30)]
    assert len(_files(trident, "p/text")) == 3
    with pytest.raises(PartitionError, match="outside the partition"):
        trident.write("p/text", data, partition=window(D0))
