"""The identity columns the engine stamps on every row. Producers never send them: identity is
the engine's, so that a row's ``__row_id`` means the same thing whoever wrote it."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .errors import ReservedColumnError, SchemaMismatchError

ROW_INDEX = "__row_index"
ROW_ID = "__row_id"
CREATED_AT = "__created_at"
IDENTITY_COLUMNS: tuple[str, ...] = (ROW_INDEX, ROW_ID, CREATED_AT)

TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
# ``__row_id`` as new tables store it: Iceberg ``uuid``, 16 bytes per row (a
# ``fixed_len_byte_array(16) (UUID)`` Parquet column) instead of a 36-character string. Tables
# created before keep their string column (Iceberg cannot promote string to uuid), so every write
# path takes the type from the table (``SinkWrite.arrow_schema``), never from a setting. Readers
# always get the text form (``ROW_ID_TEXT``, see ``public``): the promise of docs/python-api.md, "Identity columns".
ROW_ID_STORED: pa.DataType = pa.uuid()
ROW_ID_TEXT: pa.DataType = pa.large_string()
IDENTITY_FIELDS: tuple[pa.Field, ...] = (
    pa.field(ROW_INDEX, pa.int64()),
    pa.field(ROW_ID, ROW_ID_STORED),
    pa.field(CREATED_AT, TIMESTAMP_TYPE),
)
FILE_COLUMN = "__file"  # a keyed merge's column: the data file each existing row was read from (never stored)


def identity_fields(row_id_type: pa.DataType = ROW_ID_STORED) -> tuple[pa.Field, ...]:
    """The identity columns with ``__row_id`` in ``row_id_type`` (the table's own type)."""
    return (IDENTITY_FIELDS[0], pa.field(ROW_ID, row_id_type), IDENTITY_FIELDS[2])


RESERVED_PREFIX = "__"
# Engine columns that the engine's own layers write through the client (model nodes' lineage).
ENGINE_LINEAGE_COLUMNS = frozenset({"__source_row_index__"})


def refuse_reserved(schema: pa.Schema) -> None:
    """Refuse an input whose column names the engine cannot store or would confuse with its own.

    The whole ``__`` prefix is the engine's: identity columns, the merge's ``__file``, the pg
    codec's ``__data``, and whatever comes next; a producer column there would collide
    (ReservedColumnError). The only ``__`` names accepted are the engine's lineage columns,
    which the Dagster layer writes through this same door. Empty names, names with NUL (neither
    DuckDB nor Postgres' jsonb can hold them) and duplicate names (a row could not say which
    value a name means) are a SchemaMismatchError, nested struct fields included; so are names
    that differ only in case ("A" and "a"): DuckDB resolves names case-insensitively, so ``sql``
    over such a dataset would fail as if its files were corrupt.
    """
    if not schema.names:  # a dataset of identity columns alone holds nothing a reader asked for
        raise SchemaMismatchError("the input has no columns; write at least one column")
    reserved = [n for n in schema.names if n.startswith(RESERVED_PREFIX) and n not in ENGINE_LINEAGE_COLUMNS]
    if reserved:
        raise ReservedColumnError(reserved)
    _check_names(list(schema), "")


def refuse_case_clash(existing: Iterable[str], schema: pa.Schema) -> None:
    """A write that keeps the dataset's columns (append, the keyed modes, a partition's replace)
    must not add a column that differs from one of them only in case: the dataset would hold both
    ("a" and "A"), which SQL cannot tell apart (see ``refuse_reserved``)."""
    have = {n.lower(): n for n in existing}
    for name in schema.names:
        other = have.get(name.lower())
        if other is not None and other != name:
            raise SchemaMismatchError(
                f"column {name!r} differs only in case from the dataset's column {other!r}, which SQL cannot "
                f"tell apart; rename it to {other!r}"
            )


def _check_names(fields: list[pa.Field], parent: str) -> None:
    seen: set[str] = set()
    folded: dict[str, str] = {}
    for f in fields:
        where = f"{parent}{f.name!r}"
        if f.name == "":
            raise SchemaMismatchError(
                f"a column{' of ' + parent.rstrip('.') if parent else ''} has an empty name; name every column"
            )
        if "\x00" in f.name:
            raise SchemaMismatchError(f"column name {where} contains a NUL character; rename it")
        if f.name in seen:
            raise SchemaMismatchError(f"column name {where} appears more than once; each column needs its own name")
        seen.add(f.name)
        other = folded.setdefault(f.name.lower(), f.name)
        if other != f.name:  # SQL (DuckDB) matches names case-insensitively: the dataset could not be queried
            raise SchemaMismatchError(
                f"column names {parent}{other!r} and {where} differ only in case, which SQL cannot tell apart; rename one"
            )
        for child in _children(f.type):
            _check_names(child, f"{where}.")


def _children(t: pa.DataType) -> list[list[pa.Field]]:
    """The nested fields of a struct, list or map type (one list per level)."""
    if pa.types.is_struct(t):
        return [[t.field(i) for i in range(t.num_fields)]]
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _children(t.value_type)
    if pa.types.is_map(t):
        return _children(t.key_type) + _children(t.item_type)
    return []


_LUT = np.array([ord(a) | (ord(b) << 8) for a in "0123456789abcdef" for b in "0123456789abcdef"], dtype=np.uint16)

# the 4 hex digits of every 16-bit value as one little-endian uint32 (4 ASCII bytes in text order)
_HEX4 = _LUT[np.arange(1 << 16) >> 8].astype(np.uint32) | (_LUT[np.arange(1 << 16) & 0xFF].astype(np.uint32) << 16)

SEQ_BITS = 40  # rows one block can number: 2**40 (a trillion) per minted block
_BLOCK_BITS = 48  # the last UUID group: 8 random bits above the 40-bit sequence


@dataclass(frozen=True)
class RowIdBlock:
    """The row-id scheme, defined once for the numpy generator (streamed writes) and the SQL one
    (keyed merges in DuckDB).

    A row id is an RFC 9562 version-8 UUID laid out like a UUIDv7: a 48-bit Unix millisecond
    timestamp, the version, 12 random bits, the variant, 22 random bits, then a 40-bit sequence
    number of the row within the block. A block is minted by the engine for each set of rows it
    numbers, from ``os.urandom`` and the clock, NEVER from the caller's transaction id: callers
    may pass any txn id (two UUIDv7s of one millisecond share their first 64 bits; a txn id may
    be reused on another dataset), so an id derived from it would not be unique. Two blocks collide
    only when minted in the same millisecond with the same 34 random bits and overlapping
    sequences. Ids stay time-ordered, which keeps index inserts local, and cost nothing per row.

    ``head`` is the fixed first 24 characters (``xxxxxxxx-xxxx-8xxx-yyyy-``); the last group is
    12 hex digits of ``low + seq``.
    """

    head: str
    low: int  # 8 random bits << 40: added to the sequence to form the last 48 bits

    @classmethod
    def mint(cls) -> RowIdBlock:
        rand = int.from_bytes(os.urandom(5), "big")  # 40 bits: 12 + 22 + 6 spare
        ms = time.time_ns() // 1_000_000 & ((1 << 48) - 1)
        rand_a = rand & 0xFFF
        rand_b = (rand >> 12) & ((1 << 22) - 1)
        hi = (ms << 16) | 0x8000 | rand_a
        group4 = 0x8000 | (rand_b >> 8)  # variant 10, then 14 random bits
        h = f"{hi:016x}"
        return cls(head=f"{h[:8]}-{h[8:12]}-{h[12:16]}-{group4:04x}-", low=(rand_b & 0xFF) << SEQ_BITS)

    def arrow(self, first_seq: int, n: int) -> pa.Array:
        """``n`` ids for sequence numbers ``first_seq ..``, built with numpy in one pass:
        ``uuid.uuid4()`` per row costs seconds per million rows."""
        if first_seq < 0 or first_seq + n > 1 << SEQ_BITS:
            raise ValueError(f"row-id sequence {first_seq}+{n} exceeds {SEQ_BITS} bits; mint another block")
        if n == 0:
            return pa.array([], type=pa.large_string())
        # A row is 36 bytes = 9 uint32: 6 of head, then the last group's 12 hex digits as three
        # 4-digit words, each one ``_HEX4`` entry. The lowest word cycles through all 65536 values
        # in order (a rotated copy of ``_HEX4``, repeated); the two above it change once every
        # 65536 rows (a few values, repeated). No per-row arithmetic: ~2x faster than converting
        # each id (this is ~8% of a pipeline run's CPU)
        base = self.low + first_seq
        start = base & 0xFFFF
        out = np.empty((n, 9), dtype=np.uint32)
        out[:, :6] = np.frombuffer(self.head.encode(), dtype=np.uint32)
        out[:, 8] = np.resize(np.concatenate((_HEX4[start:], _HEX4[:start])), n)
        segments = (start + n + 0xFFFF) >> 16
        counts = np.full(segments, 1 << 16, dtype=np.int64)
        counts[0] = (1 << 16) - start
        counts[-1] -= int(counts.sum()) - n
        upper = (base >> 16) + np.arange(segments, dtype=np.uint64)  # bits 16.. of each segment's ids
        out[:, 7] = np.repeat(_HEX4[(upper & 0xFFFF).astype(np.intp)], counts)
        out[:, 6] = np.repeat(_HEX4[((upper >> 16) & 0xFFFF).astype(np.intp)], counts)
        offsets = np.arange(0, 36 * (n + 1), 36, dtype=np.int64)
        return pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(out))

    def texts(self, first_seq: int, n: int) -> list[str]:
        """The same ids as ``arrow`` as Python strings, for a few rows (a small append sends them
        to Postgres as text): formatting ten of them costs less than building the array."""
        if first_seq < 0 or first_seq + n > 1 << SEQ_BITS:
            raise ValueError(f"row-id sequence {first_seq}+{n} exceeds {SEQ_BITS} bits; mint another block")
        head, base = self.head, self.low + first_seq
        return [f"{head}{base + i:012x}" for i in range(n)]

    def uuid16(self, first_seq: int, n: int) -> pa.Array:
        """The same ids as ``arrow`` as 16-byte ``pa.uuid()`` values: two big-endian uint64 per
        row, the block's constant first half and a counting second half (``low + seq`` under the
        constant variant/random group), so no text is built at all."""
        if first_seq < 0 or first_seq + n > 1 << SEQ_BITS:
            raise ValueError(f"row-id sequence {first_seq}+{n} exceeds {SEQ_BITS} bits; mint another block")
        digits = self.head.replace("-", "")  # 16 + 4 hex digits: the first half, then the fourth group
        out = np.empty((n, 2), dtype=">u8")
        out[:, 0] = int(digits[:16], 16)
        out[:, 1] = np.arange(first_seq, first_seq + n, dtype=np.uint64) + np.uint64((int(digits[16:], 16) << 48) | self.low)
        storage = pa.FixedSizeBinaryArray.from_buffers(pa.binary(16), n, [None, pa.py_buffer(out)])
        return pa.ExtensionArray.from_storage(ROW_ID_STORED, storage)

    def sql(self, seq: str, row_id_type: pa.DataType = ROW_ID_TEXT) -> str:
        """The same ids as a DuckDB expression of a 0-based BIGINT sequence expression ``seq``:
        VARCHAR for a string ``__row_id`` column, DuckDB's UUID for a uuid one."""
        if _is_text(row_id_type):
            return f"('{self.head}' || printf('%012x', ({self.low}::BIGINT + ({seq}))::BIGINT))"
        # the id's 128-bit value: the block's first id plus the sequence (no text built per row)
        first = int(self.head.replace("-", ""), 16) << 48 | self.low
        return f"(('{first}'::UHUGEINT + ({seq})::UHUGEINT)::UUID)"


