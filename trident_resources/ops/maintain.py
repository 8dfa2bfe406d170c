"""``Trident.maintain`` of one dataset: under its writer lock taken without waiting, stale staged
versions discarded, small files compacted (and files whose bounds lose rows rewritten; a pg dataset's dropped row
blocks rebuilt), old snapshots expired with the files only they used,
incomplete uploads aborted, and aborted transactions' pending storage cleanups retried."""

from __future__ import annotations

import logging
from contextlib import ExitStack
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from ..control.plane import PRODUCTION, DatasetRecord
from ..core import arguments
from ..core import read_faults as faults
from ..core.errors import ConcurrentWriteError, DatasetNotFoundError, MaintenanceFailedError, TridentError, WriterLockLostError
from ..core.keys import validate_key
from ..engine import Engine
from ..read.tail import rows_count as inline_rows
from ..sinks.contract import Maintenance
from ..transaction import inline
from .flush import flushed_first

log = logging.getLogger("trident")


def maintain(
    engine: Engine,
    key: str,
    *,
    older_than: timedelta,
    retain_last: int,
    uploads_older_than: timedelta,
) -> Maintenance:
    """``Trident.maintain`` of ``key`` (see there for what it does and why the lock is not waited for)."""
    arguments.maintenance_window(older_than, retain_last, uploads_older_than)
    ds = engine.control.dataset(engine.workspace, validate_key(key))
    if ds is None:
        raise DatasetNotFoundError(key, engine.workspace)
    with ExitStack() as stack:
        try:
            ds = stack.enter_context(engine.driver.locked(ds, wait_s=0))
        except WriterLockLostError:
            raise
        except ConcurrentWriteError:
            reason = _busy_reason(engine, ds)
            log.info("trident maintain %s: skipped, %s", key, reason)
            return Maintenance(key=ds.key, expired_snapshots=0, deleted_files=0, skipped=reason)
        if engine.environment != PRODUCTION:
            return _maintain_in_environment(engine, ds)
        cleanups = engine.driver.retry_cleanups(engine.workspace, ds)
        if not ds.exists:
            if not (cleanups.cleaned or cleanups.pending):
                raise DatasetNotFoundError(key, engine.workspace)
            done = Maintenance(key=ds.key, expired_snapshots=0, deleted_files=0)
        else:
            now = datetime.now(UTC)
            cutoff = now - timedelta(days=engine.settings.staged_max_age_days)
            # a transaction group's member is decided with its group (discarding it alone would let the
            # group publish without it); the reconciler aborts a group whose owner is gone
            stale = [
                e
                for e in engine.control.staged_entries(ds.dataset_id)
                if e.staged_at is not None and e.staged_at < cutoff and e.group_id is None
            ]
            for entry in stale:
                engine.driver.discard_staged(
                    ds, entry, f"discarded by maintenance: staged over {engine.settings.staged_max_age_days} days ago"
                )
            before_flush = inline_rows(engine, ds)
            ds = flushed_first(engine, ds, before_flush)
            engine.control.purge_flushed_inline(ds.dataset_id, _before(now, older_than))
            sink = engine.driver.sink(ds.sink)
            try:
                compacted = sink.compact(ds)
                log.info("trident maintain %s: %s", key, compacted)
                in_envs = _compact_environments(engine, ds) if ds.sink == inline.INLINE_SINK else {}
                done = sink.maintain(
                    ds,
                    older_than=_before(now, older_than),
                    retain_last=retain_last,
                    uploads_before=_before(now, uploads_older_than),
                )
            except Exception as exc:  # compaction reads every small file: a damaged one is named
                err = _named(exc, key)
                if err is exc:  # already named: ``raise exc from exc`` would lose its own cause
                    raise
                raise err from exc
            done = replace(
                done,
                discarded_staged=[e.txn_id for e in stale],
                compacted_files=compacted.compacted_files,
                compaction_files_written=compacted.compaction_files_written,
                repaired_files=compacted.repaired_files,
                reencoded_files=compacted.reencoded_files,
                rebuilt_blocks=compacted.rebuilt_blocks,
                data_files_before=compacted.data_files_before,
                data_files_after=compacted.data_files_after,
                flushed_rows=before_flush,
                environment_compacted_files=in_envs,
            )
        return replace(
            done,
            deleted_files=done.deleted_files + cleanups.files,
            aborted_uploads=done.aborted_uploads + cleanups.uploads,
            cleaned_txns=len(cleanups.cleaned),
            cleanup_pending=len(cleanups.pending),
        )


