"""The join guard: refuse a join whose sources' recorded row counts say the result could explode.

DuckDB's plan says how the SQL combines its sources (it is never executed here); the sources' row
counts come from the control plane (recorded at each COMMIT, nothing is scanned). The estimate
walks the plan bottom-up: a scan is its source's row count; an equality (hash) join is assumed to be
a key join, bounded by its larger side; a cross product or a join without an equality condition
multiplies its sides; a union adds them; anything else passes its input's size through. When the
estimate exceeds the bound the node fails before reading a row, naming the offending operator.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass

import duckdb

from trident_resources import TridentError

DEFAULT_MAX_JOIN_ROWS = 1_000_000_000
ENV_MAX_JOIN_ROWS = "TRIDENT_JOIN_MAX_ROWS"
_MULTIPLYING = {"CROSS_PRODUCT", "NESTED_LOOP_JOIN", "BLOCKWISE_NL_JOIN", "PIECEWISE_MERGE_JOIN"}
_SCANS = ("ARROW_SCAN", "PYTHON_ARROW_SCAN", "SEQ_SCAN", "TABLE_SCAN", "READ_PARQUET")  # READ_PARQUET: native scans (issue 12)


class JoinTooLargeError(TridentError):
    """The sources' row counts say the join could produce more rows than allowed."""


@dataclass(frozen=True)
class SourceStats:
    key: str
    rows: int
    columns: frozenset[str]


def max_join_rows(explicit: int | None) -> int:
    """The bound: the node's ``max_rows``, else ``TRIDENT_JOIN_MAX_ROWS``, else one billion."""
    if explicit is not None:
        return explicit
    return int(os.environ.get(ENV_MAX_JOIN_ROWS, DEFAULT_MAX_JOIN_ROWS))


def check_join(con: duckdb.DuckDBPyConnection, sql: str, stats: Mapping[str, SourceStats], bound: int, output: str) -> int:
    """Return the estimate, or raise JoinTooLargeError when it exceeds ``bound``."""
    try:
        plan = json.loads(con.execute("EXPLAIN (FORMAT JSON) " + sql).fetchall()[0][1])
    except duckdb.Error as exc:
        raise TridentError(f"the join SQL of {output!r} does not plan: {exc}") from exc
    worst: list[tuple[int, str]] = []
    estimate = max(_estimate(node, stats, worst) for node in plan)
    if estimate > bound:
        op, what = max(worst) if worst else (estimate, "the plan")
        rows = ", ".join(f"{s.key}={s.rows:,}" for s in stats.values())
        raise JoinTooLargeError(
            f"join {output!r} refused: its sources' recorded row counts ({rows}) say the result could reach "
            f"{estimate:,} rows, over the bound of {bound:,}. Largest step: {what}. If this is not an "
            f"accidental cross join, raise max_rows= on the node or {ENV_MAX_JOIN_ROWS}"
        )
    return estimate


def _estimate(node: dict, stats: Mapping[str, SourceStats], worst: list[tuple[int, str]]) -> int:
    name = node.get("name", "")
    info = node.get("extra_info") or {}
    kids = [_estimate(c, stats, worst) for c in node.get("children", [])]
    if any(s in name for s in _SCANS) and not kids:
        return _scan_rows(info, stats)
    if name in _MULTIPLYING or (name.endswith("JOIN") and "=" not in str(info.get("Conditions", "="))):
        n = 1
        for k in kids:
            n *= max(k, 1)
        cond = info.get("Conditions")
        worst.append((n, f"{name}{' on ' + str(cond) if cond else ''} of {' x '.join(f'{k:,}' for k in kids)} rows"))
        return n
    if "UNION" in name:
        return sum(kids)
    if kids:
        return max(kids)
    try:
        return int(info.get("Estimated Cardinality", 1))
    except (TypeError, ValueError):
        return 1


def _scan_rows(info: dict, stats: Mapping[str, SourceStats]) -> int:
    cols = info.get("Projections") or []
    cols = [cols] if isinstance(cols, str) else cols
    matches = [s.rows for s in stats.values() if cols and set(cols) <= s.columns]
    if matches:
        return max(matches)
    return max((s.rows for s in stats.values()), default=1)  # unknown scan: assume the largest source
