"""What a user's query may read: the views it was given, nothing else.

The sandbox (``sql.sandbox``) must allow the data files behind its native views, because DuckDB
re-binds a view, and opens its files, every time a query uses it. That alone would let a query
call ``read_parquet('<one of those files>')`` itself and see what the view exists to shape: a
node's delta window (the ``__created_at`` filter), the identity columns a node hides, a raw view
(``__trident_src_0``) the node's SQL is not meant to name. DuckDB has no per-function or per-view
permission, so the query is checked before it runs, on DuckDB's own parse tree
(``json_serialize_sql``, the parser that will run it, not a regex): every table it reads must be
one of the exposed names or a CTE it defines, and the only table functions allowed are the ones
that read nothing (``range``, ``generate_series``, ``unnest``). File paths in FROM (DuckDB's
replacement scans), ``read_parquet``/``read_csv``/``glob``/``parquet_metadata``/``read_blob``,
``query('...')`` (which would run a string the check never saw) and DuckDB's catalog views are all
refused. A query the serializer cannot represent is refused rather than run unchecked.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterator
from typing import Any

import duckdb

from ..core.errors import SqlNotAllowedError, UnknownSqlTableError
from ..core.recent import Recent

# table functions that produce rows from their arguments alone; everything else reads something
SAFE_TABLE_FUNCTIONS = frozenset({"range", "generate_series", "unnest"})
# scalar functions that read the sandbox's configuration: allowed_paths lists every data file
# behind the views, home/temp/extension directories the machine's layout
SETTING_FUNCTIONS = frozenset({"current_setting", "getvariable"})
INTERNAL_PREFIX = "__trident"
# a CTE name a query may define and use: a plain identifier, never a path or URL, so that a
# reference outside the CTE's scope cannot fall through to a replacement scan of a file
_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


PASSED_KEPT = 256
_PASSED: Recent[tuple[str, frozenset[str]], bool] = Recent(PASSED_KEPT)


def check_reads_only(con: duckdb.DuckDBPyConnection, query: str, exposed: Collection[str]) -> None:
    """Refuse ``query`` unless every table it reads is a name in ``exposed`` (or a CTE of its
    own) and it calls no table function that reads files, URLs, settings or other SQL.

    ``con`` only parses (``json_serialize_sql`` runs no part of the query). The verdict depends
    on nothing but the query text and the exposed names, so a query repeated over the same names
    (a dashboard's, a check's) is checked once: walking the tree in Python cost about as much as
    a small query's scan."""
    key = (query, frozenset(exposed))
    if _PASSED.get(key):
        return
    _check(con, query, exposed)
    _PASSED.put(key, True)


