"""The identity columns the engine stamps on every row. Producers never send them: identity is
the engine's, so that a row's ``__row_id`` means the same thing whoever wrote it."""

from __future__ import annotations

import uuid
from datetime import datetime

import numpy as np
import pyarrow as pa

from .errors import ReservedColumnError

ROW_INDEX = "__row_index"
ROW_ID = "__row_id"
CREATED_AT = "__created_at"
IDENTITY_COLUMNS: tuple[str, ...] = (ROW_INDEX, ROW_ID, CREATED_AT)

TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
IDENTITY_FIELDS: tuple[pa.Field, ...] = (
    pa.field(ROW_INDEX, pa.int64()),
    pa.field(ROW_ID, pa.large_string()),
    pa.field(CREATED_AT, TIMESTAMP_TYPE),
)


def refuse_reserved(schema: pa.Schema) -> None:
    """Raise when the producer sent any identity column (or anything in the ``__`` engine namespace)."""
    reserved = [n for n in schema.names if n in IDENTITY_COLUMNS]
    if reserved:
        raise ReservedColumnError(reserved)


_LUT = np.array(
    [ord(a) | (ord(b) << 8) for a in "0123456789abcdef" for b in "0123456789abcdef"], dtype=np.uint16
)


def row_ids(txn_id: uuid.UUID, first_seq: int, n: int) -> pa.Array:
    """``n`` row ids for the rows a transaction creates, as canonical UUID strings.

    A row id is an RFC 9562 version-8 UUID: the transaction id's first 64 bits, then a 62-bit
    sequence number of the row within the transaction. Unique because transaction ids are, and
    built with numpy in one pass: ``uuid.uuid4()`` per row costs seconds per million rows.
    """
    if n == 0:
        return pa.array([], type=pa.large_string())
    head = bytearray(txn_id.bytes[:8])
    head[6] = (head[6] & 0x0F) | 0x80  # version 8
    prefix = head.hex()
    prefix = f"{prefix[:8]}-{prefix[8:12]}-{prefix[12:16]}-".encode()
    seq = np.arange(first_seq, first_seq + n, dtype=np.uint64) | np.uint64(0x8000000000000000)  # variant 10
    hexed = _LUT[seq.astype(">u8").view(np.uint8).reshape(n, 8)].view(np.uint8).reshape(n, 16)
    out = np.empty((n, 36), dtype=np.uint8)
    out[:, :19] = np.frombuffer(prefix, dtype=np.uint8)
    out[:, 19:23] = hexed[:, :4]
    out[:, 23] = ord("-")
    out[:, 24:] = hexed[:, 4:]
    offsets = np.arange(0, 36 * (n + 1), 36, dtype=np.int64)
    return pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(out))


def stamp(
    batch: pa.RecordBatch, txn_id: uuid.UUID, first_seq: int, first_index: int, created_at: datetime
) -> pa.RecordBatch:
    """Prepend the identity columns to a batch of new rows numbered from ``first_index``."""
    n = batch.num_rows
    index = pa.array(np.arange(first_index, first_index + n, dtype=np.int64))
    created = pa.array(np.full(n, _micros(created_at), dtype=np.int64)).view(TIMESTAMP_TYPE)
    arrays = [index, row_ids(txn_id, first_seq, n), created, *batch.columns]
    fields = [*IDENTITY_FIELDS, *batch.schema]
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def _micros(ts: datetime) -> int:
    return int(ts.timestamp()) * 1_000_000 + ts.microsecond
