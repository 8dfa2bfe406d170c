"""Schema rules shared by both sinks: canonical Arrow types, compatibility, evolution.

Types are canonicalised through pyiceberg's own Arrow<->Iceberg mapping so that a dataset's schema
means the same thing in the lakehouse and in the Postgres rows sink.
"""

from __future__ import annotations

import logging
from typing import Any

import pyarrow as pa
from pyiceberg.io.pyarrow import UnsupportedPyArrowTypeException, schema_to_pyarrow
from pyiceberg.schema import Schema, assign_fresh_schema_ids

from .errors import SchemaMismatchError
from .identity import IDENTITY_COLUMNS, ROW_ID, ROW_ID_STORED, convert_ids, identity_fields, public_type
from .pyiceberg_compat import arrow_to_iceberg_without_ids

# Iceberg's type promotions (column type -> wider type): what an existing column can become in
# place, keeping its field id, and so what input of a narrower type is written into as it is.
_PROMOTIONS = {(pa.int32(), pa.int64()), (pa.float32(), pa.float64())}

log = logging.getLogger("trident")


_EXTENSION_STORAGE = {"arrow.json": pa.large_string(), "arrow.bool8": pa.bool_()}


def _pre_normalise(t: pa.DataType) -> pa.DataType:
    """The storable type for ``t``, nested types included.

    Timestamps become microseconds (Iceberg's unit). A timestamp with ANY zone becomes UTC:
    Iceberg's ``timestamptz`` stores an instant and no zone, so a ``Europe/Rome`` column is kept
    as the same instants and reads back in UTC (the zone is presentation, not data); refusing it
    would only make every producer do this cast itself. Times become ``time64[us]``; a
    ``decimal256`` that fits Iceberg's 38 digits becomes ``decimal128``. Values are cast safely
    (``conform``), so a conversion that would lose data (sub-microsecond values) fails loudly.
    """
    if pa.types.is_dictionary(t):
        return _pre_normalise(t.value_type)
    if isinstance(t, pa.BaseExtensionType) and t.extension_name in _EXTENSION_STORAGE:
        # Arrow's canonical JSON (DuckDB and Polars emit it) is JSON text and bool8 a boolean:
        # stored as the string and the bool their values are (Iceberg has neither extension type)
        return _EXTENSION_STORAGE[t.extension_name]
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz="UTC" if t.tz is not None else None)
    if pa.types.is_time(t):
        return pa.time64("us")
    if pa.types.is_decimal256(t) and t.precision <= 38:
        return pa.decimal128(t.precision, t.scale)
    if pa.types.is_date64(t):
        return pa.date32()
    if pa.types.is_string_view(t):
        return pa.large_string()
    if pa.types.is_binary_view(t):
        return pa.large_binary()
    if pa.types.is_uint8(t) or pa.types.is_uint16(t) or pa.types.is_int8(t) or pa.types.is_int16(t):
        return pa.int32()
    if pa.types.is_uint32(t):
        return pa.int64()
    if pa.types.is_null(t):
        return pa.large_string()
    if pa.types.is_struct(t):
        return pa.struct([t.field(i).with_type(_pre_normalise(t.field(i).type)) for i in range(t.num_fields)])
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(_pre_normalise(t.value_type)))
    if pa.types.is_large_list(t):
        return pa.large_list(t.value_field.with_type(_pre_normalise(t.value_type)))
    if pa.types.is_fixed_size_list(t):
        return pa.list_(t.value_field.with_type(_pre_normalise(t.value_type)), t.list_size)
    if pa.types.is_map(t):
        return pa.map_(t.key_field.with_type(_pre_normalise(t.key_type)), t.item_field.with_type(_pre_normalise(t.item_type)))
    return t


