"""A small append to a pg-sink dataset in ONE call: its rows, row block, commit marker and ledger
row born committed, in the one Postgres transaction that takes the writer lock
(``ControlPlane.commit_pg_append``).

Why: the normal door costs a pg append two Postgres transactions and ~17 statements (INTENT, the
rows' transaction, COMMIT, lock and unlock) plus a DuckDB query to encode its rows, ~15 ms for 10
rows, where an inlined write to an Iceberg dataset takes one call. A pg dataset's rows live in the
control plane's Postgres already, so its small append can be the same one call.

The rules are the inlined write's (``transaction/inline.py``): only plain appends of at most
``TRIDENT_INLINE_MAX_ROWS`` rows that the dataset stores without a schema change; identity is the
normal door's (``__row_index`` from the record, ``__row_id`` minted from the txn id, ``__created_at``
the writer's instant τ); the call writes nothing when the lock is taken, the record moved, or a
transaction waits on the dataset, and the caller then takes the normal door. Nothing is ever half
done: the call is one Postgres transaction, and a process killed before it left nothing.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, cast

import pyarrow as pa

from ..control.plane import DatasetRecord, LedgerEntry, Outcome, PgAppendRows
from ..core.errors import InvalidWriteError
from ..core.failpoints import failpoint
from ..core.identity import ROW_ID, ROW_ID_TEXT, RowIdBlock, stamp
from ..core.recent import Recent
from ..core.schemas import conform, describe_schema, user_fields, with_identity
from ..sinks.pg import blocks as block_cache
from ..sinks.pg.blocks import BLOCK_ROWS, block_slices
from ..sinks.pg.codec import rows_json
from ..sinks.pg.sink import PgSink, storage_schema
from . import inline
from .driver import Intent, TransactionDriver

PG_SINK = "pg"

# (dataset, seq) of the commits this process's one-call appends made: each purged the dataset's
# settled history (older generations, the undo log), and any later write moves the latest commit,
# so an append on top of one of them has nothing to purge (two index probes less per call).
_PURGED: Recent[tuple[uuid.UUID, int], bool] = Recent(512)


@dataclass(frozen=True)
class Layout:
    """What a commit's user schema stores as: the storage schema, its user columns (what the
    marker records), their description (the dataset record's ``schema``) and serialized form."""

    stored: pa.Schema
    user_schema: pa.Schema
    described: list[dict[str, Any]]
    schema_bytes: bytes


# a commit's user schema -> its Layout: the same for every append until a schema change
_LAYOUTS: Recent[pa.Schema, Layout] = Recent(256)


def _layout(user_schema: pa.Schema) -> Layout:
    found = _LAYOUTS.get(user_schema)
    if found is None:
        stored = storage_schema(user_schema)
        fields = user_fields(stored)
        found = Layout(stored, fields, describe_schema(stored), fields.serialize().to_pybytes())
        _LAYOUTS.put(user_schema, found)
    return found


@dataclass(frozen=True)
class Appended:
    """A committed one-call pg append: its ledger entry and outcome."""

    entry: LedgerEntry
    outcome: Outcome


def commit_at_once(driver: TransactionDriver, ds: DatasetRecord, intent: Intent, rows: pa.Table) -> Appended | str:
    """Append ``rows`` to ``ds`` in one call, stamped from ``ds`` (the record this process's last
    write left, or one just read). A string says why nothing was written: ``unfit`` (the rows need
    a schema change or do not cast: the normal door decides), or the call's answers ``busy``,
    ``stale``, ``waiting``. A failure is recorded as an aborted ledger row when the control
    plane still answers.

    Raises:
        InvalidWriteError: the txn id names an earlier write.
        SchemaMismatchError: Postgres refused a value (jsonb cannot hold it).
        ControlPlaneUnavailableError: the control plane failed.
    """
    sink = cast(PgSink, driver.sink(PG_SINK))
    prior = sink.commit_at(ds)
    if prior is None:
        return "stale"
    layout = _layout(prior.user_schema)
    batch = inline.fits(rows, layout.stored) if rows.num_rows <= BLOCK_ROWS else None
    if batch is None or layout.described != ds.schema:
        return "unfit"
    user_schema = layout.user_schema
    tau = datetime.now(UTC)
    try:
        failpoint("intent.after")
        n = batch.num_rows
        id_block = RowIdBlock.mint()  # (``row_ids``'s, minted here: a small write's ids go as text)
        block = None
        if driver.settings.pg_row_blocks and n >= block_cache.MIN_BLOCK_ROWS:  # a small write has none (blocks.py)
            ids = id_block.arrow(0, n)
            stamped = stamp(batch, intent.txn_id, 0, ds.next_row_index, tau, ROW_ID_TEXT)
            stamped = stamped.set_column(stamped.schema.get_field_index(ROW_ID), ROW_ID, ids)  # the ids the rows get
            block = next(block_slices(conform(stamped, with_identity(user_schema, ROW_ID_TEXT))), None)
            texts = cast(list[str], ids.to_pylist())
        else:
            texts = id_block.texts(0, n)
        payload = PgAppendRows(
            gen=prior.gen,
            purge=_PURGED.get((ds.dataset_id, prior.seq)) is None,
            ids=texts,
            data=rows_json(batch, user_schema),
            block=None if block is None else block[2],
            schema=layout.schema_bytes,
        )
        outcome = Outcome(
            rows_written=n,
            row_count=ds.row_count + n,
            next_row_index=ds.next_row_index + n,
            snapshot_id=None,  # the new commit's seq, given by the call
            schema=ds.schema or [],
        )
        entry = inline.one_call_entry(ds, intent, "committed", tau)
        failpoint("commit.before_ledger")
        done = driver.control.commit_pg_append(entry, outcome, ds, payload)
        if done.outcome == "exists":
            raise InvalidWriteError(f"transaction id {intent.txn_id} already exists; a txn id names one write")
    except Exception as exc:
        inline.record_abort(driver, ds, intent, exc)
        raise
    if done.entry is None or done.seq is None:
        return done.outcome
    failpoint("pg.appended")
    sink.appended(ds, prior, done.seq, intent.txn_id)
    _PURGED.put((ds.dataset_id, done.seq), True)
    return Appended(done.entry, replace(outcome, snapshot_id=done.seq))
