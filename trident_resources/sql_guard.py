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
import threading
from collections import OrderedDict
from collections.abc import Collection, Iterator
from typing import Any

import duckdb

from .errors import SqlNotAllowedError

# table functions that produce rows from their arguments alone; everything else reads something
SAFE_TABLE_FUNCTIONS = frozenset({"range", "generate_series", "unnest"})
INTERNAL_PREFIX = "__trident"
# a CTE name a query may define and use: a plain identifier, never a path or URL, so that a
# reference outside the CTE's scope cannot fall through to a replacement scan of a file
_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


_PASSED: OrderedDict[tuple[str, frozenset[str]], None] = OrderedDict()
_PASSED_LOCK = threading.Lock()
PASSED_KEPT = 256


def check_reads_only(con: duckdb.DuckDBPyConnection, query: str, exposed: Collection[str]) -> None:
    """Refuse ``query`` unless every table it reads is a name in ``exposed`` (or a CTE of its
    own) and it calls no table function that reads files, URLs, settings or other SQL.

    ``con`` only parses (``json_serialize_sql`` runs no part of the query). The verdict depends
    on nothing but the query text and the exposed names, so a query repeated over the same names
    (a dashboard's, a check's) is checked once: walking the tree in Python cost about as much as
    a small query's scan."""
    key = (query, frozenset(exposed))
    with _PASSED_LOCK:
        if key in _PASSED:
            _PASSED.move_to_end(key)
            return
    _check(con, query, exposed)
    with _PASSED_LOCK:
        _PASSED[key] = None
        while len(_PASSED) > PASSED_KEPT:
            _PASSED.popitem(last=False)


def _check(con: duckdb.DuckDBPyConnection, query: str, exposed: Collection[str]) -> None:
    try:
        raw = con.execute("SELECT json_serialize_sql(?)", [query]).fetchone()
    except duckdb.Error as exc:
        raise SqlNotAllowedError(f"the query could not be checked before it runs: {exc}") from exc
    tree: Any = json.loads(raw[0]) if raw else {"error": True}
    if tree.get("error"):
        raise SqlNotAllowedError(
            "the query could not be checked before it runs (DuckDB serializes only plain SELECT queries): "
            f"{tree.get('error_message', 'unknown reason')}"
        )
    allowed = {n.casefold() for n in exposed}
    ctes = {c.casefold() for c in _cte_names(tree) if _PLAIN.fullmatch(c) and not c.startswith(INTERNAL_PREFIX)}
    for node in _nodes(tree):
        kind = node.get("type")
        if kind == "TABLE_FUNCTION":
            fn = node.get("function") or {}
            name = str(fn.get("function_name", "")).casefold()
            if name not in SAFE_TABLE_FUNCTIONS or fn.get("schema") or fn.get("catalog"):
                raise SqlNotAllowedError(
                    f"the query calls the table function {name}(): only the datasets it names can be read "
                    f"(table functions allowed: {sorted(SAFE_TABLE_FUNCTIONS)})"
                )
        elif kind in ("BASE_TABLE", "SHOW_REF"):
            name = str(node.get("table_name", ""))
            if kind == "SHOW_REF" and not name:
                continue  # DESCRIBE/SUMMARIZE of a query: the query's own tables are checked as nodes
            if name.casefold() not in allowed and name.casefold() not in ctes:
                raise SqlNotAllowedError(
                    f"the query reads {name!r}, which is not one of the datasets it may read ({sorted(exposed)}): "
                    "files, URLs and DuckDB's own tables are off limits; quote keys with '/' as \"a/b\""
                )


def _nodes(tree: Any) -> Iterator[dict[str, Any]]:
    """Every JSON object of the parse tree (iterative: a deep query must not hit the recursion limit)."""
    stack = [tree]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            yield item
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _cte_names(tree: Any) -> Iterator[str]:
    for node in _nodes(tree):
        cte_map = node.get("cte_map")
        if isinstance(cte_map, dict):
            for entry in cte_map.get("map") or ():
                if isinstance(entry, dict) and isinstance(entry.get("key"), str):
                    yield entry["key"]
