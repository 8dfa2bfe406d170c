"""Output strategies: how a node's result becomes its dataset's next version.

=================  =====================  =================================================================
strategy           Trident.write mode     meaning
=================  =====================  =================================================================
replace()          replace                the output becomes exactly the result (default)
append_always()    append                 every run adds its result
append_new(keys)   append_new + keys      add only rows whose key is not there yet
upsert(keys)       upsert + keys          update matched keys (identity kept), insert the rest
snapshot_replace   replace + keys         the output becomes the result; rows whose key existed keep
(keys)                                    their ``__row_id``/``__row_index``
delta(keys=None,   append (upsert with    incremental: read only the source rows committed after this
driver=None)       keys) or a full        output's watermark for that source. Any non-append commit of a
                   rebuild (replace)      source inside the window (replace, upsert, delete) forces a full
                                          rebuild, as does a first run. The watermark is the source
                                          commit's ``committed_at`` and advances only in the output's
                                          COMMIT step (it is passed to ``Trident.write``).
                                          A partitioned node keeps one watermark per output
                                          partition (see ``plan_output``).
=================  =====================  =================================================================

Delta is exact for row-wise SQL (filters, projections, per-row expressions, lookups into sources that
did not change). It cannot be exact for aggregates over the delta source (a new row would need to be
added to an old group): use a full strategy for those. For a join, ``driver`` names the source whose
new rows are read; any commit to another source since the watermark forces a full rebuild.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from trident_resources import PARTITION_META, Description, LedgerEntry, PartitionFilter, Trident, TridentError
from trident_resources.dagster import WriteMode

StrategyKind = Literal["replace", "append_always", "append_new", "upsert", "snapshot_replace", "delta"]
APPEND_ONLY_MODES: tuple[WriteMode, ...] = ("append", "append_new")


@dataclass(frozen=True)
class Strategy:
    kind: StrategyKind
    keys: tuple[str, ...] = ()
    driver: str | None = None  # delta on several sources: the dataset key whose new rows are read

    def describe(self) -> str:
        keys = f"(keys={list(self.keys)})" if self.keys else ""
        return f"{self.kind}{keys}"


def replace() -> Strategy:
    return Strategy("replace")


def append_always() -> Strategy:
    return Strategy("append_always")


def append_new(keys: Sequence[str]) -> Strategy:
    return Strategy("append_new", _need_keys("append_new", keys))


def upsert(keys: Sequence[str]) -> Strategy:
    return Strategy("upsert", _need_keys("upsert", keys))


def snapshot_replace(keys: Sequence[str]) -> Strategy:
    return Strategy("snapshot_replace", _need_keys("snapshot_replace", keys))


def delta(keys: Sequence[str] | None = None, driver: str | None = None) -> Strategy:
    """Incremental; ``keys`` makes each increment an upsert instead of an append."""
    return Strategy("delta", tuple([keys] if isinstance(keys, str) else (keys or ())), driver)


def _need_keys(kind: str, keys: Sequence[str]) -> tuple[str, ...]:
    out = (keys,) if isinstance(keys, str) else tuple(keys or ())
    if not out:
        raise ValueError(f"strategy {kind!r} needs keys=[...] naming the key column(s)")
    return out


# strategy kind -> (Trident.write mode, whether the strategy's keys go to the write)
_FULL_MODES: dict[StrategyKind, tuple[WriteMode, bool]] = {
    "replace": ("replace", False),
    "append_always": ("append", False),
    "append_new": ("append_new", True),
    "upsert": ("upsert", True),
    "snapshot_replace": ("replace", True),
}


@dataclass(frozen=True)
class Plan:
    """What one run of a node writes: the write mode, which source rows to read, and the
    watermarks its COMMIT records."""

    mode: WriteMode
    keys: tuple[str, ...]
    since: dict[str, datetime | None]  # source key -> read rows with __created_at > this (None: all)
    watermarks: dict[str, tuple[datetime, uuid.UUID | None]]
    incremental: bool
    reason: str
    sources: dict[str, Description] = field(default_factory=dict)

    def metadata(self) -> dict[str, str]:
        return {
            "trident/incremental": str(self.incremental).lower(),
            "trident/plan": self.reason,
        }


def plan_output(
    t: Trident,
    output: str,
    sources: Sequence[str],
    strategy: Strategy,
    partition: PartitionFilter | None = None,
    *,
    staged: Mapping[str, uuid.UUID] | None = None,
) -> Plan:
    """Decide how this run writes ``output`` from the current state of its ``sources``.

    ``partition`` (a partitioned node's run): delta reads that partition's own watermarks, so
    running one partition neither consumes nor advances another's; a partition with no
    watermark yet (or a range whose partitions disagree) is rebuilt, i.e. replaced.

    ``staged``: sources read as a version the run staged (it publishes once, at its end). Such a
    version has no commit instant yet, so no watermark is recorded for it, and a delta node
    reading one is rebuilt in full."""
    staged = staged or {}
    # versions only: no catalog look-up
    described = {s: t.describe(s, storage=False, staged=staged.get(s)) for s in sources}
    marks = {s: (d.committed_at, d.last_txn_id) for s, d in described.items() if d.committed_at is not None and s not in staged}
    full: dict[str, datetime | None] = {s: None for s in sources}
    if strategy.kind != "delta":
        full_mode, keyed = _FULL_MODES[strategy.kind]
        return Plan(full_mode, strategy.keys if keyed else (), full, marks, False, strategy.describe(), described)
    rebuild = Plan("replace", (), full, marks, False, "", described)
    driver = strategy.driver or (sources[0] if len(sources) == 1 else None)
    if driver is None or driver not in sources:
        raise TridentError(
            f"delta node {output!r} reads {list(sources)}: name the source whose new rows are read with "
            "delta(driver='<dataset key>')"
        )
    if not t.exists(output):
        return _why(rebuild, "full rebuild: first run")
    if staged:
        return _why(rebuild, f"full rebuild: {sorted(staged)} staged earlier in this run (published with it)")
    seen = t.watermarks(output, partition)
    since: dict[str, datetime | None] = {}
    for s, _d in described.items():
        mark = seen.get(s)
        if mark is None:
            where = f" in {partition.describe()}" if partition is not None else ""
            return _why(rebuild, f"full rebuild: no watermark{where} for {s}")
        later = [e for e in t.history(s) if e.status == "committed" and e.committed_at is not None and e.committed_at > mark]
        if partition is not None:  # a source's write of other partitions changed no row this run reads
            later = [e for e in later if not _elsewhere(t, s, e, partition)]
        if s != driver and later:
            return _why(
                rebuild, f"full rebuild: {s} (not the delta driver) committed {len(later)} change(s) since {mark.isoformat()}"
            )
        # a delta reads rows stamped (``__created_at``, the transaction's instant τ) after the mark,
        # which is a commit's visibility instant: a commit that became visible after the mark but
        # began before it (a concurrent partition writer, a staged version published later) has
        # rows stamped earlier, which that window would miss
        early = [e for e in later if e.started_at <= mark]
        if s == driver and early:
            e = early[0]
            return _why(
                rebuild,
                f"full rebuild: {s}'s txn {e.txn_id} began before the watermark {mark.isoformat()} and committed after it",
            )
        changed = [e for e in later if e.mode not in APPEND_ONLY_MODES]
        if changed:
            e = changed[-1]
            return _why(rebuild, f"full rebuild: {s} had a {e.mode} (txn {e.txn_id}) after the watermark {mark.isoformat()}")
        since[s] = mark if s == driver else None
    delta_mode: WriteMode = "upsert" if strategy.keys else "append"
    reason = f"delta: rows of {driver} committed after {since[driver].isoformat()}"  # type: ignore[union-attr]
    if partition is not None:
        reason += f" (watermark of {partition.describe()})"
    return Plan(delta_mode, strategy.keys, since, marks, True, reason, described)


def _elsewhere(t: Trident, source: str, entry: LedgerEntry, partition: PartitionFilter) -> bool:
    """Did ``entry`` (a commit of ``source``) write only partitions outside ``partition``? Such a
    commit cannot change the source rows a run of ``partition`` reads (it reads the source within
    ``partition`` when the source has its columns), so it forces no rebuild of this partition."""
    written = entry.metadata.get(PARTITION_META)
    schema = t.schema(source)
    if not written or not all(c in schema.names for c in partition.columns):
        return False
    try:
        return partition.bind(schema).disjoint(PartitionFilter.from_metadata(written).bind(schema))
    except (TridentError, KeyError, TypeError, ValueError):  # an older or foreign record: cannot tell
        return False


def _why(plan: Plan, reason: str) -> Plan:
    return Plan(plan.mode, plan.keys, plan.since, plan.watermarks, plan.incremental, reason, plan.sources)


def wait_for_quiet_sources(t: Trident, sources: Sequence[str], wait_s: float) -> None:
    """Wait while a source has a write in flight, so a node never reads rows whose commit the
    control plane has not recorded yet (they would be read again by the next delta run)."""
    deadline = time.monotonic() + wait_s
    for s in sources:
        while open_write(t, s):
            if time.monotonic() >= deadline:
                raise TridentError(f"source {s!r} has a write in flight for over {wait_s:.0f}s; retry the node when it finishes")
            time.sleep(0.2)


def open_write(t: Trident, key: str) -> bool:
    """Is the newest ledger entry of ``key`` an open write? Planning waits for one to finish, and
    the compute step re-checks it when its sources are opened (a source written meanwhile means
    the sources are not stable: open them again)."""
    newest = t.history(key, limit=1)
    return bool(newest) and newest[0].status == "open"
