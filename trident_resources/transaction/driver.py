"""The transaction driver: INTENT -> WRITE -> COMMIT, failure and recovery, in one place.

Every change to a dataset's rows (a ``Trident.write``, a stream session, a row edit, a canary copy)
is a ``Transaction`` opened here under the dataset's writer lock:

1. INTENT: a ledger row ``open`` with the transaction's instant τ (``open``);
2. WRITE: the planner turns the input into one sink change (``Transaction.write``);
3. COMMIT: the ledger, dataset stats, watermarks and provenance in one Postgres transaction
   (``Transaction.commit``).

Any failure reverts the change if it became visible, marks the ledger ``aborted`` and removes the
files (``Transaction.fail``); a step that cannot run (storage or Postgres down) is logged and left
to ``recover``, which the next writer of the dataset or ``reconcile`` runs: an open transaction
whose change is in its sink is rolled forward, any other is aborted. An abort owes a storage
cleanup (the ledger's ``cleanup_pending``) until ``clean`` succeeds; ``reconcile`` and
``Trident.maintain`` retry the ones that could not run.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn, cast

import duckdb
import psycopg
import pyarrow as pa
import sqlalchemy.exc

from ..control import groups
from ..control.plane import (
    ENV_FORK_META,
    ENV_LEDGER_META,
    PARTITION_META,
    PRODUCTION,
    ControlPlane,
    DatasetRecord,
    InlineBlock,
    LedgerEntry,
    Outcome,
    WatermarkRow,
    entry_environment,
)
from ..control.range_locks import LockItem
from ..control.router import RouteDecision
from ..core.errors import (
    ConcurrentWriteError,
    ControlPlaneUnavailableError,
    InvalidWriteError,
    ResourceLimitError,
    StagedVersionConflictError,
    StorageUnavailableError,
    TridentError,
    WriteFailedError,
)
from ..core.failpoints import failpoint
from ..core.partitions import PartitionFilter
from ..core.recent import Recent
from ..core.results import ReconcileReport
from ..core.settings import TridentSettings
from ..core.write_modes import WriteMode
from ..planning.planner import WritePlanner
from ..sinks.contract import Discarded, RefMove, Sink, WriteRequest

log = logging.getLogger("trident")

CANARY_WRITER = "canary"
Watermarks = list[WatermarkRow]  # (source dataset, output partition key, mark, source txn)
# Ledger metadata at INTENT: the watermarks COMMIT will record, so that a transaction rolled forward
# by the reconciler records them too (else the next delta run would read the same rows again).
WATERMARK_META = "trident.watermarks"


STAGED_META = "trident.staged"  # ledger metadata of a staged write: what publish records with it


@dataclass(frozen=True)
class StagedRecords:
    """What a staged write kept for its publish to record (``STAGED_META``): the provenance, each
    source's watermark (key -> (mark, source txn)) and the output partitions they are kept for."""

    provenance: dict[str, Any] | None
    watermarks: dict[str, tuple[datetime, uuid.UUID | None]]
    partitions: list[str]

    @classmethod
    def of(cls, entry: LedgerEntry) -> StagedRecords:
        pending = entry.metadata.get(STAGED_META) or {}
        marks = {
            k: (datetime.fromisoformat(mark), uuid.UUID(src) if src else None)
            for k, (mark, src) in (pending.get("watermarks") or {}).items()
        }
        return cls(pending.get("provenance"), marks, list(pending.get("watermark_partitions") or [""]))


def watermark_meta(rows: Watermarks) -> dict[str, Any]:
    """``rows`` as JSON for the ledger: each source's mark once, and the output partitions."""
    marks = {str(src): [mark.isoformat(), str(txn) if txn else None] for src, _, mark, txn in rows}
    return {"marks": marks, "partitions": list(dict.fromkeys(part for _, part, _, _ in rows))}


def recorded_watermarks(meta: Mapping[str, Any]) -> Watermarks:
    """The watermarks a transaction's INTENT recorded (``[]`` when it recorded none)."""
    saved = meta.get(WATERMARK_META) or {}
    return [
        (uuid.UUID(src), part, datetime.fromisoformat(mark), uuid.UUID(txn) if txn else None)
        for src, (mark, txn) in (saved.get("marks") or {}).items()
        for part in saved.get("partitions") or [""]
    ]


@dataclass(frozen=True)
class Intent:
    """What a transaction is about to do, recorded in its ledger row at INTENT."""

    txn_id: uuid.UUID
    mode: WriteMode
    writer: str
    sink: str
    route: RouteDecision
    source_refs: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)


