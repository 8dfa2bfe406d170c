"""Inlined writes (transaction/inline.py): small appends to an iceberg_native dataset commit into
the control plane with their ledger row, and every read sees the snapshot plus the tail."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest

from trident_resources import Trident, TridentSettings


def rows(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()), "v": [f"r{i}" for i in range(start, start + n)]})


@pytest.fixture
def t(settings: TridentSettings) -> Iterator[Trident]:
    tr = Trident(settings.model_copy(update={"inline_max_rows": 100}))
    yield tr
    tr.close()


def ids(table: pa.Table) -> list[int]:
    return sorted(table.column("id").to_pylist())


def test_small_append_is_inlined_with_iceberg_identity(t: Trident) -> None:
    base = t.write("ds/a", rows(0, 200), mode="replace")
    r = t.write("ds/a", rows(200, 10), mode="append")
    assert r.snapshot_id == base.snapshot_id  # no Iceberg commit
    assert r.rows_written == 10 and r.row_count == 210
    d = t.describe("ds/a")
    assert d.inlined_rows == 10 and d.row_count == 210
    got = t.read("ds/a")
    assert ids(got) == list(range(210))
    idx = sorted(got.column("__row_index").to_pylist())
    assert idx == list(range(210))
    tail = got.filter(pa.compute.greater_equal(got.column("id"), 200))
    assert set(tail.column("__created_at").to_pylist()) == {r.created_at}
    assert len(set(got.column("__row_id").to_pylist())) == 210
    assert ids(t.stream("ds/a").read_all()) == list(range(210))
    assert t.sql('select count(*) as n from "ds/a"').column("n").to_pylist() == [210]
    assert ids(t.read("ds/a", row_filter="id >= 205", columns=["id"])) == list(range(205, 210))
    assert ids(t.read("ds/a", as_of=base.txn_id)) == list(range(200))
    assert ids(t.read("ds/a", as_of=r.txn_id)) == list(range(210))
    assert [e.txn_id for e in t.history("ds/a")][:2] == [r.txn_id, base.txn_id]


def test_flush_moves_tail_into_one_snapshot(t: Trident) -> None:
    base = t.write("ds/b", rows(0, 50), mode="replace")
    writes = [t.write("ds/b", rows(50 + 10 * i, 10), mode="append") for i in range(5)]
    before = t.read("ds/b").sort_by("__row_index")
    entry = t.flush("ds/b")
    assert entry is not None and entry.snapshot_id != base.snapshot_id
    assert t.describe("ds/b").inlined_rows == 0
    after = t.read("ds/b").sort_by("__row_index")
    assert after.equals(before)
    assert t.flush("ds/b") is None
    assert ids(t.read("ds/b", as_of=writes[2].txn_id)) == list(range(80))
    assert ids(t.read("ds/b", as_of=entry.txn_id)) == list(range(100))


def test_upsert_flushes_first(t: Trident) -> None:
    t.write("ds/c", rows(0, 20), mode="replace")
    t.write("ds/c", rows(20, 5), mode="append")
    up = pa.table({"id": pa.array([22, 30], pa.int64()), "v": ["new", "x"]})
    r = t.write("ds/c", up, mode="upsert", keys=["id"])
    got = t.read("ds/c")
    assert ids(got) == [*range(25), 30]
    assert t.describe("ds/c").inlined_rows == 0
    assert r.row_count == 26
