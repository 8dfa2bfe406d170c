"""How a write cuts its rows into row groups and lanes (``sinks/iceberg/files.DataFileWriter``):
row groups that end before the configured budget is passed, and a write's last rows encoded on
every lane rather than on one while the others idle (issue 12: a small write, or a long write's
tail, kept one core busy and the other waiting)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tests.conftest import make_settings
from trident_resources import Trident

# four int64 user columns and the identity columns (__row_id 16 bytes, __row_index and
# __created_at 8 each): 64 bytes of Arrow per row, no validity buffers
_BYTES_PER_ROW = 64


def _batch(start: int, rows: int) -> pa.RecordBatch:
    values = np.arange(start, start + rows, dtype=np.int64)
    return pa.record_batch({"a": values, "b": values * 2, "c": values * 3, "d": values * 4})


def _row_groups(t: Trident, key: str) -> list[list[int]]:
    """Per data file, the rows of each of its row groups."""
    ds = t.control.dataset(t.workspace, key)
    table = t.driver.sinks["iceberg_native"].tables.table(ds)  # type: ignore[attr-defined]
    groups = []
    for task in table.scan().plan_files():
        with table.io.new_input(task.file.file_path).open() as f:
            md = pq.ParquetFile(f).metadata
        groups.append([md.row_group(i).num_rows for i in range(md.num_row_groups)])
    return groups


def test_a_row_group_ends_before_the_budget_is_passed(trident_home: Path, pg_dsn: str) -> None:
    """Batches of 65,536 rows (passed to the writer as they are) holding three quarters of the
    budget each: before, a row group ended at the first batch end past the budget, two batches
    (1.5x the budget), so one lane encoded half as much again as the other; now one batch each."""
    batch_rows = 65_536
    budget_rows = batch_rows * 4 // 3
    settings = make_settings(trident_home, pg_dsn, row_group_bytes=budget_rows * _BYTES_PER_ROW, write_parallelism=2)
    batches = [_batch(i * batch_rows, batch_rows) for i in range(6)]
    with Trident(settings) as t:
        t.write("rg/budget", pa.RecordBatchReader.from_batches(batches[0].schema, batches))
        groups = _row_groups(t, "rg/budget")
        assert sum(map(sum, groups)) == 6 * batch_rows
        assert max(max(g) for g in groups) <= budget_rows, groups
        assert sorted(t.read("rg/budget")["a"].to_pylist()) == list(range(6 * batch_rows))


def test_a_write_smaller_than_a_row_group_is_encoded_on_every_lane(trident_home: Path, pg_dsn: str) -> None:
    """40,000 rows under the default 16 MiB budget: two files of 20,000 rows (one per lane), not
    one file encoded by one lane; a tiny write stays one file."""
    with Trident(make_settings(trident_home, pg_dsn, write_parallelism=2)) as t:
        t.write("rg/small", pa.Table.from_batches([_batch(0, 40_000)]))
        assert sorted(_row_groups(t, "rg/small")) == [[20_000], [20_000]]
        assert t.read("rg/small")["a"].to_pylist() == list(range(40_000))  # the files in row order
        t.write("rg/tiny", pa.Table.from_batches([_batch(0, 1_000)]))
        assert _row_groups(t, "rg/tiny") == [[1_000]]


def test_a_tail_spread_after_one_row_group_keeps_the_files_in_row_order(trident_home: Path, pg_dsn: str) -> None:
    """One row group, then a tail cut across both lanes: its first piece follows the row group in
    lane 0's file and the second opens lane 1's, so the rows read back in the order written (the
    tail handed out in turn put the later piece first, in lane 0's file)."""
    batch_rows = 65_536
    settings = make_settings(trident_home, pg_dsn, row_group_bytes=batch_rows * _BYTES_PER_ROW * 11 // 10, write_parallelism=2)
    batches = [_batch(i * batch_rows, batch_rows) for i in range(2)]
    with Trident(settings) as t:
        t.write("rg/tail", pa.RecordBatchReader.from_batches(batches[0].schema, batches))
        assert _row_groups(t, "rg/tail") == [[batch_rows, batch_rows // 2], [batch_rows // 2]]
        assert t.read("rg/tail")["a"].to_pylist() == list(range(2 * batch_rows))
