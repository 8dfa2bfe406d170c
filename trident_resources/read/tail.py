"""Reads of an ``iceberg_native`` dataset's inlined tail (``transaction/inline.py``): the rows
small writes committed into the control plane and no flush has moved into Iceberg yet.

A version is its Iceberg snapshot plus its tail. Both are named by the dataset's RECORD: the
snapshot it records (not the table's current one) and the range of tail blocks it records
(``inline_flushed < seq <= inline_through``), so a flush killed between its Iceberg commit and its
ledger COMMIT shows its rows once (in the tail), a flush or write committing while a read runs is
not seen at all, and a read that resolved several datasets in one statement (``t.sql``,
``read_many``) reads every one of them, tails included, as of that one moment. A past version
(``as_of``) is its transaction's snapshot plus the blocks committed at or before it and not
flushed by then. Every read door adds the tail here: streams, whole reads, Arrow sources and the
DuckDB scan plan."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import chain

import pyarrow as pa
import pyarrow.dataset as pads

from ..control.plane import PRODUCTION, DatasetRecord, InlineTail, entry_environment
from ..core.filters import arrow_filter, check_columns, filter_schema
from ..core.identity import public
from ..core.schemas import conform
from ..engine import Engine
from ..sinks.contract import AsOf
from ..sinks.pg.blocks import decode_block
from ..transaction.inline import INLINE_SINK
from . import versions


@dataclass(frozen=True)
class Tail:
    """A version's inlined rows and the Iceberg snapshot they complete."""

    snapshot_id: int | None
    blocks: list[tuple[int, bytes]]

    @property
    def rows(self) -> int:
        return sum(n for n, _ in self.blocks)

    def table(self, stored: pa.Schema) -> pa.Table:
        """The rows as ``stored`` (the table's schema: identity + user columns)."""
        return pa.Table.from_batches([decode_block(data, n, stored) for n, data in self.blocks], schema=stored)

    def rows_as(self, stored: pa.Schema, out: pa.Schema, columns: list[str] | None, row_filter: str | None) -> pa.Table:
        """The rows a read of ``columns`` matching ``row_filter`` gets, shaped like ``out`` (the
        sink's result for the same read, ``__row_id`` as text)."""
        check_columns(columns, stored)
        scan = filter_schema(stored)  # 16-byte ids as the bytes a filter compares (as the Iceberg scan does)
        rows = pa.Table.from_batches([conform(b, scan) for b in self.table(stored).to_batches()], schema=scan)
        if row_filter:
            rows = rows.filter(arrow_filter(stored, row_filter))
        rows = public(rows.select(columns or stored.names))
        return pa.Table.from_batches([conform(b, out) for b in rows.to_batches()], schema=out)


def of(engine: Engine, ds: DatasetRecord, as_of: AsOf = None) -> Tail | None:
    """The tail of the version ``as_of`` names (by default the one the record ``ds`` names: the
    dataset as of the moment ``ds`` was read, its recorded snapshot and its tail's block range,
    without a query when it names no tail); ``None`` when it has no inlined rows (the sink's read
    is the whole version)."""
    if ds.sink != INLINE_SINK or ds.environment is not None:  # an environment's version never has a tail
        return None
    if as_of is None:
        found: InlineTail = engine.control.inline_tail_of(ds)
    else:
        entry = versions.entry_at(engine, ds, as_of)
        assert entry is not None and entry.committed_at is not None
        if entry_environment(entry) != PRODUCTION:  # an environment's version, read through production's
            return None  # record once promoted: its branch snapshot is all of it (production's tail is not)
        found = engine.control.inline_tail_at(ds.dataset_id, entry.snapshot_id, entry.committed_at)
    return Tail(found.snapshot_id, found.blocks) if found.blocks else None


def rows_count(engine: Engine, ds: DatasetRecord) -> int:
    """How many of the dataset's rows are inlined (not in Iceberg yet): what ``describe`` shows."""
    if ds.sink != INLINE_SINK or ds.environment is not None:
        return 0
    return engine.control.inline_rows(ds.dataset_id)


def appended(reader: pa.RecordBatchReader, rows: pa.Table) -> pa.RecordBatchReader:
    """``reader`` followed by ``rows`` (already shaped like it)."""

    def batches() -> Iterator[pa.RecordBatch]:
        yield from chain(reader, rows.to_batches())

    return pa.RecordBatchReader.from_batches(reader.schema, batches())


def with_tail_dataset(source: pads.Dataset, rows: pa.Table) -> pads.Dataset:
    """An Arrow source that scans ``source`` and then ``rows`` (shaped like it)."""
    fitted = pa.Table.from_batches([conform(b, source.schema) for b in rows.to_batches()], schema=source.schema)
    return pads.dataset([source, pads.dataset(fitted)])
