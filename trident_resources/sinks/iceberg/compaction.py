"""Compaction: many small data files rewritten into target-size ones, as ONE snapshot.

Small appends and stream ingests leave one or a few small Parquet files per transaction; a scan
pays per file (footer read, planning, a task), so 1,000 appends read far slower than the same rows
in one file. Compaction reads the small files' rows exactly as stored (identity columns included:
``__row_id``, ``__row_index`` and ``__created_at`` stay what they were for every row) and writes
them into new files that roll at the write path's target size, then commits one snapshot that
removes the inputs and adds the outputs. The rows of the dataset are the same before and after, so
a reader sees nothing change; the snapshot before compaction stays, so time travel to it still
works until ``maintain`` expires it (and only then are the small files deleted).

The caller (``IcebergSink.maintain``, through ``Trident.maintain``) holds the dataset's writer lock,
so no Trident write of the dataset is open while it runs. The snapshot carries
``trident.operation = compaction`` and no ``trident.txn-id``: it is not a ledger transaction, and the
reconciler, which looks for txn ids in the snapshot chain, never mistakes it for one.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyiceberg.conversions import from_bytes
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.manifest import DataFile
from pyiceberg.schema import Schema
from pyiceberg.table import Table, Transaction
from pyiceberg.table.refs import MAIN_BRANCH
from pyiceberg.table.snapshots import Operation
from pyiceberg.types import LongType

from ...core.errors import StorageUnavailableError, TransactionConflictError
from ...core.failpoints import failpoint
from ...core.identity import ROW_INDEX
from ...core.pyiceberg_compat import transaction, transaction_io, use_schema_in
from ...core.schemas import conform
from .bounds_repair import checked_marker, files_with_missing_bounds, record_checked
from .committer import commit_files
from .files import DataFileWriter
from .reencoding import ENCODINGS_PROPERTY, STANDARD_ENCODINGS, files_to_reencode
from .reencoding import checked_marker as reencoding_marker
from .snapshots import BOUNDS_PROPERTY, DATA_VERSION_PROPERTY, EXACT_BOUNDS, OPERATION_PROPERTY, data_version, has_column
from .tables import IcebergTables

if TYPE_CHECKING:
    from ...control.plane import DatasetRecord

# Iceberg's own rewrite_data_files default: fewer small files than this are not worth a snapshot.
MIN_INPUT_FILES = 5


@dataclass(frozen=True)
class Compaction:
    files_before: int
    files_after: int
    rewritten: int  # small files replaced
    written: int  # target-size files written for them
    snapshot_id: int | None  # the compaction snapshot, None when nothing was worth rewriting
    repaired: int = 0  # of ``rewritten``: files rewritten because their bounds lost rows
    reencoded: int = 0  # of ``rewritten``: files rewritten because some readers cannot decode them


def _rewrite(
    tables: IcebergTables,
    table: Table,
    txn: Any,
    groups: list[list[DataFile]],
    order: Any,
    stored: Any,
    writers: list[DataFileWriter],
    inputs: list[DataFile],
    written: list[DataFile],
) -> None:
    """Rewrite each group (one partition's small files) into target-size files of ``txn``'s
    table, in ``__row_index`` order: one partition, then one file, at a time (bounded memory).
    Appends to ``writers`` as it opens them (the caller discards their files when anything
    fails), to ``inputs`` the files rewritten and to ``written`` the files written."""
    meta = txn.table_metadata
    for group in groups:
        writer = DataFileWriter(
            transaction_io(txn),
            meta.location,
            uuid.uuid4(),  # names its files: a writer per partition, each numbering its own from 0
            meta.schema(),
            dict(meta.properties),
            spec_id=group[0].spec_id,
            partition=group[0].partition,
            target_file_bytes=tables.settings.target_file_bytes,
            row_group_bytes=tables.settings.row_group_bytes,
            parallelism=tables.settings.write_parallelism,
            spread_last=False,  # fewer files is the point: a small partition stays one file
        )
        writers.append(writer)
        for f in sorted(group, key=order):
            for batch in tables.file_dataset(table, [f.file_path], stored).to_batches(batch_size=65_536):
                writer.write(conform(batch, writer.arrow_schema))
        written += writer.close()
        inputs += group


def small_file_bytes(target_file_bytes: int) -> int:
    """A file is small below a quarter of the target: the target counts uncompressed Arrow bytes
    and zstd Parquet is typically 3-5x smaller, so a file of a full target is well above this."""
    return max(target_file_bytes // 4, 1)


def compact(tables: IcebergTables, ds: DatasetRecord, table: Table, *, min_input_files: int = MIN_INPUT_FILES) -> Compaction:
    """Rewrite the current snapshot's small data files, and those whose bounds lose rows, into
    target-size files, one snapshot."""
    files = tables.data_files(table)
    limit = small_file_bytes(tables.settings.target_file_bytes)
    small = [f for f in files if f.file_size_in_bytes < limit]
    current = table.current_snapshot()
    if current is None:
        return Compaction(len(files), len(files), 0, 0, None)
    # a missing or corrupt footer raises as compaction's reads do: ``dataset_maintenance`` names it
    repaired = {f.file_path for f in files_with_missing_bounds(table)}
    # files of an older Trident whose __row_id encoding some readers cannot decode (``reencoding.py``)
    reencode = {f.file_path for f in files_to_reencode(table)} - repaired
    # recorded only once the broken files are rewritten
    checked = {**checked_marker(table), **reencoding_marker(table)}
    repaired |= reencode
    broken = [f for f in files if f.file_path in repaired]
    groups = _groups([f for f in small if f.file_path not in repaired], broken, min_input_files)
    if not groups:
        record_checked(table, checked)
        return Compaction(len(files), len(files), 0, 0, None)
    txn = transaction(table)
    meta = txn.table_metadata
    compaction_id = uuid.uuid4()
    stored = schema_to_pyarrow(meta.schema(), include_field_ids=False)
    order = _row_index_order(table.schema())
    writers: list[DataFileWriter] = []
    inputs: list[DataFile] = []
    written: list[DataFile] = []
    try:
        _rewrite(tables, table, txn, groups, order, stored, writers, inputs, written)
        failpoint("compaction.before_commit")
        record_checked(txn, checked)
        _commit(txn, inputs, written, current.snapshot_id, data_version(table, current.snapshot_id), compaction_id)
    except CommitFailedException as exc:
        _discard(writers)
        raise TransactionConflictError(
            f"compaction of {ds.key!r} conflicted with a concurrent change: {exc}. Nothing changed; run maintain again"
        ) from exc
    except OSError as exc:
        _discard(writers)
        raise StorageUnavailableError(f"compaction of {ds.key!r} could not reach storage: {exc}. Nothing changed") from exc
    except BaseException:
        _discard(writers)
        raise
    after = table.refresh()
    snap = after.current_snapshot()
    return Compaction(
        len(files),
        len(files) - len(inputs) + len(written),
        len(inputs),
        len(written),
        None if snap is None else snap.snapshot_id,
        len(broken) - len(reencode),
        len(reencode),
    )


def compact_branch(
    tables: IcebergTables,
    ds: DatasetRecord,
    table: Table,
    branch: str,
    head_snapshot_id: int,
    fork_snapshot_id: int | None,
    *,
    min_input_files: int = MIN_INPUT_FILES,
) -> Compaction:
    """Rewrite an environment's own small data files on its branch ``branch`` (at
    ``head_snapshot_id``, the environment's version) into target-size files: ONE snapshot on the
    branch, its parent the head, identity unchanged. Its own: the files of the head that the
    snapshot it forked from production (``fork_snapshot_id``; ``None`` for a dataset born in the
    environment) does not hold, so a file production reads (or read at the fork) is never an input,
    and ``main`` never moves. The inputs stay in the branch's earlier snapshots until maintenance
    expires those. Nothing else of ``compact`` runs here (bounds repair and re-encoding rewrite
    production's files, and belong to production's maintenance).

    Raises:
        TransactionConflictError: the branch moved while compacting (nothing changed).
        StorageUnavailableError: storage could not be reached (nothing changed).
    """
    ref = table.metadata.refs.get(branch)
    if ref is None or ref.snapshot_id != head_snapshot_id:  # not where the environment's version is
        return Compaction(0, 0, 0, 0, None)
    files = tables.data_files(table, head_snapshot_id)
    theirs = {f.file_path for f in tables.data_files(table, fork_snapshot_id)} if fork_snapshot_id is not None else set()
    limit = small_file_bytes(tables.settings.target_file_bytes)
    own_small = [f for f in files if f.file_path not in theirs and f.file_size_in_bytes < limit]
    groups = _groups(own_small, [], min_input_files)
    if not groups:
        return Compaction(len(files), len(files), 0, 0, None)
    head = table.snapshot_by_id(head_snapshot_id)
    txn = transaction(table)
    if head is not None and head.schema_id is not None and head.schema_id != txn.table_metadata.current_schema_id:
        use_schema_in(txn, head.schema_id)  # the environment's schema, not production's (nor another's)
    meta = txn.table_metadata
    stored = schema_to_pyarrow(meta.schema(), include_field_ids=False)
    order = _row_index_order(meta.schema())
    writers: list[DataFileWriter] = []
    inputs: list[DataFile] = []
    written: list[DataFile] = []
    try:
        _rewrite(tables, table, txn, groups, order, stored, writers, inputs, written)
        failpoint("compaction.before_commit")
        _commit(txn, inputs, written, head_snapshot_id, data_version(table, head_snapshot_id), uuid.uuid4(), branch=branch)
    except CommitFailedException as exc:
        _discard(writers)
        raise TransactionConflictError(
            f"compaction of {ds.key!r} on branch {branch!r} conflicted with a concurrent change: {exc}. Nothing changed; run maintain again"
        ) from exc
    except OSError as exc:
        _discard(writers)
        raise StorageUnavailableError(f"compaction of {ds.key!r} could not reach storage: {exc}. Nothing changed") from exc
    except BaseException:
        _discard(writers)
        raise
    after = table.refresh().metadata.refs.get(branch)
    return Compaction(
        len(files),
        len(files) - len(inputs) + len(written),
        len(inputs),
        len(written),
        None if after is None else after.snapshot_id,
    )


def _groups(small: list[DataFile], broken: list[DataFile], min_input_files: int) -> list[list[DataFile]]:
    """The files to rewrite, one list per partition (spec id and partition values): a data file
    never mixes partitions, so each partition's files are compacted into files of that same
    partition and spec (a partition written before the spec changed stays in its old spec).
    A partition's lone small file gains nothing from a rewrite and is left alone; nothing is
    compacted below ``min_input_files`` candidates in all. Files whose bounds lose rows are
    rewritten whatever their size (with their partition's small files)."""
    by_partition: dict[tuple[int, tuple[object, ...]], list[DataFile]] = {}
    for f in small:
        by_partition.setdefault(_partition_key(f), []).append(f)
    candidates = [g for g in by_partition.values() if len(g) > 1]
    if sum(len(g) for g in candidates) < min_input_files:
        candidates = []
    chosen = {_partition_key(g[0]): g for g in candidates}
    for f in broken:
        chosen.setdefault(_partition_key(f), []).append(f)
    return list(chosen.values())


def _partition_key(f: DataFile) -> tuple[int, tuple[object, ...]]:
    return f.spec_id, tuple(f.partition[i] for i in range(len(f.partition)))  # files of a manifest: spec set


def _discard(writers: list[DataFileWriter]) -> None:
    for writer in writers:
        writer.discard()


def _row_index_order(schema: Schema) -> Callable[[DataFile], tuple[bool, int]]:
    """Sort key of a data file: its lowest ``__row_index`` (files without that bound last).

    pyiceberg plans the newest manifest first, so compacting in planning order wrote 1,000
    appends' rows newest block first: ``__row_index`` descending by blocks, each output file
    spanning rows from both ends of the table. In ``__row_index`` order (for appends, the order
    the rows were written) the output is laid out as a table written in one go: the identity
    columns ascending, so their delta encodings stay small and each file's bounds a narrow range."""
    field_id = schema.find_field(ROW_INDEX).field_id if has_column(schema, ROW_INDEX) else None

    def key(f: DataFile) -> tuple[bool, int]:
        raw = (f.lower_bounds or {}).get(field_id) if field_id is not None else None
        return (True, 0) if raw is None else (False, int(from_bytes(LongType(), raw)))

    return key


def _commit(
    txn: Transaction,
    inputs: list[DataFile],
    outputs: list[DataFile],
    parent: int,
    version: int | None,
    compaction_id: uuid.UUID,
    *,
    branch: str = MAIN_BRANCH,
) -> None:
    """One snapshot of ``txn`` that replaces ``inputs`` by ``outputs`` (written by ``DataFileWriter``:
    marked as having exact bounds, so ``bounds_repair`` never reads them), recording the data
    version it holds (``version``: the rows of that transaction's snapshot, see ``snapshots.data_version``)."""
    props = {
        BOUNDS_PROPERTY: EXACT_BOUNDS,
        ENCODINGS_PROPERTY: STANDARD_ENCODINGS,
        OPERATION_PROPERTY: "compaction",
        **({DATA_VERSION_PROPERTY: str(version)} if version is not None else {}),
        "trident.compaction-id": str(compaction_id),
        "trident.compacted-from": str(parent),
        "trident.rewritten-files": str(len(inputs)),
    }
    # the same rows in other files: Iceberg's ``replace``, which streaming readers skip
    commit_files(txn, txn.update_snapshot(snapshot_properties=props, branch=branch), inputs, outputs, operation=Operation.REPLACE)
    txn.commit_transaction()


__all__ = ["MIN_INPUT_FILES", "Compaction", "compact", "compact_branch", "small_file_bytes"]