def _compact_environments(engine: Engine, ds: DatasetRecord) -> dict[str, int]:
    """Production's maintenance of ``ds`` (its writer lock held): every environment's own small
    files compacted on its branch, as ``maintain`` in that environment does; by environment, the
    files rewritten (environments with nothing to compact left out)."""
    out = {}
    sink = engine.driver.sink(ds.sink)
    for head in engine.control.heads_of_dataset(ds.dataset_id):
        if head.snapshot_id is None:
            continue
        version = head.over(ds)
        done, snapshot_id = sink.compact_environment(version, None if head.born_in_env else head.fork_snapshot_id)  # type: ignore[attr-defined]
        if snapshot_id is not None:
            engine.control.move_env_head_snapshot(version, head.snapshot_id, snapshot_id)
            out[head.environment] = done.compacted_files
    return out


def _maintain_in_environment(engine: Engine, ds: DatasetRecord) -> Maintenance:
    """``maintain`` in an environment (``ds``: its version of the dataset, its writer lock held):
    the environment's own small files compacted on its branch, its head moved to the compacted
    snapshot (the same rows), and nothing else. Production's ``main``, its files, its staged
    versions, its inlined rows and its snapshot expiry are production's maintenance's (which
    keeps every file the branch reads): an environment never changes them. A dataset the
    environment has no version of is production's: nothing is done, and ``skipped`` says so."""
    ds = engine.control.dataset(engine.workspace, ds.key) or ds  # its version, read under the lock
    if ds.environment is None or ds.snapshot_id is None or ds.sink != inline.INLINE_SINK:
        return Maintenance(
            key=ds.key,
            expired_snapshots=0,
            deleted_files=0,
            skipped=f"environment {engine.environment!r} has no version of it: production's maintenance maintains it",
        )
    head = engine.control.env_heads(engine.workspace, engine.environment, [ds.dataset_id]).get(ds.dataset_id)
    fork = None if head is None or head.born_in_env else head.fork_snapshot_id
    sink = engine.driver.sink(ds.sink)
    try:
        done, snapshot_id = sink.compact_environment(ds, fork)  # type: ignore[attr-defined]
    except Exception as exc:
        err = _named(exc, ds.key)
        if err is exc:
            raise
        raise err from exc
    if snapshot_id is not None:  # crash before this: the head stays at the uncompacted version (same rows)
        engine.control.move_env_head_snapshot(ds, ds.snapshot_id, snapshot_id)
    log.info("trident maintain %s in environment %s: %s", ds.key, engine.environment, done)
    return done


def _named(exc: Exception, key: str) -> Exception:
    """``exc`` as a named error: a fault reading a file or reaching storage as reads name it, one
    of the table library's own (pyiceberg can raise ``IndexError`` on a damaged manifest) as
    ``MaintenanceFailedError``."""
    err = faults.named(exc, key)
    if isinstance(err, TridentError):
        return err
    first = (str(exc).strip().splitlines() or [""])[0]
    return MaintenanceFailedError(
        f"maintenance of {key!r} failed (its rows are unchanged: compaction commits one snapshot or none): "
        f"{type(exc).__name__}: {first}"
    )


def _busy_reason(engine: Engine, ds: DatasetRecord) -> str:
    """Why ``maintain`` could not take the writer lock, naming the open write when there is one."""
    open_now = engine.control.open_entries(ds.dataset_id)
    if not open_now:
        # no open transaction: a maintenance or reconcile of it, or a write still reading the small
        # input it may inline (an inlined write records nothing before its one COMMIT)
        return "its writer lock is held (another maintenance or reconcile of it, or a small write about to commit)"
    e = open_now[0]
    return (
        f"a write of it is open (transaction {e.txn_id}, writer {e.writer}, pid {e.pid} on {e.host}, "
        f"since {e.started_at:%Y-%m-%d %H:%M:%S%z}); the next maintenance does it"
    )


def _before(now: datetime, age: timedelta) -> datetime:
    """``now - age``, or the earliest instant when ``age`` reaches past year 1 (``timedelta.max``
    means "keep everything", and must not be a raw OverflowError)."""
    try:
        return now - age
    except OverflowError:
        return datetime.min.replace(tzinfo=UTC)