class TransactionDriver:
    def __init__(self, control: ControlPlane, sinks: Mapping[str, Sink], settings: TridentSettings) -> None:
        self.control = control
        self.sinks = dict(sinks)
        self.settings = settings
        self.planner = WritePlanner(settings)
        self._locks: dict[uuid.UUID, psycopg.Connection[Any]] = {}  # dataset -> its writer lock's session
        # (workspace, key) -> the record this process's last inlined write of it left: what the next
        # small append stamps its rows from (the commit checks it is still the dataset's)
        self.heads: Recent[tuple[str, str], DatasetRecord] = Recent(1024)
        self._shared: set[uuid.UUID] = set()  # datasets written under partition locks (partition_locked)

    def lock_session(self, ds: DatasetRecord) -> psycopg.Connection[Any] | None:
        """The session holding ``ds``'s writer lock in this process (inside ``locked``)."""
        return self._locks.get(ds.dataset_id)

    def sink(self, name: str) -> Sink:
        try:
            return self.sinks[name]
        except KeyError:
            raise StorageUnavailableError(f"sink {name!r} is not available in this installation") from None

    @contextmanager
    def locked(self, ds: DatasetRecord, wait_s: float | None = None) -> Iterator[DatasetRecord]:
        """Hold the dataset's writer lock; first settle transactions whose writers died (we hold
        the lock, so they are gone). Yields the dataset as it is now."""
        wait = self.settings.writer_wait_seconds if wait_s is None else wait_s
        with self.control.writer_lock(ds, wait) as lock:
            self._locks[ds.dataset_id] = lock
            try:
                # one query when nothing is open (the usual case): the record and "nothing to settle"
                now, has_open = self.control.dataset_if_settled(ds.dataset_id)
                if has_open:  # an open transaction, or a published group member whose ref did not move
                    for stale in self.control.open_entries(ds.dataset_id):
                        self.recover(self._fresh(ds), stale)
                    pending = groups.ref_pending(self.control, ds.workspace, ds.dataset_id)
                    if pending:
                        self.move_refs(pending, {ds.dataset_id: self._fresh(ds)}, raises=True)
                    now = self.control.dataset_by_id(ds.dataset_id)
                yield now or ds
            finally:
                self._locks.pop(ds.dataset_id, None)

    @contextmanager
    def partition_locked(
        self,
        ds: DatasetRecord,
        items: Sequence[LockItem],
        wait_s: float | None = None,
        *,
        what: str = "its partitions",
        overlapping: Callable[[LedgerEntry], bool] | None = None,
    ) -> Iterator[DatasetRecord]:
        """Hold the range locks ``items`` of a slice of the dataset (and the dataset's lock
        shared), so that writers of slices that do not overlap it run at the same time, however
        wide either is. Stale transactions are not settled here (other open ones may be live);
        ``reconcile`` and the next whole-dataset writer settle them."""
        wait = self.settings.writer_wait_seconds if wait_s is None else wait_s
        with self.control.partition_lock(ds, items, wait, what=what, overlapping=overlapping) as lock:
            self._locks[ds.dataset_id] = lock
            self._shared.add(ds.dataset_id)
            try:
                yield self._fresh(ds)
            finally:
                self._shared.discard(ds.dataset_id)
                self._locks.pop(ds.dataset_id, None)

    def shares(self, ds: DatasetRecord) -> bool:
        """Does this process write ``ds`` under a partition lock (the commit lock still to take)?"""
        return ds.dataset_id in self._shared

    def _fresh(self, ds: DatasetRecord) -> DatasetRecord:
        return self.control.dataset_by_id(ds.dataset_id) or ds

    def open(self, ds: DatasetRecord, intent: Intent) -> Transaction | None:
        """INTENT (the caller holds ``locked`` or ``partition_locked``). ``None``: this txn id
        already committed here (the caller reports that commit: a retry is a no-op).

        A txn id names one write, so writing it again repeats that write (a redelivered or
        retried Dagster step derives the same id): an aborted or rejected attempt is reopened, a
        staged one is replaced (discarded, then written again), and an attempt left open by a
        writer that died is settled first (rolled forward if its change committed, which makes
        this write a no-op). Only that makes a re-run of an ``append`` add its rows once."""
        entry = self.control.open_txn(
            LedgerEntry(
                txn_id=intent.txn_id,
                dataset_id=ds.dataset_id,
                status="open",
                mode=intent.mode,
                writer=intent.writer,
                sink=intent.sink,
                started_at=datetime.now(),
                requested_sink=intent.route.requested,
                clamped=intent.route.clamped,
                route_reason=intent.route.reason,
                source_refs=list(intent.source_refs),
                metadata=dict(intent.metadata),
            )
        )
        if entry is not None:
            return Transaction(self, ds, entry)
        prior = self.control.ledger_entry(intent.txn_id)
        assert prior is not None
        if prior.dataset_id != ds.dataset_id:
            other = self.control.dataset_by_id(prior.dataset_id)
            raise InvalidWriteError(
                f"transaction id {intent.txn_id} is a transaction of dataset "
                f"{other.key if other else prior.dataset_id!r}; a txn id names one write of one dataset"
            )
        if prior.status == "aborted" and prior.cleanup_pending:
            # A retry of an aborted transaction id writes files of the same names: the earlier
            # attempt's leftovers go first (we hold the lock), then the id is reopened.
            if self.clean(ds, prior) is None:
                raise StorageUnavailableError(
                    f"transaction {intent.txn_id} of {ds.key!r} aborted earlier and its files cannot be "
                    "removed yet (storage unreachable); retry when storage is back"
                )
            return self.open(ds, intent)
        if prior.status == "staged":  # written again: the newer attempt replaces the staged version
            with self._commit_lock(ds):  # unless a publish of it died after moving the sink: then it counts
                published = self.roll_forward_staged(ds, prior)
            if not published:
                self.discard_staged(ds, prior, "superseded: the same transaction id was written again")
            return self.open(ds, intent)
        if prior.status == "open" and self._orphaned(ds, prior, intent):
            with self._commit_lock(ds):
                self.recover(self._fresh(ds), prior)
            return self.open(ds, intent)
        if prior.status != "committed":
            raise ConcurrentWriteError(f"transaction {intent.txn_id} of {ds.key!r} is {prior.status}")
        return None  # an idempotent retry of a committed write

    def _orphaned(self, ds: DatasetRecord, prior: LedgerEntry, intent: Intent) -> bool:
        """Is ``prior``, open under this write's own txn id, an attempt whose writer is gone? Under
        the whole-dataset lock ``locked`` already settled every such one; under partition locks it
        is when it wrote the same slice, whose lock this process now holds (its writer would
        still hold it if it were alive)."""
        return self.shares(ds) and prior.metadata.get(PARTITION_META) == intent.metadata.get(PARTITION_META)

    @contextmanager
    def _commit_lock(self, ds: DatasetRecord) -> Iterator[None]:
        """The dataset's commit lock when this process writes it under partition locks (writers
        of other partitions commit alongside, and a roll-forward records dataset stats); nothing
        more under the whole-dataset lock."""
        lock = self.lock_session(ds)
        if lock is None or not self.shares(ds):
            yield
            return
        self.control.acquire_commit_lock(lock, ds, self.settings.writer_wait_seconds)
        try:
            yield
        finally:
            self.control.release_commit_lock(lock, ds)

    # -- write-audit-publish ------------------------------------------------------------------
    def publish(
        self, ds: DatasetRecord, entry: LedgerEntry, *, provenance: Mapping[str, Any] | None, watermarks: Watermarks
    ) -> tuple[LedgerEntry, Outcome]:
        """Move the published version to a staged one, then record it committed (the caller holds
        ``locked``, or for a staged partition write ``partition_locked`` on its slice: then
        the dataset's commit lock is taken here, since writers of other partitions commit
        alongside and the sink re-bases the change on their commits). A crash between the two is
        rolled forward by ``reconcile``."""
        ds = in_environment_of(ds, entry)
        meta = entry.metadata.get(PARTITION_META)
        partition = PartitionFilter.from_metadata(meta) if meta else None
        lock = self.lock_session(ds)
        commit_locked = lock is not None and self.shares(ds)
        if commit_locked:
            assert lock is not None
            self.control.acquire_commit_lock(lock, ds, self.settings.writer_wait_seconds)
        try:
            outcome = self.sink(entry.sink).publish(ds, entry.txn_id, entry.base_snapshot_id, partition)
            failpoint("publish.before_ledger")
            done = self.control.commit_txn(
                entry,
                outcome,
                watermarks=list(watermarks),
                provenance=dict(provenance) if provenance is not None else None,
                conn=lock,
                reserved_indexes=partition is not None,
            )
        finally:
            if commit_locked:
                assert lock is not None
                self.control.release_commit_lock(lock, ds)
        return done, outcome

    def rebase_staged(self, ds: DatasetRecord, entry: LedgerEntry) -> LedgerEntry:
        """Re-base staged partition write ``entry`` onto ``ds``'s current version (writers of other
        partitions committed since it was staged), still staged, and record its new version and
        base (the caller holds the dataset's commit lock). Returns the entry as re-based.

        Raises:
            StagedVersionConflictError: the partition itself changed since staging, or the sink
                cannot re-base (nothing is changed).
        """
        meta = entry.metadata.get(PARTITION_META)
        if not meta:
            raise StagedVersionConflictError(
                f"transaction {entry.txn_id} of {ds.key!r} is no partition write: it cannot be re-based"
            )
        outcome = self.sink(entry.sink).rebase_staged(ds, entry.txn_id, PartitionFilter.from_metadata(meta))
        failpoint("group.rebased")
        return self.control.restage_txn(entry, outcome, ds.snapshot_id)

    def move_refs(
        self, entries: Sequence[LedgerEntry], datasets: Mapping[uuid.UUID, DatasetRecord], *, raises: bool = False
    ) -> bool:
        """Make each published group member's version its storage's current one (Iceberg: the
        table's ``main``), one call per sink and group, then clear the members' ``ref_pending``
        (the caller holds the datasets' writer locks). A failure is logged and the members stay
        pending for ``reconcile`` or the dataset's next writer (``raises``: raised, for a writer
        that must not write on a stale ``main``). Returns whether every ref moved."""
        batches: dict[tuple[str, uuid.UUID | None], list[LedgerEntry]] = {}
        for e in entries:
            batches.setdefault((e.sink, e.group_id), []).append(e)
        moved = True
        for (sink, group), batch in batches.items():
            seen = [(e, self.as_written(datasets[e.dataset_id], e)) for e in batch if e.snapshot_id is not None]
            moves = [RefMove(ds, e.txn_id, cast(int, e.snapshot_id), main=ds.last_txn_id == e.txn_id) for e, ds in seen]
            try:
                self.sink(sink).move_refs(moves, str(group or batch[0].txn_id))
                groups.refs_moved(self.control, [e.txn_id for e in batch])
            except Exception as exc:
                if raises:
                    raise
                moved = False
                log.warning(
                    "group %s is published, but the Iceberg refs of %d of its tables could not be moved yet (%s: %s); "
                    "Trident's readers see the group, other engines' readers do when `trident reconcile` has moved them",
                    group,
                    len(batch),
                    type(exc).__name__,
                    exc,
                )
        return moved

    def as_written(self, ds: DatasetRecord, entry: LedgerEntry) -> DatasetRecord:
        """Production's record ``ds`` as the environment ``entry`` was written in sees it: its
        head there (whose branch a published member's ref move moves, never ``main``), or, with
        no live head, production's version on that environment's branch."""
        env = entry_environment(entry)
        if env == PRODUCTION:
            return ds
        head = self.control.env_heads(ds.workspace, env, [ds.dataset_id]).get(ds.dataset_id)
        return head.over(ds) if head is not None else replace(ds, environment=env)

    def roll_forward_staged(self, ds: DatasetRecord, entry: LedgerEntry) -> bool:
        """Record committed a staged version whose publish moved the sink but died before the
        ledger followed, with the provenance and watermarks that publish would have recorded
        (else the next delta run would read its rows again). False: it is still only staged."""
        outcome = self.sink(entry.sink).find_committed(ds, entry.txn_id)
        if outcome is None:
            return False
        pending = StagedRecords.of(entry)
        sources = self.control.datasets_by_keys(ds.workspace, list(pending.watermarks)) if pending.watermarks else {}
        rows: Watermarks = [
            (sources[k].dataset_id, part, mark, src)
            for k, (mark, src) in pending.watermarks.items()
            if k in sources
            for part in pending.partitions
        ]
        self.control.commit_txn(
            entry,
            outcome,
            watermarks=rows,
            provenance=pending.provenance,
            reserved_indexes=PARTITION_META in entry.metadata,
        )
        log.warning("rolled forward the interrupted publish of txn %s of %s", entry.txn_id, ds.key)
        return True

    def discard_staged(self, ds: DatasetRecord, entry: LedgerEntry, reason: str) -> None:
        self.control.reject_txn(entry.txn_id, reason)
        self.sink(entry.sink).discard_staged(ds, entry.txn_id, entry.location)

    # -- recovery ---------------------------------------------------------------------------
    def recover(self, ds: DatasetRecord, entry: LedgerEntry) -> tuple[str, Discarded | None]:
        """Settle an open transaction whose writer is gone: roll it forward when its change is
        part of the dataset (for a canary: only when the flip happened), else undo and abort it.
        Returns what happened and, for an abort, what its cleanup removed (``None``: pending)."""
        sink = self.sink(entry.sink)
        shutil.rmtree(self.settings.home / "tmp" / str(entry.txn_id), ignore_errors=True)  # its merge spill
        outcome = sink.find_committed(ds, entry.txn_id)
        if outcome is not None and (entry.writer != CANARY_WRITER or ds.sink == entry.sink):
            self.control.commit_txn(
                entry,
                outcome,
                watermarks=recorded_watermarks(entry.metadata),
                reserved_indexes=PARTITION_META in entry.metadata,
            )
            log.warning("reconciled: rolled forward txn %s of %s", entry.txn_id, ds.key)
            return "rolled_forward", None
        if outcome is not None:  # a canary copy that never flipped: the dataset still lives elsewhere
            sink.undo(ds, entry.txn_id)
        self.control.abort_txn(entry.txn_id, "aborted by the reconciler: the writer died before its change committed")
        log.warning("reconciled: aborted txn %s of %s", entry.txn_id, ds.key)
        return "aborted", self.clean(ds, entry)

    def clean(self, ds: DatasetRecord, entry: LedgerEntry) -> Discarded | None:
        """Remove an aborted transaction's storage leftovers (data files, incomplete uploads) and
        clear its ``cleanup_pending``. ``None`` when that cannot run yet (storage, the catalog or
        Postgres unreachable): the flag stays set and ``reconcile`` / ``maintain`` try again, so a
        leak is deferred, never forgotten. Never raises: it runs on failure paths."""
        try:
            done = self.sink(entry.sink).discard(ds, entry.txn_id, location=entry.location)
            self.control.cleanup_done(entry.txn_id)
        except Exception as exc:
            log.warning(
                "txn %s of %s is aborted, but its files could not be removed yet (%s: %s); "
                "`trident reconcile` or `trident maintain` retries",
                entry.txn_id,
                ds.key,
                type(exc).__name__,
                exc,
            )
            return None
        return done

    def retry_cleanups(
        self, workspace: str, ds: DatasetRecord | None = None, *, skip: frozenset[uuid.UUID] = frozenset()
    ) -> _Cleanups:
        """Retry the pending cleanups of aborted transactions (of ``ds`` only, whose writer lock the
        caller then holds; else of the workspace, each under its dataset's lock, skipping busy
        datasets). A dataset that never came to exist is cleaned through the ledger's location."""
        result = _Cleanups()
        for entry in self.control.pending_cleanups(workspace, ds.dataset_id if ds is not None else None):
            if entry.txn_id in skip:
                continue
            target = ds or self.control.dataset_by_id(entry.dataset_id)
            if target is None:
                continue
            try:
                with nullcontext() if ds is not None else self.control.writer_lock(target, 0):
                    still = self.control.ledger_entry(entry.txn_id)
                    owed = still is not None and still.status == "aborted" and still.cleanup_pending
                    done = self.clean(target, still) if owed and still is not None else Discarded()
            except ConcurrentWriteError:  # a live writer holds the dataset: next time
                done = None
            result.add(entry.txn_id, done)
        return result

    def reconcile(self, workspace: str) -> ReconcileReport:
        """Repair transactions left open by crashed processes (live writers are left alone), then
        retry the storage cleanups earlier aborts could not run."""
        forward: list[uuid.UUID] = []
        aborted: list[uuid.UUID] = []
        running: list[uuid.UUID] = []
        now = _Cleanups()
        for entry in self.control.open_entries():
            ds = self.control.dataset_by_id(entry.dataset_id)
            if ds is None or ds.workspace != workspace:
                continue
            try:
                with self.control.writer_lock(ds, _LOCK_RELEASE_SECONDS if _writer_died_here(entry) else 0):
                    still = self.control.ledger_entry(entry.txn_id)
                    if still is None or still.status != "open":
                        continue
                    status, discarded = self.recover(self._fresh(ds), still)
            except ControlPlaneUnavailableError:  # the control plane is gone, not this writer busy
                raise
            except TridentError:
                running.append(entry.txn_id)
                continue
            if status == "rolled_forward":
                forward.append(entry.txn_id)
            else:
                aborted.append(entry.txn_id)
                now.add(entry.txn_id, discarded)
        for entry in self.control.staged_entries():
            ds = self.control.dataset_by_id(entry.dataset_id)
            if ds is None or ds.workspace != workspace:
                continue
            try:  # a publisher that just died may still hold the lock for a moment
                with self.control.writer_lock(ds, _LOCK_RELEASE_SECONDS if _writer_died_here(entry) else 1.0):
                    if self.roll_forward_staged(ds, entry):  # main moved to it, the ledger did not follow
                        forward.append(entry.txn_id)
            except ControlPlaneUnavailableError:
                raise
            except TridentError:
                continue
        self._reconcile_groups(workspace, forward, aborted, running)
        earlier = self.retry_cleanups(workspace, skip=frozenset(now.cleaned + now.pending))
        return ReconcileReport(
            rolled_forward=forward,
            aborted=aborted,
            still_running=running,
            cleaned_up=earlier.cleaned,
            cleanup_pending=now.pending + earlier.pending,
            deleted_files=now.files + earlier.files,
            aborted_uploads=now.uploads + earlier.uploads,
        )

    def _reconcile_groups(
        self, workspace: str, forward: list[uuid.UUID], aborted: list[uuid.UUID], running: list[uuid.UUID]
    ) -> None:
        """Settle transaction groups whose owner died: an open one is aborted and its staged members
        discarded (none of it was published); a published one's members whose refs did not move
        get them moved (all of it was). Groups owned by a live process are left alone, and so are
        external groups (a Dagster run's) unless kept for audit past TRIDENT_STAGED_MAX_AGE_DAYS."""
        for group in groups.open_groups(self.control, workspace):
            if group.metadata.get(groups.EXTERNAL_OWNER_META) == groups.EXTERNAL_OWNER:
                # decided by its owner (a Dagster run's sensor); one kept for audit, by a person,
                # until it is older than staged versions may get
                days = self.settings.staged_max_age_days
                if groups.KEPT_META in group.metadata and group.created_at < datetime.now(UTC) - timedelta(days=days):
                    groups.abort(self.control, group.group_id, f"discarded by the reconciler: kept for audit over {days} days")
                continue
            if not self._owner_gone(group):
                running.append(group.group_id)
                continue
            groups.abort(self.control, group.group_id, "aborted by the reconciler: its owner died before it published")
            log.warning("reconciled: aborted transaction group %s (its owner died before it published)", group.group_id)
        for entry in groups.stranded(self.control, workspace):
            ds = self.control.dataset_by_id(entry.dataset_id)
            if ds is None:
                continue
            try:
                with self.control.writer_lock(ds, _LOCK_RELEASE_SECONDS if _writer_died_here(entry) else 1.0):
                    still = self.control.ledger_entry(entry.txn_id)
                    if still is not None and still.status == "staged":
                        self.discard_staged(self._fresh(ds), still, "its transaction group was aborted")
                        aborted.append(entry.txn_id)
            except TridentError:
                continue
        by_group: dict[uuid.UUID | None, list[LedgerEntry]] = {}
        for entry in groups.ref_pending(self.control, workspace):
            by_group.setdefault(entry.group_id, []).append(entry)
        for batch in by_group.values():
            records = {e.dataset_id: self.control.dataset_by_id(e.dataset_id) for e in batch}
            found = {k: v for k, v in records.items() if v is not None}
            try:
                with groups.writer_locks(self.control, list(found.values()), _LOCK_RELEASE_SECONDS):
                    ids = {b.txn_id for b in batch}
                    left = [e for e in groups.ref_pending(self.control, workspace) if e.txn_id in ids]
                    if left and self.move_refs(left, {k: self._fresh(v) for k, v in found.items()}):
                        forward.extend(e.txn_id for e in left)
            except TridentError:
                continue

    def _owner_gone(self, group: groups.GroupRecord) -> bool:
        """Is the group's owner gone (its group lock free)? An owner that died on this host may
        hold it for a moment while Postgres ends its session: waited for."""
        deadline = time.monotonic() + (_LOCK_RELEASE_SECONDS if _pid_gone_here(group.host, group.pid) else 0)
        while True:
            with groups.owner_lock(self.control, group.group_id) as free:
                if free:
                    return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)


