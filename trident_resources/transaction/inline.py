"""Inlined writes: a small append to an ``iceberg_native`` dataset committed into the control
plane, and the flush that moves those rows into ONE Iceberg snapshot.

Why: an Iceberg commit costs a manifest, a manifest list, a metadata file and a catalog update,
20-50 ms and a small file per write; a writer making many small writes (ingest, CDC, row edits)
then pays that per write and leaves a file per write until maintenance compacts them. Postgres
already holds the ledger, so a small append is stored there, in the SAME Postgres transaction as
its ledger COMMIT (``ControlPlane.commit_txn(inline=...)``; a write whose txn id is minted here:
ONE statement, ``commit_at_once``): no Iceberg commit, no file.

Rules that keep it one dataset:

- Identity is the Iceberg write's: ``__row_index`` continues from the dataset's ``next_row_index``
  (under the writer lock, like any append), ``__row_id`` is minted in the table's own id type,
  ``__created_at`` is the transaction's instant τ. The rows are stored stamped (one Arrow IPC
  block per commit, the pg sink's row-block encoding), so a flush copies them as they are.
- Only plain appends of at most ``TRIDENT_INLINE_MAX_ROWS`` rows whose columns the table already
  has (no schema change), to an existing unpartitioned table with no staged version waiting.
  Every other write of the dataset flushes the tail first, under the same writer lock
  (``ops/flush.py``), so a write that needs the whole dataset in Iceberg (replace, keyed writes,
  deletes, partition writes, staging) sees it there. (A canary moves a pg dataset: no tail.)
- A flush is a transaction like any other (writer ``inline.flush``, mode ``append``): the
  rows, identity carried, become ONE snapshot carrying its txn id; its COMMIT marks exactly the
  blocks it moved (``INLINE_FLUSH_META``: up to the last block it read). Killed after its Iceberg
  commit, its ledger row stays open: readers read the dataset's RECORDED snapshot plus the
  unflushed blocks (``read/tail.py``), i.e. the rows once, and the reconciler (or the next
  writer) rolls it forward, which marks the blocks in the same Postgres transaction.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from itertools import chain
from typing import Any

import pyarrow as pa

from ..control.plane import INLINE_FLUSH_META, DatasetRecord, InlineBlock, InlineState, LedgerEntry, Outcome, WatermarkRow
from ..control.router import RouteDecision
from ..core.errors import InvalidWriteError, SchemaMismatchError, TridentError, WriterLockLostError
from ..core.failpoints import failpoint
from ..core.identity import ROW_ID, stamp
from ..core.recent import Recent
from ..core.schemas import conform, plan_schema, user_fields
from ..sinks.pg.blocks import block_slices, decode_block
from .driver import Intent, TransactionDriver

log = logging.getLogger("trident")

INLINE_META = "trident.inlined"  # ledger metadata of an inlined write (rows in the control plane)
FLUSH_WRITER = "inline.flush"  # the writer a flush is recorded under
INLINE_SINK = "iceberg_native"  # the one sink whose small writes are inlined


@dataclass(frozen=True)
class Target:
    """What an inlined write stamps its rows into: the table's stored schema (identity + user
    columns, in the table's types), or why the dataset takes no inlined writes."""

    schema: pa.Schema | None
    refusal: str = ""


# (dataset, recorded snapshot, schema version) -> Target: a table's schema and partitioning change
# only with an Iceberg commit of its own (Trident owns the table), which moves the recorded snapshot.
_TARGETS: Recent[tuple[uuid.UUID, int | None, int], Target] = Recent(512)


def target(driver: TransactionDriver, ds: DatasetRecord) -> Target:
    """The table's stored schema as of ``ds`` (looked up once per recorded snapshot)."""
    key = (ds.dataset_id, ds.snapshot_id, ds.schema_version)
    found = _TARGETS.get(key)
    if found is not None:
        return found
    sink = driver.sink(ds.sink)
    if sink.partitioning(ds):
        found = Target(None, "partitioned table: a partition write replaces partitions in Iceberg")
    else:
        found = Target(sink.schema(ds))
    _TARGETS.put(key, found)
    return found


def take_small(reader: pa.RecordBatchReader, limit: int) -> tuple[pa.Table | None, pa.RecordBatchReader]:
    """The whole input as a table when it has at most ``limit`` rows; else ``None`` and a reader
    that still yields every batch (those read here first), for the Iceberg path."""
    seen: list[pa.RecordBatch] = []
    n = 0
    for batch in reader:
        seen.append(batch)
        n += batch.num_rows
        if n > limit:
            return None, pa.RecordBatchReader.from_batches(reader.schema, chain(seen, reader))
    return pa.Table.from_batches(seen, schema=reader.schema), pa.RecordBatchReader.from_batches(reader.schema, iter(seen))


