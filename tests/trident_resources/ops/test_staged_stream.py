"""Issue 12: a staged version streams like the current one (its snapshot's files through pyarrow's
bounded scanner, ``scans.scan_staged``) instead of through pyiceberg's time-travel reader; what it
returns is unchanged: the staged schema (a column added by the staged write reads NULL in older
files), projections, filters pruned by partition, and the identity columns."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from trident_resources import PartitionFilter, SchemaMismatchError, Trident
from trident_resources.core.identity import IDENTITY_COLUMNS


def test_a_staged_version_streams_its_own_schema_rows_and_filters(trident: Trident) -> None:
    t = trident
    t.write("ss/a", pa.table({"k": [1, 2, 3], "s": ["a", "b", "c"]}))
    staged = t.write("ss/a", pa.table({"k": [4, 5], "s": ["d", None], "extra": [1.5, 2.5]}), mode="append", stage=True)

    rows = t.stream("ss/a", staged=staged.txn_id).read_all()
    assert rows.column_names == [*IDENTITY_COLUMNS, "k", "s", "extra"]
    assert rows.schema.field("s").type == t.read("ss/a").schema.field("s").type  # the current read's types
    got = sorted(zip(rows.column("k").to_pylist(), rows.column("extra").to_pylist(), strict=True))
    assert got == [(1, None), (2, None), (3, None), (4, 1.5), (5, 2.5)]
    assert sorted(rows.column("__row_index").to_pylist()) == [0, 1, 2, 3, 4]

    # columns in the order asked for, as a read of the published version gives them (pyiceberg's
    # reader gave a staged version's in the table's order)
    filtered = t.read("ss/a", columns=["extra", "k"], row_filter="k >= 2 and extra is null", staged=staged.txn_id)
    assert filtered.column_names == ["extra", "k"] and sorted(filtered.column("k").to_pylist()) == [2, 3]
    assert t.read("ss/a", columns=["s", "k"]).column_names == ["s", "k"]
    assert t.read("ss/a", columns=[], staged=staged.txn_id).num_rows == 5
    with pytest.raises(SchemaMismatchError, match="nope"):
        t.read("ss/a", columns=["nope"], staged=staged.txn_id)
    assert "extra" not in t.read("ss/a").column_names  # the published version is unchanged


def _on(d: dt.date) -> PartitionFilter:
    return PartitionFilter.time_window("d", d, d + dt.timedelta(days=1), "day")


def test_a_staged_partition_write_streams_every_partition_of_its_version(trident: Trident) -> None:
    t = trident
    d0, d1 = dt.date(2024, 1, 1), dt.date(2024, 1, 2)
    t.write("ss/p", pa.table({"d": [d0, d0], "v": [1, 2]}), partition=_on(d0))
    t.write("ss/p", pa.table({"d": [d1], "v": [10]}), partition=_on(d1))
    staged = t.write("ss/p", pa.table({"d": [d0], "v": [3]}), partition=_on(d0), stage=True)
    rows = t.read("ss/p", columns=["d", "v"], staged=staged.txn_id)
    assert sorted(zip(rows.column("d").to_pylist(), rows.column("v").to_pylist(), strict=True)) == [(d0, 3), (d1, 10)]
    only = t.read("ss/p", columns=["v"], row_filter="d = '2024-01-02'", staged=staged.txn_id)
    assert only.column("v").to_pylist() == [10]
