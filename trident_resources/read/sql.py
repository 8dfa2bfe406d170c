"""``Trident.sql``: one read-only SELECT over datasets, in the DuckDB sandbox (``sql/sandbox.py``).

One statement, SELECT only, reading only the views of the datasets it names (``sql/guard.py``);
each dataset exposed as its scan plan says, so the same query works whichever sink a dataset lives
in; a sandbox built for the same dataset versions is reused.
"""

from __future__ import annotations

import difflib
import logging
import re
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import duckdb
import pyarrow as pa

from ..control.plane import DatasetRecord
from ..core.errors import SqlError, SqlNotAllowedError, UnknownSqlTableError
from ..core.failpoints import failpoint
from ..engine import Engine
from ..sql.guard import check_reads_only
from ..sql.sandbox import SandboxCache, bounded_result, close_soon, native_paths, parser, register_dataset, sandbox, sandbox_key
from . import datasets

log = logging.getLogger(__name__)
MAX_LISTED = 20  # datasets named in an error about a table that is none of them
_NAME = re.compile(r'"([a-z0-9_]+(?:/[a-z0-9_]+)*)"|\b([a-z0-9_]+)\b')


def _first_line(exc: duckdb.Error) -> str:
    """DuckDB's message without the query echo and caret it appends ("LINE 1: ..."), on one line:
    it is shown in CLI output and run logs, where the caller already has the query."""
    return " ".join(str(exc).split("\n\nLINE ")[0].split())


def check_read_only(query: str) -> None:
    try:
        # on this thread's parser connection, not ``duckdb.extract_statements``: that one opens
        # DuckDB's default in-memory database on first use, ~15-20 ms of the first query of a run
        statements = parser().extract_statements(query)
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


def unknown_table_message(name: str, records: Mapping[str, DatasetRecord], workspace: str) -> str:
    """What to say of a table name that is no dataset: the key of the dataset whose Iceberg
    identifier it is (the UI shows identifiers as table names), else the closest key, and the
    datasets that exist. Nothing is read in its place: the query is refused either way."""
    by_identifier = {_fold(r.iceberg_identifier): k for k, r in records.items() if r.iceberg_identifier}
    keys = sorted(records)
    listed = ", ".join(f'"{k}"' for k in keys[:MAX_LISTED]) + (
        f" and {len(keys) - MAX_LISTED} more" if len(keys) > MAX_LISTED else ""
    )
    exists = f"datasets of workspace {workspace!r}: {listed}" if keys else f"workspace {workspace!r} has no datasets yet"
    if (key := by_identifier.get(_fold(name))) is not None:
        return (
            f'{name!r} is the Iceberg identifier of dataset {key!r}: in Trident SQL a dataset is named by its key, FROM "{key}"'
        )
    as_key = name.replace(".", "/").lower()
    close = difflib.get_close_matches(as_key, keys, n=1, cutoff=0.6) or difflib.get_close_matches(
        as_key.rsplit("/", 1)[-1], [k.rsplit("/", 1)[-1] for k in keys], n=1, cutoff=0.8
    )
    if close and close[0] not in records:  # matched on the last part: the key it is the last part of
        close = [k for k in keys if k.rsplit("/", 1)[-1] == close[0]][:1]
    hint = f'; did you mean "{close[0]}"?' if close else ""
    return f"the query reads {name!r}, which is not a dataset{hint} ({exists}); quote keys with '/' as \"a/b\""


def _fold(name: str) -> str:
    return name.replace('"', "").lower()


def _source(engine: Engine, key: str, staged: uuid.UUID | str | None, record: DatasetRecord | None) -> Callable[[], Any]:
    """How the sandbox gets a dataset's Arrow source: the published version from the record read
    with every other one of the query (one control-plane snapshot: never dataset A after a group
    published and dataset B before it), or the staged version named."""
    if staged is None and record is not None:
        return lambda: datasets.arrow_source_of(engine, record)
    return lambda: datasets.arrow_source(engine, key, staged=staged)


def run_sql(engine: Engine, query: str, staged: Mapping[str, uuid.UUID | str] | None = None) -> pa.Table:
    """``staged`` maps dataset keys to staged transactions whose versions the query reads."""
    check_read_only(query)
    staged = dict(staged or {})
    # every dataset's record from ONE statement (one Postgres snapshot), passed on, never read
    # again: the query reads every dataset as of one moment of the control plane
    records = {d.key: d for d in engine.control.datasets(engine.workspace)}
    failpoint("sql.resolved")  # (tests: a commit landing after the moment the query reads)
    known = set(records) | set(staged)
    plans = {
        key: datasets.scan_plan(engine, key, staged=staged[key]) if key in staged else datasets.scan_plan_of(engine, records[key])
        for key in referenced_keys(query, known)
    }
    for unread in staged.keys() - plans.keys():
        # not read by this query, but checked all the same: a misspelt key or id here would have
        # left the query reading the published version while the caller believed it audited the staged one
        datasets.scan_plan(engine, unread, staged=staged[unread])
    try:
        check_reads_only(parser(), query, plans.keys())  # the views only: never their files directly
    except UnknownSqlTableError as exc:
        raise UnknownSqlTableError(unknown_table_message(exc.name, records, engine.workspace), name=exc.name) from exc
    cache: SandboxCache = engine.sql_sandboxes
    key = sandbox_key(plans, engine.settings)
    con = cache.take(key) if key is not None else None
    reusable = False
    try:
        if con is None:
            con = sandbox(engine.settings.duckdb_memory_limit, engine.settings.duckdb_threads, native_paths(plans.values()))
            for name, plan in plans.items():
                register_dataset(con, name, plan, _source(engine, name, staged.get(name), records.get(name)))
            con.execute("SET lock_configuration = true")
        try:
            interrupted = threading.Event()
            result = bounded_result(con, query, engine.settings, interrupted=interrupted)
            reusable = key is not None and not interrupted.is_set()
            return result
        except duckdb.PermissionException as exc:
            raise SqlNotAllowedError(f"the query tried to reach outside the datasets: {exc}") from exc
        except duckdb.CatalogException as exc:  # e.g. FROM '/etc/hosts': not a dataset, and files are off limits
            if "Function with name" in str(exc):  # an unknown (or disabled) function is not a missing dataset
                raise SqlError(f"SQL failed: {_first_line(exc)}") from exc
            raise SqlNotAllowedError(
                f"the query names something that is not a dataset of workspace {engine.workspace!r} "
                f"(datasets: {sorted(known)}); quote keys with '/' as \"a/b\". {_first_line(exc)}"
            ) from exc
        except duckdb.Error as exc:  # every other kind (binder, conversion, runtime...): one named error
            raise SqlError(f"SQL failed: {_first_line(exc)}") from exc
    finally:
        if con is not None:
            if reusable and key is not None:
                cache.give(key, con)
            else:
                close_soon(con)
