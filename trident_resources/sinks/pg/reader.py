"""Bulk reads of the pg sink's rows: a few aggregated binary COPYs, run on several connections.

Why this shape (issue 12, measured on the lineitem bench):

- Postgres renders each row's jsonb as text (``jsonb_out``) on one backend per query, and that
  render is most of the server's work: a single backend cannot go much faster than ~200k rows/s
  whatever the client does. So the rows are read as row-index ranges on several connections at
  once, all inside ONE exported snapshot (``pg_export_snapshot`` / ``SET TRANSACTION SNAPSHOT``,
  what ``pg_dump -j`` does), so the result is exactly one consistent version of the dataset.
- One range is ONE row of a binary COPY whose fields are columns already packed by Postgres:
  ``string_agg(int8send(row_index))`` (big-endian int64s), ``string_agg(row_id::text)`` (36
  bytes each), ``string_agg(timestamptz_send(created_at))`` and the documents joined by ``\\n``
  (jsonb's text never holds a raw newline: control characters are escaped). The client turns them
  into Arrow arrays with numpy views and one newline search: no Python object per row, where the
  cursor it replaces built four per row.
- All aggregates of one group see the rows in the same order, so the fields line up; the rows are
  sorted by ``__row_index`` on the client (a bitmap scan returns heap order).
- A range is sized from the plan (row count, index span, stored bytes) so that one COPY row stays
  around ``CHUNK_BYTES``; ranges are fetched at most ``connections + 1`` ahead of the consumer,
  so memory stays bounded whatever the dataset's size.
"""

from __future__ import annotations

import contextlib
import math
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import psycopg
import pyarrow as pa
import pyarrow.compute as pc
from psycopg import sql
from psycopg_pool import ConnectionPool, PoolClosed, PoolTimeout

from ... import queries as q
from ...errors import StorageUnavailableError
from ...identity import TIMESTAMP_TYPE

CHUNK_BYTES = 8 << 20  # stored jsonb bytes per range (one COPY row); the text is about as large
CHUNK_ROWS = 65_536  # and never more rows than this per range
READ_CONNECTIONS = 2  # connections that render ranges at once (Postgres renders jsonb on one core per query)
HELPER_WAIT_S = 5.0  # how long a helper waits for a pooled connection before leaving the work to the others
_PG_EPOCH_US = 946_684_800_000_000  # 2000-01-01 in Unix microseconds: timestamptz_send's origin
_COPY_SIGNATURE = b"PGCOPY\n\xff\r\n\x00"


@dataclass(frozen=True)
class RawChunk:
    """One range's rows as Arrow arrays: identity columns and (optionally) the documents' text."""

    row_index: pa.Array
    row_id: pa.Array
    created_at: pa.Array
    data: pa.Array | None

    @property
    def num_rows(self) -> int:
        return len(self.row_index)


@dataclass(frozen=True)
class ScanPlan:
    rows: int
    lo: int
    hi: int
    sample_bytes: int  # stored size of the first ``sample_rows`` documents (a whole-heap sum would read every row)
    sample_rows: int

    def ranges(self, *, with_data: bool) -> list[tuple[int, int]]:
        """Half-open ``row_index`` ranges covering [lo, hi]; each holds at most its width in rows
        (row indexes are unique within a generation)."""
        if self.rows == 0:
            return []
        stored = self.sample_bytes / max(self.sample_rows, 1) * self.rows
        by_bytes = math.ceil(stored / CHUNK_BYTES) if with_data else 1
        count = max(1, math.ceil(self.rows / CHUNK_ROWS), by_bytes)
        width = max(1, math.ceil((self.hi - self.lo + 1) / count))
        return [(a, min(a + width, self.hi + 1)) for a in range(self.lo, self.hi + 1, width)]


def _fields(message: bytes) -> list[memoryview | None]:
    """The fields of the single tuple in a binary COPY stream (header, one tuple, trailer)."""
    mv = memoryview(message)
    pos = 0
    if message.startswith(_COPY_SIGNATURE):
        ext = int.from_bytes(mv[15:19], "big")
        pos = 19 + ext
    count = int.from_bytes(mv[pos : pos + 2], "big", signed=True)
    pos += 2
    out: list[memoryview | None] = []
    for _ in range(max(count, 0)):
        size = int.from_bytes(mv[pos : pos + 4], "big", signed=True)
        pos += 4
        if size < 0:
            out.append(None)
            continue
        out.append(mv[pos : pos + size])
        pos += size
    return out


