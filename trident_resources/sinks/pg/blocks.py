"""The pg sink's read cache: row blocks (Arrow IPC) next to the jsonb rows, which stay the truth.

Why (measured on 200k lineitem rows): Postgres renders each jsonb member a read asks
for at ~0.035 s of server CPU per member per 200k rows, whatever the query shape, so a full read
of a 16-column dataset cannot reach 5x a row-by-row cursor read from jsonb. A batch written by a
replace or an append has contiguous ascending ``__row_index``; it is also stored as ONE Arrow IPC
stream (identity + user columns; zstd buffers from 64 KiB) in ``trident_row_blocks``, in the
same Postgres transaction as its rows. A read takes each block's rows from the block (one TOAST
fetch and a decode) and only the rows between blocks from jsonb.

Correctness rests on one invariant (``control/migrations/0007_pg_row_blocks.sql``): every row of the
generation whose row index lies in a block's [first, last] is exactly that block's row. A block
is dense (last - first + 1 = rows), row indexes are unique in a generation, and every later
change of such a row (a keyed write's removal, ``undo``, a DELETE/UPDATE/TRUNCATE by hand) goes
through a trigger that drops the blocks it touches. Keyed writes (upsert, update_rows, delete,
replace with keys) write no block: their rows are read from jsonb until ``maintain``
rebuilds blocks over them (``PgSink.compact``): in one transaction that holds the rows it encodes
(FOR SHARE), so a change by hand waits for the new blocks and then drops them like any other.

A block keeps the schema of the commit that wrote it; a read casts it to the current commit's
schema exactly as jsonb decoding restores types (added columns null, ``int32 -> int64`` cast,
``float32 -> float64`` through the float32's shortest text, since that text is what the jsonb
row holds and what the jsonb route parses as float64).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from ...core.errors import StorageUnavailableError
from ...core.identity import ROW_INDEX
from ...core.schemas import conform

# A block holds at least this many rows: a write batch of fewer writes none, and ``maintain``
# drops smaller blocks and rebuilds blocks over runs of at least this many consecutive row indexes
# no block holds. A short run reads from jsonb about as fast as from a block, and many tiny blocks
# read far slower: 30,010 rows written by 3,000 10-row appends read in 1.99 s from their 3,000
# blocks, in 0.07 s from jsonb.
MIN_BLOCK_ROWS = 1_024
BLOCK_ROWS = 65_536  # rows per block: a larger write batch is cut, so a block (and a read's look-ahead) stays bounded
_WRITE = ipc.IpcWriteOptions(compression="zstd")
_WRITE_SMALL = ipc.IpcWriteOptions()
# Below this many bytes a block is stored uncompressed: zstd's set-up alone costs ~0.25 ms a block
# (25x the IPC encoding of a 10-row batch), the whole budget of a small inlined commit, and saves
# next to nothing on a few hundred bytes. A reader decodes either (IPC records it per message).
COMPRESS_FROM_BYTES = 64 * 1024


@dataclass(frozen=True)
class Block:
    """One stored block's place in the generation (the IPC bytes are fetched by a reader thread)."""

    first: int
    last: int
    rows: int


def block_slices(batch: pa.RecordBatch) -> Iterator[tuple[int, int, bytes]]:
    """``(first, last, ipc)`` for each slice of up to ``BLOCK_ROWS`` rows of a stamped batch, or
    nothing when its row indexes are not contiguous ascending (then a block's span would not
    name exactly its rows)."""
    n = batch.num_rows
    if n == 0:
        return
    index = batch.column(batch.schema.get_field_index(ROW_INDEX)).to_numpy(zero_copy_only=False)
    if int(index[-1]) - int(index[0]) != n - 1 or (n > 1 and not bool(np.all(np.diff(index) == 1))):
        return
    for start in range(0, n, BLOCK_ROWS):
        part = batch.slice(start, BLOCK_ROWS)
        sink = pa.BufferOutputStream()
        options = _WRITE if part.nbytes >= COMPRESS_FROM_BYTES else _WRITE_SMALL
        with ipc.new_stream(sink, part.schema, options=options) as out:
            out.write_batch(part)
        yield int(index[start]), int(index[start + part.num_rows - 1]), sink.getvalue().to_pybytes()


def decode_block(data: bytes, rows: int, target: pa.Schema) -> pa.RecordBatch:
    """A block's rows as ``target`` (a projection of the current commit's storage schema):
    only the wanted columns are decompressed."""
    try:
        stored = ipc.open_stream(pa.py_buffer(data)).schema
        wanted = [i for i, f in enumerate(stored) if f.name in target.names]
        reader = ipc.open_stream(pa.py_buffer(data), options=ipc.IpcReadOptions(included_fields=wanted))
        table = reader.read_all()
    except (pa.ArrowInvalid, OSError) as exc:
        raise StorageUnavailableError(f"a row block of the pg sink does not decode: {exc}") from exc
    if table.num_rows != rows:
        raise StorageUnavailableError(f"a row block of the pg sink holds {table.num_rows} rows, not {rows}")
    batch = table.combine_chunks().to_batches()[0]
    return conform(_as_jsonb_reads(batch, target), target)


def _as_jsonb_reads(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """Columns whose type was widened since the block was written, converted the way the jsonb
    route reads them: a float32 was stored in jsonb as its shortest text (``0.1``), which reads
    as the float64 0.1, not as the float32's exact value 0.10000000149011612."""
    arrays, names = [], []
    for field, col in zip(batch.schema, batch.columns, strict=True):
        widened = field.name in target.names and pa.types.is_float64(target.field(field.name).type)
        if widened and pa.types.is_float32(field.type):
            col = col.cast(pa.string()).cast(pa.float64())
        arrays.append(col)
        names.append(field.name)
    return pa.RecordBatch.from_arrays(arrays, names=names)


def segments(spans: list[tuple[int, int]], blocks: list[Block]) -> list[tuple[int, int, Block | None]]:
    """The read's items in row-index order: each block, and the parts of the jsonb ``spans``
    (half-open ranges covering the generation) that no block covers."""
    items: list[tuple[int, int, Block | None]] = [(b.first, b.last + 1, b) for b in blocks]
    covered = [(b.first, b.last + 1) for b in blocks]
    for lo, hi in spans:
        cursor = lo
        for a, z in covered:
            if z <= cursor or a >= hi:
                continue
            if a > cursor:
                items.append((cursor, a, None))
            cursor = max(cursor, z)
        if cursor < hi:
            items.append((cursor, hi, None))
    items.sort(key=lambda item: item[0])
    return items
