"""Every write mode and its identity rules, on every storage backend (local, S3, REST catalog)."""

from __future__ import annotations

import uuid

import pyarrow as pa

from tests.support.helpers import rows_by, table, user_rows
from trident_resources import Trident
from trident_resources.core.identity import IDENTITY_COLUMNS


def test_replace_stamps_dense_identity_and_is_one_snapshot(any_trident: Trident) -> None:
    t = any_trident
    r = t.write("sales/orders", table(id=[10, 20, 30], v=["a", "b", "c"]), mode="replace")
    assert (r.rows_written, r.row_count, r.sink, r.schema_version) == (3, 3, "iceberg_native", 1)
    got = t.read("sales/orders")
    assert got.column_names[:3] == list(IDENTITY_COLUMNS)
    assert sorted(got["__row_index"].to_pylist()) == [0, 1, 2]
    ids = got["__row_id"].to_pylist()
    assert len(set(ids)) == 3 and all(uuid.UUID(i) for i in ids)
    # __created_at is the transaction's instant τ (the ledger's started_at), the same for every row;
    # committed_at is when the version became visible, later
    assert set(got["__created_at"].to_pylist()) == {r.created_at}
    assert r.created_at < r.committed_at
    entry = t.history("sales/orders")[0]
    assert entry.status == "committed" and entry.committed_at == r.committed_at and entry.snapshot_id == r.snapshot_id

    r2 = t.write("sales/orders", table(id=[1, 2], v=["x", "y"]), mode="replace")
    got = t.read("sales/orders")
    assert sorted(got["__row_index"].to_pylist()) == [0, 1]  # dense again after a replace
    assert r2.row_count == 2 and user_rows(t, "sales/orders", "id") == [{"id": 1, "v": "x"}, {"id": 2, "v": "y"}]


def test_append_continues_row_index(any_trident: Trident) -> None:
    t = any_trident
    t.write("a/b", table(x=[1, 2]), mode="replace")
    r = t.write("a/b", table(x=[3, 4, 5]), mode="append")
    assert (r.rows_written, r.row_count) == (3, 5)
    got = rows_by(t, "a/b", "x")
    assert [got[x]["__row_index"] for x in (1, 2, 3, 4, 5)] == [0, 1, 2, 3, 4]
    assert got[3]["__created_at"] == r.created_at != got[1]["__created_at"]


def test_upsert_keeps_identity_of_matched_and_inserts_the_rest(any_trident: Trident) -> None:
    t = any_trident
    t.write("c/items", table(k=["a", "b", "c"], n=[1, 2, 3]), mode="replace")
    before = rows_by(t, "c/items", "k")
    r = t.write("c/items", table(k=["b", "d"], n=[20, 40]), mode="upsert", keys=["k"])
    assert (r.rows_written, r.preserved, r.row_count) == (2, 1, 4)
    after = rows_by(t, "c/items", "k")
    assert after["b"]["n"] == 20
    assert (after["b"]["__row_id"], after["b"]["__row_index"]) == (before["b"]["__row_id"], before["b"]["__row_index"])
    assert after["b"]["__created_at"] == r.created_at  # a new version of the row
    for k in ("a", "c"):  # untouched rows are untouched, identity and all
        assert after[k] == before[k]
    assert after["d"]["__row_index"] == 3


def test_upsert_leaves_one_row_when_the_key_sat_in_two_data_files(any_trident: Trident) -> None:
    """pyiceberg's own upsert was seen leaving a duplicate key behind in exactly this case."""
    t = any_trident
    t.write("dup/k", table(k=[1, 2], n=[1, 2]), mode="replace")
    t.write("dup/k", table(k=[1, 3], n=[10, 3]), mode="append")  # key 1 now in two files
    assert t.read("dup/k").num_rows == 4
    r = t.write("dup/k", table(k=[1], n=[100]), mode="upsert", keys="k")
    got = t.read("dup/k").to_pylist()
    ones = [row for row in got if row["k"] == 1]
    assert len(ones) == 1 and ones[0]["n"] == 100 and ones[0]["__row_index"] == 0  # oldest identity survives
    assert r.row_count == 3 == len(got)


