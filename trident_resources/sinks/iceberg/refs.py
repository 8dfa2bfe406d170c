"""The Iceberg ``main`` refs of a published transaction group: after the control plane published the
group (what Trident's readers go by), each member table's ``main`` moves to the member's staged
snapshot and its audit branch goes, so that other engines reading the tables through the catalog
see the group too. A group written in an environment moves that environment's branch of each
table instead (``target_ref``); ``main`` stays production's.

On a REST catalog that serves ``transactions/commit``, every table's change goes in ONE catalog
call with an idempotency key (derived from the group id and the changes), and on the SQL catalog in
ONE Postgres transaction, so external readers, too, see all of the group or none of it. On a REST
catalog without the endpoint the tables move one by one (a few side by side), right after the
control-plane publish: an external reader may see the group land table by table for that moment. Both are idempotent: a table already at its version is left alone, so
the reconciler, or the next writer of a dataset, finishes what a crashed publisher left.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import cast

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import CommitTableRequest, Table, TableIdentifier
from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRefType
from pyiceberg.table.update import AssertRefSnapshotId, AssertTableUUID, RemoveSnapshotRefUpdate, SetSnapshotRefUpdate

from ...core.failpoints import failpoint
from ...core.pyiceberg_compat import (
    SqlCatalogReusingMetadata,
    commit_tables,
    commits_tables_at_once,
    manage_snapshots,
    move_branch_in,
    remove_branch_in,
    transaction,
)
from ..contract import RefMove
from .snapshots import audit_branch, env_branch, same_data_version
from .tables import IcebergTables

log = logging.getLogger("trident")
_PARALLEL_MOVES = 8  # table commits in flight at once on a catalog without multi-table commits


def move_refs(tables: IcebergTables, moves: Sequence[RefMove], idempotency_key: str) -> int:
    """Move every member's ``main`` (see the module); returns how many catalog commits it took
    (0 when every table was already there). Raises what the catalog raises (the caller keeps the
    moves pending for the reconciler)."""
    if commits_tables_at_once(tables.catalog):
        changes = [c for c in (_change(tables.existing_table(m.ds), m) for m in moves) if c is not None]
        if not changes:
            return 0
        commit_tables(tables.catalog, changes, call_key(idempotency_key, changes))  # type: ignore[arg-type]  # a RestCatalog: checked above
        return 1
    if isinstance(tables.catalog, SqlCatalogReusingMetadata) and len(moves) > 1:
        return _move_in_one_sql_transaction(tables, moves)
    if len(moves) <= 1:
        return sum(_move(tables, m) for m in moves)
    # independent tables: their commits run side by side (each is one catalog round trip or two)
    with ThreadPoolExecutor(max_workers=min(_PARALLEL_MOVES, len(moves)), thread_name_prefix="trident-refs") as pool:
        return sum(pool.map(lambda m: _move(tables, m), moves))


def _move_in_one_sql_transaction(tables: IcebergTables, moves: Sequence[RefMove]) -> int:
    """The SQL catalog's multi-table commit: every table's ``main`` in one Postgres transaction
    (``SqlCatalogReusingMetadata.commit_tables``), on the tables as this process last saw them
    (its staging commits, usually) and, if one moved since, once more on the tables as they are."""
    catalog = cast(SqlCatalogReusingMetadata, tables.catalog)
    for attempt in range(2):
        loaded = [(m, _latest(tables, m) if attempt == 0 else tables.existing_table(m.ds)) for m in moves]
        changes = [(m, t, c) for m, t in loaded if (c := _change(t, m)) is not None]
        if not changes:
            return 0
        try:
            committed = catalog.commit_tables([(t, c.requirements, c.updates) for _, t, c in changes])
        except CommitFailedException:
            if attempt == 0:
                continue
            raise
        for (m, _, _), table in zip(changes, committed, strict=True):
            tables.remember_committed(m.ds, table)
        failpoint("group.ref_moved")
        return 1
    return 0


def _latest(tables: IcebergTables, move: RefMove) -> Table:
    """The table as this process last saw it when that holds the member's snapshot, else loaded."""
    known = tables.last_known_table(move.ds)
    return known if known is not None and known.snapshot_by_id(move.snapshot_id) is not None else tables.existing_table(move.ds)


