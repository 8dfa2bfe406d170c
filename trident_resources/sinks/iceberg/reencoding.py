"""Which data files ``maintain`` rewrites because their encodings are ones some readers cannot
decode: files an older Trident wrote with ``__row_id`` (16 bytes) DELTA_BYTE_ARRAY-encoded, which
polars' native reader, DuckDB 1.4 and Velox refuse, so a table written before stays unreadable
there until its files are rewritten (``files.py`` writes PLAIN now; compaction rewrites through
the same writer).

Each snapshot Trident commits now says its files use the standard encodings (``ENCODINGS_PROPERTY``
in its summary), so their files are never opened here. Any other file of a uuid-id table (added by
an older Trident, by compaction before, or by another tool) has its footer read once: a pass
records the sequence number it checked through as a table property (``CHECKED_THROUGH_PROPERTY``,
in the compaction's own commit or a metadata-only one), and the next pass looks only above it,
as ``bounds_repair`` does for lossy bounds. Tables whose ``__row_id`` is a string need nothing:
DELTA_BYTE_ARRAY on strings is read everywhere those are.
"""

from __future__ import annotations

import pyarrow.parquet as pq
from pyiceberg.manifest import DataFile, DataFileContent, ManifestContent
from pyiceberg.table import Table
from pyiceberg.types import UUIDType

from ...core.identity import ROW_ID
from .snapshots import has_column

ENCODINGS_PROPERTY = "trident.encodings"  # snapshot summary: every file it added uses...
STANDARD_ENCODINGS = "v1"  # ...encodings every mainstream reader decodes (``files.py``)
CHECKED_THROUGH_PROPERTY = "trident.encodings-checked-through"  # table property: sequence number
_UNREADABLE = "DELTA_BYTE_ARRAY"  # on __row_id's FIXED_LEN_BYTE_ARRAY(16)


def _checked_through(table: Table) -> int:
    try:
        return int(table.properties.get(CHECKED_THROUGH_PROPERTY, "-1"))
    except ValueError:
        return -1


def _uuid_ids(table: Table) -> bool:
    schema = table.schema()
    return has_column(schema, ROW_ID) and isinstance(schema.find_field(ROW_ID).field_type, UUIDType)


def _unreadable(table: Table, f: DataFile) -> bool:
    """Does ``f`` store ``__row_id`` DELTA_BYTE_ARRAY-encoded in any row group (its footer read)?"""
    with table.io.new_input(f.file_path).open() as stream:
        md = pq.ParquetFile(stream).metadata
    names = md.schema.names
    if ROW_ID not in names:
        return False
    j = names.index(ROW_ID)
    return any(_UNREADABLE in md.row_group(i).column(j).encodings for i in range(md.num_row_groups))


def files_to_reencode(table: Table) -> list[DataFile]:
    """The current snapshot's data files whose ``__row_id`` encoding some readers cannot decode."""
    snap = table.current_snapshot()
    if snap is None or not _uuid_ids(table):
        return []
    through = _checked_through(table)
    standard = {
        s.snapshot_id
        for s in table.snapshots()
        if s.summary is not None and s.summary.get(ENCODINGS_PROPERTY) == STANDARD_ENCODINGS
    }
    out: list[DataFile] = []
    for manifest in snap.manifests(table.io):
        if manifest.content != ManifestContent.DATA or manifest.sequence_number <= through:
            continue
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            f = entry.data_file
            if f.content != DataFileContent.DATA or entry.snapshot_id in standard:
                continue
            added = entry.file_sequence_number if entry.file_sequence_number is not None else entry.sequence_number
            if added is not None and added <= through:
                continue
            if _unreadable(table, f):
                out.append(f)
    return out


def checked_marker(table: Table) -> dict[str, str]:
    """The table property that records this pass over the current snapshot (once its files are
    rewritten): empty when it would not move the mark forward."""
    snap = table.current_snapshot()
    if snap is None or snap.sequence_number is None or table.format_version < 2:
        return {}
    if snap.sequence_number <= _checked_through(table):
        return {}
    return {CHECKED_THROUGH_PROPERTY: str(snap.sequence_number)}


__all__ = ["CHECKED_THROUGH_PROPERTY", "ENCODINGS_PROPERTY", "STANDARD_ENCODINGS", "checked_marker", "files_to_reencode"]
