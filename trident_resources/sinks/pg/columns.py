"""Typed column extraction for pg-sink reads: Postgres picks each wanted member out of the jsonb
server side and ships a range's values as CSV text; pyarrow's C++ CSV reader types them.

Why (measured with the backends' CPU from /proc on 200k lineitem rows): rendering whole
documents (``data::text``, ~0.6 s of server CPU, 85 MB) and decoding that JSON client side
(``json_transform_strict``, ~0.6 s) are the cost of a read that way. Extracting each member with ``->>``
and rendering the row as ``ROW(...)::text`` costs the server about two thirds of that, ships less
than half the bytes (no keys), reads only the projected columns, and the client parses a
CSV in C++ with the recorded Arrow types instead of parsing JSON. Per-member extraction aggregated
into binary arrays (``(data->'c')::int8`` etc. in ``string_agg(int8send(...))``) measured *more*
server CPU than rendering (one aggregate per column per row), and per-row COPY output costs one
Python call per row client side, so a range stays ONE COPY row (see ``reader.py``).

``record_out`` writes a composite as ``(a,"b c",,"")``: NULL is an empty field, a value with a
quote, backslash, comma, parenthesis or white space (or an empty string) is quoted with ``"``
and ``\\`` doubled. That is CSV with ``"`` doubled and ``\\`` as escape character, which pyarrow
reads; the ``0`` members first and last take the parentheses.

Each column takes one route, chosen from the recorded type so that it decodes to exactly what
the write path (``codec.py``) stored:

- ``TEXT``: numbers, booleans, dates and strings as their text (``->>``), typed by pyarrow's CSV
  converter (floats' ``"NaN"``/``"Infinity"`` strings included). A range whose text pyarrow
  refuses (a BC date, a decimal with more digits than its scale) is cast by DuckDB instead, the
  engine that wrote it, from the same text; a value that fits neither fails loudly.
- ``BASE64``: binary, stored as base64 text (``->>``), decoded by DuckDB's ``from_base64``.
- ``JSON``: everything else (lists, structs, maps, timestamps, times...) ships its member's JSON
  (``->``) and goes through ``json_transform_strict`` with the DuckDB type, as whole documents did.

A member that is absent (the row predates its column) is SQL NULL on every route: null, as in Iceberg.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Sequence
from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
from psycopg import sql

from ...control import queries as q
from ...core.errors import SchemaMismatchError, StorageUnavailableError
from ...core.identity import CREATED_AT, ROW_ID, ROW_INDEX
from ...core.keys import quote
from ...core.schemas import conform
from .reader import RawChunk

GROUP_COLUMNS = 1000  # members per ROW(...) (a row type holds at most 1664 columns)
_PARSE = pcsv.ParseOptions(delimiter=",", quote_char='"', double_quote=True, escape_char="\\", newlines_in_values=True)


class Route(enum.Enum):
    TEXT = "text"
    BASE64 = "base64"
    JSON = "json"


def _text_type(t: pa.DataType) -> pa.DataType | None:
    """The type pyarrow's CSV converter reads a TEXT-routed column as, or None if not TEXT-routed."""
    if pa.types.is_integer(t) or pa.types.is_boolean(t) or pa.types.is_date32(t):
        return t
    if pa.types.is_float32(t) or pa.types.is_float64(t):
        return t
    if (pa.types.is_decimal128(t) or pa.types.is_decimal256(t)) and t.scale >= 0:
        # Parsed at the widest precision, then cast (safely) to ``t`` by ``conform``: DuckDB's
        # to_json writes a decimal of up to 15 digits through a double, so jsonb holds
        # ``99999.0`` for a decimal(5, 0) 99999, which pyarrow refuses as decimal(5, 0) (its
        # text has 6 digits) though the value fits.
        return pa.decimal128(38, t.scale) if t.precision < 38 and pa.types.is_decimal128(t) else t
    if pa.types.is_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_large_string(t):
        return pa.large_string()
    return None


def route(t: pa.DataType) -> Route:
    if _text_type(t) is not None:
        return Route.TEXT
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return Route.BASE64
    return Route.JSON


@dataclass(frozen=True)
class _Column:
    name: str
    type: pa.DataType
    route: Route
    duck_type: str  # the recorded type as DuckDB names it (casts and json_transform_strict)


