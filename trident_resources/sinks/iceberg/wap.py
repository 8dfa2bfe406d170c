"""Write-audit-publish on the ``iceberg_native`` sink: a staged version lives on an audit branch
(or, for a table's first write, as an unreferenced snapshot) until ``publish`` makes it main's
snapshot in one metadata-only commit, re-based onto other partitions' commits when it can be
without losing anything, or ``discard_staged`` drops it."""

from __future__ import annotations

import logging
import uuid

from pyiceberg.exceptions import CommitFailedException, ForbiddenError
from pyiceberg.table import Table
from pyiceberg.table.refs import MAIN_BRANCH
from pyiceberg.table.snapshots import Snapshot

from ...control.plane import DatasetRecord, Outcome
from ...core.errors import InvalidWriteError, StagedVersionConflictError
from ...core.partitions import PartitionFilter
from ...core.pyiceberg_compat import manage_snapshots, move_branch_in, remove_branch_in, transaction
from .committer import commit_files
from .partition_spec import iceberg_expr
from .scans import snapshot_iceberg_schema, snapshot_schema
from .snapshots import (
    TXN_PROPERTY,
    audit_branch,
    carries_txn,
    env_branch,
    has_column,
    is_maintenance,
    published_schema,
    same_data_version,
    summary_outcome,
)
from .tables import IcebergTables

log = logging.getLogger("trident")


def publish(
    tables: IcebergTables,
    ds: DatasetRecord,
    txn_id: uuid.UUID,
    base_snapshot_id: int | None,
    partition: PartitionFilter | None = None,
) -> Outcome:
    """Make a staged version the published one in ONE metadata-only commit (no data file is
    read or written). When main is still where the version was staged, main moves to the
    audit branch's snapshot (exactly the audited snapshot). A partition write staged while
    writers of OTHER partitions committed is re-based instead: its change (the same files
    added and deleted) becomes a new snapshot on the current main, so their commits are kept.
    Refused when the change would lose something: main moved for a whole-dataset write, or
    the staged partition's own files changed since staging (whoever committed that). "Moved"
    means another data version: Trident's own maintenance snapshots (compaction) hold the rows
    of the version they were made from, so a compaction between staging and publishing is no
    change (``snapshots.data_version``); main then moves to the staged snapshot, which holds
    the staged rows in the files it was staged with (the next ``maintain`` compacts them)."""
    # the table as this process last saw it (its own stage commit, usually): committed against
    # when it shows main still at the fork; the catalog's commit checks that main is really
    # there (optimistic), and only if it is not is the table loaded to decide (one
    # catalog query and load less per publish)
    known = tables.last_known_table(ds)
    if known is not None:
        seen = _staged_snapshot(known, txn_id)
        head = known.current_snapshot()
        fork = (seen.parent_snapshot_id if partition is not None else base_snapshot_id) if seen is not None else None
        if seen is not None and same_data_version(known, head.snapshot_id if head is not None else None, fork):
            try:
                return _move_main(tables, ds, known, seen, txn_id)
            except CommitFailedException:
                pass  # changed since: decided below on the table as it is now
    table = tables.existing_table(ds)
    staged = _staged_snapshot(table, txn_id)
    if staged is None:
        raise InvalidWriteError(f"transaction {txn_id} has no staged version of {ds.key!r} (discarded or expired?)")
    head = table.current_snapshot()
    now = head.snapshot_id if head is not None else None
    # a partition write's base is the snapshot its audit branch forked from (other partitions'
    # writers may have committed between its lock and its start; the ledger's base predates them)
    fork = staged.parent_snapshot_id if partition is not None else base_snapshot_id
    moved = not same_data_version(table, now, fork)
    if moved and partition is not None and now is not None and fork is not None:
        return _publish_rebased(tables, ds, table, staged, partition)
    if moved:
        raise StagedVersionConflictError(
            f"{ds.key!r} changed since transaction {txn_id} was staged (published version "
            f"{now}, staged on {fork}); publishing would lose that "
            f"change. Discard it (`trident discard {ds.key} {txn_id}`) and write again"
        )
    try:
        return _move_main(tables, ds, table, staged, txn_id)
    except CommitFailedException as exc:
        raise StagedVersionConflictError(f"{ds.key!r} changed while publishing {txn_id}: {exc}") from exc


