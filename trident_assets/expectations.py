"""Expectations: declared next to a node, run as Dagster asset checks through the client's reads
(``Trident.sql``), so they work whatever sink the dataset lives in.

``blocking=True`` (the default) makes a failure an ERROR that stops downstream assets in the same
run; ``blocking=False`` reports a WARN and lets the run go on. ``trident check`` runs the same
checks from the command line for CI.
"""

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import dagster as dg
import duckdb

from trident_resources import Trident, TridentError, VersionStats
from trident_resources.dagster import TridentResource, staged_in_run

from .key_bitmap import no_repeated_key


@dataclass(frozen=True)
class Expectation:
    """One rule. ``sql`` counts the violations of dataset ``{dataset}`` (zero means it passed),
    except for row counts, which ``evaluate`` compares to bounds."""

    name: str
    description: str
    sql: str
    blocking: bool = True
    bounds: tuple[int | None, int | None] | None = None
    details: dict[str, Any] = field(default_factory=dict)
    # A cheaper query that returns 0 only when ``sql`` would (a necessary condition for a
    # violation is checked first); ``sql`` runs only when the screen finds a candidate.
    screen: str | None = None
    # Key columns whose values, when they are integers over a small enough range, one bitmap pass
    # may prove never repeat (``key_bitmap``: ``sql`` then returns 0 without running); when it
    # cannot, ``screen`` and ``sql`` run as usual, so the result is always the exact query's.
    unique_keys: tuple[str, ...] = ()
    # Answered from the version's data file statistics when they have it (``Trident.version_stats``,
    # no scan): the row count (``bounds``), or the null counts of these columns (``not_null``).
    # Without them (the pg sink, a file without a column's count) ``sql`` runs.
    null_columns: tuple[str, ...] = ()

    def evaluate(self, t: Trident, key: str, staged: uuid.UUID | None = None) -> tuple[bool, int, dict[str, Any]]:
        """(passed, observed number, metadata) against the dataset's current rows, or against
        its staged version ``staged`` (write-audit-publish: audit before publishing)."""
        return evaluate_all(t, key, [self], staged)[0]

    def _from_stats(self, stats: Callable[[], VersionStats | None]) -> int | None:
        """What ``sql`` would count, when the data files' statistics (``stats()``, the version's
        ``Trident.version_stats``) say it exactly; else None."""
        if self.bounds is None and not self.null_columns:
            return None
        found = stats()
        if found is None:
            return None
        if self.bounds is not None:
            return found.rows
        counts = [found.null_counts.get(c) for c in self.null_columns]
        if any(c is None for c in counts):
            return None
        if all(c == 0 for c in counts):
            return 0
        # one column: its NULLs are the violating rows; several: rows NULL in more than one of
        # them would be counted twice, so the query counts them
        return counts[0] if len(counts) == 1 else None

    def _result(self, value: int) -> tuple[bool, int, dict[str, Any]]:
        if self.bounds is not None:
            lo, hi = self.bounds
            passed = (lo is None or value >= lo) and (hi is None or value <= hi)
            return passed, value, {"row_count": value, "min": lo, "max": hi}
        return value == 0, value, {"violations": value}


def evaluate_all(
    t: Trident, key: str, expectations: Sequence[Expectation], staged: uuid.UUID | None = None
) -> list[tuple[bool, int, dict[str, Any]]]:
    """``Expectation.evaluate`` of several expectations of one dataset version at once, each
    result exactly what its own ``evaluate`` gives (the same value, metadata and error).

    Why together: every check paid the same look-ups of the version (its statistics, its scan
    plan, a SQL sandbox with its files) and a query of its own. Here the statistics are read once,
    and the counts still to run go out as ONE query per round (``SELECT (q1), (q2), ...``: one
    sandbox, one plan; a round is every check's first query, then the exact queries of the
    screens that found a candidate). When that query fails, each count runs alone, so a check
    that errors reports its own error and the others their own results."""
    if staged is None and not t.exists(key):
        return [(False, -1, {"error": _missing(key), "missing": True}) for _ in expectations]
    stats = _Once(lambda: t.version_stats(key, staged=staged))
    values: dict[int, int] = {}
    errors: dict[int, BaseException] = {}
    queries: dict[int, list[str]] = {}  # what each check still has to count, in order (screen, then sql)
    for i, e in enumerate(expectations):
        try:
            value = e._from_stats(stats)
            if value is None and e.unique_keys and no_repeated_key(t, key, e.unique_keys, staged, stats):
                value = 0
        except (TridentError, duckdb.Error) as exc:
            errors[i] = exc
            continue
        if value is not None:
            values[i] = value
        else:
            queries[i] = [q for q in (e.screen, e.sql) if q is not None]
    while queries:
        counted = _counts(t, key, {i: q[0] for i, q in queries.items()}, staged)
        later: dict[int, list[str]] = {}
        for i, count in counted.items():
            if isinstance(count, BaseException):
                errors[i] = count
            elif count != 0 and len(queries[i]) > 1:  # the screen found a candidate: the exact query decides
                later[i] = queries[i][1:]
            else:
                values[i] = count
        queries = later
    return [
        (False, -1, {"error": f"{type(errors[i]).__name__}: {errors[i]}"}) if i in errors else e._result(values[i])
        for i, e in enumerate(expectations)
    ]


