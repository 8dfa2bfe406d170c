"""Clustering a backfill's rows by partition (``clustering.py``): every partition's rows end up
contiguous, no row is lost or duplicated, rows of one partition keep their input order, and the
spill files are gone afterwards, whatever the shape of the input."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator, Sequence
from datetime import date, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from trident_resources.core.partitions import PartitionFilter
from trident_resources.planning.clustering import cluster


def _runs(keys: Sequence[object]) -> list[object]:
    """The partition of each run of equal keys, in order."""
    return [k for i, k in enumerate(keys) if i == 0 or keys[i - 1] != k]


def _assert_clustered(out: pa.Table, src: pa.Table, key_columns: list[str]) -> None:
    keys = list(zip(*(out.column(c).to_pylist() for c in key_columns), strict=True))
    runs = _runs(keys)
    assert len(runs) == len(set(runs)), "a partition's rows are split over several runs"
    assert sorted(out.column("i").to_pylist()) == sorted(src.column("i").to_pylist())
    by_key: dict[object, list[int]] = {}
    for k, i in zip(keys, out.column("i").to_pylist(), strict=True):
        by_key.setdefault(k, []).append(i)
    assert all(v == sorted(v) for v in by_key.values()), "rows of one partition must keep their input order"


def _reader(table: pa.Table, batch: int) -> pa.RecordBatchReader:
    return pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize=batch))


@pytest.mark.parametrize("bucket_bytes", [1 << 30, 4096])  # one level, and buckets bucketed again
def test_a_shuffled_daily_backfill_comes_out_grouped_by_day(tmp_path: Path, bucket_bytes: int) -> None:
    rng = np.random.default_rng(7)
    n = 20_000
    day = rng.integers(0, 400, n)
    src = pa.table(
        {
            "i": np.arange(n),
            "d": [date(2024, 1, 1) + timedelta(days=int(x)) for x in day],
            "s": pa.array([f"row-{x}" for x in range(n)], type=pa.string_view()),
        }
    )
    bound = PartitionFilter.time_window("d", date(2024, 1, 1), date(2025, 3, 1), "day").bind(src.schema)
    spill = tmp_path / "spill"
    out = cluster(_reader(src, 1000), bound.key_arrays, spill, bucket_bytes=bucket_bytes).read_all()
    assert out.schema.field("s").type == pa.large_string()  # views come out as large strings
    _assert_clustered(out, src, ["d"])
    assert not spill.exists()


def test_two_dimensions_with_nulls(tmp_path: Path) -> None:
    n = 5_000
    src = pa.table(
        {
            "i": np.arange(n),
            "region": [None if x % 11 == 0 else f"r{x % 7}" for x in range(n)],
            "d": [date(2024, 1, 1) + timedelta(days=(x * 37) % 90) for x in range(n)],
        }
    )
    part = PartitionFilter.of_values("region", *[f"r{k}" for k in range(7)]) & PartitionFilter.time_window(
        "d", date(2024, 1, 1), date(2024, 4, 1), "month"
    )
    bound = part.bind(src.schema)
    out = cluster(_reader(src, 333), bound.key_arrays, tmp_path / "spill").read_all()
    months = [(x.year, x.month) for x in out.column("d").to_pylist()]
    regions = out.column("region").to_pylist()
    runs = _runs(list(zip(regions, months, strict=True)))
    assert len(runs) == len(set(runs)) == 8 * 3  # 7 regions and null, by 3 months
    assert sorted(out.column("i").to_pylist()) == list(range(n))


def test_one_partition_larger_than_a_bucket_is_streamed_as_it_is(tmp_path: Path) -> None:
    src = pa.table({"i": np.arange(30_000), "d": [date(2024, 1, 1)] * 30_000})
    bound = PartitionFilter.time_window("d", date(2024, 1, 1), date(2024, 1, 2), "day").bind(src.schema)
    out = cluster(_reader(src, 1000), bound.key_arrays, tmp_path / "spill", bucket_bytes=1024).read_all()
    assert out.column("i").to_pylist() == list(range(30_000))


def test_an_empty_input(tmp_path: Path) -> None:
    src = pa.table({"i": pa.array([], pa.int64()), "d": pa.array([], pa.date32())})
    bound = PartitionFilter.time_window("d", date(2024, 1, 1), date(2024, 1, 2), "day").bind(src.schema)
    assert cluster(_reader(src, 10), bound.key_arrays, tmp_path / "spill").read_all().num_rows == 0


def _shuffled_days(n: int = 20_000, days: int = 400) -> pa.Table:
    rng = np.random.default_rng(11)
    day = rng.integers(0, days, n)
    return pa.table({"i": np.arange(n), "d": [date(2024, 1, 1) + timedelta(days=int(x)) for x in day]})


def test_both_passes_keep_two_threads_busy(tmp_path: Path) -> None:
    """Pass 1 cuts each batch into its buckets on the thread that reads the input (the helper
    only appends to the spill files: when it also cut, it was the bottleneck and the reader
    waited), and pass 2 groups the next bucket on the helper while the consumer takes this one
    (on the consumer's thread the grouping held up the Parquet writers every bucket)."""
    src = _shuffled_days()
    bound = PartitionFilter.time_window("d", date(2024, 1, 1), date(2025, 3, 1), "day").bind(src.schema)
    exhausted = [False]
    calls: list[tuple[str, bool]] = []  # (thread, after the input was read to the end)

    def source() -> Iterator[pa.RecordBatch]:
        yield from src.to_batches(max_chunksize=1000)
        exhausted[0] = True

    def keys(batch: pa.RecordBatch) -> Sequence[pa.Array]:
        calls.append((threading.current_thread().name, exhausted[0]))
        return bound.key_arrays(batch)

    reader = cluster(pa.RecordBatchReader.from_batches(src.schema, source()), keys, tmp_path / "spill")
    out = reader.read_all()
    _assert_clustered(out, src, ["d"])
    me = threading.current_thread().name
    pass_one = {t for t, after in calls if not after}
    pass_two = [t for t, after in calls if after]
    assert pass_one == {me}
    assert sum(t.startswith("trident-cluster") for t in pass_two) >= len(pass_two) // 2, pass_two


def test_a_consumer_that_stops_early_leaves_no_spill_files(tmp_path: Path) -> None:
    """Dropping the reader mid-way closes its generator: the bucket being grouped ahead is waited
    for, then the spill files are removed."""
    src = _shuffled_days()
    bound = PartitionFilter.time_window("d", date(2024, 1, 1), date(2025, 3, 1), "day").bind(src.schema)
    spill = tmp_path / "spill"
    reader = cluster(_reader(src, 1000), bound.key_arrays, spill)
    first = reader.read_next_batch()
    assert first.num_rows > 0 and spill.exists()
    reader.close()
    del reader, first
    gc.collect()
    assert not spill.exists()