def publish_in_environment(tables: IcebergTables, ds: DatasetRecord, txn_id: uuid.UUID, base_snapshot_id: int | None) -> Outcome:
    """Publish a version staged in an environment (``ds.environment``): the environment's branch
    moves to the staged snapshot (created there when this is the environment's first version of
    the dataset) and the audit branch goes, ONE metadata-only commit; ``main`` never moves.
    Refused when the environment's branch moved since the version was staged."""
    assert ds.environment is not None
    table = tables.existing_table(ds)
    staged = _staged_snapshot(table, txn_id)
    if staged is None:
        raise InvalidWriteError(f"transaction {txn_id} has no staged version of {ds.key!r} (discarded or expired?)")
    branch = env_branch(ds.environment)
    ref = table.metadata.refs.get(branch)
    if ref is not None and ref.snapshot_id != base_snapshot_id:
        raise StagedVersionConflictError(
            f"{ds.key!r} changed in environment {ds.environment!r} since transaction {txn_id} was staged (its "
            f"version {ref.snapshot_id}, staged on {base_snapshot_id}); discard it (`trident discard {ds.key} "
            f"{txn_id}`) and write again"
        )
    try:
        txn = transaction(table)
        move_branch_in(txn, branch, staged.snapshot_id)
        if audit_branch(txn_id) in table.metadata.refs:
            remove_branch_in(txn, audit_branch(txn_id))
        committed = txn.commit_transaction()
    except CommitFailedException as exc:
        raise StagedVersionConflictError(f"{ds.key!r} changed while publishing {txn_id}: {exc}") from exc
    tables.remember_committed(ds, committed)
    return summary_outcome(staged, snapshot_schema(committed, staged.snapshot_id), committed)


def _move_main(tables: IcebergTables, ds: DatasetRecord, table: Table, staged: Snapshot, txn_id: uuid.UUID) -> Outcome:
    """Main to the staged snapshot and the audit branch dropped, one commit (CommitFailedException
    when main is not where ``table`` says, or anything else the update assumes changed)."""
    branch = audit_branch(txn_id)
    update = manage_snapshots(table).set_current_snapshot(staged.snapshot_id)
    if branch in table.metadata.refs:
        update = update.remove_branch(branch)
    update.commit()
    tables.remember_committed(ds, table)  # what the describe after a publish reads
    # the commit left ``table`` at the metadata it committed (pyiceberg updates it in place): a
    # reload would be one more catalog query and metadata parse per publish, and could
    # show a later commit's schema instead of the published one's
    return summary_outcome(staged, published_schema(table), table)


def rebase_staged(tables: IcebergTables, ds: DatasetRecord, txn_id: uuid.UUID, partition: PartitionFilter) -> Outcome:
    """Re-base a staged partition write onto the current main (other partitions' writers moved
    it since staging), still staged: the audit branch moves to main's head and gets one snapshot
    deleting and adding what the staged one did (as ``publish`` re-bases, but without publishing),
    so a transaction group can then publish it by moving main there. The caller holds the
    dataset's commit lock. Idempotent: a re-based version is re-based onto the same head again.

    Raises:
        InvalidWriteError: the transaction has no staged version.
        StagedVersionConflictError: the partition's own files changed since staging.
    """
    table = tables.existing_table(ds)
    staged = _staged_snapshot(table, txn_id)
    if staged is None or audit_branch(txn_id) not in table.metadata.refs:
        raise InvalidWriteError(f"transaction {txn_id} has no staged version of {ds.key!r} (discarded or expired?)")
    return _publish_rebased(tables, ds, table, staged, partition, onto=audit_branch(txn_id))


