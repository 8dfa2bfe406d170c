"""The join guard: refuse, before anything is written, a join whose data says it could explode.

How the estimate is made, and what it can and cannot promise (docs/dagster.md, "The join guard", says the same):

1. **Which source each scan reads** comes from DuckDB's plan of the node's SQL, planned (never run)
   over empty stand-in tables named exactly as the SQL names its sources, so every scan names its
   table. No column names are matched to guess where a scan comes from.
2. **Rows** of each source are its row count recorded by the control plane at COMMIT (nothing is
   scanned); for a delta run, the rows of the slice the node reads.
3. **Distinct counts of the join keys** are measured on the data: DuckDB's ``approx_count_distinct``
   (HyperLogLog, about 2% error, constant memory) over just the key column of the source the key
   comes from — one pass over one column, the rest of the data is not read.
4. **Each join** is estimated bottom-up: an equality join of L and R rows whose keys have d_L and
   d_R distinct values produces about ``L * R / max(d_L, d_R)`` rows (exact when the keys are
   uniformly distributed; ``L * R`` when every row has the same key; ``max(L, R)`` for a key join);
   a cross product or a join with no equality condition produces ``L * R``; an outer join at least
   its preserved side; a semi/anti join at most its left side; a union the sum; a GROUP BY at most
   the product of its keys' distinct counts; filters are not credited (they only lower the truth).
5. **The estimate** is the largest number of rows any step produces (a join followed by an
   aggregate is guarded on the join). Above ``max_rows`` the node fails with JoinTooLargeError,
   naming the step, its inputs and its keys' distinct counts.

It cannot promise an upper bound: keys with a few very frequent values (skew) can make a join
larger than ``L * R / max(d)`` says, and a join key that is an expression or a renamed column it
cannot trace to a source column is treated as no key at all (``L * R``, a refusal on the safe side,
said so in the message). It never runs the join to find out.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import duckdb

from trident_resources import PARSER_DATABASE, TridentError, TridentSettings, close_soon, sandbox

ENV_MAX_JOIN_ROWS = "TRIDENT_JOIN_MAX_ROWS"  # named in messages; TridentSettings.join_max_rows reads it
# The stand-in tables are empty: without these optimizers DuckDB keeps the plan's shape instead of
# proving from statistics that an empty input makes the join empty.
_GUARD_DISABLED_OPTIMIZERS = "statistics_propagation,empty_result_pullup"
_IDENT = re.compile(r'^(?:"((?:[^"]|"")+)"|([A-Za-z_][A-Za-z0-9_$]*))$')
_POSITION = re.compile(r"^#(\d+)$")
_EQUALITY = (" = ", " IS NOT DISTINCT FROM ")


class JoinTooLargeError(TridentError):
    """The sources' row counts and key distinct counts say the join could produce more rows than allowed."""


@dataclass(frozen=True)
class SourceStats:
    """One source as the node's SQL names it: its dataset key and the rows the node reads
    (``None``: count them, e.g. a delta slice the control plane has no count for)."""

    name: str
    key: str
    rows: int | None


@dataclass(frozen=True)
class JoinEstimate:
    rows: int  # the largest step
    steps: list[str]  # one line per join step, in plan order (inputs first)
    largest: str


@dataclass(frozen=True)
class _Col:
    name: str
    origins: frozenset[tuple[str, str]] = frozenset()  # (source name, source column)


@dataclass
class _Rel:
    rows: float
    cols: list[_Col] = field(default_factory=list)


def max_join_rows(explicit: int | None, settings: TridentSettings) -> int:
    """The bound: the node's ``max_rows``, else ``TRIDENT_JOIN_MAX_ROWS`` (default one billion)."""
    return explicit if explicit is not None else settings.join_max_rows


