"""Transaction groups in the control plane: staged writes of several datasets that publish in ONE
Postgres transaction (``publish``), so that readers, who resolve every dataset's version from the
control plane, see all of a group or none of it.

A group's owner holds the group lock (a session advisory lock on a connection of its own) for the
group's life: a group whose lock anyone else can take has lost its owner, and the reconciler
aborts it. The datasets a publish flips are locked with their writer locks, all on one session.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

import psycopg
from psycopg.rows import DictRow

from ..core.errors import ConcurrentWriteError, InvalidArgumentError, StagedVersionConflictError
from ..core.failpoints import failpoint
from . import queries as q
from .plane import (
    PARTITION_META,
    PRODUCTION,
    ControlPlane,
    DatasetRecord,
    LedgerEntry,
    WatermarkRow,
    entry_environment,
    outcome_of_staged,
)

log = logging.getLogger("trident")

EXTERNAL_OWNER_META = "owner"  # group metadata: who decides the group
EXTERNAL_OWNER = "external"  # ... an owner outside the engine (a Dagster run): the reconciler leaves it alone
KEPT_META = "kept"  # group metadata: why the group was kept for audit instead of discarded


@dataclass(frozen=True)
class GroupRecord:
    group_id: uuid.UUID
    workspace: str
    status: str  # open | published | aborted
    label: str | None
    metadata: dict[str, Any]
    created_at: datetime
    ended_at: datetime | None
    error: str | None
    pid: int | None
    host: str | None


@dataclass(frozen=True)
class Member:
    """One staged member as a publish records it: its ledger entry and what its COMMIT adds."""

    entry: LedgerEntry
    provenance: dict[str, Any] | None = None
    watermarks: list[WatermarkRow] = field(default_factory=list)


def create(plane: ControlPlane, group_id: uuid.UUID, workspace: str, label: str | None, metadata: dict[str, Any]) -> None:
    with plane.connection() as conn:
        conn.execute(
            q.INSERT_GROUP,
            (group_id, workspace, label, json.dumps(metadata, default=str), os.getpid(), socket.gethostname()),
        )


def get(plane: ControlPlane, group_id: uuid.UUID) -> GroupRecord | None:
    with plane.connection() as conn:
        row = conn.execute(q.GET_GROUP, (group_id,)).fetchone()
    return GroupRecord(**row) if row else None


def by_prefix(plane: ControlPlane, workspace: str, prefix: str) -> GroupRecord | None:
    """The group of ``workspace`` whose id starts with ``prefix`` (raises InvalidArgumentError when
    several do; ``None`` when none does)."""
    with plane.connection() as conn:
        rows = conn.execute(q.GROUPS_BY_PREFIX, (workspace, prefix.lower() + "%")).fetchall()
    if len(rows) > 1:
        raise InvalidArgumentError(f"{prefix!r} is the start of several group ids; give more of it")
    return GroupRecord(**rows[0]) if rows else None


def open_groups(plane: ControlPlane, workspace: str) -> list[GroupRecord]:
    with plane.connection() as conn:
        return [GroupRecord(**r) for r in conn.execute(q.OPEN_GROUPS, (workspace,))]


def members(plane: ControlPlane, group_id: uuid.UUID) -> list[LedgerEntry]:
    """Every ledger entry written for the group: staged (and later committed or rejected) ones, and
    the ones still open (not staged yet: their INTENT metadata names the group)."""
    with plane.connection() as conn:
        done = [LedgerEntry(**r) for r in conn.execute(q.GROUP_MEMBERS, (group_id,))]
        running = [LedgerEntry(**r) for r in conn.execute(q.GROUP_OPEN_MEMBERS, (str(group_id),))]
    return done + [e for e in running if e.group_id is None]


def abort(plane: ControlPlane, group_id: uuid.UUID, reason: str) -> bool:
    """Mark an open group aborted (nothing of it can publish any more); False when it was not open."""
    with plane.tx() as conn:
        return conn.execute(q.ABORT_GROUP, (reason[:4000], group_id)).rowcount > 0


def keep(plane: ControlPlane, group_id: uuid.UUID, reason: str) -> bool:
    """Mark an open group kept for audit (``KEPT_META``: why); False when it was not open."""
    with plane.tx() as conn:
        return conn.execute(q.KEEP_GROUP, (reason[:4000], group_id)).rowcount > 0


def stranded(plane: ControlPlane, workspace: str) -> list[LedgerEntry]:
    """Staged members of aborted groups (an abort marks the group first, then discards them)."""
    with plane.connection() as conn:
        return [LedgerEntry(**r) for r in conn.execute(q.STRANDED_MEMBERS, (workspace,))]


def ref_pending(plane: ControlPlane, workspace: str, dataset_id: uuid.UUID | None = None) -> list[LedgerEntry]:
    """Committed group members whose table's ``main`` has not been moved to them yet."""
    with plane.connection() as conn:
        return [LedgerEntry(**r) for r in conn.execute(q.REF_PENDING, (workspace, dataset_id, dataset_id))]


