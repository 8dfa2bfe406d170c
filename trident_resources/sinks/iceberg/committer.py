"""The commit producer of the ``iceberg_native`` sink: ONE snapshot per transaction, re-based onto
the current table when writers of other partitions committed meanwhile, its added files grouped
into manifests of partition ranges."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.manifest import DataFile
from pyiceberg.table import Transaction
from pyiceberg.table.refs import MAIN_BRANCH
from pyiceberg.table.snapshots import Snapshot

from ...core.errors import TransactionConflictError
from ...core.failpoints import failpoint
from ...core.pyiceberg_compat import added_manifests_in_groups, name_commit_files, transaction
from ..contract import WriteRequest
from .snapshots import BOUNDS_PROPERTY, EXACT_BOUNDS, TXN_PROPERTY, audit_branch, has_column, published_schema
from .tables import IcebergTables

# Files added by one commit of a partitioned table go into manifests of at most this many files,
# by partition order: a manifest then covers a narrow range of partitions, and a one-partition
# read or replace opens (or rewrites) one of them, not a manifest of every file of a backfill.
MANIFEST_FILES = 100


def _manifest_groups(files: list[DataFile]) -> list[list[DataFile]]:
    """``files`` by partition spec (a manifest holds one spec's files: compaction re-adds files of
    a partition written under an older spec), then in partition order, cut every
    ``MANIFEST_FILES``; the spec with the highest id, the table's newest, last."""
    specs: dict[int, list[DataFile]] = {}
    for f in files:
        specs.setdefault(f.spec_id, []).append(f)
    if len(specs) <= 1 and len(files) <= MANIFEST_FILES:
        return [files]

    def order(f: DataFile) -> tuple[tuple[bool, Any], ...]:
        p = f.partition
        return tuple((p[i] is None, p[i]) for i in range(len(p)))

    groups = []
    for spec in sorted(specs):
        ordered = sorted(specs[spec], key=order)
        groups += [ordered[i : i + MANIFEST_FILES] for i in range(0, len(ordered), MANIFEST_FILES)]
    return groups


def commit_snapshot(
    tables: IcebergTables,
    req: WriteRequest,
    txn: Transaction,
    files: list[DataFile],
    to_delete: list[DataFile],
    props: dict[str, str],
    *,
    base_snapshot_id: int | None = None,
) -> Snapshot:
    """Commit ONE snapshot. pyiceberg itself retries a commit that conflicts with a concurrent
    one (table property ``commit.retry.num-retries``); what still conflicts is a named error.

    A partition write first takes the dataset's commit lock (through ``req.fence``) and, when
    writers of other partitions committed since it began, re-bases its change on the table
    as it is now: same files added and deleted, on the new parent snapshot."""
    try:
        if req.partition is not None:
            req.fence()
            txn = _rebased(tables, req, txn, to_delete, base_snapshot_id)
        branch: str | None = MAIN_BRANCH
        if req.stage:  # an audit branch; a table with no version yet takes an unreferenced snapshot
            branch = audit_branch(req.txn_id) if txn.table_metadata.current_snapshot() is not None else None
        # every file added here came from Trident's file writers: exact bounds (``stats.py``)
        update = txn.update_snapshot(snapshot_properties={**props, BOUNDS_PROPERTY: EXACT_BOUNDS}, branch=branch)
        # named after the txn, so discard finds them if the commit never lands
        snapshot_id = commit_files(txn, update, to_delete, files, name_for=req.txn_id)
        failpoint("commit.before_catalog")
        req.fence()
        committed = txn.commit_transaction()
    except CommitFailedException as exc:
        raise TransactionConflictError(
            f"Iceberg commit of {req.dataset.key!r} conflicted with a concurrent change: {exc}. "
            "Nothing was committed; retry the write"
        ) from exc
    snap = committed.snapshot_by_id(snapshot_id)
    assert snap is not None and snap.summary is not None and snap.summary[TXN_PROPERTY] == str(req.txn_id)
    tables.remember_committed(req.dataset, committed)  # what the staged version's checks read next
    return snap


def _rebased(
    tables: IcebergTables, req: WriteRequest, txn: Transaction, to_delete: list[DataFile], base_snapshot_id: int | None
) -> Transaction:
    fresh = tables.table(req.dataset)
    head = fresh.current_snapshot() if fresh is not None else None
    if fresh is None or (head.snapshot_id if head else None) == base_snapshot_id:
        return txn
    ours = txn.table_metadata
    new = transaction(fresh)
    current = new.table_metadata.schema()
    if any(not has_column(current, f.name) for f in ours.schema().fields):
        with new.update_schema() as upd:
            upd.union_by_name(ours.schema())
    theirs = new.table_metadata
    for f in ours.schema().fields:
        other = theirs.schema().find_field(f.name) if has_column(theirs.schema(), f.name) else None
        if other is None or other.field_id != f.field_id or other.field_type != f.field_type:
            raise TransactionConflictError(
                f"the schema of {req.dataset.key!r} changed while this partition was being written "
                f"(column {f.name!r}); nothing was committed, retry the write"
            )
    if theirs.spec() != ours.spec() or theirs.default_spec_id != ours.default_spec_id:
        raise TransactionConflictError(
            f"the partitioning of {req.dataset.key!r} changed while this partition was being written; retry the write"
        )
    assert req.partition is not None
    present = {f.file_path for f in tables.partition_scope(fresh, req.partition.bind(published_schema(fresh)))}
    gone = [f.file_path for f in to_delete if f.file_path not in present]
    if gone:
        raise TransactionConflictError(
            f"{len(gone)} data file(s) this write replaces were changed by a concurrent write of {req.dataset.key!r}; "
            "nothing was committed, retry the write"
        )
    return new


def commit_files(
    txn: Any, update: Any, deleted: Iterable[DataFile], added: Iterable[DataFile], *, name_for: uuid.UUID | None = None
) -> int:
    """One snapshot of ``update`` that deletes and adds exactly these data files (an overwrite when
    anything goes, a fast append otherwise); a partitioned table's new files go into manifests of
    partition ranges, so one-partition scans prune the rest. Returns the snapshot id."""
    deleted = list(deleted)
    producer = update.overwrite() if deleted else update.fast_append()
    if name_for is not None:
        name_commit_files(producer, name_for)
    if txn.table_metadata.spec().fields:
        added_manifests_in_groups(producer, _manifest_groups)
    with producer as p:
        for f in deleted:
            p.delete_data_file(f)
        for f in added:
            p.append_data_file(f)
    return int(producer.snapshot_id)