class _Once:
    """A look-up made at most once, its exception kept too: each check that asks gets the same
    answer, or raises the same error as its own look-up would have."""

    def __init__(self, fn: Callable[[], VersionStats | None]) -> None:
        self._fn = fn
        self._done = False
        self._value: VersionStats | None = None
        self._error: BaseException | None = None

    def __call__(self) -> VersionStats | None:
        if not self._done:
            self._done = True
            try:
                self._value = self._fn()
            except (TridentError, duckdb.Error) as exc:
                self._error = exc
        if self._error is not None:
            raise self._error
        return self._value


def _counts(t: Trident, key: str, queries: Mapping[int, str], staged: uuid.UUID | None) -> dict[int, int | BaseException]:
    """Each query's count (its first column of its first row), or the error it raised alone."""
    if len(queries) > 1:
        combined = "SELECT " + ", ".join(f"({_format(q, key)})" for q in queries.values())
        try:
            row = t.sql(combined, staged={key: staged} if staged else None)
            return {i: int(row.column(n)[0].as_py() or 0) for n, i in enumerate(queries)}
        except (TridentError, duckdb.Error):
            pass  # one of them fails (or they do together): each alone says which, and why
    counts: dict[int, int | BaseException] = {}
    for i, q in queries.items():
        try:
            counts[i] = _count(t, q, key, staged)
        except (TridentError, duckdb.Error) as exc:
            counts[i] = exc
    return counts


def _format(sql: str, key: str) -> str:
    return sql.format(dataset=f'"{key}"')


def _count(t: Trident, sql: str, key: str, staged: uuid.UUID | None) -> int:
    query = _format(sql, key)
    return int(t.sql(query, staged={key: staged} if staged else None).column(0)[0].as_py() or 0)


def _cols(columns: str | Sequence[str]) -> list[str]:
    return [columns] if isinstance(columns, str) else list(columns)


def _q(c: str) -> str:
    return '"' + c.replace('"', '""') + '"'


def not_null(columns: str | Sequence[str], *, blocking: bool = True) -> Expectation:
    cols = _cols(columns)
    cond = " OR ".join(f"{_q(c)} IS NULL" for c in cols)
    return Expectation(
        f"not_null_{'_'.join(cols)}",
        f"{', '.join(cols)} never null",
        f"SELECT count(*) FROM {{dataset}} WHERE {cond}",
        blocking,
        null_columns=tuple(cols),
    )


def unique(columns: str | Sequence[str], *, blocking: bool = True) -> Expectation:
    cols = _cols(columns)
    group = ", ".join(_q(c) for c in cols)
    sql = f"SELECT count(*) FROM (SELECT {group} FROM {{dataset}} GROUP BY {group} HAVING count(*) > 1)"
    # Over several columns, grouping by one 64-bit hash of them is ~1.6x cheaper than by the
    # columns (6M distinct (l_orderkey, l_linenumber): ~1.1 vs ~1.8 s; the example pipeline
    # checks two such datasets). Equal keys have equal hashes (NULLs included), so no repeated
    # hash means no repeated key; a repeated hash (a duplicate or a collision) runs the exact query.
    screen = None
    if len(cols) > 1:
        screen = f"SELECT count(*) FROM (SELECT hash({group}) AS h FROM {{dataset}} GROUP BY h HAVING count(*) > 1)"
    return Expectation(
        f"unique_{'_'.join(cols)}", f"({', '.join(cols)}) unique", sql, blocking, screen=screen, unique_keys=tuple(cols)
    )


def accepted_values(column: str, values: Sequence[Any], *, blocking: bool = True) -> Expectation:
    listed = ", ".join(_literal(v) for v in values)
    sql = f"SELECT count(*) FROM {{dataset}} WHERE {_q(column)} IS NOT NULL AND {_q(column)} NOT IN ({listed})"
    return Expectation(
        f"accepted_values_{column}", f"{column} in {list(values)}", sql, blocking, details={"values": list(values)}
    )


