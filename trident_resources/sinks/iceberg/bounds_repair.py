"""Data files whose manifest bounds are wrong because a row group had values but no min/max.

Parquet writes no min/max for a column chunk whose value exceeds its statistics limit (4 KiB) or
that holds only NaN floats. Trident's statistics before ``stats.py`` learnt this (and pyiceberg's,
still) took the OTHER row groups' bounds as the file's, so a ``row_filter`` read pruned a file
that held matching rows: silent row loss. New files are right; files already written that way are
found here and ``compaction.compact`` rewrites them (identity unchanged, new correct statistics).

Only a file with more than one row group can be affected (one row group without a min/max gives
no bounds at all), and a DataFile's ``split_offsets`` say how many row groups it has without
reading it. Even so, reading those footers on every ``maintain`` would cost a request per such
file forever, for a repair that is needed once. So a footer is read at most once per file:

- a file added by a snapshot marked ``trident.bounds=v2`` (``snapshots.BOUNDS_PROPERTY``: written
  by Trident's file writers, whose bounds are exact) is never read;
- after a pass, the table property ``trident.bounds-checked-through`` records the sequence
  number of the snapshot the pass looked at, and ``trident.bounds-checked-snapshot`` its id.
  Every file live in that snapshot was checked (or rewritten); sequence numbers only grow, so
  anything a later commit adds, even while the pass ran, lies above it. The next pass skips
  manifests and entries at or below it without reading them, but only when the current
  snapshot IS that snapshot or descends from it: a table rolled back (or set) to an older
  snapshot by another tool holds files that were not live when the pass looked, at sequence
  numbers below the mark (they were never checked), so the mark is ignored and every candidate
  read again. An entry is compared by its FILE sequence number (the commit that added it): a
  rewrite may give its new files an older DATA sequence number.

A format-1 table has no sequence numbers (all 0): it records nothing and relies on the marks.
"""

from __future__ import annotations

import logging

import pyarrow.parquet as pq
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.io.pyarrow import parquet_path_to_id_mapping
from pyiceberg.manifest import DataFile, DataFileContent, ManifestContent
from pyiceberg.table import Table, Transaction

from .files import filesystem_for
from .snapshots import has_exact_bounds

log = logging.getLogger("trident")

CHECKED_THROUGH_PROPERTY = "trident.bounds-checked-through"
CHECKED_SNAPSHOT_PROPERTY = "trident.bounds-checked-snapshot"


def may_be_affected(f: DataFile) -> bool:
    """More than one row group and some column with bounds: the only files that can be wrong."""
    return len(f.split_offsets or []) > 1 and bool(f.lower_bounds or f.upper_bounds)


def has_missing_bounds(table: Table, f: DataFile) -> bool:
    """Whether the file's footer has a row group with non-null values and no min/max for a
    column its manifest entry gives bounds to (bounds that then exclude that row group's values)."""
    bounded = set(f.lower_bounds or {}) | set(f.upper_bounds or {})
    ids = parquet_path_to_id_mapping(table.schema())
    fs, path = filesystem_for(table.io, f.file_path)
    with fs.open_input_file(path) as source:
        meta = pq.ParquetFile(source).metadata
    leaves = [ids.get(meta.schema.column(i).path) for i in range(meta.num_columns)]
    for r in range(meta.num_row_groups):
        group = meta.row_group(r)
        for pos, fid in enumerate(leaves):
            if fid is None or fid not in bounded:
                continue
            chunk = group.column(pos)
            if not chunk.is_stats_set:  # no statistics at all: every reader drops the bounds
                continue
            st = chunk.statistics
            if not st.has_min_max and (not st.has_null_count or st.null_count < chunk.num_values):
                return True
    return False


def checked_through(table: Table, mark: tuple[str, str] = (CHECKED_THROUGH_PROPERTY, CHECKED_SNAPSHOT_PROPERTY)) -> int:
    """The sequence number through which every live file was checked (-1: none, a format-1
    table, whose sequence numbers are all 0 and so cannot say what is newer, or a current
    snapshot that does not descend from the one the mark was taken of). ``mark``: the table
    properties of the check (sequence number, snapshot id); another check keeps its own."""
    if table.format_version < 2:
        return -1
    try:
        through = int(table.properties[mark[0]])
        checked = int(table.properties[mark[1]])
    except (KeyError, ValueError):  # none, or not ours to trust: check everything again
        return -1
    return through if _descends_from(table, checked) else -1


