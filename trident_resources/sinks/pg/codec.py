"""Arrow <-> jsonb for the pg sink, done in DuckDB so no row passes through Python objects.

jsonb has no types of its own beyond JSON's, so every value is written in a form that casts back
exactly to the column's Arrow type recorded with the commit: decimals as JSON numbers (jsonb keeps
numeric text exactly), floats in shortest round-trip form with NaN/Infinity as strings (JSON has
no such numbers), binary as base64, temporal types as ISO strings. Reading casts through
``json_transform_strict`` with the recorded schema, so a value that does not fit fails loudly; a
key that is absent (the row was written before its column was added) reads as null, as in Iceberg.
"""

from __future__ import annotations

import json
import uuid

import duckdb
import numpy as np
import pyarrow as pa

from ...errors import SchemaMismatchError
from ...identity import CREATED_AT, ROW_ID, ROW_INDEX
from ...merge import quote
from ...schemas import conform, user_fields
from .reader import RawChunk


def _sql_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _is_float(t: pa.DataType) -> bool:
    return pa.types.is_floating(t)


def _is_binary(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)


class JsonCodec:
    """Encodes stamped batches to COPY text lines and decodes fetched ranges, for one user schema."""

    def __init__(self, user_schema: pa.Schema) -> None:
        self.user_schema = user_fields(user_schema)
        # arrow_lossless_conversion: a uuid column decodes as uuid, not as text its column refused
        self.con = duckdb.connect(config={"threads": 1, "arrow_lossless_conversion": True})
        self.con.execute("SET TimeZone = 'UTC'")
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
        if _is_float(field.type):
            return f"CASE WHEN {c} IS NULL THEN NULL WHEN isfinite({c}) THEN {c}::VARCHAR::JSON ELSE to_json({c}::VARCHAR) END"
        if _is_binary(field.type):
            return f"to_json(base64({c}::BLOB))"
        return c

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

    # -- decode -----------------------------------------------------------------------------
    def needs_documents(self, target: pa.Schema) -> bool:
        """Whether decoding to ``target`` reads any user column (else the documents need not be fetched)."""
        return any(f.name in self.user_schema.names for f in target)

    def decode(self, chunk: RawChunk, target: pa.Schema) -> pa.RecordBatch:
        """One range's rows (identity arrays + documents' text) -> a batch in ``target`` (a
        projection of identity + user columns, in the caller's order)."""
        wanted_user = [f for f in target if f.name in self.user_schema.names]
        columns: dict[str, pa.Array] = {ROW_INDEX: chunk.row_index, ROW_ID: chunk.row_id, CREATED_AT: chunk.created_at}
        if wanted_user:
            assert chunk.data is not None
            columns["__data"] = chunk.data
        fetched = pa.table(columns)
        if not len(target):
            return pa.RecordBatch.from_arrays([], schema=target)
        if not wanted_user:
            return conform(fetched.select(target.names).combine_chunks().to_batches()[0], target)
        structure = {f.name: ("VARCHAR" if _is_binary(f.type) else self._duck_types[f.name]) for f in wanted_user}
        parts = []
        for f in target:
            if f.name in (ROW_INDEX, ROW_ID, CREATED_AT):
                parts.append(quote(f.name))
            elif _is_binary(f.type):
                parts.append(f"from_base64(s.{quote(f.name)}) AS {quote(f.name)}")
            else:
                parts.append(f"s.{quote(f.name)} AS {quote(f.name)}")
        inner = f"json_transform_strict(__data, {_sql_literal(json.dumps(structure))}) AS s"
        sql = f"SELECT {', '.join(parts)} FROM (SELECT *, {inner} FROM fetched)"
        try:
            out = self.con.sql(sql).to_arrow_table()
        except duckdb.Error:
            # Rows written before a column was added lack its key: decode member by member.
            out = self._decode_tolerant(fetched, parts, structure)
        batch = out.combine_chunks().to_batches()[0] if out.num_rows else pa.RecordBatch.from_pylist([], schema=out.schema)
        return conform(batch, target)

    def _decode_tolerant(self, fetched: pa.Table, parts: list[str], structure: dict[str, str]) -> pa.Table:
        """Decode ``fetched`` (read by DuckDB's replacement scan) where a stored row may lack keys: a missing key is null.

        A pg dataset's rows are never rewritten when a column is added (an append only adds
        rows), so older rows' jsonb has no key for it; Iceberg reads such rows as null, and so
        must this sink. The single-struct ``json_transform_strict`` (the fast path) refuses a
        missing key, so this slower path, taken only for chunks that need it, extracts every
        member with one JSON-pointer list (parsed once per row) and casts each one strictly: a
        value of the wrong type still fails loudly; only absence becomes null.
        """
        names = list(structure)
        pointers = ", ".join(_sql_literal("/" + n.replace("~", "~0").replace("/", "~1")) for n in names)
        members = ", ".join(
            f"{quote(n)} := json_transform_strict(__m[{i + 1}], {_sql_literal(json.dumps(structure[n]))})"
            for i, n in enumerate(names)
        )
        sql = (
            f"SELECT {', '.join(parts) or '1 AS __none'} FROM (SELECT *, struct_pack({members}) AS s "
            f"FROM (SELECT *, json_extract(__data, [{pointers}]) AS __m FROM fetched))"
        )
        try:
            return self.con.sql(sql).to_arrow_table()
        except duckdb.Error as exc:
            raise SchemaMismatchError(f"a stored row does not decode with the dataset's recorded schema: {exc}") from exc
