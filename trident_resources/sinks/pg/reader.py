"""Bulk reads of the pg sink's rows: a few aggregated binary COPYs, run on several connections.

Why this shape (measured on the lineitem bench):

- Postgres renders each row's jsonb as text (``jsonb_out``) on one backend per query, and that
  render is most of the server's work: a single backend cannot go much faster than ~200k rows/s
  whatever the client does. So the rows are read as row-index ranges on several connections at
  once, all inside ONE exported snapshot (``pg_export_snapshot`` / ``SET TRANSACTION SNAPSHOT``,
  what ``pg_dump -j`` does), so the result is exactly one consistent version of the dataset.
- One range is ONE row of a binary COPY whose fields are columns already packed by Postgres:
  ``string_agg(int8send(row_index))`` (big-endian int64s), ``string_agg(row_id::text)`` (36
  bytes each), ``string_agg(timestamptz_send(created_at))`` and the wanted user columns as CSV
  text (``columns.py``). The client turns the identity into Arrow arrays with numpy views and the
  CSV with pyarrow's reader: no Python object per row (the cursor it replaced built four per row),
  and not one COPY message per row either (psycopg costs ~1.4 us of Python per message).
- Each fetcher thread also decodes its ranges (pyarrow and DuckDB release the GIL), so decoding
  runs in parallel too and the consumer only takes finished batches in order.
- All aggregates of one group see the rows in the same order, so the fields line up; the rows are
  sorted by ``__row_index`` on the client (a bitmap scan returns heap order).
- Row blocks (``blocks.py``), listed in the same snapshot, replace the ranges they cover: a
  block is one fetch of its IPC bytes and a decode (zstd for large blocks), no jsonb rendering at all.
- A range is sized from the plan (row count, index span, stored bytes) so that one COPY row stays
  around ``CHUNK_BYTES``; ranges are fetched at most ``connections + 1`` ahead of the consumer,
  so memory stays bounded whatever the dataset's size.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import psycopg
import pyarrow as pa
from psycopg import sql
from psycopg_pool import ConnectionPool, PoolClosed, PoolTimeout

from ...control import queries as q
from ...core.errors import DatasetChangedError, StorageUnavailableError
from ...core.identity import TIMESTAMP_TYPE
from .blocks import Block, segments

CHUNK_BYTES = 8 << 20  # stored jsonb bytes per range (one COPY row); the text is about as large
CHUNK_ROWS = 65_536  # and never more rows than this per range
READ_CONNECTIONS = 2  # connections that render ranges at once (Postgres renders jsonb on one core per query)
HELPER_WAIT_S = 5.0  # how long a helper waits for a pooled connection before leaving the work to the others
_PG_EPOCH_US = 946_684_800_000_000  # 2000-01-01 in Unix microseconds: timestamptz_send's origin
_COPY_SIGNATURE = b"PGCOPY\n\xff\r\n\x00"


@dataclass(frozen=True)
class RawChunk:
    """One range's rows: identity columns as Arrow arrays (in the order Postgres aggregated them)
    and the user columns' text, one field per column group, in the same row order."""

    row_index: pa.Array
    row_id: pa.Array
    created_at: pa.Array
    texts: tuple[memoryview, ...]

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


def _chunk(fields: list[memoryview | None], groups: int) -> RawChunk | None:
    if len(fields) != 3 + groups:
        raise StorageUnavailableError(f"the pg sink returned a range of {len(fields)} fields, not {3 + groups}")
    index_b, ids_b, created_b = fields[:3]
    if index_b is None or ids_b is None or created_b is None:  # an empty range: the aggregates are NULL
        return None
    n = len(index_b) // 8
    if len(ids_b) != 36 * n or len(created_b) != 8 * n:
        raise StorageUnavailableError(f"the pg sink returned a malformed range ({n} rows, {len(ids_b)} id bytes)")
    texts = tuple(fields[3:])
    if any(t is None for t in texts):
        raise StorageUnavailableError("the pg sink returned a range without its columns")
    row_index = pa.array(np.frombuffer(index_b, ">i8").astype(np.int64))
    created = pa.array(np.frombuffer(created_b, ">i8").astype(np.int64) + _PG_EPOCH_US).view(TIMESTAMP_TYPE)
    row_id = pa.LargeStringArray.from_buffers(
        n, pa.py_buffer(np.arange(0, 36 * (n + 1), 36, dtype=np.int64)), pa.py_buffer(ids_b)
    )
    return RawChunk(row_index, row_id, created, cast(tuple[memoryview, ...], texts))