@dataclass
class _Cleanups:
    """Tally of cleanup attempts: which transactions are clean now, which still pending."""

    cleaned: list[uuid.UUID] = field(default_factory=list)
    pending: list[uuid.UUID] = field(default_factory=list)
    files: int = 0
    uploads: int = 0

    def add(self, txn_id: uuid.UUID, done: Discarded | None) -> None:
        if done is None:
            self.pending.append(txn_id)
            return
        self.cleaned.append(txn_id)
        self.files += done.files
        self.uploads += done.uploads


_LOCK_RELEASE_SECONDS = 10.0  # how long Postgres may take to end a dead client's session


def in_environment_of(ds: DatasetRecord, entry: LedgerEntry) -> DatasetRecord:
    """``ds`` as the environment ``entry`` was written in sees it: a version staged by an
    environment's first write of the dataset has no head there yet, and its publish must move the
    environment's branch (``DatasetRecord.environment``), never main."""
    env = entry.metadata.get(ENV_LEDGER_META)
    if env and ds.environment is None:
        return replace(ds, environment=str(env))
    return ds


def _writer_died_here(entry: LedgerEntry) -> bool:
    """The writer ran on this host and its process is gone: its lock session is ending, so it is
    worth waiting for instead of reporting the transaction as still running."""
    return _pid_gone_here(entry.host, entry.pid)