def row_ids(txn_id: uuid.UUID, first_seq: int, n: int, row_id_type: pa.DataType = ROW_ID_STORED) -> pa.Array:
    """``n`` fresh row ids for rows a transaction creates (see ``RowIdBlock``), in ``row_id_type``
    (the table's: uuid, or the string of a table created before uuid ids).

    ``txn_id`` is accepted for the callers' sake and deliberately not used: row ids must be
    unique whatever transaction ids callers pass. Each call mints its own block.
    """
    block = RowIdBlock.mint()
    if _is_text(row_id_type):
        ids = block.arrow(first_seq, n)
        return ids if row_id_type == ROW_ID_TEXT else ids.cast(row_id_type)
    return block.uuid16(first_seq, n)


def stamp(
    batch: pa.RecordBatch,
    txn_id: uuid.UUID,
    first_seq: int,
    first_index: int,
    created_at: datetime,
    row_id_type: pa.DataType = ROW_ID_STORED,
) -> pa.RecordBatch:
    """Prepend the identity columns to a batch of new rows numbered from ``first_index``, the
    ids minted straight in the table's ``row_id_type`` (no text to cast)."""
    n = batch.num_rows
    index = pa.array(np.arange(first_index, first_index + n, dtype=np.int64))
    created = pa.array(np.full(n, _micros(created_at), dtype=np.int64)).view(TIMESTAMP_TYPE)
    arrays = [index, row_ids(txn_id, first_seq, n, row_id_type), created, *batch.columns]
    fields = [*identity_fields(row_id_type), *batch.schema]
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


