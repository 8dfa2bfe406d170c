"""Data files whose manifest bounds are wrong because a row group had values but no min/max.

Parquet writes no min/max for a column chunk whose value exceeds its statistics limit (4 KiB) or
that holds only NaN floats. Trident's statistics before ``stats.py`` learnt this (and pyiceberg's,
still) took the OTHER row groups' bounds as the file's, so a ``row_filter`` read pruned a file
that held matching rows: silent row loss. New files are right; files already written that way are
found here and ``compaction.compact`` rewrites them (identity unchanged, new correct statistics).

Only a file with more than one row group can be affected (one row group without a min/max gives
no bounds at all), and a DataFile's ``split_offsets`` say how many row groups it has without
reading it: only those files' footers are read.
"""

from __future__ import annotations

import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import parquet_path_to_id_mapping
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from .files import filesystem_for


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


def files_with_missing_bounds(table: Table, files: list[DataFile]) -> list[DataFile]:
    """The ``files`` whose bounds are wrong (footers read only for multi-row-group files)."""
    return [f for f in files if may_be_affected(f) and has_missing_bounds(table, f)]


__all__ = ["files_with_missing_bounds", "has_missing_bounds", "may_be_affected"]
