"""Issue 12: a streamed write pulls its input on a helper thread (``prefetch.py``), a bounded few
batches ahead of the Parquet encoders, so the source keeps producing while the writer waits for a
lane. Order, errors, early stops and the failed-write guarantee stay what they were."""

from __future__ import annotations

import threading
from collections.abc import Generator, Iterator

import pyarrow as pa
import pytest

from trident_resources import Trident, TridentError
from trident_resources.planning.prefetch import prefetched


def _helpers_alive() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name == "trident-input"]


def test_prefetched_keeps_order_and_stays_a_bounded_few_items_ahead() -> None:
    produced = [0]

    def source() -> Iterator[int]:
        for i in range(200):
            produced[0] += 1
            yield i

    seen: list[int] = []
    for item in prefetched(source(), depth=2):
        # consumed + 2 queued + 1 produced and waiting to be queued, never more
        assert produced[0] - len(seen) <= 2 + 2
        seen.append(item)
    assert seen == list(range(200))
    assert not _helpers_alive()


def test_an_input_error_reaches_the_consumer_as_raised_after_the_items_before_it() -> None:
    boom = ValueError("bad batch")

    def source() -> Iterator[int]:
        yield 1
        yield 2
        raise boom

    got: list[int] = []
    with pytest.raises(ValueError) as info:
        for item in prefetched(source()):
            got.append(item)
    assert info.value is boom and got == [1, 2]
    assert not _helpers_alive()


def test_a_consumer_that_stops_early_stops_and_closes_the_input_before_it_returns() -> None:
    closed = threading.Event()

    def source() -> Iterator[int]:
        try:
            i = 0
            while True:
                yield i
                i += 1
        finally:
            closed.set()

    it = prefetched(source(), depth=1)
    assert isinstance(it, Generator)
    assert next(it) == 0
    it.close()  # what an abandoned write's generator chain does
    assert closed.is_set()
    assert not _helpers_alive()


def test_a_write_pulls_its_input_on_the_helper_thread(trident: Trident) -> None:
    pulled_on: set[str] = set()

    def batches() -> Iterator[pa.RecordBatch]:
        for i in range(5):
            pulled_on.add(threading.current_thread().name)
            yield pa.record_batch({"k": list(range(i * 100_000, (i + 1) * 100_000))})

    schema = pa.schema([("k", pa.int64())])
    r = trident.write("pf/rows", pa.RecordBatchReader.from_batches(schema, batches()))
    assert pulled_on == {"trident-input"}
    assert r.rows_written == 500_000
    assert trident.read("pf/rows", columns=["k"]).column("k").to_pylist() == list(range(500_000))
    assert not _helpers_alive()


def test_an_input_failing_mid_write_aborts_it_and_leaves_the_dataset_as_it_was(trident: Trident) -> None:
    t = trident
    t.write("pf/kept", pa.table({"k": [1, 2, 3]}))
    closed = threading.Event()

    def batches() -> Iterator[pa.RecordBatch]:
        try:
            for i in range(3):
                yield pa.record_batch({"k": list(range(i * 100_000, (i + 1) * 100_000))})
            raise ValueError("the source broke")
        finally:
            closed.set()

    schema = pa.schema([("k", pa.int64())])
    with pytest.raises((TridentError, ValueError)) as info:
        t.write("pf/kept", pa.RecordBatchReader.from_batches(schema, batches()))
    chain: list[BaseException] = []
    exc: BaseException | None = info.value
    while exc is not None:
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    assert any(isinstance(e, ValueError) and "the source broke" in str(e) for e in chain)
    assert closed.is_set()
    assert t.read("pf/kept", columns=["k"]).column("k").to_pylist() == [1, 2, 3]
    assert [e.status for e in t.history("pf/kept")] == ["aborted", "committed"]
    assert not _helpers_alive()


def test_a_write_failing_on_the_writer_side_stops_its_input_before_it_returns(trident: Trident) -> None:
    """The input's owner (a node's DuckDB session) closes its source as soon as the write
    returns, even with the exception still alive: the helper must be stopped and joined by then,
    not when the failed write's frames are collected."""
    from trident_resources.core.failpoints import InjectedFault, armed

    t = trident
    pulled = [0]

    def batches() -> Iterator[pa.RecordBatch]:
        for i in range(1_000):
            pulled[0] += 1
            yield pa.record_batch({"k": list(range(i * 100_000, (i + 1) * 100_000))})

    schema = pa.schema([("k", pa.int64())])
    with armed("write.file_flushed"), pytest.raises((TridentError, InjectedFault)) as info:
        t.write("pf/writer_fails", pa.RecordBatchReader.from_batches(schema, batches()))
        # checked while the exception (and its frames) are still alive
    assert info.value is not None
    assert not _helpers_alive()  # nothing reads the input any more
    assert pulled[0] < 1_000  # it stopped early, at the failure
    assert not t.exists("pf/writer_fails") or t.history("pf/writer_fails")[0].status == "aborted"
