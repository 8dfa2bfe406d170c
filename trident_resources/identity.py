"""The identity columns the engine stamps on every row. Producers never send them: identity is
the engine's, so that a row's ``__row_id`` means the same thing whoever wrote it."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import pyarrow as pa

from .errors import ReservedColumnError, SchemaMismatchError

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


RESERVED_PREFIX = "__"
# Engine columns that the engine's own layers write through the facade (model nodes' lineage).
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
    over such a dataset failed as if its files were corrupt.
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
    be reused on another dataset), so an id derived from it was not unique. Two blocks collide
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

    def sql(self, seq: str) -> str:
        """The same ids as a DuckDB expression of a 0-based BIGINT sequence expression ``seq``."""
        return f"('{self.head}' || printf('%012x', ({self.low}::BIGINT + ({seq}))::BIGINT))"


def row_ids(txn_id: uuid.UUID, first_seq: int, n: int) -> pa.Array:
    """``n`` fresh row ids for rows a transaction creates (see ``RowIdBlock``).

    ``txn_id`` is accepted for the callers' sake and deliberately not used: row ids must be
    unique whatever transaction ids callers pass. Each call mints its own block.
    """
    return RowIdBlock.mint().arrow(first_seq, n)


def stamp(batch: pa.RecordBatch, txn_id: uuid.UUID, first_seq: int, first_index: int, created_at: datetime) -> pa.RecordBatch:
    """Prepend the identity columns to a batch of new rows numbered from ``first_index``."""
    n = batch.num_rows
    index = pa.array(np.arange(first_index, first_index + n, dtype=np.int64))
    created = pa.array(np.full(n, _micros(created_at), dtype=np.int64)).view(TIMESTAMP_TYPE)
    arrays = [index, row_ids(txn_id, first_seq, n), created, *batch.columns]
    fields = [*IDENTITY_FIELDS, *batch.schema]
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def _micros(ts: datetime) -> int:
    return int(ts.timestamp()) * 1_000_000 + ts.microsecond
