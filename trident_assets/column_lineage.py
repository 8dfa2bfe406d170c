"""Column lineage of a SQL node: which source columns each output column is computed from.

The node's SQL is parsed with sqlglot (DuckDB dialect) and qualified against the columns of the
views the node reads (its sources, under the names the SQL gives them), then each output column is
followed back through CTEs and subqueries to the source columns it reads. What comes out is kept
in the output's provenance (``column_lineage``), from which the IO manager reports Dagster's
``dagster/column_lineage`` (Dagster+ draws it as a column graph; the open source UI shows the
provenance's copy).

Never guessed: an output column is *traced* only when every leaf of its lineage is a column that
really exists in a source the SQL reads. Anything else is *untraced*, with the reason: a constant
or an aggregate over rows (``count(*)``) reads no column; SQL the parser cannot follow (a DuckDB
feature sqlglot does not know, ``COLUMNS(...)``) or a name it cannot resolve says so instead of
naming a plausible column.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.lineage import lineage
from sqlglot.optimizer.qualify import qualify
from sqlglot.schema import MappingSchema

DIALECT = "duckdb"
NO_COLUMN = "untraced: computed from no source column (a constant, or an aggregate over rows such as count(*))"


def column_lineage(
    sql: str, sources: Mapping[str, str], source_columns: Mapping[str, Sequence[str]], outputs: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """Per output column, ``{"sources": [{"key": dataset key, "column": name}, ...]}`` or
    ``{"untraced": why}``.

    ``sources`` maps the SQL's names to dataset keys, ``source_columns`` the SQL's names to the
    columns their views show, ``outputs`` the columns the query returns (in order)."""
    schema: dict[str, dict[str, str]] = {name: dict.fromkeys(cols, "text") for name, cols in source_columns.items()}
    mapping = MappingSchema(dict(schema), dialect=DIALECT)
    try:
        tree = qualify(
            sqlglot.parse_one(sql, dialect=DIALECT),
            schema=mapping,
            dialect=DIALECT,
            validate_qualify_columns=True,
        )
    except SqlglotError as exc:
        why = f"untraced: the SQL could not be followed ({type(exc).__name__}: {_first_line(exc)})"
        return {c: {"untraced": why} for c in outputs}
    return {c: _trace(c, tree, schema, sources) for c in outputs}


def _trace(column: str, tree: exp.Expr, schema: dict[str, dict[str, str]], sources: Mapping[str, str]) -> dict[str, Any]:
    try:
        node = lineage(column, tree, schema=schema, dialect=DIALECT, copy=True)
    except (SqlglotError, KeyError, ValueError) as exc:  # sqlglot's lineage raises plain errors for unresolvable names
        return {"untraced": f"untraced: {type(exc).__name__}: {_first_line(exc)}"}
    found: list[dict[str, str]] = []
    for leaf in node.walk():
        if leaf.downstream:
            continue
        table = leaf.expression
        if not isinstance(table, exp.Table):
            return {"untraced": NO_COLUMN}
        name = _source_name(table.name, sources)
        written = exp.to_column(leaf.name, dialect=DIALECT).name
        col = {c.lower(): c for c in schema.get(name or "", {})}.get(written.lower())  # DuckDB folds case
        if name is None or col is None:
            return {"untraced": f"untraced: {written!r} of {table.name!r} is not a column of a source the node reads"}
        entry = {"key": sources[name], "column": col}
        if entry not in found:
            found.append(entry)
    return {"sources": found} if found else {"untraced": NO_COLUMN}


def _source_name(table: str, sources: Mapping[str, str]) -> str | None:
    """The node's name for the view ``table`` names (identifiers fold case, as in DuckDB)."""
    return {n.lower(): n for n in sources}.get(table.lower())


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0][:200]