# -- the two forms of an id: 16 bytes stored, text read -------------------------------------------


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def is_row_id_bytes(t: pa.DataType) -> bool:
    """Is ``t`` a 16-byte id type (``pa.uuid()`` or its storage, ``fixed_size_binary(16)``)?"""
    storage = t.storage_type if isinstance(t, pa.BaseExtensionType) else t
    return pa.types.is_fixed_size_binary(storage) and storage.byte_width == 16


_DASHES = (8, 13, 18, 23)
_HEX_AT = np.array([i for i in range(36) if i not in _DASHES], dtype=np.intp)  # where the 32 digits go
_WORD_AT = (0, 4, 9, 14, 19, 24, 28, 32)  # where each 16-bit word's 4 digits go in the text
_HEX_BYTES = _HEX4.view(np.uint8).reshape(1 << 16, 4)
_NIBBLE = np.full(256, 255, dtype=np.uint8)
for _i, _c in enumerate("0123456789abcdef"):
    _NIBBLE[ord(_c)] = _i
    _NIBBLE[ord(_c.upper())] = _i


_TEXT_POOL_PREFIX = "trident-id-text"
_text_pool_lock = threading.Lock()
_text_executor: ThreadPoolExecutor | None = None


def _text_pool() -> ThreadPoolExecutor:
    """The process's pool for converting the chunks of a read's ids, made on first use."""
    global _text_executor
    with _text_pool_lock:
        if _text_executor is None:
            _text_executor = ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1), thread_name_prefix=_TEXT_POOL_PREFIX)
        return _text_executor


