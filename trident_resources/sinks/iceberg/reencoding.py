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
with ``bounds_repair``'s walk and marks. Tables whose ``__row_id`` is a string are left as
they are: polars and DuckDB 1.4 read DELTA_BYTE_ARRAY on strings (new writes are PLAIN there too).
"""

from __future__ import annotations

import pyarrow.parquet as pq
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table
from pyiceberg.types import UUIDType

from ...core.identity import ROW_ID
from .bounds_repair import checked_marker as bounds_marker
from .bounds_repair import checked_through, unchecked_files
from .snapshots import has_column

ENCODINGS_PROPERTY = "trident.encodings"  # snapshot summary: every file it added uses...
STANDARD_ENCODINGS = "v1"  # ...encodings every mainstream reader decodes (``files.py``)
CHECKED_THROUGH_PROPERTY = "trident.encodings-checked-through"  # table property: sequence number
CHECKED_SNAPSHOT_PROPERTY = "trident.encodings-checked-snapshot"  # ...and the snapshot it was of
_MARK = (CHECKED_THROUGH_PROPERTY, CHECKED_SNAPSHOT_PROPERTY)
_UNREADABLE = "DELTA_BYTE_ARRAY"  # on __row_id's FIXED_LEN_BYTE_ARRAY(16)


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
    if table.current_snapshot() is None or not _uuid_ids(table):
        return []
    standard = {
        s.snapshot_id
        for s in table.snapshots()
        if s.summary is not None and s.summary.get(ENCODINGS_PROPERTY) == STANDARD_ENCODINGS
    }
    return [f for f in unchecked_files(table, checked_through(table, _MARK), standard) if _unreadable(table, f)]


def checked_marker(table: Table) -> dict[str, str]:
    """The table properties that record this pass over the current snapshot (once its files are
    rewritten): empty when it would not move the mark forward."""
    return bounds_marker(table, _MARK)


__all__ = ["CHECKED_THROUGH_PROPERTY", "ENCODINGS_PROPERTY", "STANDARD_ENCODINGS", "checked_marker", "files_to_reencode"]