def _check(con: duckdb.DuckDBPyConnection, query: str, exposed: Collection[str]) -> None:
    try:
        raw = con.execute("SELECT json_serialize_sql(?)", [query]).fetchone()
    except duckdb.Error as exc:
        raise SqlNotAllowedError(f"the query could not be checked before it runs: {exc}") from exc
    try:
        tree: Any = json.loads(raw[0]) if raw else {"error": True}
    except RecursionError as exc:  # a parse tree nested deeper than Python's JSON decoder goes
        raise SqlNotAllowedError(
            "the query could not be checked before it runs: it is nested too deeply "
            "(e.g. hundreds of chained operators or subqueries); split it up"
        ) from exc
    if tree.get("error"):
        raise SqlNotAllowedError(
            "the query could not be checked before it runs (DuckDB serializes only plain SELECT queries): "
            f"{tree.get('error_message', 'unknown reason')}"
        )
    allowed = {_fold(n) for n in exposed}
    for node, ctes in _scoped_nodes(tree):
        kind = node.get("type")
        if kind == "TABLE_FUNCTION":
            fn = node.get("function") or {}
            name = _fold(str(fn.get("function_name", "")))
            if name not in SAFE_TABLE_FUNCTIONS or fn.get("schema") or fn.get("catalog"):
                raise SqlNotAllowedError(
                    f"the query calls the table function {name}(): only the datasets it names can be read "
                    f"(table functions allowed: {sorted(SAFE_TABLE_FUNCTIONS)})"
                )
        elif node.get("class") == "FUNCTION" and _fold(str(node.get("function_name", ""))) in SETTING_FUNCTIONS:
            raise SqlNotAllowedError(
                f"the query calls {node.get('function_name')}(): DuckDB's settings and variables are off limits "
                "(they name the data files and directories behind the views)"
            )
        elif kind in ("BASE_TABLE", "SHOW_REF"):
            name = str(node.get("table_name", ""))
            if kind == "SHOW_REF" and not name:
                continue  # DESCRIBE/SUMMARIZE of a query: the query's own tables are checked as nodes
            # a qualified name never means a CTE, only the catalog; and an exposed view lives in
            # the main schema (information_schema.x is DuckDB's own table, whatever x is named)
            schema, catalog = _fold(str(node.get("schema_name") or "")), _fold(str(node.get("catalog_name") or ""))
            qualified = bool(schema or catalog)
            exposed_here = schema in ("", "main") and catalog in ("", "memory", "temp")
            if not (_fold(name) in allowed and exposed_here) and (qualified or _fold(name) not in ctes):
                path = (node.get("qualified_name") or {}).get("path") or [p for p in (catalog, schema, name) if p]
                written = ".".join(str(p) for p in path) if qualified else name
                raise UnknownSqlTableError(
                    f"the query reads {written!r}, which is not one of the datasets it may read ({sorted(exposed)}): "
                    "files, URLs and DuckDB's own tables are off limits; quote keys with '/' as \"a/b\"",
                    name=written,
                )


def _fold(name: str) -> str:
    """A name as DuckDB compares identifiers: ASCII letters case-insensitively, every other
    character exactly (``str.casefold`` would equate names DuckDB keeps apart, e.g. 'ß'/'ss')."""
    return name.encode("utf-8", "surrogatepass").lower().decode("utf-8", "surrogatepass")


def _scoped_nodes(tree: Any) -> Iterator[tuple[dict[str, Any], frozenset[str]]]:
    """Every JSON object of the parse tree with the CTE names in scope where it stands.

    DuckDB binds a table name to a CTE only inside the query that defines it: in that query's
    body, in the CTEs defined after it in the same WITH, and (a recursive CTE) in its own
    recursive term. Anywhere else, including the CTE's own body and an earlier CTE's, the same
    name binds to the catalog (a view, DuckDB's own tables) or a replacement scan, so a name
    counted as a CTE outside its scope would let a query read exactly what the check refuses.
    Iterative: a deep query must not hit the recursion limit."""
    stack: list[tuple[Any, frozenset[str]]] = [(tree, frozenset())]
    while stack:
        item, scope = stack.pop()
        if isinstance(item, list):
            stack.extend((x, scope) for x in item)
            continue
        if not isinstance(item, dict):
            continue
        yield item, scope
        inner = scope
        cte_map = item.get("cte_map")
        if isinstance(cte_map, dict):
            for entry in cte_map.get("map") or ():
                if not isinstance(entry, dict):
                    continue
                stack.append((entry.get("value"), inner))  # its body sees only the CTEs before it
                key = entry.get("key")
                if isinstance(key, str) and _PLAIN.fullmatch(key) and not _fold(key).startswith(INTERNAL_PREFIX):
                    inner = inner | {_fold(key)}
        for field, value in item.items():
            if field == "cte_map":
                continue
            if field == "right" and item.get("type") == "RECURSIVE_CTE_NODE":
                name = item.get("cte_name")
                if isinstance(name, str) and _PLAIN.fullmatch(name) and not _fold(name).startswith(INTERNAL_PREFIX):
                    stack.append((value, inner | {_fold(name)}))
                    continue
            stack.append((value, inner))