def _pid_gone_here(host: str | None, pid: int | None) -> bool:
    if host != socket.gethostname() or pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


class Transaction:
    """One open ledger transaction on one dataset; the caller holds the dataset's writer lock."""

    def __init__(self, driver: TransactionDriver, ds: DatasetRecord, entry: LedgerEntry) -> None:
        self.driver = driver
        self.ds = ds
        self.entry = entry
        self.sink = driver.sink(entry.sink)
        self.lock = driver.lock_session(ds)
        self.shared = driver.shares(ds)  # under partition locks: COMMIT takes the commit lock
        self.partitioned = PARTITION_META in entry.metadata
        self._commit_locked = False

    def _fence(self) -> None:
        """Right before the sink's atomic commit: this writer still holds its lock, and a partition
        writer takes the dataset's commit lock, held until its ledger COMMIT (so commits, and the
        dataset stats they record, happen in one order)."""
        if self.lock is not None:
            self.driver.control.check_lock(self.lock, self.ds)
            if self.shared and not self._commit_locked:
                self.driver.control.acquire_commit_lock(self.lock, self.ds, self.driver.settings.writer_wait_seconds)
                self._commit_locked = True

    def _release_commit_lock(self) -> None:
        if self._commit_locked and self.lock is not None:
            self._commit_locked = False
            self.driver.control.release_commit_lock(self.lock, self.ds)

    def _reserve(self, n: int) -> int:
        if self.ds.environment is not None:
            return self.driver.control.reserve_env_row_indexes(self.ds, n)
        return self.driver.control.reserve_row_indexes(self.ds.dataset_id, n)

    @property
    def txn_id(self) -> uuid.UUID:
        return self.entry.txn_id

    def write(
        self,
        reader: pa.RecordBatchReader | None,
        *,
        keys: tuple[str, ...] = (),
        row_filter: str | None = None,
        preserve_identity: bool = False,
        stage: bool = False,
        partition: PartitionFilter | None = None,
    ) -> Outcome:
        """WRITE: the planner's rows stored by the sink as ONE change carrying the txn id."""
        spill = self.driver.settings.home / "tmp" / str(self.txn_id)
        try:
            failpoint("intent.after")
            return self.driver.planner.execute(
                self.sink,
                WriteRequest(
                    dataset=self.ds,
                    mode=cast(WriteMode, self.entry.mode),
                    keys=keys,
                    row_filter=row_filter,
                    txn_id=self.txn_id,
                    tau=self.entry.started_at,
                    reader=reader,
                    spill_dir=spill,
                    note_location=self._note_location,
                    preserve_identity=preserve_identity,
                    fence=self._fence,
                    stage=stage,
                    partition=partition,
                    # partition writers side by side reserve their row indexes in production's
                    # record, an environment's in its head there (its runs may stage side by side and
                    # be re-based at their publish); an environment's first write of the dataset
                    # numbers from the version it forks (a member staged so is never re-based)
                    reserve_rows=self._reserve if partition is not None and ENV_FORK_META not in self.entry.metadata else None,
                ),
            )
        except BaseException as exc:
            _reraise(exc, self.fail(exc))
        finally:
            shutil.rmtree(spill, ignore_errors=True)

    def _note_location(self, location: str) -> None:
        """Where the files go, in the ledger (for a crash) and here (for this writer's cleanup)."""
        self.driver.control.set_txn_location(self.txn_id, location)
        self.entry.location = location

    def commit(
        self,
        outcome: Outcome,
        *,
        provenance: Mapping[str, Any] | None = None,
        watermarks: Watermarks = (),  # type: ignore[assignment]
        flip_to: str | None = None,
        inline: InlineBlock | None = None,
    ) -> LedgerEntry:
        """COMMIT: record exactly what WRITE produced (and, for a canary, the flip; for an
        inlined write, its rows: ``transaction/inline.py``)."""
        try:
            failpoint("commit.before_ledger")
            return self.driver.control.commit_txn(
                self.entry,
                outcome,
                watermarks=list(watermarks),
                provenance=dict(provenance) if provenance is not None else None,
                flip_to=flip_to,
                conn=self.lock,
                reserved_indexes=self.partitioned,
                inline=inline,
            )
        except BaseException as exc:
            _reraise(exc, self.fail(exc))
        finally:
            self._release_commit_lock()

    def stage(self, outcome: Outcome) -> LedgerEntry:
        """The write is durable on its audit branch: record it ``staged`` (not published). Its
        base is the published version it was staged on; publish refuses if that moved."""
        try:
            failpoint("commit.before_ledger")
            return self.driver.control.stage_txn(self.entry, outcome, self.ds.snapshot_id, conn=self.lock)
        except BaseException as exc:
            _reraise(exc, self.fail(exc))
        finally:
            self._release_commit_lock()

    def fail(self, exc: BaseException) -> bool:
        """Revert the change if it became visible, mark the ledger ``aborted`` and remove the
        files. Each step that cannot be done (storage or Postgres down) is logged and left to
        the reconciler (an open row) or to a later cleanup (``cleanup_pending``), so the caller
        always gets the original, named error. Returns whether the transaction is settled
        (aborted); ``False`` leaves it open for the reconciler."""
        try:
            return self._fail(exc)
        finally:
            self._release_commit_lock()

    def _fail(self, exc: BaseException) -> bool:
        try:
            self.sink.undo(self.ds, self.txn_id)  # a no-op unless the change is the dataset's current state
        except Exception as undo_exc:
            log.error(
                "trident write %s failed (txn %s) and its change could not be checked or reverted (%s); "
                "the ledger row stays open for `trident reconcile`",
                self.ds.key,
                self.txn_id,
                undo_exc,
            )
            return False
        msg = f"{type(exc).__name__}: {exc}"
        try:
            self.driver.control.abort_txn(self.txn_id, msg)
        except Exception as pg_exc:
            log.error("could not mark txn %s aborted (%s); `trident reconcile` will", self.txn_id, pg_exc)
            return False
        self.driver.clean(self.ds, self.entry)
        log.warning("trident write %s aborted (txn %s): %s", self.ds.key, self.txn_id, msg)
        return True