def fits(rows: pa.Table, schema: pa.Schema) -> pa.RecordBatch | None:
    """The input's user columns as the table stores them, or ``None`` when storing them needs a
    schema change (a new column, a widened type: the Iceberg path decides those) or they do not
    cast (the Iceberg path then names the error)."""
    stored = user_fields(schema)
    if not _stores_as_is(schema, rows.schema):
        return None
    batch = rows.combine_chunks().to_batches()
    if not batch:
        return pa.RecordBatch.from_pylist([], schema=stored)
    try:
        return conform(batch[0], stored)
    except SchemaMismatchError:
        return None


# (table schema, input schema) -> does the input store without a schema change? Planning converts
# both through pyiceberg's schema (~0.5 ms, the largest Python cost of a 10-row commit), and a
# writer of many small writes sends the same schema each time.
_AS_IS: Recent[tuple[pa.Schema, pa.Schema], bool] = Recent(256)


def _stores_as_is(schema: pa.Schema, incoming: pa.Schema) -> bool:
    found = _AS_IS.get((schema, incoming))
    if found is None:
        try:
            found = plan_schema(schema, user_fields(incoming), replace=False).equals(user_fields(schema))
        except TridentError:
            found = False
        _AS_IS.put((schema, incoming), found)
    return found


def commit(
    driver: TransactionDriver,
    ds: DatasetRecord,
    intent: Intent,
    batch: pa.RecordBatch,
    schema: pa.Schema,
    *,
    provenance: dict[str, Any] | None,
    watermarks: list[WatermarkRow],
    fresh: bool = False,
) -> tuple[LedgerEntry, Outcome] | None:
    """Commit ``batch`` (user columns, stored types) as an inlined write of ``ds`` (the caller
    holds its writer lock): INTENT, then ONE Postgres transaction with the ledger COMMIT, the
    dataset's stats and the stamped rows. ``None``: the txn id already committed (a retry).

    ``fresh``: the txn id was minted for this write (no retry of an earlier one can exist) and
    nothing beyond the rows is recorded (no provenance, no watermarks): then INTENT and COMMIT
    are ONE statement (``commit_at_once``), the path of a stream of small writes."""
    if fresh and provenance is None and not watermarks:
        done = commit_at_once(driver, ds, intent, batch, schema)
        if isinstance(done, str):  # not under the lock this process holds: it died with its session
            raise WriterLockLostError(f"dataset {ds.key!r}: the inlined write found the dataset {done} under its writer lock")
        return done.entry, done.outcome
    txn = driver.open(ds, replace(intent, metadata={**intent.metadata, INLINE_META: True}))
    if txn is None:
        return None
    try:
        failpoint("intent.after")
        stamped = conform(stamp(batch, txn.txn_id, 0, ds.next_row_index, txn.entry.started_at, schema.field(ROW_ID).type), schema)
        blocks = list(block_slices(stamped))
        n = stamped.num_rows
    except BaseException as exc:
        txn.fail(exc)
        raise
    outcome = Outcome(
        rows_written=n,
        row_count=ds.row_count + n,
        next_row_index=ds.next_row_index + n,
        snapshot_id=ds.snapshot_id,
        schema=ds.schema or [],
    )
    block = InlineBlock(ds.next_row_index, n, blocks[0][2]) if blocks else None
    entry = txn.commit(outcome, provenance=provenance, watermarks=watermarks, inline=block)
    failpoint("inline.committed")
    return entry, outcome


@dataclass(frozen=True)
class Inlined:
    """A committed inlined write: its ledger entry and outcome, and the tail after it."""

    entry: LedgerEntry
    outcome: Outcome
    tail: InlineState
    block_seq: int | None


def commit_at_once(
    driver: TransactionDriver, ds: DatasetRecord, intent: Intent, batch: pa.RecordBatch, schema: pa.Schema
) -> Inlined | str:
    """An inlined write whose ledger row is born committed, in ONE call with the dataset's stats
    and its rows (``ControlPlane.commit_inline``): the floor is one round trip. Its rows are
    stamped from ``ds``; the call commits them only if the dataset is still as ``ds`` says and
    its lock is free (or held by this process: ``locked``), else it writes nothing and the
    answer is why (``busy``, ``stale``, ``waiting``: the caller takes the normal door, or reads
    the record again). Its rows never leave Postgres, so there is no step a crash could leave
    half done: killed before the call the write left nothing, after it the write is committed.
    τ is this process's clock (there is no INTENT row to take Postgres' from); ``committed_at``
    is never earlier. A failure is recorded as an aborted ledger row when the control plane
    still answers.

    Raises:
        InvalidWriteError: the txn id names an earlier write.
        ControlPlaneUnavailableError: the control plane failed (the write is recorded aborted
            when it answers again in time).
    """
    tau = datetime.now(UTC)  # microseconds: what every part of the trident stores
    try:
        failpoint("intent.after")
        stamped = conform(stamp(batch, intent.txn_id, 0, ds.next_row_index, tau, schema.field(ROW_ID).type), schema)
        blocks = list(block_slices(stamped))
        n = stamped.num_rows
        outcome = Outcome(
            rows_written=n,
            row_count=ds.row_count + n,
            next_row_index=ds.next_row_index + n,
            snapshot_id=ds.snapshot_id,
            schema=ds.schema or [],
        )
        entry = one_call_entry(ds, intent, "committed", tau)
        block = InlineBlock(ds.next_row_index, n, blocks[0][2]) if blocks else None
        failpoint("commit.before_ledger")
        done = driver.control.commit_inline(entry, outcome, block, ds, conn=driver.lock_session(ds))
        if done.outcome == "exists":
            raise InvalidWriteError(f"transaction id {intent.txn_id} already exists; a txn id names one write")
    except Exception as exc:
        record_abort(driver, ds, intent, exc)
        raise
    if done.entry is None or done.tail is None:
        return done.outcome
    failpoint("inline.committed")
    return Inlined(done.entry, outcome, done.tail, done.block_seq)