def _hint(t: pa.DataType) -> str:
    """What to do with a type Iceberg cannot store (the first culprit found, nested or not)."""
    if pa.types.is_duration(t):
        return f"{t}: Iceberg has no duration type; cast it to int64 (a count of its unit) or store it as a string"
    if pa.types.is_interval(t):
        return f"{t}: Iceberg has no interval type; store its months/days/nanoseconds as int columns, or as a string"
    if pa.types.is_decimal(t) and t.precision > 38:
        return f"{t}: Iceberg decimals have at most 38 digits; cast to decimal128(38, {t.scale}) if the values fit, or to string"
    if pa.types.is_decimal(t) and t.scale < 0:
        return f"{t}: Parquet (and so Iceberg) has no negative decimal scale; cast to decimal128({t.precision - t.scale}, 0)"
    for child in _nested(t):
        hint = _hint(child)
        if hint:
            return hint
    return ""


def _nested(t: pa.DataType) -> list[pa.DataType]:
    if pa.types.is_struct(t):
        return [t.field(i).type for i in range(t.num_fields)]
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return [t.value_type]
    if pa.types.is_map(t):
        return [t.key_type, t.item_type]
    return []


def _negative_scale(t: pa.DataType) -> bool:
    return (pa.types.is_decimal(t) and t.scale < 0) or any(_negative_scale(c) for c in _nested(t))


def _unsupported(schema: pa.Schema, exc: Exception) -> SchemaMismatchError:
    """A SchemaMismatchError naming each top-level column whose type Iceberg cannot store."""
    bad = []
    for f in schema:
        try:
            if _negative_scale(f.type):
                raise ValueError("negative decimal scale")
            arrow_to_iceberg_without_ids(pa.schema([f]))
        except Exception:
            bad.append(f"column {f.name!r} has type {_hint(f.type) or f'{f.type}: cast it to a type Iceberg supports'}")
    detail = "; ".join(bad) if bad else str(exc)
    return SchemaMismatchError(f"unsupported column type: {detail}")


def to_iceberg(schema: pa.Schema) -> Schema:
    """Iceberg schema (fresh ids, every column optional) for an Arrow schema."""
    pre = pa.schema([pa.field(f.name, _pre_normalise(f.type), nullable=True) for f in schema])
    if any(_negative_scale(f.type) for f in pre):
        # pyiceberg accepts decimal(5, -2), then the Parquet writer refuses it mid-write (an
        # OSError named as storage being unavailable) and the pg sink's DuckDB fails on it
        raise _unsupported(pre, ValueError("negative decimal scale"))
    try:
        converted = arrow_to_iceberg_without_ids(pre)
    except UnsupportedPyArrowTypeException as exc:
        raise _unsupported(pre, exc) from exc
    except (TypeError, ValueError) as exc:
        raise SchemaMismatchError(f"unsupported column type: {exc}") from exc
    return assign_fresh_schema_ids(converted)


def canonical(schema: pa.Schema) -> pa.Schema:
    """The Arrow schema the input will be stored as (no field ids, all nullable)."""
    return schema_to_pyarrow(to_iceberg(schema), include_field_ids=False)


def user_fields(schema: pa.Schema) -> pa.Schema:
    return pa.schema([f for f in schema if f.name not in IDENTITY_COLUMNS])


def with_identity(user_schema: pa.Schema, row_id_type: pa.DataType = ROW_ID_STORED) -> pa.Schema:
    """The stored schema: identity columns first (``__row_id`` in the table's own type: uuid for a
    new table, string for one created before uuid ids), then the user's."""
    return pa.schema([*identity_fields(row_id_type), *user_fields(user_schema)])


def promotable(column: pa.DataType, wider: pa.DataType) -> bool:
    """Can an Iceberg column of type ``column`` be promoted to ``wider`` in place (same field id,
    old data files read as the new type)? int -> long, float -> double, and decimal(P, S) ->
    decimal(P', S) with P' > P: the promotions of the Iceberg spec (v2)."""
    if (column, wider) in _PROMOTIONS:
        return True
    return (
        pa.types.is_decimal128(column)
        and pa.types.is_decimal128(wider)
        and wider.scale == column.scale
        and wider.precision > column.precision
    )


