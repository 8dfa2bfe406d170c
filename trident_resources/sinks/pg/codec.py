"""Arrow <-> jsonb for the pg sink, done in DuckDB so no row passes through Python objects.

jsonb has no types of its own beyond JSON's, so every value is written in a form that casts back
exactly to the column's Arrow type recorded with the commit: decimals as JSON numbers (jsonb keeps
numeric text exactly), floats in shortest round-trip form with NaN/Infinity/-0.0 as strings (JSON has
no such numbers; jsonb's numeric has no negative zero), binary as base64, temporal types as ISO strings. Reading (``columns.py``)
extracts each wanted member server side and types it with the recorded schema, so a value that
does not fit fails loudly; a key that is absent (the row was written before its column was
added) reads as null, as in Iceberg.
"""

from __future__ import annotations

import json
import math
import os
import threading
import uuid

import duckdb
import numpy as np
import pyarrow as pa

from ...core.errors import SchemaMismatchError
from ...core.identity import CREATED_AT, ROW_ID, ROW_INDEX
from ...core.keys import quote
from ...core.schemas import user_fields
from .blocks import decode_block
from .columns import ColumnReader
from .reader import RangeQuery


def _sql_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _is_float(t: pa.DataType) -> bool:
    return pa.types.is_floating(t)


def _is_binary(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)


def _floats_as_json(expr: str, t: pa.DataType, depth: int = 0) -> str | None:
    """``expr`` with every float in it (top level, or inside lists, structs and map values) as a JSON value
    jsonb keeps exactly; None when ``t`` holds no float. NaN, infinities and -0.0 become strings
    (JSON has no such numbers, and a jsonb number is a numeric, which has no negative zero), so
    a nested NaN cannot make the whole row invalid JSON and the write refused. Reads accept both
    forms (pyarrow's CSV reader and ``json_transform_strict`` parse "nan", "-inf", "-0.0")."""
    if _is_float(t):
        return (
            f"CASE WHEN {expr} IS NULL THEN NULL WHEN isfinite({expr}) AND (NOT signbit({expr}) OR {expr} < 0) "
            f"THEN {expr}::VARCHAR::JSON ELSE to_json({expr}::VARCHAR) END"
        )
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t) or pa.types.is_list_view(t):
        x = f"x{depth}"
        inner = _floats_as_json(x, t.value_type, depth + 1)
        return None if inner is None else f"list_transform({expr}, lambda {x}: {inner})"
    if pa.types.is_struct(t):
        members = [(f.name, _floats_as_json(f"struct_extract({expr}, {_sql_literal(f.name)})", f.type, depth + 1)) for f in t]
        if all(m is None for _, m in members):
            return None
        fields = ", ".join(
            f"{quote(name)} := {m if m is not None else f'struct_extract({expr}, {_sql_literal(name)})'}" for name, m in members
        )
        return f"CASE WHEN {expr} IS NULL THEN NULL ELSE struct_pack({fields}) END"
    if pa.types.is_map(t):  # values only: a map's JSON is an object, its keys are member names
        e = f"e{depth}"
        inner = _floats_as_json(f"{e}.value", t.item_type, depth + 1)
        if inner is None:
            return None
        entries = f"list_transform(map_entries({expr}), lambda {e}: struct_pack(key := {e}.key, value := {inner}))"
        return f"CASE WHEN {expr} IS NULL THEN NULL ELSE map_from_entries({entries}) END"
    return None  # the rest: as they are


PY_ENCODE_ROWS = 10_000  # up to this many rows of flat columns are encoded in Python (``row_json``)


