"""The write operation: one INTENT -> WRITE -> COMMIT transaction of rows into a dataset, whatever
sink it lives in (``Trident.write`` documents the modes and their rules).

Every argument is checked before the dataset is touched (a malformed one is a named error at the
call, never a raw ``TypeError`` from deep inside), and the watermarks are resolved before the
transaction opens: refused between its WRITE and COMMIT, a bad one would leave the transaction
open with its data written, for the reconciler to roll forward.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import pyarrow as pa

from ..control.plane import GROUP_META, PRODUCTION, DatasetRecord
from ..core import arguments
from ..core.errors import DatasetNotFoundError, InvalidWriteError
from ..core.identity import refuse_case_clash, refuse_reserved
from ..core.keys import iceberg_identifier, validate_key
from ..core.partitions import PartitionFilter
from ..core.results import WriteResult
from ..core.write_modes import WriteMode
from ..engine import Engine
from ..planning.inputs import to_reader
from ..transaction import inline, pg_append
from ..transaction.driver import PARTITION_META, STAGED_META, WATERMARK_META, Intent, watermark_meta
from . import commit_records
from . import env_writes as environments
from .flush import flush_after, flush_locking, flushed_first

log = logging.getLogger("trident")


def write(
    engine: Engine,
    key: str,
    data: Any = None,
    *,
    mode: WriteMode = "replace",
    writer: str = "ingest.api",
    keys: Iterable[str] | str | None = None,
    row_filter: str | None = None,
    source_refs: Iterable[str] | None = None,
    metadata: Mapping[str, Any] | None = None,
    txn_id: uuid.UUID | str | None = None,
    provenance: Mapping[str, Any] | None = None,
    watermarks: Mapping[str, tuple[datetime, uuid.UUID | None]] | None = None,
    stage: bool = False,
    partition: PartitionFilter | None = None,
    group: uuid.UUID | None = None,
    allow_inline: bool = True,
) -> WriteResult:
    """``Trident.write`` (see there for the modes, and what it raises); ``group``: staged for that
    transaction group (``ops/group.py``), published with it. ``allow_inline=False``: never inlined,
    whatever its size (an ingest stream session: its transaction is open, in the ledger, from its
    first batch, while an inlined write reads its whole input before it records anything)."""
    validate_key(key)
    key_cols = arguments.write_keys(keys)
    arguments.write_mode(mode, key_cols, row_filter, data)
    refs, metadata = arguments.source_refs(source_refs), arguments.metadata(metadata)
    provenance = arguments.metadata(provenance, "provenance") if provenance is not None else None
    if partition is not None and mode == "delete":
        raise InvalidWriteError("a delete takes row_filter=... (a partition is a filter like any other), not partition=")
    reader = None if data is None else to_reader(data)
    if reader is not None:
        refuse_reserved(reader.schema)
    partition = arguments.partition_filter(partition)
    bound = partition.bind(reader.schema) if partition is not None and reader is not None else None
    # delta per partition: a partition write's watermarks are recorded per output partition
    marked = bound.watermark_keys() if bound is not None and watermarks else [""]
    txn = arguments.txn_id(txn_id) or uuid.uuid4()
    marks = commit_records.watermark_rows(engine, watermarks, marked)
    in_env = engine.environment != PRODUCTION
    plain = (
        mode == "append" and not (key_cols or stage or marks) and all(x is None for x in (partition, group, txn_id, provenance))
    )
    if plain and allow_inline and not in_env and reader is not None and engine.settings.inline_max_rows:
        fast, reader = _inline_now(engine, key, writer, reader, txn, refs, metadata)
        if fast is not None:
            return fast
    existing = engine.control.dataset(engine.workspace, key)
    if mode == "delete" and (existing is None or not existing.exists):
        raise DatasetNotFoundError(key, engine.workspace)
    if reader is not None and existing is not None and existing.schema and (mode != "replace" or partition is not None):
        refuse_case_clash((c["name"] for c in existing.schema), reader.schema)
    route = engine.route(key, writer, existing)
    if in_env:
        environments.refuse_sink(engine, key, route.sink)
    if partition is not None:
        engine.require_partitions(key, route.sink)
    ident = ".".join(iceberg_identifier(engine.settings.namespace_root, engine.workspace, key))
    ds = existing or engine.control.ensure_dataset(engine.workspace, key, route.sink, ident)
    with engine.lock(ds, bound) as ds:
        route = engine.route(key, writer, ds)  # decided again: the dataset may have moved or been born meanwhile
        if partition is not None:
            engine.require_partitions(key, route.sink)
        if ds.sink != route.sink:  # not born yet (an aborted first write may have named another sink)
            engine.control.set_dataset_sink(ds.dataset_id, route.sink, ident)
            ds = engine.control.dataset_by_id(ds.dataset_id) or ds
        log.info("trident write %s mode=%s writer=%s sink=%s", key, mode, writer, route.describe())
        meta = dict(metadata)
        if partition is not None:
            meta[PARTITION_META] = partition.as_metadata()
        if marks and not stage:  # a roll-forward by the reconciler records them too
            meta[WATERMARK_META] = watermark_meta(marks)
        if stage:  # recorded by publish, with the version (a staged version changes nothing yet)
            meta[STAGED_META] = commit_records.staged_meta(provenance, watermarks, marked)
        if group is not None:
            meta[GROUP_META] = str(group)
        if in_env:  # the environment's version of the dataset (its branch), never production's
            environments.refuse_sink(engine, key, route.sink)
            ds, fork = environments.fork_point(engine, ds)
            if partition is not None:
                environments.refuse_repartition(engine, ds, partition)
            meta.update(environments.write_meta(engine, fork, key_cols))
        intent = Intent(txn_id=txn, mode=mode, writer=writer, sink=route.sink, route=route, source_refs=refs, metadata=meta)
        sink = engine.sink(route.sink)
        if stage and not sink.stages:
            raise sink.staging_refusal(ds)
        if route.sink == inline.INLINE_SINK and ds.exists and not in_env:
            state = engine.control.inline_state(ds.dataset_id)
            small, reader = (
                _inlinable(engine, ds, mode, key_cols, stage, partition, reader, state.staged) if allow_inline else (None, reader)
            )
            if small is not None:
                schema = inline.target(engine.driver, ds).schema
                assert schema is not None  # (``_inlinable`` checked)
                fresh = txn_id is None  # minted here: no earlier attempt of it can exist
                inlined = inline.commit(
                    engine.driver, ds, intent, small, schema, provenance=provenance, watermarks=marks, fresh=fresh
                )
                if inlined is None:
                    return commit_records.noop_result(engine, key, txn, route)
                if _flush_due(engine, state.rows + small.num_rows, state.age_s):
                    flush_after(engine, ds)
                return commit_records.write_result(ds.key, *inlined, route)
            ds = flushed_first(engine, ds, state.rows)
        transaction = engine.driver.open(ds, intent)
        if transaction is None:
            return commit_records.noop_result(engine, key, txn, route)
        outcome = transaction.write(reader, keys=key_cols, row_filter=row_filter, stage=stage, partition=partition)
        if stage:
            return commit_records.write_result(ds.key, transaction.stage(outcome), outcome, route, staged=True)
        done = transaction.commit(outcome, provenance=provenance, watermarks=marks)
        return commit_records.write_result(ds.key, done, outcome, route)


def _inline_now(
    engine: Engine,
    key: str,
    writer: str,
    reader: pa.RecordBatchReader,
    txn: uuid.UUID,
    refs: list[str],
    metadata: Mapping[str, Any],
) -> tuple[WriteResult | None, pa.RecordBatchReader | None]:
    """A plain small append (no txn id, provenance, watermarks, keys, stage, partition or group)
    of an existing ``iceberg_native`` or ``pg`` dataset in ONE round trip: inlined
    (``inline.commit_at_once``) or straight into the pg sink's rows (``pg_append``). Its rows are
    stamped from the record this process's last write of it left (else read now), and the call
    takes the writer lock for its own Postgres transaction and checks that record is still the
    dataset's: the path of a stream of small writes. ``None`` and the input, unconsumed, when
    the write is not taken this way or the lock is taken or something waits on the dataset:
    nothing was written, and ``write`` goes on through the normal door, which waits, settles and
    decides."""
    heads = engine.driver.heads
    ds = heads.get((engine.workspace, key)) or engine.control.dataset(engine.workspace, key)
    for _ in range(2):  # a stale record is read again once
        if ds is None:
            return None, reader
        route = engine.route(key, writer, ds)
        if route.sink not in (inline.INLINE_SINK, pg_append.PG_SINK) or ds.sink != route.sink or not ds.exists:
            return None, reader
        if ds.schema:
            refuse_case_clash((c["name"] for c in ds.schema), reader.schema)
        intent = Intent(txn, "append", writer, route.sink, route, refs, dict(metadata))
        if route.sink == pg_append.PG_SINK:
            rows, reader = inline.take_small(reader, engine.settings.inline_max_rows)
            if rows is None:
                return None, reader
            appended = pg_append.commit_at_once(engine.driver, ds, intent, rows)
            if isinstance(appended, pg_append.Appended):
                log.info("trident write %s mode=append writer=%s sink=%s (one call)", key, writer, route.describe())
                heads.put((engine.workspace, key), inline.advanced(ds, appended.entry, appended.outcome))
                return commit_records.write_result(ds.key, appended.entry, appended.outcome, route), reader
            done: inline.Inlined | str = appended
        else:
            small, reader = _inlinable(engine, ds, "append", (), False, None, reader, False)
            if small is None or reader is None:
                return None, reader
            schema = inline.target(engine.driver, ds).schema
            assert schema is not None  # (``_inlinable`` checked)
            done = inline.commit_at_once(engine.driver, ds, intent, small, schema)
            if isinstance(done, inline.Inlined):
                log.info("trident write %s mode=append writer=%s sink=%s (inlined)", key, writer, route.describe())
                after = inline.advanced(ds, done.entry, done.outcome, done.block_seq)
                heads.put((engine.workspace, key), after)
                if _flush_due(engine, done.tail.rows, done.tail.age_s):
                    flush_locking(engine, after)
                return commit_records.write_result(ds.key, done.entry, done.outcome, route), reader
        if done != "stale":
            break
        ds = engine.control.dataset(engine.workspace, key)
    heads.discard((engine.workspace, key))
    return None, reader


def _inlinable(
    engine: Engine,
    ds: DatasetRecord,
    mode: WriteMode,
    keys: tuple[str, ...],
    stage: bool,
    partition: PartitionFilter | None,
    reader: pa.RecordBatchReader | None,
    staged_waiting: bool,
) -> tuple[pa.RecordBatch | None, pa.RecordBatchReader | None]:
    """The input as the batch an inlined write stores, when this write is inlined
    (``transaction/inline.py`` says which are); else ``None`` and the input, unconsumed."""
    limit = engine.settings.inline_max_rows
    if not limit or mode != "append" or keys or stage or partition is not None or reader is None or staged_waiting:
        return None, reader
    if ds.snapshot_id is None:
        return None, reader
    target = inline.target(engine.driver, ds)
    if target.schema is None:
        return None, reader
    rows, reader = inline.take_small(reader, limit)
    if rows is None:
        return None, reader
    return inline.fits(rows, target.schema), reader


def _flush_due(engine: Engine, rows: int, age_s: float | None) -> bool:
    """Has the inlined tail passed ``TRIDENT_INLINE_FLUSH_ROWS`` rows, or its oldest row
    ``TRIDENT_INLINE_FLUSH_SECONDS``?"""
    s = engine.settings
    return rows >= s.inline_flush_rows or bool(s.inline_flush_seconds and age_s is not None and age_s >= s.inline_flush_seconds)