def _reraise(exc: BaseException, settled: bool) -> NoReturn:
    """Re-raise, naming storage faults (OSError from pyarrow/S3) as StorageUnavailableError and a
    lost control plane as ControlPlaneUnavailableError: psycopg's errors, and the SQL catalog's
    connection errors (sqlalchemy), since that catalog lives in the control-plane Postgres.
    ``settled`` says whether the failure path could abort the transaction; if not, its ledger row
    is still open, and whether the change counts is the reconciler's call (its snapshot may have
    committed), so the message must not claim that nothing was committed."""
    fate = (
        "nothing was committed"
        if settled
        else (
            "its ledger row stays open until `trident reconcile` (or the next write of the dataset) settles it: "
            "rolled forward if its snapshot committed, else aborted"
        )
    )
    if isinstance(exc, ControlPlaneUnavailableError) and isinstance(exc.__cause__, psycopg.Error):
        exc = exc.__cause__  # named by the control plane, which cannot know the write's fate: said here
    if isinstance(exc, psycopg.Error) or _lost_sql_catalog(exc):
        raise ControlPlaneUnavailableError(
            f"the control-plane Postgres failed during the write; {fate}: {type(exc).__name__}: {exc}"
        ) from exc
    if isinstance(exc, OSError) and not isinstance(exc, TridentError):
        raise StorageUnavailableError(f"storage unavailable, {fate}: {type(exc).__name__}: {exc}") from exc
    if isinstance(exc, duckdb.OutOfMemoryException):
        raise ResourceLimitError(
            f"the write ran out of DuckDB memory and could not spill enough; {fate}. Raise TRIDENT_DUCKDB_MEMORY_LIMIT "
            f"(or free the spill disk): {_first_line(exc)}"
        ) from exc
    if isinstance(exc, (duckdb.Error, pa.ArrowException)) and not isinstance(exc, TridentError):
        raise WriteFailedError(f"the write failed; {fate}: {type(exc).__name__}: {_first_line(exc)}") from exc
    raise exc


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0]


def _lost_sql_catalog(exc: BaseException) -> bool:
    """The SQL catalog's connection to Postgres failed (not a bug in a statement)."""
    return isinstance(exc, (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError, sqlalchemy.exc.TimeoutError)) or (
        isinstance(exc, sqlalchemy.exc.DBAPIError) and exc.connection_invalidated
    )