def compatible(incoming: pa.DataType, existing: pa.DataType) -> bool:
    """Can ``incoming`` values be stored in an ``existing`` column as it is (equal, or a type the
    column is a promotion of: every such value fits)?"""
    return incoming == existing or promotable(incoming, existing)


def widened(existing: pa.Schema, incoming: pa.Schema) -> dict[str, tuple[pa.DataType, pa.DataType]]:
    """The columns of ``existing`` that ``incoming`` has in a type they can be promoted to
    (``promotable``), each with (its type, the wider type)."""
    return {
        f.name: (existing.field(f.name).type, f.type)
        for f in incoming
        if f.name in existing.names and promotable(existing.field(f.name).type, f.type)
    }


def plan_schema(existing: pa.Schema | None, incoming: pa.Schema, *, replace: bool) -> pa.Schema:
    """The dataset's user schema after this write.

    A replace makes the dataset exactly the input, so its schema wins. Every other mode keeps
    existing columns, adds new ones and promotes a column whose input type is one it can be
    promoted to (int -> long, float -> double, a decimal to more digits: schema evolution, in
    place); any other type change is an error. Either way a promotion keeps the column's Iceberg
    field id, and is logged.

    Raises:
        SchemaMismatchError: an input column's type cannot be stored in, nor promoted from, the
            dataset's column of that name (modes other than replace), or Iceberg cannot store it.
    """
    incoming = canonical(incoming)
    if existing is not None:
        for name, (was, now) in widened(user_fields(existing), incoming).items():
            log.info("trident: column %r widens from %s to %s (Iceberg type promotion, same field id)", name, was, now)
    if existing is None or replace:
        return incoming
    existing = user_fields(existing)
    bad = [
        f"{f.name}: dataset has {existing.field(f.name).type}, input has {f.type}"
        for f in incoming
        if f.name in existing.names
        and not compatible(f.type, existing.field(f.name).type)
        and not promotable(existing.field(f.name).type, f.type)
    ]
    if bad:
        raise SchemaMismatchError(
            "input columns are incompatible with the dataset: "
            + "; ".join(bad)
            + " (Iceberg promotes only int to long, float to double and a decimal to more digits of the same scale)"
            + ". Cast them in the input, or use mode='replace' to redefine the dataset"
        )
    wider = widened(existing, incoming)
    kept = [f.with_type(wider[f.name][1]) if f.name in wider else f for f in existing]
    added = [f for f in incoming if f.name not in existing.names]
    return pa.schema([*kept, *added])


def conform(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """Project a batch onto ``target``: reorder, cast, and fill absent columns with nulls."""
    arrays = []
    for field in target:
        idx = batch.schema.get_field_index(field.name)
        if idx < 0:
            arrays.append(pa.nulls(batch.num_rows, field.type))
            continue
        col = batch.column(idx)
        if pa.types.is_dictionary(col.type):
            col = col.dictionary_decode()
        if not col.type.equals(field.type):
            ids = convert_ids(col, field.type) if field.name == ROW_ID else None
            if ids is not None:  # text <-> 16 bytes: an id copied between a string and a uuid table
                arrays.append(ids)
                continue
            try:
                col = col.cast(field.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise SchemaMismatchError(f"column {field.name!r}: cannot store {col.type} as {field.type}: {exc}") from exc
        arrays.append(col)
    return pa.RecordBatch.from_arrays(arrays, schema=target)


def describe_schema(schema: pa.Schema) -> list[dict[str, Any]]:
    """JSON form kept in the control plane and shown in Dagster's column schema. ``__row_id`` is
    shown as readers get it (text), whether the table stores 16 bytes or a string: the stored
    type is the sink's business, and a dataset's schema version must not move with it."""
    return [
        {"name": f.name, "type": str(public_type(f.type) if f.name == ROW_ID else f.type), "nullable": f.nullable} for f in schema
    ]