def check_join(con: duckdb.DuckDBPyConnection, sql: str, sources: Sequence[SourceStats], bound: int, output: str) -> JoinEstimate:
    """Return the estimate, or raise JoinTooLargeError when it exceeds ``bound``. ``con`` holds the
    node's source views (named as in ``sources``); the SQL is planned, never executed."""
    estimate = _Estimator(con, {s.name: s for s in sources}).estimate(sql, output)
    if estimate.rows > bound:
        raise JoinTooLargeError(
            f"join {output!r} refused before writing anything: the data says it could produce about "
            f"{estimate.rows:,} rows, over the bound of {bound:,}. Largest step: {estimate.largest}. "
            f"(Estimated from the sources' row counts and the distinct counts of the join keys: a join "
            f"of L and R rows gives about L x R / max(distinct keys).) If this is intended, raise "
            f"max_rows= on the node or {ENV_MAX_JOIN_ROWS}"
        )
    return estimate


class _Estimator:
    def __init__(self, con: duckdb.DuckDBPyConnection, sources: Mapping[str, SourceStats]) -> None:
        self.con = con
        self.sources = sources
        self.steps: list[tuple[float, str]] = []
        self._rows: dict[str, float] = {}
        self._ndv: dict[tuple[str, str], float] = {}
        self._wanted: dict[str, list[str]] | None = None  # set while the first walk lists the keys to measure
        self._ctes: dict[str, _Rel] = {}

    # -- the plan ---------------------------------------------------------------------------
    def estimate(self, sql: str, output: str) -> JoinEstimate:
        plan = self._plan(sql, output)
        # Walked twice: first to list every key column whose distinct count the estimate uses,
        # and every source whose rows must be counted (the walk's path depends on the plan
        # alone, never on a count), which are then measured with one scan per source; then with
        # the counts. A query per column cost a scan each: seven in TPC-H Q3, four of them over
        # ``orders``, and a delta slice's row count one more.
        self._wanted = {}
        for node in plan:
            self._walk(node)
        self._measure(self._wanted)
        self._wanted = None
        self.steps.clear()
        self._ctes.clear()
        final = max((self._walk(node).rows for node in plan), default=0.0)
        worst, what = max(self.steps, default=(final, "the query's result"))
        rows = math.ceil(max(final, worst))
        return JoinEstimate(rows=rows, steps=[s for _, s in self.steps], largest=what if worst >= final else "the query's result")

    def _plan(self, sql: str, output: str) -> list[dict[str, Any]]:
        # only planned, never run, but binding a table function opens its file: a sandbox that
        # allows no file, on a database opened ahead (``SPARES``: not ~15-20 ms of the step here)
        guard = sandbox(*PARSER_DATABASE)
        try:
            guard.execute(f"SET disabled_optimizers = '{_GUARD_DISABLED_OPTIMIZERS}'")
            for name in self.sources:
                columns = self.con.execute(f"DESCRIBE {_quote(name)}").fetchall()
                guard.execute(f"CREATE TABLE {_quote(name)} ({', '.join(f'{_quote(c[0])} {c[1]}' for c in columns)})")
            return json.loads(guard.execute("EXPLAIN (FORMAT JSON) " + sql).fetchall()[0][1])
        except duckdb.Error as exc:
            raise TridentError(f"the join SQL of {output!r} does not plan: {exc}") from exc
        finally:
            close_soon(guard)

    def _walk(self, node: dict[str, Any]) -> _Rel:
        name = str(node.get("name", "")).strip()
        info = node.get("extra_info") or {}
        kids = [self._walk(c) for c in node.get("children", [])] if name != "CTE" else []
        if name == "CTE":  # [definition, consumer]: CTE_SCANs in the consumer read the definition
            definition, consumer = node["children"]
            self._ctes[str(info.get("Table Index"))] = self._walk(definition)
            return self._walk(consumer)
        if name == "CTE_SCAN":
            return self._ctes.get(str(info.get("CTE Index")), _Rel(1.0))
        if not kids:
            return self._leaf(info)
        if "JOIN" in name or name == "CROSS_PRODUCT":
            return self._join(name, info, kids)
        if "UNION" in name:
            return _Rel(sum(k.rows for k in kids), list(kids[0].cols))
        if name.endswith("GROUP_BY"):
            return self._group_by(info, kids[0])
        if "AGGREGATE" in name:
            return _Rel(1.0, [_Col(a) for a in _items(info.get("Aggregates"))])
        if name == "PROJECTION":
            return _Rel(kids[0].rows, [self._resolve_col(p, kids[0]) for p in _items(info.get("Projections"))])
        if "LIMIT" in name and str(info.get("Limit", "")).isdigit():
            return _Rel(min(kids[0].rows, float(info["Limit"])), kids[0].cols)
        if "WINDOW" in name:
            return _Rel(kids[0].rows, [*kids[0].cols, *(_Col(p) for p in _items(info.get("Projections")))])
        return _Rel(max(k.rows for k in kids), list(kids[0].cols))  # filters, orders, ...: not credited

    def _leaf(self, info: Mapping[str, Any]) -> _Rel:
        table = str(info.get("Table", "")).split(".")[-1]
        if table in self.sources:
            columns = _items(info.get("Projections"))
            return _Rel(self._source_rows(table), [_Col(c, frozenset({(table, c)})) for c in columns])
        try:  # VALUES, range(), ...: DuckDB's own estimate
            return _Rel(max(1.0, float(info.get("Estimated Cardinality", 1))))
        except (TypeError, ValueError):
            return _Rel(1.0)

    def _join(self, name: str, info: Mapping[str, Any], kids: list[_Rel]) -> _Rel:
        if len(kids) != 2:
            return _Rel(max(k.rows for k in kids), list(kids[0].cols))
        left, right = kids
        kind = str(info.get("Join Type", "INNER")).upper()
        if kind in ("SEMI", "ANTI", "MARK", "SINGLE"):
            return _Rel(left.rows, list(left.cols))
        if kind in ("RIGHT_SEMI", "RIGHT_ANTI"):
            return _Rel(right.rows, list(right.cols))
        product = left.rows * right.rows
        divisor, keys = 0.0, []
        untraced = []
        for cond in _items(info.get("Conditions")):
            sides = _split_equality(cond)
            if sides is None:
                continue
            d_left, d_right = self._col_ndv(sides[0], left), self._col_ndv(sides[1], right)
            if d_left is None and d_right is None:
                untraced.append(cond)
                continue
            d = max(x for x in (d_left, d_right) if x is not None)
            keys.append(f"{cond} ({_n(d_left)} x {_n(d_right)} distinct)")
            divisor = max(divisor, d)
        rows = product / divisor if divisor else product
        if kind == "LEFT":
            rows = max(rows, left.rows)
        elif kind == "RIGHT":
            rows = max(rows, right.rows)
        elif kind in ("FULL", "OUTER"):
            rows = max(rows, left.rows, right.rows)
        how = f" on {', '.join(keys)}" if keys else (" with no equality condition" if not untraced else "")
        if untraced:
            how += f"; join keys {untraced} could not be traced to source columns, so they count as no key"
        self.steps.append((rows, f"{kind.lower()} {name} of {left.rows:,.0f} x {right.rows:,.0f} rows{how} ~ {rows:,.0f} rows"))
        return _Rel(rows, [*left.cols, *right.cols])

    def _group_by(self, info: Mapping[str, Any], child: _Rel) -> _Rel:
        groups = [self._resolve_col(g, child) for g in _items(info.get("Groups"))]
        ndvs = [self._ndv_of(c, child) for c in groups]
        rows = child.rows
        if groups and all(d is not None for d in ndvs):
            rows = min(rows, math.prod(d for d in ndvs if d is not None))
        return _Rel(rows, [*groups, *(_Col(a) for a in _items(info.get("Aggregates")))])

    # -- columns ----------------------------------------------------------------------------
    def _resolve_col(self, expr: str, rel: _Rel) -> _Col:
        """The column an expression of a node's output is, when it is a plain reference."""
        expr = expr.strip()
        pos = _POSITION.match(expr)
        if pos:
            i = int(pos.group(1))
            return rel.cols[i] if i < len(rel.cols) else _Col(expr)
        ident = _IDENT.match(expr)
        if ident:
            name = (ident.group(1) or "").replace('""', '"') or ident.group(2)
            origins = frozenset(o for c in rel.cols if c.name == name for o in c.origins)
            return _Col(name, origins)
        return _Col(expr)

    def _col_ndv(self, expr: str, rel: _Rel) -> float | None:
        return self._ndv_of(self._resolve_col(_strip_parens(expr), rel), rel)

    def _ndv_of(self, col: _Col, rel: _Rel) -> float | None:
        """Distinct values of a column in ``rel``: the fewest of its possible origins (a name two
        sources share counts as the less distinct one), never more than ``rel``'s rows."""
        if not col.origins:
            return None
        return max(1.0, min(min(self._source_ndv(s, c) for s, c in col.origins), rel.rows))

    # -- measured on the data ---------------------------------------------------------------
    def _source_rows(self, name: str) -> float:
        if name not in self._rows:
            known = self.sources[name].rows
            if known is None:
                if self._wanted is not None:  # the first walk: counted with the source's key columns
                    self._wanted.setdefault(name, [])
                    return 1.0
                self._measure({name: []})
            else:
                self._rows[name] = float(known)
        return self._rows[name]

    def _source_ndv(self, name: str, column: str) -> float:
        if self._wanted is not None:  # the first walk: only list it
            columns = self._wanted.setdefault(name, [])
            if column not in columns:
                columns.append(column)
            return 1.0
        if (name, column) not in self._ndv:
            self._measure({name: [column]})
        return self._ndv[(name, column)]

    def _measure(self, wanted: Mapping[str, Sequence[str]]) -> None:
        """Each source's listed columns' distinct counts, and its rows when the control plane
        has no count of them, in one scan of that source."""
        for name, columns in wanted.items():
            todo = [c for c in columns if (name, c) not in self._ndv]
            count = name not in self._rows and self.sources[name].rows is None
            if not todo and not count:
                continue
            aggs = [*(["count(*)"] if count else []), *(f"approx_count_distinct({_quote(c)})" for c in todo)]
            [row] = self.con.execute(f"SELECT {', '.join(aggs)} FROM {_quote(name)}").fetchall()
            values = list(row)
            if count:
                self._rows[name] = float(values.pop(0))
            for column, value in zip(todo, values, strict=True):
                self._ndv[(name, column)] = float(value or 0)


def _items(value: Any) -> list[str]:
    if value is None or value == "":
        return []
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


def _split_equality(cond: str) -> tuple[str, str] | None:
    """``lhs = rhs`` (or IS NOT DISTINCT FROM) at the top level of a join condition, else None."""
    for op in _EQUALITY:
        depth, i = 0, 0
        hits = []
        while i < len(cond):
            ch = cond[i]
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0 and cond.startswith(op, i):
                hits.append(i)
            i += 1
        if len(hits) == 1:
            return cond[: hits[0]].strip(), cond[hits[0] + len(op) :].strip()
    return None


def _strip_parens(expr: str) -> str:
    expr = expr.strip()
    while expr.startswith("(") and expr.endswith(")") and _balanced(expr[1:-1]):
        expr = expr[1:-1].strip()
    return expr


def _balanced(s: str) -> bool:
    depth = 0
    for ch in s:
        depth += (ch == "(") - (ch == ")")
        if depth < 0:
            return False
    return depth == 0


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _n(value: float | None) -> str:
    return "?" if value is None else f"{value:,.0f}"
