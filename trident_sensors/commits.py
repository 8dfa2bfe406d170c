"""Every commit is an event Dagster sees: the ledger sensor reports each transaction committed
outside Dagster (``ingest.api``, ``sync.*``, ``ingest.stream``, ``row.edit``, a canary, a script)
as a runless materialization of that dataset's asset, so the asset's history shows every version
and automation conditions (``dg.AutomationCondition.eager()`` on a delta node) react to it.

A commit made by a Dagster run carries the run's id in its ledger metadata (the IO manager puts it
there, whatever the writer) and is skipped when this instance knows the run: Dagster recorded that
materialization already. A run this instance does not know (``dagster asset materialize`` or a
script's ``materialize()`` on a throwaway instance, a test, another deployment) recorded it
somewhere this UI never looks, so its commit is reported like any other. So is a version a run
staged and its blocking checks rejected, published later by an operator: that run failed and
recorded no current version. A commit of a partitioned asset's run is reported once per Dagster
partition it wrote (the IO manager records them in the ledger, ``PARTITION_KEYS``).

The cursor is the ledger's commit sequence (``Trident.commits_since``). Two writers committing at
the same moment can make a sequence number visible a moment after a larger one, so the cursor only
moves past commits older than ``SETTLE_SECONDS`` and remembers which newer ones it has reported:
each commit is reported exactly once, however commits interleave. The first tick starts at the
beginning of the workspace's ledger (``COMMITS_PER_TICK`` at a time); reset the cursor in the UI to
report everything again.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import dagster as dg

from trident_resources import LedgerEntry, Trident
from trident_resources.dagster import PARTITION_KEYS, RUN_ID, TridentResource, report

SENSOR_NAME = "trident_ledger_commits"
COMMITS_PER_TICK = 500
SETTLE_SECONDS = 60.0
TICK_SECONDS = 30

Commit = tuple[int, str, LedgerEntry]  # (commit sequence, dataset key, ledger entry)


@dataclass(frozen=True)
class LedgerCursor:
    """Every commit up to ``after`` is settled; ``seen`` are the later ones already handled."""

    after: int = 0
    seen: frozenset[int] = field(default_factory=frozenset)

    @classmethod
    def parse(cls, raw: str | None) -> LedgerCursor:
        if not raw:
            return cls()
        data = json.loads(raw)
        return cls(int(data["after"]), frozenset(int(s) for s in data.get("seen", [])))

    def serialize(self) -> str:
        return json.dumps({"after": self.after, "seen": sorted(self.seen)})


def from_dagster(
    entry: LedgerEntry, failed_runs: AbstractSet[str] = frozenset(), known_runs: AbstractSet[str] | None = None
) -> bool:
    """The commit was made by a Dagster run that recorded its own materialization in this
    instance: a run of ``known_runs`` (None: every run is taken as known). Not so a version a run
    staged and its blocking checks rejected (the run failed) that an operator published later
    (`trident publish`): the run recorded no current version of it."""
    run = (entry.metadata or {}).get(RUN_ID)
    if not run or (known_runs is not None and str(run) not in known_runs):
        return False
    return not (entry.staged_at is not None and run in failed_runs)


def run_ids(commits: Sequence[Commit]) -> set[str]:
    """The Dagster runs that made ``commits`` (whether this instance knows them is looked up)."""
    return {str(e.metadata[RUN_ID]) for _, _, e in commits if (e.metadata or {}).get(RUN_ID)}


def staged_runs(commits: Sequence[Commit]) -> set[str]:
    """The runs whose staged versions are among ``commits`` (whose fate the sensor looks up)."""
    return {str(e.metadata[RUN_ID]) for _, _, e in commits if e.staged_at is not None and (e.metadata or {}).get(RUN_ID)}


def commit_events(
    commits: Sequence[Commit],
    cursor: LedgerCursor,
    now: datetime,
    settle: timedelta = timedelta(seconds=SETTLE_SECONDS),
    failed_runs: AbstractSet[str] = frozenset(),
    known_runs: AbstractSet[str] | None = None,
) -> tuple[list[dg.AssetMaterialization], LedgerCursor]:
    """The materializations to report for ``commits`` (ascending sequence, all after
    ``cursor.after``) and the next cursor; ``failed_runs``: runs that failed, ``known_runs``: runs
    this instance has (see from_dagster)."""
    events = [
        event
        for seq, key, entry in commits
        if seq not in cursor.seen and not from_dagster(entry, failed_runs, known_runs)
        for event in materializations(key, entry)
    ]
    after = cursor.after
    for seq, _, entry in commits:  # move only over a prefix of commits old enough to be settled
        if entry.ended_at is None or entry.ended_at > now - settle:
            break
        after = seq
    seen = frozenset(s for s in (*cursor.seen, *(seq for seq, _, _ in commits)) if s > after)
    return events, LedgerCursor(after, seen)


def materializations(key: str, entry: LedgerEntry) -> list[dg.AssetMaterialization]:
    """A commit as Dagster shows it: one materialization, or one per Dagster partition the run wrote."""
    partitions = (entry.metadata or {}).get(PARTITION_KEYS) or []
    if not partitions:
        return [materialization(key, entry)]
    return [materialization(key, entry, partition=str(p)) for p in partitions]


def materialization(key: str, entry: LedgerEntry, partition: str | None = None) -> dg.AssetMaterialization:
    """A commit as Dagster shows it: the same keys a Dagster-made materialization reports, ids as text."""
    metadata: dict[str, Any] = {
        "dagster/row_count": dg.MetadataValue.int(int(entry.row_count or 0)),
        "trident/txn_id": str(entry.txn_id),
        "trident/writer": entry.writer,
        "trident/mode": entry.mode,
        "trident/sink": entry.sink,
        "trident/rows_written": int(entry.rows_written or 0),
        "trident/snapshot_id": dg.MetadataValue.text(str(entry.snapshot_id)),
        "trident/reported_by": SENSOR_NAME,
    }
    if entry.committed_at is not None:
        metadata["trident/committed_at"] = dg.MetadataValue.timestamp(entry.committed_at)
    if entry.schema_version is not None:
        metadata["trident/schema_version"] = entry.schema_version
    run = (entry.metadata or {}).get(RUN_ID)
    where = f"by Dagster run {run}, which this instance does not know" if run else "outside Dagster"
    return dg.AssetMaterialization(
        asset_key=dg.AssetKey(key.split("/")),
        partition=partition,
        description=f"{entry.mode} by {entry.writer}, committed {where} (txn {entry.txn_id})",
        metadata=report(metadata),  # the same few keys as a Dagster-made materialization
    )


@dg.sensor(
    name=SENSOR_NAME,
    minimum_interval_seconds=TICK_SECONDS,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Report every commit made outside Dagster (ingest, sync, stream, row edits, canaries), or by runs this "
    "instance does not know, as a materialization of its asset, so asset history and automation conditions see it.",
)
def trident_commits(context: dg.SensorEvaluationContext, trident: TridentResource) -> dg.SensorResult:
    cursor = LedgerCursor.parse(context.cursor)
    with Trident(trident.settings()) as t:
        commits = t.commits_since(cursor.after, COMMITS_PER_TICK)
    runs = run_ids(commits)
    statuses = (
        {
            r.dagster_run.run_id: r.dagster_run.status
            for r in context.instance.get_run_records(dg.RunsFilter(run_ids=sorted(runs)))
        }
        if runs
        else {}
    )
    failed = {r for r in staged_runs(commits) if statuses.get(r) == dg.DagsterRunStatus.FAILURE}
    events, nxt = commit_events(commits, cursor, datetime.now(UTC), failed_runs=failed, known_runs=set(statuses))
    if events:
        context.log.info(
            f"{len(events)} commit(s) made outside Dagster: "
            + ", ".join(f"{e.asset_key.to_user_string()} ({e.description})" for e in events)
        )
    return dg.SensorResult(
        asset_events=events,
        cursor=nxt.serialize(),
        skip_reason=None if events else f"no new commits from outside this instance ({len(commits)} read)",
    )
