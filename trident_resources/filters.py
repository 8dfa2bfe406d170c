"""Row filters and column checks, written once for every sink and every door.

Row filters use pyiceberg's filter syntax (``"k > 5 and v = 'x'"``) whatever the sink, so a filter
means the same thing on a dataset before and after a canary moves it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pyarrow as pa
from pyiceberg.expressions.parser import parse as parse_filter
from pyiceberg.expressions.visitors import bind
from pyiceberg.io.pyarrow import expression_to_pyarrow
from pyparsing import ParseBaseException

from .errors import InvalidFilterError, InvalidWriteError, SchemaMismatchError
from .schemas import to_iceberg


def arrow_filter(schema: pa.Schema, row_filter: str) -> Any:
    """``row_filter`` as a pyarrow expression over ``schema``; InvalidFilterError when it does not
    parse or names a column the dataset lacks."""
    if not isinstance(row_filter, str):  # was "'int' object has no attribute 'expandtabs'"
        raise InvalidFilterError(
            f"row_filter must be a string in pyiceberg filter syntax, e.g. \"k > 5 and v = 'x'\", "
            f"got a {type(row_filter).__name__}: {row_filter!r}"
        )
    try:
        return expression_to_pyarrow(bind(to_iceberg(schema), parse_filter(row_filter), case_sensitive=True))
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