def _chunk(fields: list[memoryview | None], with_data: bool) -> RawChunk | None:
    index_b, ids_b, created_b, data_b = fields
    if index_b is None or ids_b is None or created_b is None:  # an empty range: the aggregates are NULL
        return None
    n = len(index_b) // 8
    if len(ids_b) != 36 * n or len(created_b) != 8 * n:
        raise StorageUnavailableError(f"the pg sink returned a malformed range ({n} rows, {len(ids_b)} id bytes)")
    row_index = pa.array(np.frombuffer(index_b, ">i8").astype(np.int64))
    created = pa.array(np.frombuffer(created_b, ">i8").astype(np.int64) + _PG_EPOCH_US).view(TIMESTAMP_TYPE)
    row_id = pa.LargeStringArray.from_buffers(
        n, pa.py_buffer(np.arange(0, 36 * (n + 1), 36, dtype=np.int64)), pa.py_buffer(ids_b)
    )
    data = None
    if with_data:
        if data_b is None:
            raise StorageUnavailableError("the pg sink returned a range without its documents")
        text = np.frombuffer(data_b, np.uint8)
        breaks = np.flatnonzero(text == 10)
        if len(breaks) != n - 1:
            raise StorageUnavailableError(f"the pg sink returned {len(breaks) + 1} documents for {n} rows")
        offsets = np.empty(n + 1, np.int64)
        offsets[0], offsets[-1] = 0, len(text)
        offsets[1:-1] = breaks + 1  # each document keeps its trailing newline: JSON whitespace
        data = pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data_b))
    chunk = RawChunk(row_index, row_id, created, data)
    order = np.frombuffer(index_b, ">i8")
    if n > 1 and not bool(np.all(order[1:] > order[:-1])):
        return _sorted(chunk)
    return chunk


def _sorted(chunk: RawChunk) -> RawChunk:
    take = pc.sort_indices(chunk.row_index)
    return RawChunk(
        chunk.row_index.take(take),
        chunk.row_id.take(take),
        chunk.created_at.take(take),
        None if chunk.data is None else chunk.data.take(take),
    )


def _fetch(
    conn: psycopg.Connection[Any], dataset_id: uuid.UUID, gen: int, span: tuple[int, int], with_data: bool
) -> RawChunk | None:
    sql = q.PG_COPY_RANGE if with_data else q.PG_COPY_RANGE_IDS
    parts: list[bytes] = []
    with conn.cursor().copy(sql, (dataset_id, gen, span[0], span[1])) as copy:
        for block in copy:
            parts.append(bytes(block))
    message = parts[0] if len(parts) == 1 else b"".join(parts)
    return _chunk(_fields(message), with_data)


def _begin_snapshot(conn: psycopg.Connection[Any], snapshot: str | None = None) -> None:
    """Open the transaction as a repeatable-read snapshot (the lead's, or the one it exported),
    with text in UTF-8 whatever the server's encoding, since the client reads raw bytes."""
    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
    if snapshot is not None:
        conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot)))
    conn.execute("SET LOCAL client_encoding TO 'UTF8'")


class _Ranges:
    """The ranges still to fetch and the fetched ones not yet consumed, shared by the fetchers."""

    def __init__(self, spans: list[tuple[int, int]], ahead: int) -> None:
        self.spans = spans
        self.next = 0
        self.done: dict[int, RawChunk | BaseException | None] = {}
        self.cond = threading.Condition()
        self.room = threading.Semaphore(ahead)
        self.stop = False

    def claim(self) -> int | None:
        while not self.room.acquire(timeout=0.5):  # a fetcher never blocks for good once the read halted
            if self.stop:
                return None
        with self.cond:
            if self.stop or self.next >= len(self.spans):
                self.room.release()
                return None
            i, self.next = self.next, self.next + 1
            return i

    def put(self, i: int, value: RawChunk | BaseException | None) -> None:
        with self.cond:
            self.done[i] = value
            self.cond.notify_all()

    def take(self, i: int, alive: Any) -> RawChunk | BaseException | None:
        with self.cond:
            while i not in self.done:
                if not alive():
                    raise StorageUnavailableError("the pg sink's readers stopped before every range was read")
                self.cond.wait(timeout=1.0)
            value = self.done.pop(i)
        self.room.release()
        return value

    def halt(self) -> None:
        with self.cond:
            self.stop = True
            self.cond.notify_all()