def _move(tables: IcebergTables, move: RefMove) -> int:
    done = _move_one(tables, move)
    failpoint("group.ref_moved")
    return done


def call_key(group: str, changes: Sequence[CommitTableRequest]) -> str:
    """The ``Idempotency-Key`` of one ``transactions/commit`` call: a UUID derived from the group and
    the exact changes (each table's required and new ``main``), so the retry of the same call is
    recognised as one by the catalog, and a call after anything changed (a new requirement) is a
    new one, never answered with an earlier call's outcome."""
    try:
        space = uuid.UUID(group)
    except ValueError:
        space = uuid.NAMESPACE_URL
    return str(uuid.uuid5(space, "\n".join(sorted(c.model_dump_json() for c in changes))))


def target_ref(move: RefMove) -> str:
    """The ref a member's publish moves: ``main``, or for a member written in an environment
    (``move.ds.environment``) that environment's branch (created when missing), never ``main``."""
    return env_branch(move.ds.environment) if move.ds.environment is not None else MAIN_BRANCH


def _at(table: Table, ref: str) -> int | None:
    """The snapshot ``ref`` points at in ``table`` (None: no such ref)."""
    found = table.metadata.refs.get(ref)
    return found.snapshot_id if found is not None else None


def _there(table: Table, move: RefMove) -> bool:
    """Is the member's ref already at its version (or superseded, so it must not move)?"""
    head = _at(table, target_ref(move))
    return not move.main or (head is not None and same_data_version(table, head, move.snapshot_id))


def _change(table: Table, move: RefMove) -> CommitTableRequest | None:
    """One table's part of a multi-table commit: the member's ref (``target_ref``) to its snapshot
    (required to still be where it is now) and the audit branch removed; ``None`` when nothing is
    left to do."""
    ref = target_ref(move)
    head = _at(table, ref)
    branch = audit_branch(move.txn_id)
    updates: list[SetSnapshotRefUpdate | RemoveSnapshotRefUpdate] = []
    if not _there(table, move):
        updates.append(
            SetSnapshotRefUpdate(
                ref_name=ref,
                type=SnapshotRefType.BRANCH,
                snapshot_id=move.snapshot_id,
                max_ref_age_ms=None,
                max_snapshot_age_ms=None,
                min_snapshots_to_keep=None,
            )
        )
    if branch in table.metadata.refs:
        updates.append(RemoveSnapshotRefUpdate(ref_name=branch))
    if not updates:
        return None
    ident = table.name()
    return CommitTableRequest(
        identifier=TableIdentifier(namespace=tuple(ident[:-1]), name=ident[-1]),
        requirements=(
            AssertTableUUID(uuid=table.metadata.table_uuid),
            AssertRefSnapshotId(ref=ref, snapshot_id=head),
        ),
        updates=tuple(updates),
    )


def _move_one(tables: IcebergTables, move: RefMove) -> int:
    """One table's ``main`` to the member's snapshot and its audit branch dropped, one commit. It
    commits against the table as this process last saw it (its staging commit, usually: one
    catalog load and metadata parse less per table); the catalog checks that it is still so, and
    only when it is not is the table loaded to decide again."""
    known = tables.last_known_table(move.ds)
    if known is not None and known.snapshot_by_id(move.snapshot_id) is not None:
        try:
            done = _commit_move(tables, move, known)
        except CommitFailedException:
            done = 0
        if done:
            return done
    return _commit_move(tables, move, tables.existing_table(move.ds))


def _commit_move(tables: IcebergTables, move: RefMove, table: Table) -> int:
    branch = audit_branch(move.txn_id)
    there = _there(table, move)
    if there and branch not in table.metadata.refs:
        return 0
    if move.ds.environment is not None:  # the environment's branch, in one transaction with the audit branch's removal
        txn = transaction(table)
        if not there:
            move_branch_in(txn, target_ref(move), move.snapshot_id)
        if branch in table.metadata.refs:
            remove_branch_in(txn, branch)
        tables.remember_committed(move.ds, txn.commit_transaction())
        return 1
    update = manage_snapshots(table)
    if not there:
        update = update.set_current_snapshot(move.snapshot_id)
    if branch in table.metadata.refs:
        update = update.remove_branch(branch)
    update.commit()
    tables.remember_committed(move.ds, table)
    return 1