def _descends_from(table: Table, snapshot_id: int) -> bool:
    """Whether the current snapshot is ``snapshot_id`` or has it as an ancestor (an expired link
    of the chain counts as no: then the mark cannot be vouched for)."""
    by_id = {s.snapshot_id: s for s in table.snapshots()}  # one pass (snapshot_by_id scans the list each time)
    snap = table.current_snapshot()
    seen: set[int] = set()
    while snap is not None and snap.snapshot_id not in seen:
        if snap.snapshot_id == snapshot_id:
            return True
        seen.add(snap.snapshot_id)
        snap = None if snap.parent_snapshot_id is None else by_id.get(snap.parent_snapshot_id)
    return False


def files_to_check(table: Table) -> list[DataFile]:
    """The current snapshot's data files whose footers must be read: multi-row-group files with
    bounds, added by an unmarked snapshot after the last pass."""
    exact = {s.snapshot_id for s in table.snapshots() if has_exact_bounds(s)}
    return [f for f in unchecked_files(table, checked_through(table), exact) if may_be_affected(f)]


def unchecked_files(table: Table, through: int, marked: set[int]) -> list[DataFile]:
    """The current snapshot's data files added after sequence number ``through`` by a snapshot
    not in ``marked`` (those say what their files are). Manifests at or below ``through`` are not
    even opened (a manifest's entries are never newer than it)."""
    snap = table.current_snapshot()
    if snap is None:
        return []
    out: list[DataFile] = []
    for manifest in snap.manifests(table.io):
        if manifest.content != ManifestContent.DATA or manifest.sequence_number <= through:
            continue
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            f = entry.data_file
            if f.content != DataFileContent.DATA or entry.snapshot_id in marked:
                continue
            added = entry.file_sequence_number if entry.file_sequence_number is not None else entry.sequence_number
            if added is not None and added <= through:
                continue
            out.append(f)
    return out


def files_with_missing_bounds(table: Table) -> list[DataFile]:
    """The current files whose bounds are wrong (footers read only of ``files_to_check``)."""
    return [f for f in files_to_check(table) if has_missing_bounds(table, f)]


def checked_marker(table: Table, mark: tuple[str, str] = (CHECKED_THROUGH_PROPERTY, CHECKED_SNAPSHOT_PROPERTY)) -> dict[str, str]:
    """The table properties (``mark``, as ``checked_through``) to record once this pass over the
    current snapshot has ended (its broken files rewritten): empty when it would not move the
    mark forward."""
    snap = table.current_snapshot()
    if snap is None or table.format_version < 2 or snap.sequence_number is None:
        return {}
    if snap.sequence_number <= checked_through(table, mark):
        return {}
    return {mark[0]: str(snap.sequence_number), mark[1]: str(snap.snapshot_id)}


def record_checked(target: Table | Transaction, marker: dict[str, str]) -> None:
    """Record ``marker`` (``checked_marker``): in the caller's transaction when it commits anyway
    (compaction), else in a metadata-only commit of its own. That commit failing loses nothing but
    the shortcut (the next pass reads those footers again), so it is logged, not raised."""
    if not marker:
        return
    if isinstance(target, Transaction):
        target.set_properties(marker)
        return
    try:
        with target.transaction() as txn:
            txn.set_properties(marker)
    except (CommitFailedException, OSError) as exc:
        log.warning("could not record the bounds check of %s (%s); the next maintain checks again", target.name(), exc)


__all__ = [
    "CHECKED_SNAPSHOT_PROPERTY",
    "CHECKED_THROUGH_PROPERTY",
    "checked_marker",
    "checked_through",
    "files_to_check",
    "files_with_missing_bounds",
    "has_missing_bounds",
    "may_be_affected",
    "record_checked",
    "unchecked_files",
]