def _publish_rebased(
    tables: IcebergTables,
    ds: DatasetRecord,
    table: Table,
    staged: Snapshot,
    partition: PartitionFilter,
    onto: str = MAIN_BRANCH,
) -> Outcome:
    """Publish a staged partition write onto a main that other partitions' writers moved (the
    caller holds the dataset's commit lock): refused unless the partition's files on main are
    exactly those it was staged on; then one snapshot on main deletes and adds what the staged
    snapshot deleted and added, carrying its summary (txn id, counts, next ``__row_index``).
    ``onto`` an audit branch: that snapshot goes onto the branch, moved to main's head first
    (re-based, still staged: ``rebase_staged``)."""
    txn_id = uuid.UUID(str(staged.summary[TXN_PROPERTY])) if staged.summary is not None else None
    assert txn_id is not None and staged.parent_snapshot_id is not None
    expr = iceberg_expr(partition.bind(snapshot_schema(table, staged.snapshot_id)))
    parent = {f.file_path: f for f in tables.data_files(table, staged.parent_snapshot_id)}
    mine = {f.file_path: f for f in tables.data_files(table, staged.snapshot_id)}
    # the version it re-bases onto: main's head, or in an environment the environment's version
    head = table.snapshot_by_id(ds.snapshot_id) if ds.environment is not None and ds.snapshot_id else table.current_snapshot()
    assert head is not None
    was = {f.file_path for f in tables.data_files(table, staged.parent_snapshot_id, row_filter=expr)}
    now_files = {f.file_path: f for f in tables.data_files(table, head.snapshot_id, row_filter=expr)}
    added = [f for p, f in mine.items() if p not in parent]
    deleted = [f for p, f in parent.items() if p not in mine]
    conflict = StagedVersionConflictError(
        f"partition {partition.describe()} of {ds.key!r} changed since transaction {txn_id} was staged "
        f"(staged on version {staged.parent_snapshot_id}, published version now {head.snapshot_id}); "
        f"publishing would lose that change. Discard it (`trident discard {ds.key} {txn_id}`) and write again"
    )
    if was != set(now_files):
        if not _rows_unchanged(tables, table, staged.parent_snapshot_id, head, expr):
            raise conflict
        # only maintenance rewrote the partition's files: its rows are those the write was staged
        # on. A write that replaced them all replaces the rewritten files; one that kept some of
        # them cannot say which rows of the rewritten files to drop
        replaced = {f.file_path for f in deleted}
        if replaced & (was - set(now_files)):
            if not was <= replaced:
                raise conflict
            deleted = [f for f in deleted if f.file_path not in was] + list(now_files.values())
    live = {f.file_path for f in tables.data_files(table, head.snapshot_id)}
    if any(f.file_path not in live for f in deleted):
        raise StagedVersionConflictError(
            f"data files transaction {txn_id} replaces in {ds.key!r} were changed by a later commit; "
            f"discard it (`trident discard {ds.key} {txn_id}`) and write again"
        )
    summary = staged.summary.additional_properties if staged.summary is not None else {}
    props = {k: v for k, v in summary.items() if k.startswith("trident.")}
    try:
        txn = transaction(table)
        ours, theirs = snapshot_iceberg_schema(table, staged.snapshot_id), txn.table_metadata.schema()
        if any(not has_column(theirs, f.name) for f in ours.fields):
            with txn.update_schema() as upd:
                upd.union_by_name(ours)
        if onto != MAIN_BRANCH:
            move_branch_in(txn, onto, head.snapshot_id)
        update = txn.update_snapshot(snapshot_properties=props, branch=onto)
        # what the staged snapshot did to the rows, whatever main's files it now applies to
        operation = staged.summary.operation if staged.summary is not None else None
        snapshot_id = commit_files(txn, update, deleted, added, operation=operation)
        if onto == MAIN_BRANCH and audit_branch(txn_id) in table.metadata.refs:
            remove_branch_in(txn, audit_branch(txn_id))
        committed = txn.commit_transaction()
    except CommitFailedException as exc:
        raise StagedVersionConflictError(f"{ds.key!r} changed while publishing {txn_id}: {exc}") from exc
    tables.remember_committed(ds, committed)
    snap = committed.snapshot_by_id(snapshot_id)
    assert snap is not None
    return summary_outcome(snap, published_schema(committed), committed)


def _rows_unchanged(tables: IcebergTables, table: Table, fork: int, head: Snapshot, expr: object) -> bool:
    """Did every snapshot from ``fork`` (exclusive) to ``head`` that changed the partition ``expr``'s
    files change only their layout (a maintenance snapshot)? False when the chain is broken."""
    by_id = {s.snapshot_id: s for s in table.snapshots()}
    snap = head
    while snap.snapshot_id != fork:
        parent = snap.parent_snapshot_id
        if parent is None or parent not in by_id:
            return False
        if not is_maintenance(snap):
            ours = {f.file_path for f in tables.data_files(table, snap.snapshot_id, row_filter=expr)}
            before = {f.file_path for f in tables.data_files(table, parent, row_filter=expr)}
            if ours != before:
                return False
        snap = by_id[parent]
    return True


def _staged_snapshot(table: Table, txn_id: uuid.UUID) -> Snapshot | None:
    """The staged snapshot: the audit branch's head, or (first write of a table) the snapshot
    carrying the txn id that no ref points to."""
    ref = table.metadata.refs.get(audit_branch(txn_id))
    if ref is not None:
        return table.snapshot_by_id(ref.snapshot_id)
    return next((s for s in table.snapshots() if carries_txn(s, txn_id)), None)


def drop_audit_branch(table: Table, txn_id: uuid.UUID) -> bool:
    """Remove the transaction's audit branch and expire its staged snapshot (only that one):
    what discarding a staged version does to the table before its files are deleted. False when
    the catalog refused the expiry (a catalog that only expires snapshots by its own
    maintenance, answering 403 to a REST commit removing one): the snapshot then stays,
    unreferenced, and so must its files, until the catalog's maintenance expires it."""
    branch = audit_branch(txn_id)
    ref = table.metadata.refs.get(branch)
    if ref is None:
        return True
    manage_snapshots(table).remove_branch(branch).commit()
    table = table.refresh()
    snap = table.snapshot_by_id(ref.snapshot_id)
    if snap is None or not carries_txn(snap, txn_id):
        return True
    try:
        table.maintenance.expire_snapshots().by_id(ref.snapshot_id).commit()  # only the staged one
    except ForbiddenError as exc:
        log.info(
            "the catalog refused to expire discarded staged snapshot %s of %s (%s); it stays unreferenced, with "
            "its files, until the catalog's own maintenance expires it",
            ref.snapshot_id,
            table.name(),
            exc,
        )
        return False
    return True
