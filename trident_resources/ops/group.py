"""Multi-dataset transactions (groups): every write of a group is staged (write-audit-publish), and
the group publishes them all in ONE control-plane transaction, so readers see all of them or none.

Why this is all-or-nothing, also across a crash: readers resolve every dataset's version from the
control plane (the Iceberg sink reads the snapshot the record names, not whatever ``main`` is at),
and a group's publish flips every member in one Postgres transaction. Before that commit nothing
of the group is visible; after it everything is. The Iceberg ``main`` refs follow right after
(``sinks/iceberg/refs.py``), under the members' writer locks; a publisher dying in between leaves
the members ``ref_pending``, which the reconciler (or a dataset's next writer) completes. A group
whose owner dies before its publish is aborted by the reconciler and its staged members discarded.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any

from ..control import groups
from ..control.groups import EXTERNAL_OWNER, EXTERNAL_OWNER_META, GroupRecord, Member
from ..control.plane import (
    ENV_FORK_META,
    ENV_LEDGER_META,
    PARTITION_META,
    PRODUCTION,
    DatasetRecord,
    LedgerEntry,
    entry_environment,
    outcome_of_staged,
)
from ..control.router import RouteDecision
from ..core.errors import TransactionGroupError
from ..core.failpoints import failpoint
from ..core.partitions import PartitionFilter
from ..core.results import GroupResult, WriteResult
from ..core.write_modes import WriteMode
from ..engine import Engine
from ..transaction.driver import StagedRecords
from . import commit_records
from .write import write

log = logging.getLogger("trident")
_ID_PREFIX = re.compile(r"[0-9a-f][0-9a-f-]*")  # what a group id, or its start, may hold


class TransactionGroup:
    """``Trident.transaction()``: stage writes of several datasets, publish them all at once.

    Used as a context manager, the group publishes when the block ends without an exception and
    is discarded when it raises (or when its publish is refused); ``publish()`` / ``discard()``
    decide it explicitly. The group holds its owner lock (one Postgres session) until it is
    decided: the reconciler aborts a group whose owner died.

    ``external``: the group is owned outside this process (a Dagster run whose steps run in
    several processes, each joining the group by its id ``group_id``): joining records it once,
    takes no owner lock, and leaving the block decides nothing. Its owner publishes or discards
    it (``publish_group`` / ``discard_group``); the engine's reconciler leaves it alone. Its
    writes may be partition writes: at the publish a member whose dataset moved since it was
    staged (another partition's commit) refuses the whole group, as any member does."""

    def __init__(
        self,
        engine: Engine,
        *,
        label: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        group_id: uuid.UUID | None = None,
        external: bool = False,
    ) -> None:
        self.engine = engine
        self.group_id = group_id or uuid.uuid4()
        self.label = label
        self.external = external
        self._metadata = {
            **dict(metadata or {}),
            **({EXTERNAL_OWNER_META: EXTERNAL_OWNER} if external else {}),
            **({ENV_LEDGER_META: engine.environment} if engine.environment != PRODUCTION else {}),
        }
        self._keys: dict[str, uuid.UUID] = {}
        self._lock: Any = None
        self._state = "new"

    # -- lifecycle ---------------------------------------------------------------------------
    def open(self) -> TransactionGroup:
        """Record the group (``open``) and take its owner lock.

        Raises:
            ControlPlaneUnavailableError: the control-plane Postgres went away.
        """
        if self._state != "new":
            return self
        groups.create(self.engine.control, self.group_id, self.engine.workspace, self.label, self._metadata)
        if self.external:
            self._state = "open"
            return self
        self._lock = groups.owner_lock(self.engine.control, self.group_id)
        self._lock.__enter__()
        self._state = "open"
        failpoint("group.opened")
        return self

    def __enter__(self) -> TransactionGroup:
        return self.open()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self.external:  # decided by its owner, not by this process leaving the block
            return
        if self._state != "open":
            self._release()
            return
        if exc is not None:
            self.discard(f"the block raised {type(exc).__name__}: {exc}")
            return
        self.publish()

    def _release(self) -> None:
        if self._lock is not None:
            lock, self._lock = self._lock, None
            lock.__exit__(None, None, None)

    # -- writes ------------------------------------------------------------------------------
    def write(
        self,
        key: str,
        data: Any = None,
        *,
        mode: WriteMode = "replace",
        writer: str = "ingest.api",
        keys: Iterable[str] | str | None = None,
        row_filter: str | None = None,
        source_refs: Iterable[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
        txn_id: uuid.UUID | str | None = None,
        provenance: Mapping[str, Any] | None = None,
        watermarks: Mapping[str, tuple[datetime, uuid.UUID | None]] | None = None,
        partition: PartitionFilter | None = None,
    ) -> WriteResult:
        """Stage one write of the group (any mode ``Trident.write`` takes); nothing of it is
        visible until the group publishes. Read it meanwhile with ``read(key, staged=txn_id)``.

        Raises:
            TransactionGroupError: the group is not open, ``key`` was already written in it, or
                ``partition`` is given to a group that is not ``external`` (a group of this
                process stages whole-dataset writes).
            UnsupportedBySinkError: the dataset lives in a sink that cannot stage (``pg``).
            (and whatever ``Trident.write`` raises; the failed write is aborted, the group stays
            open: discard it, or write again)
        """
        self.open()
        if self._state != "open":
            raise TransactionGroupError(f"transaction group {self.group_id} is {self._state}: it takes no more writes")
        if partition is not None and not self.external:
            raise TransactionGroupError(
                f"a transaction group stages whole-dataset writes; write partition {partition!r} of {key!r} "
                "outside the group (a partition publish re-bases onto other partitions' commits)"
            )
        if key in self._keys:
            raise TransactionGroupError(
                f"{key!r} was already written in transaction group {self.group_id} (txn {self._keys[key]}); "
                "a group holds one version of each dataset: build it in one write"
            )
        done = write(
            self.engine,
            key,
            data,
            mode=mode,
            writer=writer,
            keys=keys,
            row_filter=row_filter,
            source_refs=source_refs,
            metadata=metadata,
            txn_id=txn_id,
            provenance=provenance,
            watermarks=watermarks,
            partition=partition,
            stage=True,
            group=self.group_id,
        )
        self._keys[key] = done.txn_id
        return done

    # -- decisions ---------------------------------------------------------------------------
    def publish(self) -> GroupResult:
        """Publish every staged write of the group at once (see ``publish_group``); a refused
        publish discards the group and re-raises.

        Raises:
            TransactionGroupError: the group is not open.
            StagedVersionConflictError: a member's dataset changed since it was staged.
            ConcurrentWriteError: a member's dataset stayed locked by another writer.
        """
        if self._state != "open":
            raise TransactionGroupError(f"transaction group {self.group_id} is {self._state}, not open")
        try:
            result = publish_group(self.engine, self.group_id)
        except BaseException as exc:
            self.discard(f"its publish failed: {type(exc).__name__}: {exc}")
            raise
        self._state = "published"
        self._release()
        return result

    def discard(self, reason: str = "discarded") -> None:
        """Discard every staged write of the group; nothing of it was ever visible.

        Raises:
            ControlPlaneUnavailableError: the control-plane Postgres went away (the reconciler
                aborts the group once this process is gone).
        """
        try:
            if self._state in ("open", "new"):
                discard_group(self.engine, self.group_id, reason)
            self._state = "discarded"
        finally:
            self._release()


def find(engine: Engine, group_id: uuid.UUID | str) -> GroupRecord:
    """The group ``group_id`` (a whole id or a unique prefix of one) names in this workspace.

    Raises:
        TransactionGroupError: no group of this workspace has that id.
        InvalidArgumentError: the prefix names several groups.
    """
    text = str(group_id).strip().lower()
    found = groups.by_prefix(engine.control, engine.workspace, text) if _ID_PREFIX.fullmatch(text) else None
    if found is not None and str(found.metadata.get(ENV_LEDGER_META) or PRODUCTION) != engine.environment:
        found = None  # another environment's group (or production's, seen from an environment) is not ours to decide
    if found is None:
        where = "" if engine.environment == PRODUCTION else f" environment {engine.environment!r} of"
        raise TransactionGroupError(
            f"no transaction group {text!r} in{where} workspace {engine.workspace!r} (see `trident staged`)"
        )
    return found


def publish_group(engine: Engine, group_id: uuid.UUID | str) -> GroupResult:
    """Publish an open group: under every member dataset's writer lock (one Postgres session),
    ONE Postgres transaction commits every staged member and marks the group published (see
    ``control/groups.publish``); then the storage refs follow (``TransactionDriver.move_refs``).

    Raises:
        TransactionGroupError: no such group, it is not open, or a member is still being written.
        StagedVersionConflictError: a member's dataset changed since it was staged (nothing published).
        ConcurrentWriteError: a member's dataset stayed locked by another writer.
    """
    group = find(engine, group_id)
    if group.status != "open":
        raise TransactionGroupError(f"transaction group {group.group_id} is {group.status}, not open")
    entries = groups.members(engine.control, group.group_id)
    busy = [e for e in entries if e.status == "open"]
    if busy:
        raise TransactionGroupError(
            f"transaction group {group.group_id} still has {len(busy)} write(s) running (txn {busy[0].txn_id}); "
            "publish it when they end"
        )
    lost = [e for e in entries if e.status not in ("staged", "open")]
    if lost:  # a member decided on its own (by hand, in the ledger): the group would publish without it
        raise TransactionGroupError(
            f"transaction group {group.group_id} lost member txn {lost[0].txn_id} ({lost[0].status}); it publishes "
            f"all of its writes or none: discard it (`trident discard {group.group_id}`) and run again"
        )
    staged = [e for e in entries if e.status == "staged"]
    datasets = groups.datasets_by_ids(engine.control, [e.dataset_id for e in staged])
    driver = engine.driver
    # datasets a member wrote partitions of: their partition writers commit under the commit lock,
    # held here too until ``main`` moved, so none re-bases onto the ``main`` this publish replaces
    sliced = [datasets[e.dataset_id] for e in staged if PARTITION_META in e.metadata]
    wait = engine.settings.writer_wait_seconds
    with groups.writer_locks(engine.control, list(datasets.values()), wait) as conn:
        held: list[DatasetRecord] = []
        try:
            for ds in sliced:
                engine.control.acquire_commit_lock(conn, ds, wait)
                held.append(ds)
            earlier = groups.ref_pending_of(engine.control, list(datasets))
            if earlier:  # an earlier group's refs a dead publisher left: moved before this group's
                driver.move_refs(earlier, _fresh(engine, datasets), raises=True)
            staged = _rebased(engine, staged, _fresh(engine, datasets))
            members = [_member(engine, e) for e in staged]
            failpoint("group.before_publish")
            done = groups.publish(engine.control, conn, group.group_id, members)
            failpoint("group.after_publish")
            moved = driver.move_refs(done, _fresh(engine, datasets))
        finally:
            for ds in held:
                engine.control.release_commit_lock(conn, ds)
    at = done[0].committed_at if done else None
    log.info("trident published transaction group %s: %d dataset(s)", group.group_id, len(done))
    results = {
        datasets[e.dataset_id].key: commit_records.write_result(
            datasets[e.dataset_id].key, e, outcome_of_staged(e, e.committed_at), _route(e)
        )
        for e in done
    }
    return GroupResult(group_id=group.group_id, published_at=at, results=results, refs_moved=moved)


def discard_group(engine: Engine, group_id: uuid.UUID | str, reason: str = "discarded") -> list[uuid.UUID]:
    """Abort an open group (nothing of it can publish any more), then discard its staged members,
    each under its dataset's lock; returns the discarded transactions. A crash between the two is
    finished by the reconciler (staged members of an aborted group).

    Raises:
        TransactionGroupError: no such group, or it was published.
    """
    group = find(engine, group_id)
    if group.status == "published":
        raise TransactionGroupError(f"transaction group {group.group_id} was published; it cannot be discarded")
    groups.abort(engine.control, group.group_id, reason)
    gone: list[uuid.UUID] = []
    for entry in groups.members(engine.control, group.group_id):
        if entry.status != "staged":
            continue
        ds = engine.control.dataset_by_id(entry.dataset_id)
        if ds is None:
            continue
        with engine.driver.locked(ds) as now:
            still = engine.control.ledger_entry(entry.txn_id)
            if still is not None and still.status == "staged":
                engine.driver.discard_staged(now, still, reason)
                gone.append(entry.txn_id)
    return gone


def keep_group(engine: Engine, group_id: uuid.UUID | str, reason: str) -> GroupRecord:
    """Keep an open group for audit instead of discarding it: its staged versions stay readable
    (``trident sql --staged``) and listed by ``trident staged`` with ``reason``, until someone
    publishes or discards the group (or ``reconcile`` discards it past
    ``TRIDENT_STAGED_MAX_AGE_DAYS``); its owner no longer decides it. Returns the group as kept.

    Raises:
        TransactionGroupError: no such group, or it is not open.
    """
    group = find(engine, group_id)
    if not groups.keep(engine.control, group.group_id, reason):
        raise TransactionGroupError(f"transaction group {group.group_id} is {group.status}, not open: it cannot be kept")
    return find(engine, group.group_id)


def refuse_member(entry: LedgerEntry) -> None:
    """A single publish or discard of a group's member is refused: the group decides them all.

    Raises:
        TransactionGroupError: ``entry`` belongs to a group.
    """
    if entry.group_id is not None:
        raise TransactionGroupError(
            f"transaction {entry.txn_id} belongs to transaction group {entry.group_id}: publish or discard the "
            f"whole group (`trident publish {entry.group_id}` / `trident discard {entry.group_id}`)"
        )


def _rebased(engine: Engine, staged: Sequence[LedgerEntry], now: Mapping[uuid.UUID, DatasetRecord]) -> list[LedgerEntry]:
    """The members, each partition member whose dataset other partitions' writers moved since it
    was staged re-based onto that (the publish holds the commit locks): a backfill of one
    partition per run, each run a group, publishes every run, as single publishes of staged
    partition writes do. A member whose own partition changed stays a conflict (raised)."""
    out = []
    for e in staged:
        seen = engine.driver.as_written(now[e.dataset_id], e)
        # in an environment, only onto the environment's own head: a member staged on the version
        # its environment forks (no head yet) builds on that fork, as its single publish would
        onto = PARTITION_META in e.metadata and (
            entry_environment(e) == PRODUCTION or (ENV_FORK_META not in e.metadata and seen.environment is not None)
        )
        out.append(engine.driver.rebase_staged(seen, e) if onto and seen.snapshot_id != e.base_snapshot_id else e)
    return out


def _member(engine: Engine, entry: LedgerEntry) -> Member:
    """What publishing ``entry`` records besides its version: the provenance and watermarks its
    staged write kept for the publish (as a single publish records them)."""
    pending = StagedRecords.of(entry)
    return Member(
        entry=entry,
        provenance=pending.provenance,
        watermarks=commit_records.watermark_rows(engine, pending.watermarks, pending.partitions),
    )


def _fresh(engine: Engine, datasets: Mapping[uuid.UUID, DatasetRecord]) -> dict[uuid.UUID, DatasetRecord]:
    """The records as they are now (one query), for the ref moves that follow a publish."""
    now = groups.datasets_by_ids(engine.control, list(datasets))
    return {k: now.get(k, v) for k, v in datasets.items()}


def _route(entry: LedgerEntry) -> RouteDecision:
    return RouteDecision(
        sink=entry.sink,
        requested=entry.requested_sink or entry.sink,
        clamped=entry.clamped,
        reason=entry.route_reason or "staged",
    )
