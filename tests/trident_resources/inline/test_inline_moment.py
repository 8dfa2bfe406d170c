"""A read of several datasets reads their inlined tails as of the ONE control-plane moment it
resolved them at (``read/tail.py``: the record names its tail's block range), not as of the later
instants each tail's blocks are fetched: ``t.sql`` over several datasets, ``read_many``, and any
read door given a record read earlier."""

from __future__ import annotations

import sys
import threading
import time

import pyarrow as pa

from tests.support.helpers import table
from trident_resources import Trident
from trident_resources.core.failpoints import armed
from trident_resources.read.datasets import arrow_source_of

QUERY = 'SELECT (SELECT count(*) FROM "mo/a") AS a, (SELECT count(*) FROM "mo/b") AS b, (SELECT max(k) FROM "mo/a") AS top'


def _two_datasets_with_tails(t: Trident) -> None:
    for key in ("mo/a", "mo/b"):
        t.write(key, table(k=[0]))  # the Iceberg table
        t.write(key, table(k=[1]), mode="append")  # inlined
        assert t.describe(key).inlined_rows == 1


def _commits_after_the_moment(t: Trident) -> None:
    t.write("mo/a", table(k=[2]), mode="append")  # inlined: a's tail grows
    t.write("mo/b", table(k=[5, 6, 7]))  # a replace: b's tail flushed, then a new snapshot


def _in_failpoint(thread: threading.Thread) -> bool:
    frame = sys._current_frames().get(thread.ident or -1)
    while frame is not None:
        if frame.f_code.co_name == "failpoint":
            return True
        frame = frame.f_back
    return False


def test_sql_over_several_datasets_reads_every_tail_as_of_one_moment(trident: Trident) -> None:
    t = trident
    _two_datasets_with_tails(t)
    assert t.sql(QUERY).to_pylist() == [{"a": 2, "b": 2, "top": 1}]
    results: list[pa.Table] = []
    errors: list[BaseException] = []

    def query() -> None:
        try:
            results.append(t.sql(QUERY))
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    with armed("sql.resolved", "sleep:3"):  # the query has resolved its datasets, and waits there
        worker = threading.Thread(target=query)
        worker.start()
        deadline = time.monotonic() + 30
        while not _in_failpoint(worker) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _in_failpoint(worker)
        _commits_after_the_moment(t)  # both land after the query's moment
        worker.join(60)
    assert not errors, errors
    # the moment it resolved: a's tail without the later block, b's old snapshot with its tail
    # (a tail read at fetch time would show a = 3, and b = 1: its tail flushed, its old snapshot kept)
    assert results[0].to_pylist() == [{"a": 2, "b": 2, "top": 1}]
    assert t.sql(QUERY).to_pylist() == [{"a": 3, "b": 3, "top": 2}]  # the next query: the next moment


def test_a_record_pins_its_tail_for_every_read_door(trident: Trident) -> None:
    t = trident
    _two_datasets_with_tails(t)
    records = {d.key: d for d in t.control.datasets(t.workspace)}  # one statement: one moment
    _commits_after_the_moment(t)
    for key in ("mo/a", "mo/b"):
        plan = t.scan_plan_of(records[key])
        assert plan.tail is not None and plan.tail.num_rows == 1, key
        assert plan.tail.column("k").to_pylist() == [1]
        source = arrow_source_of(t.engine, records[key])  # what t.sql registers on the Arrow path
        assert sorted(source.to_table().column("k").to_pylist()) == [0, 1], key
    # and now: a's tail has both blocks, b has no tail (its rows are the replace's)
    assert t.scan_plan("mo/a").tail.column("k").to_pylist() == [1, 2]  # type: ignore[union-attr]
    assert t.scan_plan("mo/b").tail is None


def test_read_many_reads_the_inlined_rows_of_each_dataset(trident: Trident) -> None:
    t = trident
    _two_datasets_with_tails(t)
    both = t.read_many(["mo/a", "mo/b"], columns=["k"])
    assert {k: sorted(v.column("k").to_pylist()) for k, v in both.items()} == {"mo/a": [0, 1], "mo/b": [0, 1]}
    _commits_after_the_moment(t)
    both = t.read_many(["mo/a", "mo/b"])
    assert {k: sorted(v.column("k").to_pylist()) for k, v in both.items()} == {"mo/a": [0, 1, 2], "mo/b": [5, 6, 7]}
    assert both["mo/a"].schema == t.read("mo/a").schema  # the tail's rows shaped as the snapshot's
