"""A small append commits in ONE call (migrations/0012_inline_commit.sql): its rows are stamped
from the record this process's last write left, and the call commits them only while that record
is still the dataset's and nobody else holds its writer lock. These tests make the record stale or
the lock taken, from other Trident instances (their own pools and sessions), and check every row
lands once with dense identity."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest

from tests.support.helpers import append_waits_for_held_lock, writers_take_turns
from trident_resources import Trident, TridentSettings


def rows(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()), "v": [f"r{i}" for i in range(start, start + n)]})


@pytest.fixture
def pair(settings: TridentSettings) -> Iterator[tuple[Trident, Trident]]:
    s = settings.model_copy(update={"inline_max_rows": 100, "inline_flush_rows": 10**6})
    a, b = Trident(s), Trident(s)
    yield a, b
    a.close()
    b.close()


def whole(t: Trident, key: str, n: int) -> None:
    got = t.read(key)
    assert sorted(got.column("id").to_pylist()) == list(range(n))
    assert sorted(got.column("__row_index").to_pylist()) == list(range(n))
    assert len(set(got.column("__row_id").to_pylist())) == n


def test_writers_taking_turns_restamp_from_the_dataset_as_it_is(pair: tuple[Trident, Trident]) -> None:
    a, b = pair
    a.write("one/turns", rows(0, 10), mode="replace")
    n = writers_take_turns(a, b, "one/turns", 10)
    assert a.describe("one/turns").inlined_rows == 100
    whole(a, "one/turns", n)
    whole(b, "one/turns", n)


def test_a_flush_by_another_process_moves_the_snapshot_the_next_append_records(pair: tuple[Trident, Trident]) -> None:
    a, b = pair
    a.write("one/flushed", rows(0, 10), mode="replace")
    a.write("one/flushed", rows(10, 5), mode="append")  # a remembers the record
    flushed = b.flush("one/flushed")
    assert flushed is not None
    r = a.write("one/flushed", rows(15, 5), mode="append")
    entry = a.history("one/flushed")[0]
    assert entry.txn_id == r.txn_id and entry.snapshot_id == flushed.snapshot_id
    assert sorted(a.read("one/flushed", as_of=r.txn_id).column("id").to_pylist()) == list(range(20))
    whole(a, "one/flushed", 20)


def test_an_append_while_another_writer_holds_the_lock_waits_for_it(pair: tuple[Trident, Trident]) -> None:
    a, b = pair
    a.write("one/held", rows(0, 10), mode="replace")
    a.write("one/held", rows(10, 5), mode="append")
    append_waits_for_held_lock(a, b, "one/held", rows(15, 5))
    whole(a, "one/held", 20)
    assert a.describe("one/held").inlined_rows == 10


def test_a_dataset_replaced_by_another_process_is_appended_to_as_it_is_now(pair: tuple[Trident, Trident]) -> None:
    a, b = pair
    a.write("one/replaced", rows(0, 10), mode="replace")
    a.write("one/replaced", rows(10, 5), mode="append")
    b.write("one/replaced", rows(0, 3), mode="replace")  # next_row_index and snapshot move
    r = a.write("one/replaced", rows(3, 4), mode="append")
    assert r.row_count == 7
    got = a.read("one/replaced")
    assert sorted(got.column("id").to_pylist()) == list(range(7))
    assert len(set(got.column("__row_index").to_pylist())) == 7
