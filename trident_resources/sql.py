"""Read-only SQL over datasets, in DuckDB.

The sandbox is DuckDB's own: one statement, SELECT only, external access disabled (no files, URLs,
ATTACH, INSTALL or LOAD) except exactly the data files of the datasets the query names, and the
configuration locked so the query cannot turn it back on. Datasets are exposed by key
(``"sales/orders"``) as the facade's ``scan_plan`` says: on a local warehouse a view over DuckDB's
own ``read_parquet`` of the current snapshot's files, elsewhere the sink's Arrow source, so the
same query works whichever sink a dataset lives in.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import duckdb
import pyarrow as pa

from .errors import SqlNotAllowedError
from .sinks.base import ScanPlan

if TYPE_CHECKING:
    from .facade import Trident

_NAME = re.compile(r'"([a-z0-9_]+(?:/[a-z0-9_]+)*)"|\b([a-z0-9_]+)\b')


def check_read_only(query: str) -> None:
    try:
        statements = duckdb.extract_statements(query)
    except duckdb.Error as exc:
        raise SqlNotAllowedError(f"SQL does not parse: {exc}") from exc
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


def sandbox(memory_limit: str, threads: int, allowed_paths: Iterable[str] = ()) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection that can read exactly ``allowed_paths`` (the data files of the
    datasets a query or node names) and no other file, URL or database.

    DuckDB only accepts ``allowed_paths`` while external access is still on, so it is set first
    and external access is switched off right after, before any caller SQL runs; the caller
    then registers its views and locks the configuration (``lock``)."""
    con = duckdb.connect(
        config={
            "autoinstall_known_extensions": False,
            "autoload_known_extensions": False,
            "memory_limit": memory_limit,
            "threads": threads,
        }
    )
    try:
        paths = sorted(set(allowed_paths))
        if paths:
            con.execute("SET allowed_paths = ?", [paths])
        con.execute("SET enable_external_access = false")
        con.execute("SET TimeZone = 'UTC'")
    except BaseException:
        con.close()
        raise
    return con


def native_paths(plans: Iterable[ScanPlan]) -> list[str]:
    """Every file the sandbox must allow for these plans (native ones only)."""
    return [f for p in plans if p.path == "native" for f in p.files]


def register_dataset(con: duckdb.DuckDBPyConnection, name: str, plan: ScanPlan, arrow_source: Callable[[], Any]) -> None:
    """Expose one dataset version to DuckDB as ``name``.

    Native: a view over ``read_parquet`` of exactly the plan's files, columns matched by Iceberg
    field id (``schema=MAP{id: {name, type, default_value}}``, as DuckDB's own Iceberg reader
    does), so a column added after a file was written reads NULL there, and DuckDB's parallel
    reader pushes projections and filters into the Parquet files. Arrow: ``arrow_source()`` (the
    sink's re-scannable pyarrow source) is registered instead."""
    if plan.path == "native" and plan.files:
        con.execute(f"CREATE VIEW {_ident(name)} AS SELECT * FROM {_read_parquet_sql(con, plan)}")
    elif plan.path == "native":  # a version with no rows has no files: an empty relation of the right shape
        con.register(name, pa.Table.from_batches([], schema=plan.schema))
    else:
        con.register(name, arrow_source())


def _read_parquet_sql(con: duckdb.DuckDBPyConnection, plan: ScanPlan) -> str:
    types = [str(t) for t in con.from_arrow(pa.Table.from_batches([], schema=plan.schema)).types]
    cols = ", ".join(
        f"{fid}: {{name: {_lit(f.name)}, type: {_lit(t)}, default_value: NULL}}"
        for fid, f, t in zip(plan.field_ids, plan.schema, types, strict=True)
    )
    files = ", ".join(_lit(f) for f in plan.files)
    return f"read_parquet([{files}], schema = MAP {{{cols}}})"


def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def run_sql(t: Trident, query: str) -> pa.Table:
    check_read_only(query)
    known = {d.key for d in t.datasets()}
    plans = {key: t.scan_plan(key) for key in referenced_keys(query, known)}
    con = sandbox(t.settings.duckdb_memory_limit, t.settings.duckdb_threads, native_paths(plans.values()))
    try:
        for key, plan in plans.items():
            register_dataset(con, key, plan, lambda key=key: t.arrow_source(key))  # type: ignore[misc]
        con.execute("SET lock_configuration = true")
        try:
            return con.sql(query).to_arrow_table()
        except duckdb.PermissionException as exc:
            raise SqlNotAllowedError(f"the query tried to reach outside the datasets: {exc}") from exc
        except duckdb.CatalogException as exc:  # e.g. FROM '/etc/hosts': not a dataset, and files are off limits
            raise SqlNotAllowedError(
                f"the query names something that is not a dataset of workspace {t.workspace!r} "
                f"(datasets: {sorted(known)}); quote keys with '/' as \"a/b\". {exc}"
            ) from exc
    finally:
        con.close()
