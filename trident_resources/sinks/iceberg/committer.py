"""The commit producer of the ``iceberg_native`` sink: ONE snapshot per transaction, re-based onto
the current table when writers of other partitions committed meanwhile, its added files grouped
into manifests of partition ranges."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.manifest import DataFile
from pyiceberg.table import Transaction
from pyiceberg.table.refs import MAIN_BRANCH
from pyiceberg.table.snapshots import Operation, Snapshot

from ...core.errors import TransactionConflictError
from ...core.failpoints import failpoint
from ...core.pyiceberg_compat import (
    added_manifests_in_groups,
    create_branch_in,
    manage_snapshots,
    name_commit_files,
    overwrite_as,
    transaction,
)
from ...core.schemas import promotable, widened
from ..contract import WriteRequest
from .reencoding import ENCODINGS_PROPERTY, STANDARD_ENCODINGS
from .snapshots import BOUNDS_PROPERTY, EXACT_BOUNDS, TXN_PROPERTY, audit_branch, env_branch, has_column, published_schema
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
            if req.dataset.environment is None:  # an environment's write holds its whole lock: its
                # base is its branch's version, which nobody else moves (main is production's)
                txn = _rebased(tables, req, txn, to_delete, base_snapshot_id)
        branch: str | None = MAIN_BRANCH
        branch_after: str | None = None
        if req.dataset.environment is not None and req.stage:  # staged in an environment: an audit branch
            branch = audit_branch(req.txn_id) if req.dataset.snapshot_id is not None else None
        elif req.dataset.environment is not None:  # an environment's version: its branch, never main
            branch = env_branch(req.dataset.environment)
            if not txn.table_metadata.snapshots:  # Iceberg writes a table's first snapshot to main only:
                branch, branch_after = None, branch  # an unreferenced snapshot, then the branch made at it
        elif req.stage:  # an audit branch; a table with no version yet takes an unreferenced snapshot
            branch = audit_branch(req.txn_id) if txn.table_metadata.current_snapshot() is not None else None
        # every file added here came from Trident's file writers: exact bounds (``stats.py``)
        # ... and in encodings every mainstream reader decodes (``reencoding.py``)
        marks = {BOUNDS_PROPERTY: EXACT_BOUNDS, ENCODINGS_PROPERTY: STANDARD_ENCODINGS}
        update = txn.update_snapshot(snapshot_properties={**props, **marks}, branch=branch)
        # named after the txn, so discard finds them if the commit never lands
        # a keyed delete adds files too: the rows of the files it touched that stay, unchanged
        operation = snapshot_operation(deleted=bool(to_delete), added=bool(files), removes_rows_only=req.mode == "delete")
        snapshot_id = commit_files(txn, update, to_delete, files, name_for=req.txn_id, operation=operation)
        failpoint("commit.before_catalog")
        req.fence()
        committed = txn.commit_transaction()
        if branch_after is not None:
            manage_snapshots(committed).create_branch(snapshot_id, branch_after).commit()
    except CommitFailedException as exc:
        raise TransactionConflictError(
            f"Iceberg commit of {req.dataset.key!r} conflicted with a concurrent change: {exc}. "
            "Nothing was committed; retry the write"
        ) from exc
    snap = committed.snapshot_by_id(snapshot_id)
    assert snap is not None and snap.summary is not None and snap.summary[TXN_PROPERTY] == str(req.txn_id)
    tables.remember_committed(req.dataset, committed)  # what the staged version's checks read next
    return snap


def _sequence(metadata: Any) -> int:
    """The table's last sequence number (v1 metadata has none: 0)."""
    return int(getattr(metadata, "last_sequence_number", 0) or 0)


def _rebased(
    tables: IcebergTables, req: WriteRequest, txn: Transaction, to_delete: list[DataFile], base_snapshot_id: int | None
) -> Transaction:
    fresh = tables.table(req.dataset)
    head = fresh.current_snapshot() if fresh is not None else None
    # unchanged only if main is where it was AND no snapshot was added anywhere: another
    # partition's staged version (an audit branch) moves the table's sequence number, not main,
    # and a snapshot built on the older metadata would reuse that number (the catalog refuses it)
    moved = fresh is not None and _sequence(fresh.metadata) != _sequence(txn.table_metadata)
    if fresh is None or ((head.snapshot_id if head else None) == base_snapshot_id and not moved):
        return txn
    ours = txn.table_metadata
    new = transaction(fresh)
    if req.stage and head is not None:  # the audit branch starts at the version it is re-based on
        create_branch_in(new, head.snapshot_id, audit_branch(req.txn_id))
    current = new.table_metadata.schema()
    # columns this write added or promoted (int -> long...) are added or promoted on the new parent too
    if any(not has_column(current, f.name) for f in ours.schema().fields) or widened(
        schema_to_pyarrow(current, include_field_ids=False), schema_to_pyarrow(ours.schema(), include_field_ids=False)
    ):
        with new.update_schema() as upd:
            upd.union_by_name(ours.schema())
    theirs = new.table_metadata
    for f in ours.schema().fields:
        other = theirs.schema().find_field(f.name) if has_column(theirs.schema(), f.name) else None
        # files of a narrower type under a column the other writer promoted read as its type
        same_type = other is not None and (
            other.field_type == f.field_type or promotable(schema_to_pyarrow(f.field_type), schema_to_pyarrow(other.field_type))
        )
        if other is None or other.field_id != f.field_id or not same_type:
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
    txn: Any,
    update: Any,
    deleted: Iterable[DataFile],
    added: Iterable[DataFile],
    *,
    name_for: uuid.UUID | None = None,
    operation: Operation | None = None,
) -> int:
    """One snapshot of ``update`` that deletes and adds exactly these data files; a partitioned
    table's new files go into manifests of partition ranges, so one-partition scans prune the
    rest. Returns the snapshot id.

    The snapshot records ``operation`` (Iceberg's word for what the commit did to the rows, which
    streaming and incremental readers act on), by default what the files say
    (``snapshot_operation``): a commit that only adds is an ``append`` (a fast append), one that
    only removes a ``delete``. A caller that knows more says so: compaction rewrites rows without
    changing them (``replace``); a keyed delete rewrites files with the rows that stay (``delete``)."""
    deleted, added = list(deleted), list(added)
    operation = operation or snapshot_operation(deleted=bool(deleted), added=bool(added))
    if not deleted:
        producer = update.fast_append()
    elif operation == Operation.OVERWRITE:
        producer = update.overwrite()
    else:
        producer = overwrite_as(update, operation)
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


def snapshot_operation(*, deleted: bool, added: bool, removes_rows_only: bool = False) -> Operation:
    """The Iceberg operation of a commit that deletes and/or adds data files: ``append`` when it
    only adds, ``delete`` when it only removes rows (no file added, or ``removes_rows_only``: the
    files it adds hold rows that were already there, minus the removed ones), ``overwrite`` when
    rows are both removed and added. (``replace``, rows rewritten without change, is compaction's
    to claim.)"""
    if not deleted:
        return Operation.APPEND
    if not added or removes_rows_only:
        return Operation.DELETE
    return Operation.OVERWRITE
