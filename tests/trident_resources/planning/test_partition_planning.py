"""A partitioned dataset with many partitions stays cheap to touch one partition at a time (issue
10): a backfill's manifests each cover a narrow range of partitions, so that reading, replacing
or describing one partition reads the manifest entries of about that range, not every file's.

Manifest entries read are counted by wrapping pyiceberg's ``ManifestFile.fetch_manifest_entry``
(a library call; nothing of the trident is replaced)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date, timedelta
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.manifest import ManifestFile

from trident_resources import PartitionFilter, Trident
from trident_resources.sinks.iceberg.committer import MANIFEST_FILES

D0 = date(2024, 1, 1)
DAYS = 3 * MANIFEST_FILES


def window(start: date, n: int = 1) -> PartitionFilter:
    return PartitionFilter.time_window("d", start, start + timedelta(days=n), "day")


def _backfill(t: Trident, key: str) -> None:
    order = [(i * 7) % DAYS for i in range(DAYS)]  # every day once, out of order
    rows = pa.table({"d": [D0 + timedelta(days=i) for i in order for _ in range(2)], "v": list(range(2 * DAYS))})
    t.write(key, rows, partition=window(D0, DAYS))


@pytest.fixture
def entries_read(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Manifest entries pyiceberg reads, one number per manifest opened."""
    counts: list[int] = []
    original = ManifestFile.fetch_manifest_entry

    def counting(self: ManifestFile, *args: Any, **kwargs: Any) -> Any:
        out = original(self, *args, **kwargs)
        counts.append(len(out))
        return out

    monkeypatch.setattr(ManifestFile, "fetch_manifest_entry", counting)
    yield counts


def _manifests(t: Trident, key: str) -> list[ManifestFile]:
    sink = t.driver.sinks["iceberg_native"]
    table = sink.tables.table(t.dataset_record(key))  # type: ignore[attr-defined]
    return table.current_snapshot().manifests(table.io)


def test_a_backfill_writes_one_snapshot_whose_manifests_each_cover_a_range_of_days(trident: Trident) -> None:
    _backfill(trident, "pp/manifests")
    assert len(trident.history("pp/manifests")) == 1
    manifests = _manifests(trident, "pp/manifests")
    assert len(manifests) == DAYS // MANIFEST_FILES
    assert sum(m.added_files_count or 0 for m in manifests) == DAYS
    spans = []
    for m in manifests:
        (summary,) = m.partitions or []
        assert summary.lower_bound is not None and summary.upper_bound is not None
        lo, hi = int.from_bytes(summary.lower_bound, "little"), int.from_bytes(summary.upper_bound, "little")
        spans.append((lo, hi))
    assert all(hi - lo == MANIFEST_FILES - 1 for lo, hi in spans)  # contiguous days, not scattered


def test_reading_one_day_reads_one_manifest_of_entries(trident: Trident, entries_read: list[int]) -> None:
    _backfill(trident, "pp/read")
    entries_read.clear()
    day = D0 + timedelta(days=DAYS // 2)
    assert trident.read("pp/read", partition=window(day)).num_rows == 2
    assert sum(entries_read) <= MANIFEST_FILES


def test_replacing_one_day_reads_and_rewrites_only_its_manifest(trident: Trident, entries_read: list[int]) -> None:
    _backfill(trident, "pp/replace")
    before = {m.manifest_path for m in _manifests(trident, "pp/replace")}
    entries_read.clear()
    day = D0 + timedelta(days=DAYS // 2)
    r = trident.write("pp/replace", pa.table({"d": [day] * 3, "v": [-1, -2, -3]}), partition=window(day))
    assert (r.rows_written, r.row_count) == (3, 2 * DAYS + 1)
    # the plan of the replaced files, pyiceberg's overwrite (deleted entries and the rewrite): the
    # manifest holding that day, a few times; never the other manifests' entries
    assert sum(entries_read) <= 4 * MANIFEST_FILES, entries_read
    after = {m.manifest_path for m in _manifests(trident, "pp/replace")}
    assert len(before - after) == 1  # only the manifest holding that day was rewritten
    assert sorted(trident.read("pp/replace", partition=window(day)).column("v").to_pylist()) == [-3, -2, -1]


def test_describe_after_a_one_day_write_reads_only_the_new_manifests(trident: Trident, entries_read: list[int]) -> None:
    _backfill(trident, "pp/describe")
    assert len(trident.describe("pp/describe").partitions) == DAYS
    day = D0 + timedelta(days=5)
    trident.write("pp/describe", pa.table({"d": [day], "v": [0]}), partition=window(day))
    entries_read.clear()
    d = trident.describe("pp/describe")
    assert len(d.partitions) == DAYS and d.row_count == 2 * DAYS - 1
    assert [p["row_count"] for p in d.partitions if p["partition"]["day(d)"] == day.isoformat()] == [1]
    assert sum(entries_read) <= 2 * MANIFEST_FILES, entries_read


def test_a_file_of_the_old_partitioning_outside_the_day_is_still_rewritten(trident: Trident) -> None:
    """A dataset gaining partitions: its unpartitioned files are rewritten by the first partition
    write even when their statistics say they hold no row of that partition (after it, no data
    file mixes partitions)."""
    trident.write("pp/gain", pa.table({"d": [D0, D0 + timedelta(days=1)], "v": [1, 2]}))
    far = D0 + timedelta(days=30)
    trident.write("pp/gain", pa.table({"d": [far], "v": [3]}), partition=window(far))
    sink = trident.driver.sinks["iceberg_native"]
    files = sink.tables.data_files(sink.tables.table(trident.dataset_record("pp/gain")))  # type: ignore[attr-defined]
    assert len(files) == 3 and all(f.partition[0] is not None for f in files)
    assert sorted(trident.read("pp/gain").column("v").to_pylist()) == [1, 2, 3]


def test_a_partition_write_of_many_small_chunks_reserves_row_indexes_once(trident: Trident) -> None:
    """A partition write reserves each batch's ``__row_index`` range in Postgres; a table of many
    small chunks (rows filtered out of a larger table) is combined first, not one round trip each."""
    day = D0 + timedelta(days=3)
    chunks = [pa.table({"d": [day] * 3, "v": [i, i + 1, i + 2]}) for i in range(0, 300, 3)]
    rows = pa.concat_tables(chunks)
    assert rows.column("v").num_chunks == 100
    control = trident.driver.control
    original = control.reserve_row_indexes
    calls: list[int] = []

    def counting(dataset_id: Any, n: int) -> int:
        calls.append(n)
        return original(dataset_id, n)

    control.reserve_row_indexes = counting  # type: ignore[method-assign]
    try:
        r = trident.write("pp/chunks", rows, partition=window(day))
    finally:
        control.reserve_row_indexes = original  # type: ignore[method-assign]
    assert calls == [300] and r.rows_written == 300
    assert sorted(x["__row_index"] for x in trident.read("pp/chunks").to_pylist()) == list(range(300))