def _forget_text_pool() -> None:
    """In a forked child: the parent's pool threads do not exist here; make a new pool on use."""
    global _text_executor, _text_pool_lock
    _text_executor, _text_pool_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_text_pool)


def ids_as_text(ids: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """16-byte ids (``pa.uuid()`` or ``fixed_size_binary(16)``) as their canonical 36-character
    text, vectorised. A row of text is 9 uint32: the first 7 hold the 28 characters of the first
    12 bytes, the last 2 the 8 digits of the last 4 bytes (one ``_HEX4`` entry per 16-bit word).
    Ids come in runs that share their first 12 bytes (each block a write minted, below 2**32 rows),
    so each run's head is formatted once and broadcast; any other order falls back to converting
    every word. ``str(uuid.UUID(bytes=...))`` per row costs ~1 s per million rows."""
    if isinstance(ids, pa.ChunkedArray):
        if ids.num_chunks > 1 and not threading.current_thread().name.startswith(_TEXT_POOL_PREFIX):
            # a whole read() (many chunks): numpy releases the GIL in this work, so the chunks
            # convert on all cores (0.24 -> 0.13 s per 6M ids on 2); never nested in the pool
            return pa.chunked_array(list(_text_pool().map(ids_as_text, ids.chunks)), type=ROW_ID_TEXT)
        return pa.chunked_array([ids_as_text(c) for c in ids.chunks], type=ROW_ID_TEXT)
    storage = ids.storage if isinstance(ids, pa.ExtensionArray) else ids
    n = len(storage)
    if n == 0:
        return pa.array([], type=ROW_ID_TEXT)
    raw = np.frombuffer(storage.buffers()[1], dtype=np.uint8, count=(storage.offset + n) * 16)[storage.offset * 16 :]
    rows = raw.reshape(n, 16)
    # runs of ids sharing their first 12 bytes (28 characters of text): compared in place, no copy
    halves = raw.view(np.uint64).reshape(n, 2)[:, 0]
    third = raw.view(np.uint32).reshape(n, 4)[:, 2]
    changes = np.flatnonzero((halves[1:] != halves[:-1]) | (third[1:] != third[:-1])) + 1
    if len(changes) < max(n // 256, 16):
        # each run's row of text (its head, the tail filled below) repeated down the run: a copy of
        # whole 36-byte rows, ~20% faster than assigning the head's 7 words to every row
        starts = np.concatenate(([0], changes))
        heads = np.zeros((len(starts), 9), dtype=np.uint32)
        for i, a in enumerate(starts.tolist()):
            heads[i, :7] = np.frombuffer(str(uuid.UUID(bytes=rows[a].tobytes()))[:28].encode(), dtype=np.uint32)
        out32 = np.repeat(heads, np.diff(np.append(starts, n)), axis=0)
        out = out32.view(np.uint8)
    else:  # no runs (ids of many blocks interleaved): every head word converted
        out = np.empty((n, 36), dtype=np.uint8)
        out32 = out.view(np.uint32)
        words = raw.view(">u2").reshape(n, 8)
        for w, pos in enumerate(_WORD_AT[:6]):
            out[:, pos : pos + 4] = _HEX_BYTES[words[:, w].astype(np.intp)]
        for pos in _DASHES:
            out[:, pos] = ord("-")
    # the last 4 bytes (characters 28-35, two aligned uint32): one big-endian read and two lookups
    tail = raw.view(">u4").reshape(n, 4)[:, 3].astype(np.uint32)
    out32[:, 7] = _HEX4[tail >> 16]
    out32[:, 8] = _HEX4[tail & 0xFFFF]
    offsets = np.arange(0, 36 * (n + 1), 36, dtype=np.int64)
    text = pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(out))
    if storage.null_count:  # (ids are never null; a null stays null all the same)
        text = pc.if_else(storage.is_valid(), text, pa.scalar(None, ROW_ID_TEXT))
    return text


def ids_from_text(ids: pa.Array | pa.ChunkedArray, target: pa.DataType = ROW_ID_STORED) -> pa.Array | pa.ChunkedArray:
    """Canonical 36-character id text as 16-byte ids (``target``: ``pa.uuid()`` or
    ``fixed_size_binary(16)``), vectorised: a copy that carries ids from a string column (the pg
    sink, a table created before uuid ids) into a uuid one. Anything but UUID text is refused."""
    if isinstance(ids, pa.ChunkedArray):
        return pa.chunked_array([ids_from_text(c, target) for c in ids.chunks], type=target)
    text = ids.cast(pa.large_string()) if not pa.types.is_large_string(ids.type) else ids
    n = len(text)
    valid = text.is_valid()
    filled = text.fill_null("00000000-0000-0000-0000-000000000000") if text.null_count else text
    lengths = np.asarray(pc.binary_length(filled))
    if n and (lengths != 36).any():
        bad = filled[int(np.argmax(lengths != 36))].as_py()
        raise SchemaMismatchError(f"{ROW_ID} {bad!r} is not a UUID (36 characters, 8-4-4-4-12 hex digits)")
    offsets = np.frombuffer(filled.buffers()[1], dtype=np.int64, count=filled.offset + n + 1)[filled.offset :]
    chars = np.frombuffer(filled.buffers()[2], dtype=np.uint8)[int(offsets[0]) : int(offsets[0]) + 36 * n].reshape(n, 36)
    nibbles = _NIBBLE[chars[:, _HEX_AT]]
    if n and ((nibbles == 255).any() or (chars[:, _DASHES] != ord("-")).any()):
        bad_row = int(np.argmax((nibbles == 255).any(axis=1) | (chars[:, _DASHES] != ord("-")).any(axis=1)))
        raise SchemaMismatchError(f"{ROW_ID} {filled[bad_row].as_py()!r} is not a UUID (8-4-4-4-12 hex digits)")
    packed = (nibbles[:, 0::2] << 4) | nibbles[:, 1::2]
    storage = pa.FixedSizeBinaryArray.from_buffers(pa.binary(16), n, [None, pa.py_buffer(np.ascontiguousarray(packed))])
    if text.null_count:
        storage = pc.if_else(valid, storage, pa.scalar(None, pa.binary(16)))
    return pa.ExtensionArray.from_storage(target, storage) if isinstance(target, pa.BaseExtensionType) else storage


def convert_ids(ids: pa.Array | pa.ChunkedArray, target: pa.DataType) -> pa.Array | pa.ChunkedArray | None:
    """``ids`` in ``target`` when one is text and the other 16 bytes (None: not such a pair, the
    caller casts as usual). pyarrow's own cast of uuid to string keeps the raw bytes as "text"."""
    if is_row_id_bytes(ids.type) and _is_text(target):
        out = ids_as_text(ids)
        return out if target == ROW_ID_TEXT else out.cast(target)
    if _is_text(ids.type) and is_row_id_bytes(target):
        return ids_from_text(ids, target)
    if is_row_id_bytes(ids.type) and is_row_id_bytes(target):  # uuid <-> fixed_size_binary(16): same bytes
        if isinstance(ids, pa.ChunkedArray):
            return pa.chunked_array([_same_bytes(c, target) for c in ids.chunks], type=target)
        return _same_bytes(ids, target)
    return None


def _same_bytes(ids: pa.Array, target: pa.DataType) -> pa.Array:
    storage = ids.storage if isinstance(ids, pa.ExtensionArray) else ids
    return pa.ExtensionArray.from_storage(target, storage) if isinstance(target, pa.BaseExtensionType) else storage


def public_type(t: pa.DataType) -> pa.DataType:
    """The type a reader sees for a ``__row_id`` column stored as ``t``: always text."""
    return ROW_ID_TEXT if is_row_id_bytes(t) else t


def public_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` as readers see it: ``__row_id`` as text, whatever the table stores."""
    i = schema.get_field_index(ROW_ID)
    if i < 0 or not is_row_id_bytes(schema.field(i).type):
        return schema
    return schema.set(i, schema.field(i).with_type(ROW_ID_TEXT))


def public(data: pa.RecordBatch | pa.Table) -> Any:
    """A read result with a 16-byte ``__row_id`` column converted to its text (the read
    boundary: every read door, whichever sink and table type)."""
    i = data.schema.get_field_index(ROW_ID)
    if i < 0 or not is_row_id_bytes(data.schema.field(i).type):
        return data
    return data.set_column(i, data.schema.field(i).with_type(ROW_ID_TEXT), ids_as_text(data.column(i)))


def _micros(ts: datetime) -> int:
    return int(ts.timestamp()) * 1_000_000 + ts.microsecond