def ref_pending_of(plane: ControlPlane, dataset_ids: Sequence[uuid.UUID]) -> list[LedgerEntry]:
    """``ref_pending`` of several datasets, in one query."""
    with plane.connection() as conn:
        return [LedgerEntry(**r) for r in conn.execute(q.REF_PENDING_OF, (list(dataset_ids),))]


def datasets_by_ids(plane: ControlPlane, dataset_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, DatasetRecord]:
    """The records of several datasets, in one query (an id with no record is absent)."""
    with plane.connection() as conn:
        return {r["dataset_id"]: DatasetRecord(**r) for r in conn.execute(q.GET_DATASETS_BY_IDS, (list(dataset_ids),))}


def refs_moved(plane: ControlPlane, txn_ids: Sequence[uuid.UUID]) -> None:
    if txn_ids:
        with plane.connection() as conn:
            conn.execute(q.CLEAR_REF_PENDING, (list(txn_ids),))


@contextmanager
def owner_lock(plane: ControlPlane, group_id: uuid.UUID) -> Iterator[bool]:
    """Try the group lock on a connection of its own, held until the block ends; yields whether it
    was taken (False: another session, the group's live owner, holds it)."""
    with plane.connection() as conn:
        took = bool(cast(DictRow, conn.execute(q.TRY_GROUP_LOCK, (str(group_id),)).fetchone())["locked"])
        try:
            yield took
        finally:
            if took:
                try:
                    conn.execute(q.GROUP_UNLOCK, (str(group_id),))
                except psycopg.Error as exc:  # the session died, and its lock with it
                    log.warning("group lock of %s was already gone at release: %s", group_id, exc)


@contextmanager
def writer_locks(plane: ControlPlane, datasets: Sequence[DatasetRecord], wait_s: float) -> Iterator[psycopg.Connection[Any]]:
    """Hold the writer locks of every dataset in ``datasets`` on ONE session (a group of 500
    datasets holds 500 advisory locks, not 500 connections), taken in dataset-id order so two
    publishes of overlapping groups never wait for each other in a circle."""
    ordered = sorted({d.dataset_id: d for d in datasets}.values(), key=lambda d: str(d.dataset_id))
    with plane.connection() as conn:
        taken: list[DatasetRecord] = []
        try:
            deadline = time.monotonic() + wait_s
            for ds in ordered:
                delay = 0.02
                while not cast(DictRow, conn.execute(q.TRY_WRITER_LOCK, (str(ds.dataset_id),)).fetchone())["locked"]:
                    if time.monotonic() >= deadline:
                        raise ConcurrentWriteError(
                            f"dataset {ds.key!r} is being written by another writer; the group publish waited "
                            f"{wait_s:.0f}s for it. Retry when it finishes, or raise TRIDENT_WRITER_WAIT_SECONDS"
                        )
                    time.sleep(delay)
                    delay = min(delay * 2, 0.5)
                taken.append(ds)
            yield conn
        finally:
            try:
                for ds in taken:
                    conn.execute(q.WRITER_UNLOCK, (str(ds.dataset_id),))
            except psycopg.Error as exc:  # the session died, and its locks with it
                log.warning("writer locks of a group publish were already gone at release: %s", exc)