def row_count_between(min_rows: int | None = None, max_rows: int | None = None, *, blocking: bool = True) -> Expectation:
    if min_rows is None and max_rows is None:
        raise ValueError("row_count_between needs min_rows, max_rows or both")
    return Expectation(
        "row_count_between",
        f"row count in [{min_rows}, {max_rows}]",
        "SELECT count(*) FROM {dataset}",
        blocking,
        bounds=(min_rows, max_rows),
    )


def custom_sql(name: str, sql: str, *, description: str = "", blocking: bool = True) -> Expectation:
    """``sql`` returns the violating rows of ``{dataset}``; the check passes when there are none."""
    if "{dataset}" not in sql:
        raise ValueError("custom_sql needs {dataset} in the query where the dataset goes")
    return Expectation(name, description or f"no rows from: {sql}", f"SELECT count(*) FROM ({sql})", blocking)


def _literal(v: Any) -> str:
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, (int, float)):
        return repr(v)
    return "'" + str(v).replace("'", "''") + "'"


def build_checks(key: str, expectations: Sequence[Expectation]) -> list[dg.AssetChecksDefinition]:
    """One asset check per expectation on the asset ``key``."""
    names = [e.name for e in expectations]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"expectations on {key!r} share the name(s) {dupes}; give custom_sql checks distinct names")
    return [_check(key, e) for e in expectations]


def _check(key: str, e: Expectation) -> dg.AssetChecksDefinition:
    @dg.asset_check(
        asset=dg.AssetKey(key.split("/")),
        name=e.name,
        description=e.description,
        blocking=e.blocking,
        metadata={"trident/sql": e.sql.format(dataset=f'"{key}"')},
    )
    def _run(context: dg.AssetCheckExecutionContext, trident: TridentResource) -> dg.AssetCheckResult:
        t = trident.get_client()
        # write-audit-publish (gate.py): the version this run staged, if the asset was gated
        return check_result(t, key, e, staged=staged_in_run(t, key, context.run.run_id))

    return _run


# -- in-step checks ---------------------------------------------------------------------------------
# The same expectations as check specs on the asset itself, evaluated in the asset's own step right
# after the IO manager has written the output (``trident_assets.checked``). A separate check step
# per expectation costs a process start each; in-step they cost one query each.


def check_key(key: str, e: Expectation) -> dg.AssetCheckKey:
    return dg.AssetCheckKey(dg.AssetKey(key.split("/")), e.name)


def check_specs(key: str, expectations: Sequence[Expectation]) -> list[dg.AssetCheckSpec]:
    """One ``AssetCheckSpec`` per expectation on ``key`` (same names, descriptions, blocking)."""
    build_checks(key, expectations)  # the same validation (distinct names)
    return [
        dg.AssetCheckSpec(
            e.name,
            asset=dg.AssetKey(key.split("/")),
            description=e.description,
            blocking=e.blocking,
            metadata={"trident/sql": e.sql.format(dataset=f'"{key}"')},
        )
        for e in expectations
    ]


def check_result(t: Trident, key: str, e: Expectation, staged: uuid.UUID | None = None) -> dg.AssetCheckResult:
    """Evaluate one expectation against the dataset's current rows, as a result of ``key``'s check."""
    return check_results(t, key, [e], staged)[0]


def check_results(
    t: Trident, key: str, expectations: Sequence[Expectation], staged: uuid.UUID | None = None
) -> list[dg.AssetCheckResult]:
    """Evaluate expectations of ``key`` together (``evaluate_all``), one result per expectation."""
    return [
        _as_result(key, e, evaluated, staged)
        for e, evaluated in zip(expectations, evaluate_all(t, key, expectations, staged), strict=True)
    ]


def _as_result(
    key: str, e: Expectation, evaluated: tuple[bool, int, dict[str, Any]], staged: uuid.UUID | None
) -> dg.AssetCheckResult:
    passed, value, meta = evaluated
    if staged is not None:
        meta = {**meta, "trident/staged_txn": str(staged)}
    return dg.AssetCheckResult(
        asset_key=dg.AssetKey(key.split("/")),
        check_name=e.name,
        passed=passed,
        severity=dg.AssetCheckSeverity.ERROR if e.blocking else dg.AssetCheckSeverity.WARN,
        metadata={**meta, "observed": value, "blocking": e.blocking},
        description=None if passed else _failure(e, value, meta),
    )


def _missing(key: str) -> str:
    return f"dataset {key!r} does not exist yet: materialize it first"


def _failure(e: Expectation, value: int, meta: dict[str, Any]) -> str:
    """Why the check did not pass: the number it observed, or why it observed none (the dataset
    is missing, or the count raised), never the -1 that stands for "no number"."""
    if "error" in meta:
        return f"{e.description}: {'missing' if meta.get('missing') else 'error'}: {meta['error']}"
    return f"{e.description}: failed (observed {value})"
