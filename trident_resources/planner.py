"""The write planner: one sink-neutral algorithm for every write mode.

It decides the dataset's schema after the write, stamps identity on new rows, runs the keyed merge
(upsert, append_new, identity-preserving replace, delete) and computes the counts; the sink only
stores what it is handed. So identity and counting rules are written once and both sinks follow
them by construction, and a new sink adds storage code only.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from .errors import DatasetNotFoundError, InvalidWriteError
from .filters import arrow_filter, check_key_columns
from .identity import IDENTITY_COLUMNS, ROW_ID, ROW_INDEX, stamp
from .merge import FILE_COLUMN, KeyedMerge
from .schemas import conform, plan_schema, user_fields, with_identity
from .settings import TridentSettings
from .sinks.base import Sink, SinkWrite, StoredVersion, WriteCounts, WriteRequest
from .control_plane import Outcome


class WritePlanner:
    def __init__(self, settings: TridentSettings) -> None:
        self.settings = settings

    def execute(self, sink: Sink, req: WriteRequest) -> Outcome:
        """WRITE step of one transaction: plan the rows and hand them to ``sink`` as ONE change."""
        version = sink.current(req.dataset)
        if req.mode == "delete" and version.schema is None:
            raise DatasetNotFoundError(req.dataset.key, req.dataset.workspace)
        if req.preserve_identity and (req.mode != "replace" or req.keys):
            raise InvalidWriteError("an identity-preserving copy (migration) is always a plain replace")
        if req.mode in ("append", "replace") and not req.keys:
            return self._stream(req, version)
        return self._keyed(sink, req, version)

    # -- append / replace: stream and stamp ---------------------------------------------------
    def _stream(self, req: WriteRequest, version: StoredVersion) -> Outcome:
        assert req.reader is not None
        replace = req.mode == "replace"
        user_schema = plan_schema(version.schema, user_fields(req.reader.schema), replace=replace)
        first = 0 if (replace or version.schema is None) else req.dataset.next_row_index
        top = [-1]  # highest carried __row_index of an identity-preserving copy

        def rows(target: pa.Schema) -> Iterator[pa.RecordBatch]:
            seq = 0
            for batch in req.reader:  # type: ignore[union-attr]
                if batch.num_rows == 0:
                    continue
                if req.preserve_identity:
                    out = _carried(batch, with_identity(user_schema), top)
                else:
                    out = stamp(conform(batch, user_fields(user_schema)), req.txn_id, seq, first + seq, req.tau)
                seq += batch.num_rows
                yield conform(out, target)

        with version.begin(req, user_schema, replace=replace) as w:
            n = w.put(rows(w.arrow_schema))
            next_index = max(req.dataset.next_row_index, top[0] + 1) if req.preserve_identity else first + n
            return self._commit(w, WriteCounts(rows_written=n, next_row_index=next_index))

    # -- keyed modes: merge in DuckDB ---------------------------------------------------------
    def _keyed(self, sink: Sink, req: WriteRequest, version: StoredVersion) -> Outcome:
        existing = version.schema
        if req.mode == "delete":
            assert existing is not None
            user_schema = user_fields(existing)
        else:
            assert req.reader is not None
            user_schema = plan_schema(existing, req.reader.schema, replace=req.mode == "replace")
        first = req.dataset.next_row_index if existing is not None else 0
        s = self.settings
        with KeyedMerge(req.spill_dir, memory_limit=s.duckdb_memory_limit, threads=s.duckdb_threads) as merge:
            if req.mode == "delete" and req.row_filter:
                assert existing is not None
                removed = merge.plan_removal(version.matching_ids(arrow_filter(existing, req.row_filter)))
                counts = WriteCounts(rows_written=0, next_row_index=first, deleted=removed)
            else:
                assert req.reader is not None
                merge.stage(req.reader, req.keys, keys_only=req.mode == "delete")
                merge.load_existing(self._existing_keys(sink, version, req))
                plan = merge.plan(req.mode, first_index=first, txn_id=req.txn_id, tau=req.tau)
                fresh = plan.fresh if req.mode != "delete" else 0
                counts = WriteCounts(next_row_index=first + fresh, **plan.counts(req.mode))
            replace = req.mode == "replace"
            with version.begin(req, user_schema, replace=replace) as w:
                if not replace and existing is not None:
                    w.remove(merge)
                w.put(conform(b, w.arrow_schema) for b in merge.added_rows())
                return self._commit(w, counts)

    @staticmethod
    def _existing_keys(sink: Sink, version: StoredVersion, req: WriteRequest) -> pa.RecordBatchReader:
        """The dataset's keys and identity; empty (typed like the input's keys) for a new dataset."""
        assert req.reader is not None
        if version.schema is not None:
            check_key_columns(req.keys, version.schema, "the dataset")
            return version.existing_keys(req.keys)
        incoming = req.reader.schema
        fields = [pa.field(k, incoming.field(k).type) for k in req.keys if k in incoming.names]
        fields += [pa.field(ROW_ID, pa.large_string()), pa.field(ROW_INDEX, pa.int64())]
        if sink.tracks_files:
            fields.append(pa.field(FILE_COLUMN, pa.int32()))
        return pa.RecordBatchReader.from_batches(pa.schema(fields), [])

    @staticmethod
    def _commit(w: SinkWrite, counts: WriteCounts) -> Outcome:
        return w.commit(counts)  # the sink fires failpoint write.before_commit once its data is durable


def _carried(batch: pa.RecordBatch, full: pa.Schema, top: list[int]) -> pa.RecordBatch:
    """A migration copy's batch: the rows keep the identity they already have."""
    missing = [c for c in IDENTITY_COLUMNS if c not in batch.schema.names]
    if missing:
        raise InvalidWriteError(f"an identity-preserving copy needs {missing} in the input")
    out = conform(batch, full)
    highest = pc.max(out.column(ROW_INDEX)).as_py()
    top[0] = max(top[0], -1 if highest is None else highest)
    return out