def _py_encodes(t: pa.DataType) -> bool:
    """Does Python's json encode this type's values exactly as the DuckDB encoding does? Integers,
    booleans, text and doubles (whose finite values ``repr`` writes in shortest round-trip form,
    the rest as the strings DuckDB writes: "nan", "inf", "-inf", "-0.0")."""
    return (
        pa.types.is_integer(t)
        or pa.types.is_boolean(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_float64(t)
    )


def _py_float(v: float | None) -> float | str | None:
    if v is None or (math.isfinite(v) and not (v == 0.0 and math.copysign(1.0, v) < 0)):
        return v
    return str(v)  # nan, inf, -inf, -0.0


_JSON = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _py_rows_json(rows: pa.RecordBatch, schema: pa.Schema) -> str:
    columns = []
    for f in schema:
        values = rows.column(rows.schema.get_field_index(f.name)).to_pylist()
        columns.append([_py_float(v) for v in values] if pa.types.is_float64(f.type) else values)
    names = schema.names
    objects = [dict(zip(names, row, strict=True)) for row in zip(*columns, strict=True)] if columns else [{}] * rows.num_rows
    return _JSON.encode(objects)  # one encoder call for the whole array


def rows_json(rows: pa.RecordBatch, user_schema: pa.Schema) -> str:
    """The rows' user columns (``rows`` holds them typed as ``user_schema``) as ONE jsonb array
    text, each element the object ``JsonCodec.copy_payload`` writes, in row order: for a small
    batch of flat columns built in Python (a DuckDB query costs ~3 ms, more than the whole of a
    10-row one-call append), else in DuckDB."""
    fields = user_fields(user_schema)
    if rows.num_rows <= PY_ENCODE_ROWS and all(_py_encodes(f.type) for f in fields):
        return _py_rows_json(rows, fields)
    codec = JsonCodec(user_schema)
    try:
        return "[" + ",".join(codec.duck_row_json(rows)) + "]"
    finally:
        codec.close()


_DATABASE: tuple[int, duckdb.DuckDBPyConnection] | None = None
_DATABASE_LOCK = threading.Lock()


def _database() -> duckdb.DuckDBPyConnection:
    """The process's in-memory DuckDB database every codec opens a connection to (``cursor()``:
    a connection of its own, usable on its own thread). Opening a database per codec cost ~50 ms,
    a third of a 10-row pg write. Made again in a forked child (a database is not fork-safe).
    ``arrow_lossless_conversion``: a uuid column decodes as uuid, not as text its column refused."""
    global _DATABASE
    with _DATABASE_LOCK:
        if _DATABASE is None or _DATABASE[0] != os.getpid():
            con = duckdb.connect(config={"threads": 1, "arrow_lossless_conversion": True})
            con.execute("SET GLOBAL TimeZone = 'UTC'")
            _DATABASE = (os.getpid(), con)
        return _DATABASE[1]


class JsonCodec:
    """Encodes stamped batches to COPY text lines and decodes fetched ranges, for one user schema."""

    def __init__(self, user_schema: pa.Schema) -> None:
        self.user_schema = user_fields(user_schema)
        self.con = _database().cursor()  # a connection of its own to the process's codec database
        self._duck_types = self._duckdb_types(self.user_schema)

    def close(self) -> None:
        self.con.close()

    def _duckdb_types(self, schema: pa.Schema) -> dict[str, str]:
        if not len(schema):
            return {}
        empty = pa.Table.from_batches([], schema=schema)  # noqa: F841 - DuckDB replacement scan
        return {row[0]: row[1] for row in self.con.execute("DESCRIBE SELECT * FROM empty").fetchall()}

    # -- encode -----------------------------------------------------------------------------
    def _value_json(self, field: pa.Field) -> str:
        c = quote(field.name)
        if _is_binary(field.type):
            return f"to_json(base64({c}::BLOB))"
        return _floats_as_json(c, field.type) or c

    def row_json_sql(self) -> str:
        if not len(self.user_schema):
            return "'{}'"
        members = ", ".join(f"{quote(f.name)} := {self._value_json(f)}" for f in self.user_schema)
        return f"to_json(struct_pack({members}))"

    def copy_payload(self, stamped: pa.RecordBatch, dataset_id: uuid.UUID, gen: int, txn_id: uuid.UUID) -> memoryview:
        """COPY-text lines (dataset_id, gen, row_id, row_index, created_at, txn_id, data) for a
        batch that already carries the identity columns; returned zero-copy from Arrow's buffer."""
        if stamped.num_rows == 0:
            return memoryview(b"")
        batch = stamped  # noqa: F841
        head = _sql_literal(f"{dataset_id}\t{gen}\t")
        txn = _sql_literal(f"\t{txn_id}\t")
        sql = (
            f"SELECT {head} || {ROW_ID} || chr(9) || {ROW_INDEX}::VARCHAR || chr(9) || {CREATED_AT}::VARCHAR || {txn} "
            f"|| replace(({self.row_json_sql()})::VARCHAR, '\\', '\\\\') || chr(10) AS line FROM batch"
        )
        try:
            col = self.con.sql(sql).to_arrow_table().column(0).combine_chunks()
        except duckdb.Error as exc:
            raise SchemaMismatchError(f"cannot encode rows as JSON for the pg sink: {exc}") from exc
        if col.null_count:
            raise SchemaMismatchError("a row could not be encoded (an identity column was null)")
        if pa.types.is_string_view(col.type):
            col = col.cast(pa.large_string())
        width = np.int64 if pa.types.is_large_string(col.type) else np.int32
        offsets = np.frombuffer(col.buffers()[1], dtype=width)[col.offset : col.offset + len(col) + 1]
        return memoryview(col.buffers()[2])[int(offsets[0]) : int(offsets[-1])]

    def duck_row_json(self, rows: pa.RecordBatch) -> list[str]:
        """Each row's user columns as the jsonb text ``copy_payload`` writes, in row order."""
        batch = rows  # noqa: F841 - DuckDB replacement scan
        try:
            table = self.con.sql(f"SELECT ({self.row_json_sql()})::VARCHAR FROM batch").to_arrow_table()
        except duckdb.Error as exc:
            raise SchemaMismatchError(f"cannot encode rows as JSON for the pg sink: {exc}") from exc
        return [str(v) for v in table.column(0).to_pylist()]

    # -- decode -----------------------------------------------------------------------------
    def reader(self, target: pa.Schema, *, blocks: bool = True) -> RangeQuery:
        """How a read into ``target`` (a projection of identity + user columns, in the caller's
        order) fetches and decodes each range: only the wanted members, typed (``columns.py``), or
        a row block's wanted columns (``blocks.py``)."""
        columns = ColumnReader(self.con, {f.name: self._duck_types[f.name] for f in self.user_schema}, target)

        def block(data: bytes, rows: int) -> pa.RecordBatch:
            return decode_block(data, rows, target)

        return RangeQuery(columns.fields(), len(columns.groups), columns.decode, block if blocks else None)