class RangeQuery:
    """What a read fetches per range and how a range becomes a batch (called on fetcher threads);
    ``block`` turns a row block's IPC bytes into a batch of the same shape (``blocks.py``), or is
    None to read every row from jsonb."""

    def __init__(
        self,
        fields: sql.Composable,
        groups: int,
        decode: Callable[[RawChunk], pa.RecordBatch],
        block: Callable[[bytes, int], pa.RecordBatch] | None = None,
    ) -> None:
        self.statement = sql.SQL(q.PG_COPY_RANGE).format(fields=fields)
        self.groups = groups
        self.decode = decode
        self.block = block


Item = tuple[int, int, Block | None]  # a half-open row-index range, and the block holding it (None: jsonb rows)


def _fetch(
    conn: psycopg.Connection[Any], dataset_id: uuid.UUID, gen: int, item: Item, query: RangeQuery
) -> pa.RecordBatch | None:
    if item[2] is not None:
        return _fetch_block(conn, dataset_id, gen, item[2], query)
    return fetch_rows(conn, dataset_id, gen, (item[0], item[1]), query)


def _fetch_block(
    conn: psycopg.Connection[Any], dataset_id: uuid.UUID, gen: int, block: Block, query: RangeQuery
) -> pa.RecordBatch:
    assert query.block is not None
    row = conn.cursor(binary=True).execute(q.PG_BLOCK_IPC, (dataset_id, gen, block.first)).fetchone()
    if row is None:  # listed in this very snapshot: it cannot have gone
        raise StorageUnavailableError(f"the pg sink's row block at {block.first} vanished from the read's snapshot")
    values = list(row.values()) if isinstance(row, dict) else list(row)
    return query.block(bytes(values[1]), int(values[0]))


def fetch_rows(
    conn: psycopg.Connection[Any], dataset_id: uuid.UUID, gen: int, span: tuple[int, int], query: RangeQuery
) -> pa.RecordBatch | None:
    """The jsonb rows of ``[span[0], span[1])`` in ``__row_index`` order, as one of ``query``'s
    batches (None when the range holds no row); the caller's transaction decides what it sees."""
    parts: list[bytes] = []
    with conn.cursor().copy(query.statement, (dataset_id, gen, span[0], span[1])) as copy:
        for block in copy:
            parts.append(bytes(block))
    message = parts[0] if len(parts) == 1 else b"".join(parts)
    chunk = _chunk(_fields(message), query.groups)
    return None if chunk is None else query.decode(chunk)


def _begin_snapshot(conn: psycopg.Connection[Any], snapshot: str | None = None) -> None:
    """Open the transaction as a repeatable-read snapshot (the lead's, or the one it exported),
    with text in UTF-8 whatever the server's encoding, since the client reads raw bytes."""
    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
    if snapshot is not None:
        conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot)))
    conn.execute("SET LOCAL client_encoding TO 'UTF8'")
    # The read is already spread over connections; parallel workers inside one range's query
    # measured more server CPU (partial aggregates copied again when combined), not less wall.
    conn.execute("SET LOCAL max_parallel_workers_per_gather = 0")


class _Ranges:
    """The ranges still to fetch and the fetched ones not yet consumed, shared by the fetchers."""

    def __init__(self, spans: list[Item], ahead: int) -> None:
        self.spans = spans
        self.next = 0
        self.done: dict[int, pa.RecordBatch | BaseException | None] = {}
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

    def put(self, i: int, value: pa.RecordBatch | BaseException | None) -> None:
        with self.cond:
            self.done[i] = value
            self.cond.notify_all()

    def take(self, i: int, alive: Any) -> pa.RecordBatch | BaseException | None:
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
    query: RangeQuery,
    *,
    seq: int | None = None,
    connections: int = READ_CONNECTIONS,
) -> Iterator[pa.RecordBatch]:
    """Every row of one generation, in ``__row_index`` order, as ``query``'s batches (bounded memory).

    ``seq`` is the commit the caller planned the read on (its generation and schema), looked up
    before this snapshot existed: a commit in between would make the read mix versions, or find
    nothing at all once a replace and the next write purged ``gen``; then the read raises
    ``DatasetChangedError`` rather than return rows of no version the dataset ever had."""
    try:
        with pool.connection() as lead, lead.transaction():
            _begin_snapshot(lead)
            if seq is not None:
                _check_version(lead, dataset_id, seq)
            spans = _items(lead, dataset_id, gen, query)
            helpers = min(connections - 1, len(spans) - 1, _spare_connections(pool))
            if helpers <= 0:
                for span in spans:
                    if (batch := _fetch(lead, dataset_id, gen, span, query)) is not None:
                        yield batch
                return
            snapshot = lead.execute("SELECT pg_export_snapshot() AS s").fetchone()
            assert snapshot is not None
            name = snapshot["s"] if isinstance(snapshot, dict) else snapshot[0]
            yield from _parallel(pool, lead, name, dataset_id, gen, spans, helpers, query)
    except psycopg.Error as exc:
        raise StorageUnavailableError(f"the pg sink could not read the dataset's rows from Postgres: {exc}") from exc


