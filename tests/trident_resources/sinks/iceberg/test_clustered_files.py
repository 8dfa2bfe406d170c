"""The partitioned data-file writer on clustered input (a wide backfill after ``clustering.py``):
a partition is finished (its file written and closed) as soon as the input moves on to the next
one, instead of waiting in the buffers until the end of the write; files never mix partitions,
also when input said to be clustered brings a finished partition back."""

from __future__ import annotations

import contextlib
import uuid
from datetime import date, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import DayTransform
from pyiceberg.types import DateType, LongType, NestedField

from trident_resources.sinks.iceberg.files import PartitionedDataFileWriter
from trident_resources.sinks.iceberg.partition_spec import Partitioner

SCHEMA = Schema(NestedField(1, "i", LongType(), required=False), NestedField(2, "d", DateType(), required=False))
SPEC = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=DayTransform(), name="d_day"))
DAY0 = date(2024, 1, 1)


def _writer(tmp_path: Path) -> PartitionedDataFileWriter:
    return PartitionedDataFileWriter(
        PyArrowFileIO(),
        f"file://{tmp_path}/table",
        uuid.uuid4(),
        SCHEMA,
        {},
        partitioner=Partitioner(SPEC, SCHEMA),
        spec_id=0,
        target_file_bytes=1 << 30,
        row_group_bytes=1 << 24,  # nothing here comes near a row group: rows stay buffered
    )


def _rows(w: PartitionedDataFileWriter, days: list[int], start: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {"i": list(range(start, start + len(days))), "d": [DAY0 + timedelta(days=d) for d in days]},
        schema=w.arrow_schema,
    )


def _finished(tmp_path: Path) -> list[pa.Table]:
    """The data files complete on disk (a readable footer) right now."""
    done = []
    for f in sorted((tmp_path / "table" / "data").glob("*.parquet")):
        with contextlib.suppress(pa.ArrowInvalid, OSError):  # still being written
            done.append(pq.read_table(f))
    return done


def test_a_partition_is_finished_when_clustered_input_moves_past_it(tmp_path: Path) -> None:
    """Finished partitions are written while the input goes on (handed to the pool in groups of
    a few small files), not held until the end of the write."""
    w = _writer(tmp_path)
    days = [d for d in range(20) for _ in range(3)]  # 20 days of 3 rows, batches cutting days
    for start in range(0, len(days), 7):
        w.write(_rows(w, days[start : start + 7], start), clustered=True)
    for f in list(w._closing):
        f.result()
    finished = _finished(tmp_path)
    assert len(finished) >= 16  # days 0-15 are complete files before the write ends
    for t in finished:
        i = t.column("i").to_pylist()
        assert len(set(t.column("d").to_pylist())) == 1 and i == list(range(i[0], i[0] + 3))
    files = w.close()
    assert [f.record_count for f in files] == [3] * 20
    assert sorted(f.partition[0] for f in files) == [(DAY0 + timedelta(days=d) - date(1970, 1, 1)).days for d in range(20)]


def test_a_partition_that_comes_back_gets_a_file_of_its_own(tmp_path: Path) -> None:
    w = _writer(tmp_path)
    w.write(_rows(w, [0, 0, 1], 0), clustered=True)
    w.write(_rows(w, [0, 2], 3), clustered=True)  # day 0 again: the input was not clustered after all
    files = w.close()
    tables = {f.file_path: pq.read_table(f.file_path.removeprefix("file://")) for f in files}
    for f in files:
        days = set(tables[f.file_path].column("d").to_pylist())
        assert len(days) == 1, "a data file mixes partitions"
        assert f.partition[0] == (days.pop() - date(1970, 1, 1)).days
    assert sorted(i for t in tables.values() for i in t.column("i").to_pylist()) == [0, 1, 2, 3, 4]
    assert sorted(f.record_count for f in files) == [1, 1, 1, 2]


def test_unclustered_input_still_buffers_partitions_together(tmp_path: Path) -> None:
    """Without the hint a partition may come back at any time: one file per partition."""
    w = _writer(tmp_path)
    w.write(_rows(w, [0, 1], 0))
    w.write(_rows(w, [0, 1], 2))
    files = w.close()
    assert sorted(f.record_count for f in files) == [2, 2]
