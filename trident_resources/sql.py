"""Read-only SQL over datasets, in DuckDB.

The sandbox is DuckDB's own: one statement, SELECT only, external access disabled (no files, URLs,
ATTACH, INSTALL or LOAD) and the configuration locked so the query cannot turn it back on. Datasets
are exposed as Arrow sources named by key (``"sales/orders"``), read through the facade, so the same
query works whichever sink a dataset lives in.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import duckdb
import pyarrow as pa

from .errors import SqlError, SqlNotAllowedError

if TYPE_CHECKING:
    from .facade import Trident

_NAME = re.compile(r'"([a-z0-9_]+(?:/[a-z0-9_]+)*)"|\b([a-z0-9_]+)\b')


def _first_line(exc: duckdb.Error) -> str:
    """DuckDB's message without the query echo and caret it appends ("LINE 1: ..."), on one line:
    it is shown in CLI output and run logs, where the caller already has the query."""
    return " ".join(str(exc).split("\n\nLINE ")[0].split())


def check_read_only(query: str) -> None:
    try:
        statements = duckdb.extract_statements(query)
    except duckdb.Error as exc:
        raise SqlNotAllowedError(f"SQL does not parse: {_first_line(exc)}") from exc
    if len(statements) != 1:
        raise SqlNotAllowedError(f"exactly one statement is allowed, got {len(statements)}")
    kind = statements[0].type
    if kind != duckdb.StatementType.SELECT:
        raise SqlNotAllowedError(f"only SELECT queries are allowed (read-only); this is a {kind.name} statement")


def referenced_keys(query: str, known: set[str]) -> set[str]:
    """Dataset keys the query names (quoted, or bare for one-word keys)."""
    found = set()
    for quoted, bare in _NAME.findall(query):
        name = quoted or bare
        if name in known:
            found.add(name)
    return found


def sandbox(memory_limit: str, threads: int) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(
        config={
            "enable_external_access": False,
            "autoinstall_known_extensions": False,
            "autoload_known_extensions": False,
            "memory_limit": memory_limit,
            "threads": threads,
        }
    )
    con.execute("SET TimeZone = 'UTC'")
    return con


def run_sql(t: Trident, query: str) -> pa.Table:
    check_read_only(query)
    con = sandbox(t.settings.duckdb_memory_limit, t.settings.duckdb_threads)
    try:
        known = {d.key for d in t.datasets()}
        for key in referenced_keys(query, known):
            con.register(key, t.arrow_source(key))
        con.execute("SET lock_configuration = true")
        try:
            return con.sql(query).to_arrow_table()
        except duckdb.PermissionException as exc:
            raise SqlNotAllowedError(f"the query tried to reach outside the datasets: {exc}") from exc
        except duckdb.CatalogException as exc:  # e.g. FROM '/etc/hosts': not a dataset, and files are off limits
            raise SqlNotAllowedError(
                f"the query names something that is not a dataset of workspace {t.workspace!r} "
                f"(datasets: {sorted(known)}); quote keys with '/' as \"a/b\". {_first_line(exc)}"
            ) from exc
        except duckdb.Error as exc:  # every other kind (binder, conversion, runtime...): one named error
            raise SqlError(f"SQL failed: {_first_line(exc)}") from exc
    finally:
        con.close()