def advanced(ds: DatasetRecord, entry: LedgerEntry, outcome: Outcome, block_seq: int | None = None) -> DatasetRecord:
    """``ds`` as a one-call write (inlined, with its tail block ``block_seq``, or a pg append)
    left it: what the next small append stamps from."""
    return replace(
        ds,
        row_count=outcome.row_count,
        next_row_index=outcome.next_row_index,
        snapshot_id=outcome.snapshot_id,
        last_txn_id=entry.txn_id,
        committed_at=entry.committed_at,
        inline_through=block_seq if block_seq is not None else ds.inline_through,
    )


def record_abort(driver: TransactionDriver, ds: DatasetRecord, intent: Intent, exc: BaseException) -> None:
    """The failed write in the ledger as ``aborted`` (nothing to clean: it wrote no file). Never
    raises: when the control plane itself failed, there is nothing to record it in."""
    try:
        if driver.control.open_txn(one_call_entry(ds, intent, "open", datetime.now(UTC))) is not None:
            driver.control.abort_txn(intent.txn_id, f"{type(exc).__name__}: {exc}")
            driver.control.cleanup_done(intent.txn_id)
    except Exception as record_exc:
        log.warning("could not record the failed inlined write %s of %s (%s)", intent.txn_id, ds.key, record_exc)


def one_call_entry(ds: DatasetRecord, intent: Intent, status: str, started_at: datetime) -> LedgerEntry:
    """The ledger row of a one-call write (inlined, or a pg append: ``transaction/pg_append.py``):
    born ``committed`` at its τ, or ``open`` to record its abort. Only an inlined write's says so
    (``INLINE_META``): its rows are in the tail, not in the table."""
    meta = {**intent.metadata, INLINE_META: True} if intent.sink == INLINE_SINK else dict(intent.metadata)
    return LedgerEntry(
        txn_id=intent.txn_id,
        dataset_id=ds.dataset_id,
        status=status,
        mode=intent.mode,
        writer=intent.writer,
        sink=intent.sink,
        started_at=started_at,
        requested_sink=intent.route.requested,
        clamped=intent.route.clamped,
        route_reason=intent.route.reason,
        schema_version=ds.schema_version,
        source_refs=list(intent.source_refs),
        metadata=meta,
    )


def flush(driver: TransactionDriver, ds: DatasetRecord) -> LedgerEntry | None:
    """Move the dataset's inlined rows into ONE Iceberg snapshot, identity carried (the caller
    holds the dataset's writer lock, whole). ``None`` when nothing is inlined. Idempotent: a
    second flush finds nothing; a flush killed at any step is settled by the reconciler (rolled
    forward when its snapshot committed, else aborted with the rows still inlined)."""
    tail = driver.control.inline_tail(ds.dataset_id)
    if not tail.blocks or tail.last_seq is None:
        return None
    schema = driver.sink(ds.sink).schema(ds)
    intent = Intent(
        txn_id=uuid.uuid4(),
        mode="append",
        writer=FLUSH_WRITER,
        sink=ds.sink,
        route=RouteDecision(sink=ds.sink, requested=ds.sink, clamped=False, reason="dataset"),
        metadata={INLINE_FLUSH_META: tail.last_seq},
    )
    txn = driver.open(ds, intent)
    assert txn is not None  # a fresh txn id
    outcome = txn.write(_blocks(tail.blocks, schema), preserve_identity=True)
    entry = txn.commit(outcome)
    failpoint("flush.committed")
    return entry


def _blocks(blocks: list[tuple[int, bytes]], schema: pa.Schema) -> pa.RecordBatchReader:
    def batches() -> Iterator[pa.RecordBatch]:
        for n, data in blocks:
            yield decode_block(data, n, schema)

    return pa.RecordBatchReader.from_batches(schema, batches())