def publish(
    plane: ControlPlane, conn: psycopg.Connection[Any], group_id: uuid.UUID, to_publish: Sequence[Member]
) -> list[LedgerEntry]:
    """THE publish of a group: in one Postgres transaction on the locks' session ``conn``, the
    group turns ``published`` and every member is committed exactly as a single publish commits
    it (ledger, dataset stats, schema version, sync log, watermarks, provenance), all at one
    instant (their ``committed_at``), each marked ``ref_pending`` until its table's ``main`` moves.

    Raises:
        StagedVersionConflictError: a member's dataset changed since it was staged, or the group
            is no longer open (discarded meanwhile): nothing is published.
    """
    with conn.transaction():
        group = conn.execute(q.GET_GROUP_FOR_UPDATE, (group_id,)).fetchone()
        if group is None or group["status"] != "open":
            state = "gone" if group is None else group["status"]
            raise StagedVersionConflictError(f"transaction group {group_id} is {state}, not open: nothing was published")
        at = cast(DictRow, conn.execute(q.GROUP_INSTANT).fetchone())["at"]
        rows = {
            r["dataset_id"]: r
            for r in conn.execute(q.GET_DATASETS_BY_IDS_FOR_UPDATE, ([m.entry.dataset_id for m in to_publish],))
        }
        heads = _env_head_snapshots(conn, group["workspace"], to_publish)
        for member in to_publish:
            entry = member.entry
            row = rows[entry.dataset_id]
            env = entry_environment(entry)
            # an environment's member builds on its head there (none yet: on the version it forks,
            # which a production commit since does not invalidate, as a single publish there)
            now = row["snapshot_id"] if env == PRODUCTION else heads.get(entry.dataset_id, entry.base_snapshot_id)
            if now != entry.base_snapshot_id:
                where = "" if env == PRODUCTION else f" in environment {env!r}"
                raise StagedVersionConflictError(
                    f"{row['key']!r} changed{where} since transaction {entry.txn_id} of group {group_id} was staged "
                    f"(published version {now}, staged on {entry.base_snapshot_id}); publishing would "
                    f"lose that change. The group publishes nothing: discard it (`trident discard {group_id}`) and run again"
                )
        done: list[LedgerEntry] = []
        for m in to_publish:
            done.append(
                plane.commit_txn(
                    m.entry,
                    outcome_of_staged(m.entry, at),
                    watermarks=list(m.watermarks),
                    provenance=m.provenance,
                    conn=conn,
                    reserved_indexes=PARTITION_META in m.entry.metadata,  # a partition member reserved its indexes
                )
            )
            failpoint("group.publishing")  # inside the transaction: a crash here publishes nothing
        conn.execute(q.MARK_REF_PENDING, ([e.txn_id for e in done],))
        conn.execute(q.PUBLISH_GROUP, (at, group_id))
    for e in done:
        e.ref_pending = True
    return done


def _env_head_snapshots(
    conn: psycopg.Connection[Any], workspace: str, to_publish: Sequence[Member]
) -> dict[uuid.UUID, int | None]:
    """The live environment head's snapshot of every member written in an environment (a group's
    members are all of one environment: the environment of the ``Trident`` that wrote them)."""
    envs = {entry_environment(m.entry) for m in to_publish} - {PRODUCTION}
    if not envs:
        return {}
    ids = [m.entry.dataset_id for m in to_publish]
    out: dict[uuid.UUID, int | None] = {}
    for env in envs:
        for r in conn.execute(q.ENV_HEADS_OF_FOR_UPDATE, (workspace, env, ids)):
            out[r["dataset_id"]] = r["snapshot_id"]
    return out