def read_ranges(
    pool: ConnectionPool[Any],
    dataset_id: uuid.UUID,
    gen: int,
    *,
    with_data: bool,
    connections: int = READ_CONNECTIONS,
) -> Iterator[RawChunk]:
    """Every row of one generation, in ``__row_index`` order, as RawChunks (bounded memory)."""
    try:
        with pool.connection() as lead, lead.transaction():
            _begin_snapshot(lead)
            plan_row = lead.execute(q.PG_SCAN_PLAN, {"ds": dataset_id, "gen": gen}).fetchone()
            assert plan_row is not None
            plan = ScanPlan(*(plan_row.values() if isinstance(plan_row, dict) else plan_row))
            spans = plan.ranges(with_data=with_data)
            helpers = min(connections - 1, len(spans) - 1, _spare_connections(pool))
            if helpers <= 0:
                for span in spans:
                    if (chunk := _fetch(lead, dataset_id, gen, span, with_data)) is not None:
                        yield chunk
                return
            snapshot = lead.execute("SELECT pg_export_snapshot() AS s").fetchone()
            assert snapshot is not None
            name = snapshot["s"] if isinstance(snapshot, dict) else snapshot[0]
            yield from _parallel(pool, lead, name, dataset_id, gen, spans, helpers, with_data)
    except psycopg.Error as exc:
        raise StorageUnavailableError(f"the pg sink could not read the dataset's rows from Postgres: {exc}") from exc


def _spare_connections(pool: ConnectionPool[Any]) -> int:
    """Connections the pool can hand out now without waiting (idle ones plus room to grow), so a
    read never queues behind the rest of the process for a helper it can do without."""
    stats = pool.get_stats()
    return max(0, stats.get("pool_available", 0) + pool.max_size - stats.get("pool_size", 0))


def _parallel(
    pool: ConnectionPool[Any],
    lead: psycopg.Connection[Any],
    snapshot: str,
    dataset_id: uuid.UUID,
    gen: int,
    spans: list[tuple[int, int]],
    helpers: int,
    with_data: bool,
) -> Iterator[RawChunk]:
    """Fetch ``spans`` on the lead connection and up to ``helpers`` pooled ones that import its
    snapshot; yield them in order. A helper that cannot get a connection leaves its share to the
    others; the lead's transaction (and so the snapshot) stays open until every fetcher is done."""
    ranges = _Ranges(spans, ahead=helpers + 2)

    def work(conn: psycopg.Connection[Any]) -> None:
        while (i := ranges.claim()) is not None:
            try:
                ranges.put(i, _fetch(conn, dataset_id, gen, spans[i], with_data))
            except BaseException as exc:  # handed to the consumer, which raises it in order
                ranges.put(i, exc)
                ranges.halt()
                return

    def helper(working: threading.Event) -> None:
        with contextlib.ExitStack() as stack:
            try:
                conn = pool.getconn(timeout=HELPER_WAIT_S)
            except (PoolTimeout, PoolClosed):  # busy or closing: the other fetchers take this one's share
                return
            stack.callback(pool.putconn, conn)
            working.set()
            try:
                with conn.transaction():
                    _begin_snapshot(conn, snapshot)
                    work(conn)
            except psycopg.Error:  # could not join the snapshot (or the range failed): the others carry on
                return

    lead_done = threading.Event()
    lead_done.set()  # the lead fetcher always works (and is always joined)
    working = [lead_done] + [threading.Event() for _ in range(helpers)]
    threads = [threading.Thread(target=work, args=(lead,), name="trident-pg-read-0", daemon=True)]
    threads += [
        threading.Thread(target=helper, args=(working[k + 1],), name=f"trident-pg-read-{k + 1}", daemon=True)
        for k in range(helpers)
    ]
    for th in threads:
        th.start()
    try:
        for i in range(len(spans)):
            value = ranges.take(i, lambda: any(th.is_alive() for th in threads))
            if isinstance(value, BaseException):
                raise value
            if value is not None:
                yield value
    finally:
        ranges.halt()
        for _ in threads:
            ranges.room.release()  # wake fetchers blocked on room so they see the halt
        for th, busy in zip(threads, working, strict=True):
            if busy.is_set():  # one still waiting for a pooled connection finds the read halted (or the
                th.join()  # snapshot gone) and leaves on its own: the read does not wait for it
