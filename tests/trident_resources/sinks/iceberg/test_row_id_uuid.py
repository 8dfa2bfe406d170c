"""``__row_id`` stored as 16 bytes (issue 12, item 2): a new table's column is Iceberg ``uuid``
(Parquet ``fixed_len_byte_array(16) (UUID)``); a table created before keeps its string column;
every reader still gets the 36-character UUID string, and every write path keeps each row's id
on both kinds of table.

The legacy table is built as the old code left it: a table holding Trident's identity columns
with ``__row_id`` as a string (ids from the same ``RowIdBlock`` scheme), taken over with
``Trident.adopt`` (a real table, real files, no stand-in)."""

from __future__ import annotations

import uuid
from datetime import date, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.types import StringType, UUIDType

from trident_resources import PartitionFilter, Trident
from trident_resources.core.identity import RowIdBlock
from trident_resources.core.keys import iceberg_identifier
from trident_resources.sinks.iceberg.scans import _local_path
from trident_resources.sinks.iceberg.sink import IcebergSink

D0 = date(2024, 1, 1)


def _sink(t: Trident) -> IcebergSink:
    sink = t.driver.sink("iceberg_native")
    assert isinstance(sink, IcebergSink)
    return sink


def _table(t: Trident, key: str) -> Any:
    return _sink(t).tables.table(t.dataset_record(key))


def _legacy(t: Trident, key: str, data: pa.Table) -> None:
    """A dataset whose table stores ``__row_id`` as a string, as tables written before uuid ids."""
    sink = _sink(t)
    parts = iceberg_identifier(t.settings.namespace_root, t.workspace, key)
    ident = (".".join(parts[:-1]), parts[-1])
    sink.catalog.create_namespace_if_not_exists(ident[0])
    n = data.num_rows
    ids = pa.table(
        {
            "__row_index": pa.array(range(n), pa.int64()),
            "__row_id": RowIdBlock.mint().arrow(0, n),
            "__created_at": pa.array([0] * n, pa.timestamp("us", tz="UTC")),
        }
    )
    full = pa.Table.from_arrays([*ids.columns, *data.columns], names=[*ids.column_names, *data.column_names])
    table = sink.catalog.create_table(ident, schema=full.schema)
    table.append(full)
    t.adopt(key)


def _make(t: Trident, kind: str, key: str, data: pa.Table) -> None:
    if kind == "legacy":
        _legacy(t, key, data)
    else:
        t.write(key, data)
    expected = StringType() if kind == "legacy" else UUIDType()
    assert _table(t, key).schema().find_field("__row_id").field_type == expected


def _ids(t: Trident, key: str, col: str = "k", **kwargs: Any) -> dict[Any, str]:
    out = t.read(key, **kwargs)
    assert out.schema.field("__row_id").type == pa.large_string()
    return dict(zip(out.column(col).to_pylist(), out.column("__row_id").to_pylist(), strict=True))


def _canonical(ids: Any) -> None:
    for i in ids:
        assert isinstance(i, str) and str(uuid.UUID(i)) == i, i


def test_a_new_dataset_stores_row_ids_as_16_byte_uuids(trident: Trident) -> None:
    t = trident
    t.write("u/new", pa.table({"k": list(range(1000))}))
    table = _table(t, "u/new")
    assert table.schema().find_field("__row_id").field_type == UUIDType()
    for f in t.scan_plan("u/new").files:
        meta = pq.ParquetFile(_local_path(f)).metadata
        col = meta.row_group(0).column(meta.schema.names.index("__row_id"))
        assert col.physical_type == "FIXED_LEN_BYTE_ARRAY" and col.statistics.logical_type.type == "UUID"
        # PLAIN: every reader decodes it (polars' native reader and DuckDB 1.4 refuse DELTA_BYTE_ARRAY here)
        assert "PLAIN" in col.encodings and "DELTA_BYTE_ARRAY" not in col.encodings
    ids = _ids(t, "u/new")
    assert len(set(ids.values())) == 1000
    _canonical(ids.values())
    described = {c["name"]: c["type"] for c in t.describe("u/new").schema}
    assert described["__row_id"] == "large_string"  # the public type did not change
    # the column's bounds are the file's lowest and highest ids (Iceberg uuid bounds: the 16 bytes)
    files = _sink(t).tables.data_files(table)
    field_id = table.schema().find_field("__row_id").field_id
    lows = [uuid.UUID(bytes=f.lower_bounds[field_id]) for f in files]
    highs = [uuid.UUID(bytes=f.upper_bounds[field_id]) for f in files]
    assert min(lows) == min(uuid.UUID(i) for i in ids.values()) and max(highs) == max(uuid.UUID(i) for i in ids.values())


