"""Row filters and column checks, written once for every sink and every door.

Row filters use pyiceberg's filter syntax (``"k > 5 and v = 'x'"``) whatever the sink, so a filter
means the same thing on a dataset before and after a canary moves it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

import pyarrow as pa
from pyiceberg.expressions import (
    AlwaysFalse,
    AlwaysTrue,
    And,
    BooleanExpression,
    BoundPredicate,
    LiteralPredicate,
    Not,
    Or,
    SetPredicate,
    UnboundPredicate,
)
from pyiceberg.expressions.literals import Literal, literal
from pyiceberg.expressions.parser import parse as parse_filter
from pyiceberg.expressions.visitors import BooleanExpressionVisitor, bind, visit
from pyiceberg.io.pyarrow import expression_to_pyarrow
from pyparsing import ParseBaseException

from .errors import InvalidFilterError, InvalidWriteError, SchemaMismatchError
from .identity import ROW_ID, is_row_id_bytes
from .schemas import to_iceberg


def filter_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` as a filtered pyarrow scan must read it: a 16-byte ``__row_id`` as its storage,
    ``fixed_size_binary(16)`` (pyarrow has no comparison kernels for the ``arrow.uuid`` extension
    type; ``arrow_filter`` compares the ids' bytes). Readers get text either way (``public``)."""
    i = schema.get_field_index(ROW_ID)
    if i < 0 or not is_row_id_bytes(schema.field(i).type) or schema.field(i).type == pa.binary(16):
        return schema
    return schema.set(i, schema.field(i).with_type(pa.binary(16)))


class _IdsAsBytes(BooleanExpressionVisitor[BooleanExpression]):
    """A parsed filter with every ``__row_id`` literal (UUID text) as its 16 bytes, to bind
    against ``filter_schema``: ``__row_id = '...'`` keeps meaning what it meant on string ids."""

    def visit_true(self) -> BooleanExpression:
        return AlwaysTrue()

    def visit_false(self) -> BooleanExpression:
        return AlwaysFalse()

    def visit_not(self, child_result: BooleanExpression) -> BooleanExpression:
        return Not(child_result)

    def visit_and(self, left_result: BooleanExpression, right_result: BooleanExpression) -> BooleanExpression:
        return And(left_result, right_result)

    def visit_or(self, left_result: BooleanExpression, right_result: BooleanExpression) -> BooleanExpression:
        return Or(left_result, right_result)

    def visit_unbound_predicate(self, predicate: UnboundPredicate) -> BooleanExpression:
        if getattr(predicate.term, "name", None) != ROW_ID:
            return predicate
        if isinstance(predicate, LiteralPredicate):
            return type(predicate)(predicate.term, _id_bytes(predicate.literal))
        if isinstance(predicate, SetPredicate):
            return type(predicate)(predicate.term, {_id_bytes(v) for v in predicate.literals})
        return predicate

    def visit_bound_predicate(self, predicate: BoundPredicate) -> BooleanExpression:
        return predicate


def _id_bytes(value: Literal[Any]) -> Literal[Any]:
    try:
        return literal(uuid.UUID(str(value.value)).bytes)
    except ValueError as exc:
        raise InvalidFilterError(f"{ROW_ID} is a UUID; {value.value!r} is not one") from exc


def arrow_filter(schema: pa.Schema, row_filter: str) -> Any:
    """``row_filter`` as a pyarrow expression over ``schema``; InvalidFilterError when it does not
    parse or names a column the dataset lacks."""
    if not isinstance(row_filter, str):  # else pyiceberg's parser fails as "'int' object has no attribute 'expandtabs'"
        raise InvalidFilterError(
            f"row_filter must be a string in pyiceberg filter syntax, e.g. \"k > 5 and v = 'x'\", "
            f"got a {type(row_filter).__name__}: {row_filter!r}"
        )
    try:
        parsed = parse_filter(row_filter)
        bytes_schema = filter_schema(schema)
        if bytes_schema is not schema:  # 16-byte ids: compare bytes (see ``filter_schema``)
            parsed, schema = visit(parsed, _IdsAsBytes()), bytes_schema
        return expression_to_pyarrow(bind(to_iceberg(schema), parsed, case_sensitive=True))
    except ParseBaseException as exc:
        # pyparsing reports a failure as its whole grammar ("Expected {{{W:(A-Z_a-z..."): say where instead
        near = row_filter[exc.loc : exc.loc + 30].strip()
        where = f"at column {exc.col} (near {near!r})" if near else "at its end"
        raise InvalidFilterError(
            f"invalid row_filter {row_filter!r}: it does not parse {where}; write "
            'comparisons such as "amount > 100", "region = \'eu\'", "note is null" or "id in (1, 2)", '
            "joined by and / or / not"
        ) from exc
    except Exception as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InvalidFilterError(
            f"invalid row_filter {row_filter!r}: {reason[:300]}. Use pyiceberg filter syntax, e.g. \"k > 5 and v = 'x'\""
        ) from exc


def check_columns(columns: Iterable[str] | None, schema: pa.Schema) -> None:
    """Refuse a projection naming columns the dataset does not have."""
    if not columns:
        return
    unknown = [c for c in columns if c not in schema.names]
    if unknown:
        raise SchemaMismatchError(f"unknown column(s) {unknown}; the dataset has {schema.names}")


def check_key_columns(keys: Iterable[str], schema: pa.Schema, where: str) -> None:
    """Refuse key columns that ``where`` (``"the input"`` / ``"the dataset"``) does not have."""
    missing = [k for k in keys if k not in schema.names]
    if missing:
        error = SchemaMismatchError if where == "the dataset" else InvalidWriteError
        raise error(f"key column(s) {missing} are not in {where} (columns: {schema.names})")