class ColumnReader:
    """What one read asks Postgres for (``fields``) and how a fetched range becomes a batch in
    ``target`` (identity + user columns in the caller's order). ``decode`` is called from several
    fetcher threads at once: it keeps no state but the DuckDB database (a cursor per call)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, duck_types: dict[str, str], target: pa.Schema) -> None:
        self.con = con
        self.target = target
        self.columns = [_Column(f.name, f.type, route(f.type), duck_types[f.name]) for f in target if f.name in duck_types]
        self.groups = [self.columns[i : i + GROUP_COLUMNS] for i in range(0, len(self.columns), GROUP_COLUMNS)]

    def fields(self) -> sql.Composable:
        """The COPY's extra select list: one ROW text aggregate per group ('' when no user column is read)."""
        parts = []
        for group in self.groups:
            members = sql.SQL(", ").join(
                sql.SQL(q.PG_MEMBER_JSON if c.route is Route.JSON else q.PG_MEMBER_TEXT).format(key=sql.Literal(c.name))
                for c in group
            )
            parts.append(sql.SQL(", ") + sql.SQL(q.PG_RANGE_GROUP).format(members=members))
        return sql.Composed(parts)

    def decode(self, chunk: RawChunk) -> pa.RecordBatch:
        n = chunk.num_rows
        if len(chunk.texts) != len(self.groups):
            raise StorageUnavailableError(f"the pg sink returned {len(chunk.texts)} column groups, not {len(self.groups)}")
        arrays: dict[str, pa.Array] = {ROW_INDEX: chunk.row_index, ROW_ID: chunk.row_id, CREATED_AT: chunk.created_at}
        for group, text in zip(self.groups, chunk.texts, strict=True):
            arrays.update(self._group(group, text, n))
        batch = pa.RecordBatch.from_arrays([arrays[f.name] for f in self.target], names=self.target.names)
        order = chunk.row_index.to_numpy()
        if n > 1 and not bool(np.all(order[1:] > order[:-1])):  # a bitmap scan returns heap order
            batch = batch.take(pc.sort_indices(chunk.row_index))
        return conform(batch, self.target)

    def _group(self, group: Sequence[_Column], text: memoryview, n: int) -> dict[str, pa.Array]:
        names = [f"c{i}" for i in range(len(group))]
        typed = {name: (_text_type(c.type) or pa.string()) for name, c in zip(names, group, strict=True)}
        try:
            table = _read(text, names, typed)
            fallback = False
        except pa.ArrowInvalid:  # text pyarrow does not read as the type: DuckDB casts it (below)
            table = _read(text, names, {name: pa.string() for name in names})
            fallback = True
        if table.num_rows != n:
            raise StorageUnavailableError(f"the pg sink returned {table.num_rows} rows of columns for {n} rows")
        exprs: dict[str, str] = {}
        for name, c in zip(names, group, strict=True):
            if c.route is Route.JSON:
                exprs[name] = f"json_transform_strict({name}, {_literal(json.dumps(c.duck_type))})"
            elif c.route is Route.BASE64:
                exprs[name] = f"from_base64({name})"
            elif fallback:
                exprs[name] = f"CAST({name} AS {c.duck_type})"
        if exprs:
            table = self._duck(table, names, exprs)
        return {c.name: table.column(name).combine_chunks() for name, c in zip(names, group, strict=True)}

    def _duck(self, table: pa.Table, names: list[str], exprs: dict[str, str]) -> pa.Table:
        select = ", ".join(f"{exprs.get(n, n)} AS {quote(n)}" for n in names)
        cur = self.con.cursor()
        try:
            return cur.from_arrow(table).project(select).to_arrow_table()
        except duckdb.Error as exc:
            raise SchemaMismatchError(f"a stored row does not decode with the dataset's recorded schema: {exc}") from exc
        finally:
            cur.close()


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _read(text: memoryview, names: list[str], types: dict[str, pa.DataType]) -> pa.Table:
    """One group's ``(0,...,0)`` lines as a table of ``names`` (the two ``0`` fields dropped)."""
    try:
        return pcsv.read_csv(
            pa.BufferReader(pa.py_buffer(text)),
            read_options=pcsv.ReadOptions(column_names=["_open", *names, "_close"], use_threads=False),
            parse_options=_PARSE,
            convert_options=pcsv.ConvertOptions(
                include_columns=names,
                column_types=types,
                null_values=[""],
                strings_can_be_null=True,
                quoted_strings_can_be_null=False,  # "" is an empty string, an empty field is NULL
                true_values=["true"],
                false_values=["false"],
                check_utf8=False,  # Postgres sends UTF-8 (the reader sets client_encoding)
            ),
        )
    except pa.ArrowInvalid as exc:
        if "conversion" in str(exc).lower():  # a value the type refuses: the caller falls back to DuckDB
            raise
        raise StorageUnavailableError(f"the pg sink returned columns that do not parse: {exc}") from exc