@pytest.mark.parametrize("kind", ["new", "legacy"])
def test_every_read_door_returns_the_ids_as_text(trident: Trident, kind: str) -> None:
    t = trident
    key = f"u/doors_{kind}"
    _make(t, kind, key, pa.table({"k": pa.array([1, 2, 3], pa.int64())}))
    first = _ids(t, key)
    _canonical(first.values())
    version = t.history(key)[0].snapshot_id
    t.write(key, pa.table({"k": pa.array([4], pa.int64())}), mode="append")
    now = _ids(t, key)
    assert {k: now[k] for k in first} == first and len(set(now.values())) == 4
    streamed = t.stream(key).read_all()
    assert streamed.schema.field("__row_id").type == pa.large_string()
    assert dict(zip(streamed.column("k").to_pylist(), streamed.column("__row_id").to_pylist(), strict=True)) == now
    assert _ids(t, key, as_of=version) == first  # time travel (pyiceberg's reader)
    one = now[2]
    assert _ids(t, key, row_filter=f"__row_id = '{one}'") == {2: one}  # a filter on the text form
    got = t.sql(f'select k, __row_id from "{key}" order by k')
    assert pa.types.is_string(got.schema.field("__row_id").type) or pa.types.is_large_string(got.schema.field("__row_id").type)
    assert dict(zip(got.column("k").to_pylist(), got.column("__row_id").to_pylist(), strict=True)) == now
    assert t.sql(f"select k from \"{key}\" where __row_id = '{one}'").column("k").to_pylist() == [2]
    staged = t.write(key, pa.table({"k": pa.array([2, 5], pa.int64())}), mode="upsert", keys=["k"], stage=True)
    audit = dict(zip(*t.read(key, columns=["k", "__row_id"], staged=staged.txn_id).columns, strict=True))
    assert {k.as_py(): v.as_py() for k, v in audit.items()}[2] == one
    t.publish(key, staged.txn_id)
    assert _ids(t, key)[2] == one


@pytest.mark.parametrize("kind", ["new", "legacy"])
def test_keyed_writes_keep_each_rows_id(trident: Trident, kind: str) -> None:
    t = trident
    key = f"u/keyed_{kind}"
    _make(t, kind, key, pa.table({"k": pa.array([1, 2, 3, 4], pa.int64()), "v": ["a", "b", "c", "d"]}))
    start = _ids(t, key)
    t.write(key, pa.table({"k": pa.array([2, 5], pa.int64()), "v": ["B", "e"]}), mode="upsert", keys=["k"])
    after = _ids(t, key)
    assert {k: after[k] for k in start} == start and 5 in after
    r = t.write(key, pa.table({"k": pa.array([1, 6], pa.int64()), "v": ["x", "f"]}), mode="append_new", keys=["k"])
    assert r.skipped == 1
    after = _ids(t, key)
    assert {k: after[k] for k in start} == start and len(set(after.values())) == 6
    t.write(key, pa.table({"k": pa.array([3], pa.int64())}), mode="delete", keys=["k"])
    t.write(key, mode="delete", row_filter="k = 4")
    after = _ids(t, key)
    assert set(after) == {1, 2, 5, 6} and all(after[k] == start[k] for k in (1, 2))
    t.write(key, pa.table({"k": pa.array([1, 5, 7], pa.int64()), "v": ["1", "5", "7"]}), mode="replace", keys=["k"])
    final = _ids(t, key)
    assert set(final) == {1, 5, 7} and final[1] == start[1] and final[5] == after[5] and final[7] not in after.values()
    _canonical(final.values())
    stored = StringType() if kind == "legacy" else UUIDType()
    assert _table(t, key).schema().find_field("__row_id").field_type == stored  # kept its type throughout


@pytest.mark.parametrize("kind", ["new", "legacy"])
def test_partition_replace_keeps_the_other_partitions_ids(trident: Trident, kind: str) -> None:
    t = trident
    key = f"u/parts_{kind}"
    days = [D0, D0, D0 + timedelta(days=1), D0 + timedelta(days=1)]
    _make(t, kind, key, pa.table({"d": days, "k": pa.array([1, 2, 3, 4], pa.int64())}))
    start = _ids(t, key)
    window = PartitionFilter.time_window("d", D0, D0 + timedelta(days=1), "day")
    t.write(key, pa.table({"d": [D0], "k": pa.array([9], pa.int64())}), partition=window)  # replaces day 1 only
    after = _ids(t, key)
    assert set(after) == {3, 4, 9} and after[3] == start[3] and after[4] == start[4]
    _canonical(after.values())


@pytest.mark.usefixtures("iceberg_writes")  # each append its own small file, to compact
@pytest.mark.parametrize("kind", ["new", "legacy"])
def test_compaction_keeps_ids(trident: Trident, kind: str) -> None:
    t = trident
    key = f"u/compact_{kind}"
    _make(t, kind, key, pa.table({"k": pa.array([0], pa.int64())}))
    for i in range(1, 6):
        t.write(key, pa.table({"k": pa.array([i], pa.int64())}), mode="append")
    before = _ids(t, key)
    assert len(t.scan_plan(key).files) == 6
    report = t.maintain(key)
    assert report.data_files_after == 1
    assert _ids(t, key) == before
    _canonical(before.values())


def test_copies_between_sinks_keep_the_ids(trident: Trident) -> None:
    """pg keeps ids as text; moving a dataset to the lakehouse carries them into a uuid table."""
    t = trident
    t.router.set_pin("u/moved", "pg")
    t.write("u/moved", pa.table({"k": pa.array([1, 2, 3], pa.int64())}))
    before = _ids(t, "u/moved")
    t.migrate("u/moved", "iceberg_native")
    assert t.router.pins()["u/moved"] == "iceberg_native"
    assert _table(t, "u/moved").schema().find_field("__row_id").field_type == UUIDType()
    assert _ids(t, "u/moved") == before


def test_a_move_to_pg_turns_16_byte_ids_into_text(trident: Trident) -> None:
    """The other way: a uuid table's ids land in the pg sink as the same text."""
    t = trident
    t.write("u/back", pa.table({"k": pa.array([1, 2, 3], pa.int64())}))
    assert _table(t, "u/back").schema().find_field("__row_id").field_type == UUIDType()
    before = _ids(t, "u/back")
    report = t.migrate("u/back", "pg")
    assert report.parity, report.message
    assert t.dataset_record("u/back").sink == "pg"
    assert _ids(t, "u/back") == before
