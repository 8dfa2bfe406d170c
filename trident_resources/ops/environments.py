"""Environments (docs/environments.md): a named, zero-copy view of every dataset of a workspace.

An environment's write of a dataset commits to the Iceberg branch ``trident_env_<name>`` of the
dataset's table, created from production's published snapshot on its first write (a ref in the
same commit as the write's snapshot: no data file copied), and records the version as the
environment's head of the dataset (``trident_env_heads``) instead of production's record. Readers
of the environment resolve that head where the environment wrote one, production's record
otherwise (``ControlPlane._seen``); production never reads a head.

``promote`` publishes every dataset the environment changed as ONE transaction group (the
multi-dataset publish): a dataset production did not touch since the fork is promoted by moving
``main`` to the environment's snapshot (metadata only); one production changed meanwhile is
rebased when both changes are appends, or touch disjoint keys of a keyed dataset (the
environment's new or changed rows written onto production's version in the group), and any other
case refuses the whole promotion before anything is written (``EnvironmentConflictError``).
``drop`` removes the branches, the snapshots and files only the environment used, and its
control-plane rows; a file any other ref of the table reads is never deleted.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from ..control import groups
from ..control.plane import (
    ENV_FORK_META,
    ENV_LEDGER_META,
    ENV_PROMOTED_META,
    PRODUCTION,
    DatasetRecord,
    EnvHead,
    EnvironmentRecord,
    LedgerEntry,
    entry_environment,
)
from ..core.errors import (
    EnvironmentConflictError,
    EnvironmentNotFoundError,
    EnvironmentUnsupportedError,
    InvalidEnvironmentNameError,
)
from ..core.identity import ROW_ID
from ..core.settings import check_environment_name
from ..engine import Engine
from .env_writes import KEYS_META

log = logging.getLogger("trident")
PROMOTED_META = ENV_PROMOTED_META  # a promotion's ledger rows: the environment they came from
PROMOTE_WRITER = "ingest.api"


# -- what is there -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class EnvironmentDataset:
    """One dataset an environment wrote: its fork and its head."""

    key: str
    born_in_env: bool
    fork_txn_id: uuid.UUID | None
    fork_snapshot_id: int | None
    txn_id: uuid.UUID
    snapshot_id: int | None
    row_count: int
    updated_at: datetime
    production_moved: bool


@dataclass(frozen=True)
class EnvironmentInfo:
    """``trident env list`` / ``show``: an environment and (for ``show``) the datasets it wrote."""

    name: str
    created_at: datetime
    last_used_at: datetime
    dataset_count: int
    datasets: list[EnvironmentDataset] = field(default_factory=list)

    @property
    def idle_days(self) -> float:
        return (datetime.now(UTC) - self.last_used_at).total_seconds() / 86400


def _name(name: str) -> str:
    return check_environment_name(name, InvalidEnvironmentNameError)


def _record(engine: Engine, name: str) -> EnvironmentRecord:
    name = _name(name)
    if name == PRODUCTION:
        raise EnvironmentUnsupportedError(
            "`main` is production, not an environment: it has no branch to show, diff, promote or drop"
        )
    found = engine.control.environment_record(engine.workspace, name)
    if found is None:
        raise EnvironmentNotFoundError(f"no environment {name!r} in workspace {engine.workspace!r} (see `trident env list`)")
    return found


def list_environments(engine: Engine) -> list[EnvironmentInfo]:
    """Every environment of the workspace (name, when made, when last written, how many datasets).

    Raises:
        ControlPlaneUnavailableError: the control-plane Postgres went away.
    """
    return [
        EnvironmentInfo(r.name, r.created_at, r.last_used_at, r.datasets) for r in engine.control.environments(engine.workspace)
    ]


def _heads(engine: Engine, name: str, *, promoted: bool = False) -> list[tuple[EnvHead, DatasetRecord]]:
    heads = engine.control.env_heads(engine.workspace, name, promoted=promoted)
    records = {d.dataset_id: d for d in engine.control.all_datasets(engine.workspace)}
    out = [(h, records[h.dataset_id]) for h in heads.values() if h.dataset_id in records]
    return sorted(out, key=lambda p: p[1].key)


def _moved(head: EnvHead, prod: DatasetRecord) -> bool:
    """Did production commit anything of the dataset since the environment forked it?"""
    if head.born_in_env:
        return prod.exists
    return prod.last_txn_id != head.fork_txn_id


def show(engine: Engine, name: str) -> EnvironmentInfo:
    """One environment and every dataset it wrote.

    Raises:
        InvalidEnvironmentNameError: ``name`` is not an environment name.
        EnvironmentNotFoundError: no such environment.
    """
    rec = _record(engine, name)
    rows = [
        EnvironmentDataset(
            key=ds.key,
            born_in_env=h.born_in_env,
            fork_txn_id=h.fork_txn_id,
            fork_snapshot_id=h.fork_snapshot_id,
            txn_id=h.last_txn_id,
            snapshot_id=h.snapshot_id,
            row_count=h.row_count,
            updated_at=h.updated_at,
            production_moved=_moved(h, ds),
        )
        for h, ds in _heads(engine, rec.name)
    ]
    return EnvironmentInfo(rec.name, rec.created_at, rec.last_used_at, len(rows), rows)


# -- diff -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RowChanges:
    """How one version differs from another: rows matched by the dataset's keys (or, without
    keys, by ``__row_id``, the identity every write keeps for rows it does not replace)."""

    added: int
    removed: int
    changed: int
    # the matched keys (as tuples) each kind touched, for the conflict check of a promotion
    touched: frozenset[tuple[Any, ...]] = frozenset()

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed)


@dataclass(frozen=True)
class DatasetDiff:
    """``trident env diff``: one dataset the environment wrote, against the version it forked."""

    key: str
    born_in_env: bool
    rows_added: int
    rows_removed: int
    rows_changed: int
    matched_by: list[str]  # the key columns rows were matched by (["__row_id"] without keys)
    columns_added: list[str]
    columns_removed: list[str]
    columns_retyped: list[str]
    production_moved: bool  # production committed the dataset since the fork
    environment_modes: list[str]  # the write modes the environment used, oldest first


@dataclass(frozen=True)
class EnvironmentDiff:
    name: str
    datasets: list[DatasetDiff]

    @property
    def changed(self) -> list[DatasetDiff]:
        return [
            d
            for d in self.datasets
            if d.born_in_env
            or d.rows_added
            or d.rows_removed
            or d.rows_changed
            or d.columns_added
            or d.columns_removed
            or d.columns_retyped
        ]


def _read(engine: Engine, ds: DatasetRecord) -> pa.Table:
    """The whole version ``ds`` names, identity included (production's with its inlined tail)."""
    from ..read.datasets import read_record

    return read_record(engine, ds)


def _fork_record(head: EnvHead, prod: DatasetRecord) -> DatasetRecord | None:
    if head.born_in_env or head.fork_snapshot_id is None:
        return None
    return replace(
        prod,
        snapshot_id=head.fork_snapshot_id,
        last_txn_id=head.fork_txn_id,
        row_count=head.fork_row_count or 0,
        environment=head.environment,
    )


def _empty_like(table: pa.Table) -> pa.Table:
    return table.schema.empty_table()


def row_changes(before: pa.Table | None, after: pa.Table, keys: Sequence[str]) -> RowChanges:
    """Rows added, removed and changed from ``before`` to ``after`` (see ``RowChanges``), counted
    by DuckDB over the two Arrow tables.

    Raises:
        duckdb.Error: only on a DuckDB fault (the queries are built from the tables' own columns).
    """
    if before is None:
        before = _empty_like(after)
    match = list(keys) or [ROW_ID]
    if any(k not in before.column_names or k not in after.column_names for k in match):
        match = [ROW_ID]
    common = [c for c in _user(after).column_names if c in before.column_names and c not in match]
    con = duckdb.connect()
    try:
        con.register("b", before.select(match + common))
        con.register("a", after.select(match + common))
        on = " AND ".join(f'a."{k}" IS NOT DISTINCT FROM b."{k}"' for k in match)
        same = " AND ".join(f'a."{c}" IS NOT DISTINCT FROM b."{c}"' for c in common) or "true"
        cols = ", ".join(f'x."{k}"' for k in match)
        in_b = on.replace('a."', 'x."')  # a row x of ``a`` has a match in ``b``
        in_a = on.replace('b."', 'x."')
        added = con.execute(f"SELECT {cols} FROM a x WHERE NOT EXISTS (SELECT 1 FROM b WHERE {in_b})").fetchall()
        removed = con.execute(f"SELECT {cols} FROM b x WHERE NOT EXISTS (SELECT 1 FROM a WHERE {in_a})").fetchall()
        keyed = ", ".join(f'a."{k}"' for k in match)
        changed = con.execute(f"SELECT {keyed} FROM a JOIN b ON {on} WHERE NOT ({same})").fetchall()
    finally:
        con.close()
    touched = frozenset(tuple(r) for r in [*added, *removed, *changed])
    return RowChanges(len(added), len(removed), len(changed), touched)


def _schema_change(
    before: list[dict[str, Any]] | None, after: list[dict[str, Any]] | None
) -> tuple[list[str], list[str], list[str]]:
    was = {c["name"]: c.get("type") for c in before or [] if not c["name"].startswith("__")}
    now = {c["name"]: c.get("type") for c in after or [] if not c["name"].startswith("__")}
    return (
        [c for c in now if c not in was],
        [c for c in was if c not in now],
        [c for c in now if c in was and now[c] != was[c]],
    )


def _env_entries(engine: Engine, head: EnvHead, *, committed_only: bool = True) -> list[LedgerEntry]:
    """The environment's (committed) writes of the dataset, oldest first."""
    out = [
        e
        for e in engine.control.history_in(head.dataset_id, head.environment)
        if (e.status == "committed" or not committed_only) and e.metadata.get(ENV_LEDGER_META) == head.environment
    ]
    return sorted(out, key=lambda e: e.started_at)


def _keys_of(entries: Sequence[LedgerEntry]) -> list[str]:
    for e in reversed(entries):
        keys = e.metadata.get(KEYS_META)
        if keys:
            return list(keys)
    return []


def _dataset_diff(engine: Engine, head: EnvHead, prod: DatasetRecord) -> tuple[DatasetDiff, pa.Table | None, pa.Table]:
    entries = _env_entries(engine, head)
    keys = _keys_of(entries)
    fork = _fork_record(head, prod)
    before = _read(engine, fork) if fork is not None else None
    after = _read(engine, head.over(prod))
    changes = row_changes(before, after, keys)
    fork_schema = _fork_schema(engine, head) if not head.born_in_env else None
    added, removed, retyped = _schema_change(fork_schema, head.schema)
    diff = DatasetDiff(
        key=prod.key,
        born_in_env=head.born_in_env,
        rows_added=changes.added,
        rows_removed=changes.removed,
        rows_changed=changes.changed,
        matched_by=keys or [ROW_ID],
        columns_added=added,
        columns_removed=removed,
        columns_retyped=retyped,
        production_moved=_moved(head, prod),
        environment_modes=[e.mode for e in entries],
    )
    return diff, before, after


def _fork_schema(engine: Engine, head: EnvHead) -> list[dict[str, Any]] | None:
    """The schema of the version the environment forked (its first write recorded it)."""
    entries = _env_entries(engine, head)
    for e in entries:
        fork = e.metadata.get(ENV_FORK_META)
        if fork:
            return fork.get("schema")
    return None


def diff(engine: Engine, name: str) -> EnvironmentDiff:
    """What the environment changed against the production version it forked, per dataset.

    Raises:
        InvalidEnvironmentNameError: ``name`` is not an environment name.
        EnvironmentNotFoundError: no such environment.
    """
    rec = _record(engine, name)
    return EnvironmentDiff(rec.name, [_dataset_diff(engine, h, ds)[0] for h, ds in _heads(engine, rec.name)])


# -- promote ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PromoteResult:
    """A promotion: the group it published and how each dataset went (``fast``: ``main`` moved to
    the environment's snapshot; ``rebased``: the environment's rows written onto production's
    version in the group)."""

    name: str
    group_id: uuid.UUID | None
    published_at: datetime | None
    promoted: dict[str, str]


@dataclass
class _Plan:
    head: EnvHead
    prod: DatasetRecord
    how: str  # fast | append | upsert
    rows: pa.Table | None = None
    keys: list[str] = field(default_factory=list)


def _conflict_or_plan(engine: Engine, head: EnvHead, prod: DatasetRecord) -> _Plan | str:
    """How a dataset production moved since the fork is promoted, or why it cannot be."""
    entries = _env_entries(engine, head)
    env_modes = {e.mode for e in entries}
    fork_at = _committed_at(engine, head.fork_txn_id)
    prod_entries = [
        e
        for e in engine.control.history_in(prod.dataset_id, PRODUCTION)
        if e.status == "committed" and (fork_at is None or (e.committed_at is not None and e.committed_at > fork_at))
    ]
    prod_modes = {e.mode for e in prod_entries}
    if head.born_in_env:
        return "it was created in the environment and production created it meanwhile"
    replaced = sorted(m for m in env_modes | prod_modes if m == "replace")
    if replaced:
        side = "the environment" if "replace" in env_modes else "production"
        return f"{side} replaced it (a replace cannot be rebased onto the other side's change)"
    fork = _fork_record(head, prod)
    assert fork is not None
    before, after = _read(engine, fork), _read(engine, head.over(prod))
    if env_modes <= {"append"} and prod_modes <= {"append"}:
        added = row_changes(before, after, [])
        ids = pa.array([r[0] for r in added.touched], type=pa.string()) if added.touched else pa.array([], pa.string())
        rows = after.filter(pc.is_in(after.column(ROW_ID).cast(pa.string()), value_set=ids))
        return _Plan(head, prod, "append", _user(rows))
    keys = _keys_of(entries)
    if not keys:
        return "both sides changed it and the environment's writes name no keys to tell their rows apart"
    ours = row_changes(before, after, keys)
    theirs = row_changes(before, _read(engine, prod), keys)
    if ours.removed:
        return f"the environment deleted {ours.removed} row(s), which cannot be replayed onto production's change"
    both = ours.touched & theirs.touched
    if both:
        sample = ", ".join(str(k if len(k) > 1 else k[0]) for k in sorted(both, key=str)[:3])
        return f"both changed the same {len(both)} key(s) ({', '.join(keys)} = {sample}{'...' if len(both) > 3 else ''})"
    wanted = [k for k in ours.touched]
    rows = _rows_with_keys(after, keys, wanted)
    return _Plan(head, prod, "upsert", _user(rows), keys)


def _user(table: pa.Table) -> pa.Table:
    """The producer's columns (identity is the engine's: a rebased row is written as new input)."""
    return table.select([c for c in table.column_names if not c.startswith("__")])


def _rows_with_keys(table: pa.Table, keys: list[str], wanted: list[tuple[Any, ...]]) -> pa.Table:
    con = duckdb.connect()
    try:
        con.register("t", table)
        con.register(
            "w", pa.table({k: [w[i] for w in wanted] for i, k in enumerate(keys)}) if wanted else table.select(keys).slice(0, 0)
        )
        on = " AND ".join(f't."{k}" IS NOT DISTINCT FROM w."{k}"' for k in keys)
        return con.sql(f"SELECT t.* FROM t WHERE EXISTS (SELECT 1 FROM w WHERE {on})").to_arrow_table()
    finally:
        con.close()


def _committed_at(engine: Engine, txn_id: uuid.UUID | None) -> datetime | None:
    if txn_id is None:
        return None
    entry = engine.control.ledger_entry(txn_id)
    return None if entry is None else entry.committed_at


def promote(engine: Engine, name: str) -> PromoteResult:
    """Publish every dataset the environment changed as ONE transaction group (see the module):
    all of them or none. The promoted datasets' heads are forgotten (the environment then reads
    production's version of them, which is its own); the environment stays until dropped.

    Raises:
        InvalidEnvironmentNameError: ``name`` is not an environment name.
        EnvironmentNotFoundError: no such environment.
        EnvironmentUnsupportedError: this Trident runs in an environment (promote from production).
        EnvironmentConflictError: production changed a dataset in a way the environment's change
            cannot be rebased onto (nothing is promoted; the message names each dataset).
        StagedVersionConflictError: production committed while the promotion published (nothing
            is promoted; run it again).
    """
    from .group import TransactionGroup

    if engine.environment != PRODUCTION:
        raise EnvironmentUnsupportedError(
            f"promote {name!r} from production: this Trident runs in environment {engine.environment!r} "
            "(unset TRIDENT_ENVIRONMENT, or set it to main)"
        )
    rec = _record(engine, name)
    plans: list[_Plan] = []
    conflicts: list[str] = []
    unchanged: list[EnvHead] = []
    for head, prod in _heads(engine, rec.name):
        if not head.born_in_env and head.last_txn_id == head.fork_txn_id:
            unchanged.append(head)
            continue
        if not _moved(head, prod):
            plans.append(_Plan(head, prod, "fast"))
            continue
        found = _conflict_or_plan(engine, head, prod)
        if isinstance(found, str):
            conflicts.append(f"{prod.key}: {found}")
        else:
            plans.append(found)
    if conflicts:
        raise EnvironmentConflictError(
            f"environment {rec.name!r} cannot be promoted: production changed {len(conflicts)} of its datasets "
            "since it branched in ways its changes cannot be rebased onto; nothing was promoted.\n  "
            + "\n  ".join(conflicts)
            + f"\nRebuild those datasets in the environment on production's version (`trident env drop {rec.name}` "
            "and run again, or write them again there), then promote"
        )
    if not plans:
        return PromoteResult(rec.name, None, None, {})
    group = TransactionGroup(engine, label=f"promote environment {rec.name}", metadata={PROMOTED_META: rec.name})
    with group:
        for plan in plans:
            if plan.how == "fast":
                _stage_head(engine, group.group_id, plan.head, plan.prod, rec.name)
            else:
                assert plan.rows is not None
                group.write(
                    plan.prod.key,
                    plan.rows,
                    mode="append" if plan.how == "append" else "upsert",
                    keys=plan.keys or None,
                    writer=PROMOTE_WRITER,
                    metadata={PROMOTED_META: rec.name},
                )
        result = group.publish()
    # the promoted heads are production's versions now: the environment reads production's record
    # of them again; their branches (production's history now, or garbage) go with the drop
    engine.control.mark_promoted(engine.workspace, rec.name, [p.head.dataset_id for p in plans])
    log.info("trident promoted environment %s: %d dataset(s) in group %s", rec.name, len(plans), group.group_id)
    return PromoteResult(rec.name, group.group_id, result.published_at, {p.prod.key: p.how for p in plans})


def _stage_head(engine: Engine, group_id: uuid.UUID, head: EnvHead, prod: DatasetRecord, name: str) -> LedgerEntry:
    """A group member that makes the environment's head production's version, metadata only: a
    ledger row born ``staged`` naming the head's snapshot (already on the table), on production's
    current version as its base (the group publish refuses if that moves)."""
    last = engine.control.ledger_entry(head.last_txn_id)
    entry = LedgerEntry(
        txn_id=uuid.uuid4(),
        dataset_id=head.dataset_id,
        status="staged",
        mode=last.mode if last is not None else "replace",
        writer=last.writer if last is not None else PROMOTE_WRITER,
        sink=prod.sink,
        started_at=datetime.now(UTC),
        route_reason=f"promoted from environment {name}",
        rows_written=max(head.row_count - (head.fork_row_count or 0), 0),
        row_count=head.row_count,
        snapshot_id=head.snapshot_id,
        base_snapshot_id=prod.snapshot_id,
        group_id=group_id,
        metadata={PROMOTED_META: name, "trident.env-txn": str(head.last_txn_id), "trident.group": str(group_id)},
    )
    staged = {"next_row_index": head.next_row_index, "schema": head.schema, "deleted": 0}
    return engine.control.insert_staged(entry, staged)


# -- drop -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DropResult:
    name: str
    datasets: int
    deleted_files: int
    dropped_tables: list[str]


def drop(engine: Engine, name: str) -> DropResult:
    """Remove the environment: its branch of every table it wrote, the snapshots and files only it
    used (a file any other ref of the table reads, production's or another environment's, stays),
    tables born in it that nothing else has, and its control-plane rows (its heads and record;
    its ledger rows stay, tagged with it, as the audit trail).

    Raises:
        InvalidEnvironmentNameError: ``name`` is not an environment name.
        EnvironmentNotFoundError: no such environment.
        ConcurrentWriteError: a dataset stayed locked by another writer.
    """
    rec = _record(engine, name)
    deleted = 0
    dropped: list[str] = []
    _abort_groups(engine, rec.name)
    heads = _heads(engine, rec.name, promoted=True)
    staged_only = [p for p in _with_staged(engine, rec.name) if p.dataset_id not in {h.dataset_id for h, _ in heads}]
    for prod in [p for _, p in heads] + staged_only:
        n, gone = _release_branch(engine, prod, rec.name)
        deleted += n
        if gone:
            dropped.append(prod.key)
    engine.control.forget_environment(engine.workspace, rec.name)
    log.info("trident dropped environment %s: %d file(s) deleted", rec.name, deleted)
    return DropResult(rec.name, len(heads), deleted, dropped)


def _abort_groups(engine: Engine, name: str) -> None:
    """Abort the environment's open transaction groups: none of them may publish into it after
    its drop (their staged members are discarded with the environment's other staged versions)."""
    for g in groups.open_groups(engine.control, engine.workspace):
        if g.metadata.get(ENV_LEDGER_META) == name:
            groups.abort(engine.control, g.group_id, f"its environment {name!r} was dropped")


def _with_staged(engine: Engine, name: str) -> list[DatasetRecord]:
    """Production's records of the datasets the environment holds a staged version of."""
    ids = {e.dataset_id for e in engine.control.staged_entries() if e.metadata.get(ENV_LEDGER_META) == name}
    found = groups.datasets_by_ids(engine.control, list(ids))
    return sorted((d for d in found.values() if d.workspace == engine.workspace), key=lambda d: d.key)


def _release_branch(engine: Engine, prod: DatasetRecord, name: str) -> tuple[int, bool]:
    """Discard the environment's staged versions of one dataset, remove its branch and what only
    it used, then its head; a dataset born in it that nothing else has goes entirely (table and
    record). Returns (files deleted, whether the dataset went)."""
    sink = engine.sink(prod.sink)
    with engine.driver.locked(prod) as now:
        mine = [e for e in engine.control.history_in(prod.dataset_id, name) if e.metadata.get(ENV_LEDGER_META) == name]
        for entry in mine:
            if entry.status == "staged":
                engine.driver.discard_staged(now, entry, f"its environment {name!r} was dropped")
        others = [h.environment for h in engine.control.heads_of_dataset(prod.dataset_id) if h.environment != name]
        others += [entry_environment(e) for e in engine.control.staged_entries(prod.dataset_id)]  # not ours: discarded above
        deleted, gone = sink.drop_branch(now, name, {e.txn_id for e in mine}, remove_table=not now.exists and not others)
        engine.control.forget_env_heads(engine.workspace, name, [prod.dataset_id])
        if gone:
            engine.control.delete_dataset(prod.dataset_id)
    return deleted, gone


def stale(engine: Engine, max_age_days: float | None = None) -> list[EnvironmentInfo]:
    """Environments not written for ``TRIDENT_ENVIRONMENT_MAX_AGE_DAYS`` (or ``max_age_days``).

    Raises:
        ControlPlaneUnavailableError: the control-plane Postgres went away.
    """
    days = engine.settings.environment_max_age_days if max_age_days is None else max_age_days
    cutoff = datetime.now(UTC) - timedelta(days=days)
    return [e for e in list_environments(engine) if e.last_used_at < cutoff]