def test_append_new_skips_existing_keys(any_trident: Trident) -> None:
    t = any_trident
    t.write("n/k", table(k=[1, 2], v=["a", "b"]), mode="replace")
    before = rows_by(t, "n/k", "k")
    r = t.write("n/k", table(k=[2, 3], v=["B", "c"]), mode="append_new", keys=["k"])
    assert (r.rows_written, r.skipped, r.row_count) == (1, 1, 3)
    after = rows_by(t, "n/k", "k")
    assert after[2] == before[2] and after[3]["v"] == "c" and after[3]["__row_index"] == 2


def test_replace_with_keys_preserves_identity_and_drops_absent_keys(any_trident: Trident) -> None:
    t = any_trident
    t.write("s/r", table(k=[1, 2, 3], v=["a", "b", "c"]), mode="replace")
    before = rows_by(t, "s/r", "k")
    r = t.write("s/r", table(k=[3, 1, 9], v=["C", "A", "I"]), mode="replace", keys=["k"])
    assert (r.preserved, r.row_count) == (2, 3)
    after = rows_by(t, "s/r", "k")
    assert set(after) == {1, 3, 9}
    for k in (1, 3):
        assert (after[k]["__row_id"], after[k]["__row_index"]) == (before[k]["__row_id"], before[k]["__row_index"])
    assert after[9]["__row_index"] == 3 and after[9]["__row_id"] not in {b["__row_id"] for b in before.values()}


def test_delete_by_keys_and_by_filter(any_trident: Trident) -> None:
    t = any_trident
    t.write("d/x", table(k=[1, 2, 3, 4], v=[10, 20, 30, 40]), mode="replace")
    before = rows_by(t, "d/x", "k")
    r = t.write("d/x", table(k=[2, 99]), mode="delete", keys=["k"], writer="row.edit")
    assert (r.deleted, r.row_count) == (1, 3)
    r = t.write("d/x", mode="delete", row_filter="v >= 40", writer="row.edit")
    assert (r.deleted, r.row_count) == (1, 2)
    after = rows_by(t, "d/x", "k")
    assert set(after) == {1, 3} and after[1] == before[1] and after[3] == before[3]


def test_inputs_of_every_kind(any_trident: Trident) -> None:
    import pandas as pd  # test extras: both are installed by scripts/test.sh
    import polars as pl

    t = any_trident
    t.write("in/pandas", pd.DataFrame({"a": [1, 2], "b": ["x", "y"]}))
    t.write("in/polars", pl.DataFrame({"a": [1, 2], "b": ["x", "y"]}))
    batches = [pa.record_batch({"a": [1], "b": ["x"]}), pa.record_batch({"a": [2], "b": ["y"]})]
    t.write("in/iterable", iter(batches))
    t.write("in/reader", pa.RecordBatchReader.from_batches(batches[0].schema, batches))
    for key in ("in/pandas", "in/polars", "in/iterable", "in/reader"):
        assert user_rows(t, key, "a") == [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}], key


def test_empty_table_writes_zero_rows(any_trident: Trident) -> None:
    t = any_trident
    r = t.write("e/z", pa.table({"a": pa.array([], pa.int64())}))
    assert (r.rows_written, r.row_count) == (0, 0)
    assert t.read("e/z").num_rows == 0 and t.describe("e/z").schema_version == 1


def test_read_columns_filter_and_time_travel(any_trident: Trident) -> None:
    t = any_trident
    r1 = t.write("tt/x", table(k=[1, 2, 3], v=["a", "b", "c"]))
    t.write("tt/x", table(k=[4], v=["d"]), mode="append")
    assert t.read("tt/x", columns=["v"]).column_names == ["v"]
    assert t.read("tt/x", row_filter="k > 2")["k"].to_pylist() == [3, 4] or sorted(
        t.read("tt/x", row_filter="k > 2")["k"].to_pylist()
    ) == [3, 4]
    assert t.read("tt/x", as_of=r1.txn_id).num_rows == 3
    assert t.read("tt/x", as_of=r1.snapshot_id).num_rows == 3
    streamed = sum(b.num_rows for b in t.stream("tt/x"))
    assert streamed == 4 == t.describe("tt/x").row_count
    assert t.sql('select count(*) as n from "tt/x"')["n"].to_pylist() == [4]