def _check_version(conn: psycopg.Connection[Any], dataset_id: uuid.UUID, seq: int) -> None:
    row = conn.execute(q.PG_LATEST_SEQ, {"ds": dataset_id}).fetchone()
    now = None if row is None else (row["seq"] if isinstance(row, dict) else row[0])
    if now != seq:
        raise DatasetChangedError(
            f"the pg dataset changed since this read was opened (commit {seq}, now {now}): the pg sink keeps "
            "only its current version; read again"
        )


def _items(conn: psycopg.Connection[Any], dataset_id: uuid.UUID, gen: int, query: RangeQuery) -> list[Item]:
    """What to fetch, in row-index order: the generation's row blocks (listed in the read's
    snapshot) and the jsonb ranges between them.

    When the blocks are contiguous and the generation's lowest and highest row index (two index
    probes) fall inside them, every row is a block's row (the blocks' invariant), so the read
    skips the scan plan: its count and size sample visit every row's heap tuple, ~80 ms per
    100k rows, more than reading the blocks themselves."""
    blocks = [] if query.block is None else _blocks(conn, dataset_id, gen)
    if blocks and _blocks_hold_every_row(conn, dataset_id, gen, blocks):
        return [(b.first, b.last + 1, b) for b in blocks]
    plan_row = conn.execute(q.PG_SCAN_PLAN, {"ds": dataset_id, "gen": gen}).fetchone()
    assert plan_row is not None
    plan = ScanPlan(*(plan_row.values() if isinstance(plan_row, dict) else plan_row))
    spans = plan.ranges(with_data=query.groups > 0)
    if query.block is None:
        return [(a, z, None) for a, z in spans]
    if sum(b.rows for b in blocks) == plan.rows:
        spans = []
    return segments(spans, blocks)


def _blocks(conn: psycopg.Connection[Any], dataset_id: uuid.UUID, gen: int) -> list[Block]:
    return [Block(*(r.values() if isinstance(r, dict) else r)) for r in conn.execute(q.PG_LIST_BLOCKS, (dataset_id, gen))]


def _blocks_hold_every_row(conn: psycopg.Connection[Any], dataset_id: uuid.UUID, gen: int, blocks: list[Block]) -> bool:
    """``blocks`` (in row-index order) leave no gap and span the generation's rows."""
    if any(b.first != a.last + 1 for a, b in itertools.pairwise(blocks)):
        return False
    row = conn.execute(q.PG_ROW_INDEX_SPAN, (dataset_id, gen)).fetchone()
    lo, hi = (row.values() if isinstance(row, dict) else row) if row is not None else (None, None)
    return lo is not None and hi is not None and blocks[0].first <= lo and hi <= blocks[-1].last


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
    spans: list[Item],
    helpers: int,
    query: RangeQuery,
) -> Iterator[pa.RecordBatch]:
    """Fetch ``spans`` on the lead connection and up to ``helpers`` pooled ones that import its
    snapshot; yield them in order. A helper that cannot get a connection leaves its share to the
    others; the lead's transaction (and so the snapshot) stays open until every fetcher is done."""
    ranges = _Ranges(spans, ahead=helpers + 2)

    def work(conn: psycopg.Connection[Any]) -> None:
        while (i := ranges.claim()) is not None:
            try:
                ranges.put(i, _fetch(conn, dataset_id, gen, spans[i], query))
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
