"""The write planner: one sink-neutral algorithm for every write mode.

It decides the dataset's schema after the write, stamps identity on new rows, runs the keyed merge
(upsert, append_new, identity-preserving replace, delete) and computes the counts; the sink only
stores what it is handed. So identity and counting rules are written once and both sinks follow
them by construction, and a new sink adds storage code only.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from ..control.plane import Outcome
from ..core.errors import DatasetNotFoundError, InvalidWriteError
from ..core.filters import arrow_filter, check_key_columns
from ..core.identity import FILE_COLUMN, IDENTITY_COLUMNS, ROW_ID, ROW_INDEX, stamp
from ..core.partitions import PartitionFilter
from ..core.schemas import conform, plan_schema, user_fields, with_identity
from ..core.settings import TridentSettings
from ..sinks.contract import Sink, SinkWrite, StoredVersion, WriteCounts, WriteRequest
from .clustering import cluster
from .merge import KeyedMerge
from .prefetch import prefetched

# More partitions than this in one write and the input is clustered by partition first (the data
# file writer keeps at most this many files open, one per partition).
MAX_OPEN_PARTITIONS = 32
COALESCE_ROWS = 65_536  # smaller input batches are combined up to this many rows before stamping


class WritePlanner:
    def __init__(self, settings: TridentSettings) -> None:
        self.settings = settings

    def execute(self, sink: Sink, req: WriteRequest) -> Outcome:
        """WRITE step of one transaction: plan the rows and hand them to ``sink`` as ONE change."""
        version = sink.current(req.dataset)
        if req.mode == "delete" and version.schema is None:
            raise DatasetNotFoundError(req.dataset.key, req.dataset.workspace)
        if req.preserve_identity and (req.mode not in ("replace", "append") or req.keys):
            # a migration copies a whole dataset (replace); a flush of inlined rows appends them
            raise InvalidWriteError("an identity-preserving copy is a plain replace or append")
        if req.mode in ("append", "replace") and not req.keys:
            return self._stream(req, version)
        return self._keyed(sink, req, version)

    # -- append / replace: stream and stamp ---------------------------------------------------
    def _stream(self, req: WriteRequest, version: StoredVersion) -> Outcome:
        assert req.reader is not None
        replace = req.mode == "replace"
        part = req.partition
        # A partition replace keeps every other partition's rows: the schema rules are an append's.
        user_schema = plan_schema(
            version.schema,
            user_fields(req.reader.schema),
            replace=replace and part is None,
            partition_replace=replace and part is not None,
        )
        first = 0 if ((replace and part is None) or version.schema is None) else req.dataset.next_row_index
        top = [-1]  # highest carried __row_index of an identity-preserving copy
        reader = req.reader if part is None else self._clustered(req.reader, part, req)
        clustered = reader is not req.reader
        # pulled on a helper thread (prefetch.py): the source keeps producing while the writer
        # waits for an encoder lane, instead of the two taking turns
        batches = prefetched(_coalesced(reader, max_bytes=self.settings.row_group_bytes))

        def rows(target: pa.Schema) -> Iterator[pa.RecordBatch]:
            seq = 0
            # ids are minted (or carried) straight in the table's own __row_id type: 16 bytes for
            # a uuid table, text for one created before uuid ids; never text cast afterwards
            row_id_type = target.field(ROW_ID).type
            # the user's columns in the types the files are written from (text as views: no copy of
            # an engine's strings, see ``files.file_schema``), so the second conform casts nothing
            users = user_fields(target)
            bound = part.bind(target) if part is not None else None
            for batch in batches:
                if req.preserve_identity:
                    out = _carried(batch, with_identity(user_schema, row_id_type), top)
                else:
                    index = req.reserve_rows(batch.num_rows) if req.reserve_rows is not None else first + seq
                    top[0] = max(top[0], index + batch.num_rows - 1)
                    out = stamp(conform(batch, users), req.txn_id, seq, index, req.tau, row_id_type)
                seq += batch.num_rows
                out = conform(out, target)
                if bound is not None:
                    bound.check(out, req.dataset.key)
                yield out

        try:
            with version.begin(req, user_schema, replace=replace) as w:
                n = w.put(rows(w.arrow_schema), clustered=clustered)
                if req.preserve_identity or req.reserve_rows is not None:
                    next_index = max(req.dataset.next_row_index, top[0] + 1)
                else:
                    next_index = first + n
                return self._commit(w, WriteCounts(rows_written=n, next_row_index=next_index))
        finally:
            # a failed write stops and joins the helper NOW: the input's owner (a node's DuckDB
            # session) closes its source when the write returns, while the exception still
            # holds this frame (and so the generator) alive
            batches.close()

    def _clustered(self, reader: pa.RecordBatchReader, part: PartitionFilter, req: WriteRequest) -> pa.RecordBatchReader:
        """The input with each partition's rows together when it may span more partitions than the
        data file writer keeps open, so that each partition becomes a few full files (a backfill of
        an unsorted source would otherwise scatter every partition over many small files). See
        ``clustering.py``: a bucketed spill to local disk, bounded in memory."""
        bound = part.bind(reader.schema)
        fanout = bound.fanout()
        if fanout is not None and fanout <= MAX_OPEN_PARTITIONS:
            return reader
        return cluster(reader, bound.key_arrays, req.spill_dir / "cluster")

    # -- keyed modes: merge in DuckDB ---------------------------------------------------------
    def _keyed(self, sink: Sink, req: WriteRequest, version: StoredVersion) -> Outcome:
        existing = version.schema
        part = req.partition
        if req.mode == "delete":
            assert existing is not None
            user_schema = user_fields(existing)
        else:
            assert req.reader is not None
            whole = req.mode == "replace" and part is None
            user_schema = plan_schema(
                existing, req.reader.schema, replace=whole, partition_replace=req.mode == "replace" and part is not None
            )
        first = req.dataset.next_row_index if existing is not None else 0
        s = self.settings
        with KeyedMerge(req.spill_dir, memory_limit=s.duckdb_memory_limit, threads=s.duckdb_threads) as merge:
            if req.mode == "delete" and req.row_filter:
                assert existing is not None
                removed = merge.plan_removal(version.matching_ids(arrow_filter(existing, req.row_filter)))
                counts = WriteCounts(rows_written=0, next_row_index=first, deleted=removed)
            else:
                assert req.reader is not None
                typed = _typed(req.reader, user_schema)
                staged = typed if part is None else _checked(typed, part, req.dataset.key)
                merge.stage(staged, req.keys, keys_only=req.mode == "delete")
                merge.load_existing(self._existing_keys(sink, version, req, typed.schema))
                reserved = [first]

                def first_index(fresh: int) -> int:
                    if req.reserve_rows is not None and fresh:
                        reserved[0] = req.reserve_rows(fresh)
                    return reserved[0]

                plan = merge.plan(
                    req.mode, first_index=first_index, txn_id=req.txn_id, tau=req.tau, row_id_type=version.row_id_type
                )
                fresh = plan.fresh if req.mode != "delete" else 0
                top = max(req.dataset.next_row_index, reserved[0] + fresh) if req.reserve_rows is not None else first + fresh
                counts = WriteCounts(next_row_index=top, **plan.counts(req.mode))
            replace = req.mode == "replace"
            with version.begin(req, user_schema, replace=replace) as w:
                if not replace and existing is not None:
                    w.remove(merge)
                w.put(conform(b, w.arrow_schema) for b in merge.added_rows())
                return self._commit(w, counts)

    @staticmethod
    def _existing_keys(sink: Sink, version: StoredVersion, req: WriteRequest, incoming: pa.Schema) -> pa.RecordBatchReader:
        """The dataset's keys and identity; empty (typed like the staged input's keys) for a new dataset."""
        if version.schema is not None:
            check_key_columns(req.keys, version.schema, "the dataset")
            return version.existing_keys(req.keys, req.partition)
        fields = [pa.field(k, incoming.field(k).type) for k in req.keys if k in incoming.names]
        fields += [pa.field(ROW_ID, version.row_id_type), pa.field(ROW_INDEX, pa.int64())]
        if sink.tracks_files:
            fields.append(pa.field(FILE_COLUMN, pa.int32()))
        return pa.RecordBatchReader.from_batches(pa.schema(fields), [])

    @staticmethod
    def _commit(w: SinkWrite, counts: WriteCounts) -> Outcome:
        return w.commit(counts)  # the sink fires failpoint write.before_commit once its data is durable


def _coalesced(batches: Iterable[pa.RecordBatch], *, max_bytes: int, rows: int = COALESCE_ROWS) -> Iterator[pa.RecordBatch]:
    """The input without empty batches, small consecutive ones combined up to ``rows`` rows or
    ``max_bytes`` (a row group: the data file writers buffer that much anyway, so nothing reaches
    storage later than before). Each batch costs a stamp, a check and, for a partition write, a
    row-index reservation in Postgres: a table of many small chunks (rows filtered out of a larger
    one) paid that per chunk."""
    pending: list[pa.RecordBatch] = []
    n = size = 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        if not pending and (batch.num_rows >= rows or batch.nbytes >= max_bytes):
            yield batch
            continue
        pending.append(batch)
        n += batch.num_rows
        size += batch.nbytes
        if n >= rows or size >= max_bytes:
            yield pa.concat_batches(pending)
            pending, n, size = [], 0, 0
    if pending:
        yield pending[0] if len(pending) == 1 else pa.concat_batches(pending)


def _typed(reader: pa.RecordBatchReader, user_schema: pa.Schema) -> pa.RecordBatchReader:
    """The input cast to the types it will be stored as before DuckDB stages it: DuckDB has no
    float16 nor decimal256, so a keyed write of such a column failed inside the merge (as
    WriteFailedError) while a replace of the same table stored it as float / decimal128."""
    target = pa.schema([user_schema.field(f.name) if f.name in user_schema.names else f for f in reader.schema])
    if target.equals(reader.schema):
        return reader
    return pa.RecordBatchReader.from_batches(target, (conform(b, target) for b in reader))


def _checked(reader: pa.RecordBatchReader, part: PartitionFilter, dataset: str) -> pa.RecordBatchReader:
    """The input, refused at the first row outside the partition being written (before staging
    completes, so nothing is written)."""
    bound = part.bind(reader.schema)

    def batches() -> Iterator[pa.RecordBatch]:
        for b in reader:
            bound.check(b, dataset)
            yield b

    return pa.RecordBatchReader.from_batches(reader.schema, batches())


def _carried(batch: pa.RecordBatch, full: pa.Schema, top: list[int]) -> pa.RecordBatch:
    """A migration copy's batch: the rows keep the identity they already have."""
    missing = [c for c in IDENTITY_COLUMNS if c not in batch.schema.names]
    if missing:
        raise InvalidWriteError(f"an identity-preserving copy needs {missing} in the input")
    out = conform(batch, full)
    highest = pc.max(out.column(ROW_INDEX)).as_py()
    top[0] = max(top[0], -1 if highest is None else highest)
    return out
