"""The ``pg`` sink: rows as jsonb in the control-plane Postgres (the legacy store, and the home of
``dataset.manifest`` by design), with the same facade semantics as the lakehouse.

- One Postgres transaction per write: rows and a commit marker (``trident_pg_commits``, carrying the
  txn id, the Arrow schema and the outcome) become visible together or not at all; a killed
  process leaves nothing because Postgres rolls its transaction back.
- Bulk writes use COPY with lines built in DuckDB; reads use a server-side cursor, so both run in
  bounded memory whatever the size.
- Keyed modes reuse the sink-neutral ``KeyedMerge``; identity rules are the lakehouse's.
- A replace writes a new generation; the old one (and the undo log of keyed writes) is purged by
  the next write, so ``undo`` of a write whose ledger COMMIT failed is exact and cheap.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import tuple_row
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.ipc as ipc
from pyiceberg.expressions.parser import parse as parse_filter
from pyiceberg.expressions.visitors import bind
from pyiceberg.io.pyarrow import expression_to_pyarrow, schema_to_pyarrow

from ... import queries as q
from ...control_plane import ControlPlane, DatasetRecord, Outcome
from ...errors import (
    DatasetNotFoundError,
    InvalidFilterError,
    InvalidWriteError,
    SchemaMismatchError,
    StorageUnavailableError,
    UnsupportedBySinkError,
)
from ...failpoints import failpoint
from ...identity import CREATED_AT, IDENTITY_COLUMNS, ROW_ID, ROW_INDEX, stamp
from ...merge import KeyedMerge
from .codec import JsonCodec
from ...schemas import conform, describe_schema, plan_schema, to_iceberg, user_fields, with_identity
from ...settings import TridentSettings
from ..base import AsOf, Sink, WriteRequest

FETCH_ROWS = 20_000  # rows per server-side cursor round trip (and per decoded batch)


@dataclass(frozen=True)
class PgCommit:
    seq: int
    gen: int
    user_schema: pa.Schema
    outcome: dict[str, Any]
    txn_id: uuid.UUID


def storage_schema(user_schema: pa.Schema) -> pa.Schema:
    """Identity + user columns exactly as the lakehouse would describe them (same canonical types)."""
    full = schema_to_pyarrow(to_iceberg(with_identity(user_schema)), include_field_ids=False)
    return pa.schema([pa.field(f.name, f.type, f.nullable) for f in full])


def _schema_bytes(schema: pa.Schema) -> bytes:
    return schema.serialize().to_pybytes()


def _commit_row(row: dict[str, Any] | None) -> PgCommit | None:
    if row is None:
        return None
    schema = ipc.read_schema(pa.py_buffer(bytes(row["arrow_schema"])))
    return PgCommit(seq=row["seq"], gen=row["gen"], user_schema=schema, outcome=row["outcome"], txn_id=row["txn_id"])


class PgSink(Sink):
    name = "pg"

    def __init__(self, control: ControlPlane, settings: TridentSettings) -> None:
        self.control = control
        self.settings = settings

    # -- state ------------------------------------------------------------------------------
    def _latest(self, conn: psycopg.Connection[Any], dataset_id: uuid.UUID) -> PgCommit | None:
        return _commit_row(conn.execute(q.PG_LATEST_COMMIT, (dataset_id,)).fetchone())

    def current(self, ds: DatasetRecord) -> PgCommit | None:
        with self.control.pool.connection() as conn:
            return self._latest(conn, ds.dataset_id)

    def _existing(self, ds: DatasetRecord) -> PgCommit:
        state = self.current(ds)
        if state is None:
            raise DatasetNotFoundError(ds.key, ds.workspace)
        return state

    def schema(self, ds: DatasetRecord) -> pa.Schema:
        return storage_schema(self._existing(ds).user_schema)

    # -- WRITE ------------------------------------------------------------------------------
    def write(self, req: WriteRequest) -> Outcome:
        preserve = getattr(req, "preserve_identity", False)
        if preserve and (req.mode != "replace" or req.keys):
            raise InvalidWriteError("an identity-preserving copy (migration) is always a plain replace")
        with self.control.pool.connection() as conn:
            try:
                with conn.transaction():
                    prior = self._latest(conn, req.dataset.dataset_id)
                    if prior is not None:  # every earlier transaction is settled: we hold the writer lock
                        conn.execute(q.PG_PURGE_OLD_GENS, (req.dataset.dataset_id, prior.gen))
                        conn.execute(q.PG_PURGE_UNDO, (req.dataset.dataset_id,))
                    if req.mode == "delete" and prior is None:
                        raise DatasetNotFoundError(req.dataset.key, req.dataset.workspace)
                    seq = conn.execute(q.PG_NEXT_SEQ).fetchone()["seq"]
                    if req.mode in ("append", "replace") and not req.keys:
                        user_schema, counts, gen = self._write_stream(conn, req, prior, seq, preserve)
                    else:
                        user_schema, counts, gen = self._write_keyed(conn, req, prior, seq)
                    outcome = Outcome(schema=describe_schema(storage_schema(user_schema)), snapshot_id=seq, **counts)
                    conn.execute(
                        q.PG_INSERT_COMMIT,
                        (seq, req.dataset.dataset_id, req.txn_id, gen, _schema_bytes(user_schema), json.dumps(outcome.__dict__)),
                    )
                    failpoint("write.before_commit")
            except psycopg.errors.UntranslatableCharacter as exc:
                raise SchemaMismatchError(f"the pg sink (jsonb) cannot store this value: {exc}") from exc
            except psycopg.errors.DataError as exc:
                raise SchemaMismatchError(f"Postgres refused a value of the input: {exc}") from exc
            except psycopg.OperationalError as exc:
                raise StorageUnavailableError(f"the pg sink lost Postgres; nothing was committed: {exc}") from exc
        return outcome

    def _copy(self, conn: psycopg.Connection[Any], batches: Iterator[pa.RecordBatch], codec: JsonCodec, ds: DatasetRecord, gen: int, txn: uuid.UUID) -> int:
        n = 0
        with conn.cursor().copy(q.PG_COPY_ROWS) as copy:
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                copy.write(codec.copy_payload(batch, ds.dataset_id, gen, txn))
                n += batch.num_rows
                failpoint("write.file_flushed")
        return n

    def _write_stream(
        self, conn: psycopg.Connection[Any], req: WriteRequest, prior: PgCommit | None, seq: int, preserve: bool
    ) -> tuple[pa.Schema, dict[str, int], int]:
        assert req.reader is not None
        replace = req.mode == "replace"
        incoming = user_fields(req.reader.schema)
        user_schema = plan_schema(None if prior is None else prior.user_schema, incoming, replace=replace)
        gen = seq if (replace or prior is None) else prior.gen
        first = 0 if (replace or prior is None) else req.dataset.next_row_index
        full = with_identity(user_schema)
        codec = JsonCodec(user_schema)
        state = {"seq": 0, "max_index": -1}

        def stamped() -> Iterator[pa.RecordBatch]:
            for batch in req.reader:  # type: ignore[union-attr]
                if batch.num_rows == 0:
                    continue
                if preserve:
                    missing = [c for c in IDENTITY_COLUMNS if c not in batch.schema.names]
                    if missing:
                        raise InvalidWriteError(f"an identity-preserving copy needs {missing} in the input")
                    out = conform(batch, full)
                    top = pa.compute.max(out.column(ROW_INDEX)).as_py()
                    state["max_index"] = max(state["max_index"], -1 if top is None else top)
                else:
                    out = stamp(conform(batch, user_fields(user_schema)), req.txn_id, state["seq"], first + state["seq"], req.tau)
                state["seq"] += batch.num_rows
                yield out

        try:
            n = self._copy(conn, stamped(), codec, req.dataset, gen, req.txn_id)
        finally:
            codec.close()
        if preserve:
            next_index = max(req.dataset.next_row_index, state["max_index"] + 1)
        else:
            next_index = first + n
        before = 0 if (replace or prior is None) else req.dataset.row_count
        counts = {"rows_written": n, "row_count": before + n, "next_row_index": next_index}
        return user_schema, counts, gen

    def _write_keyed(
        self, conn: psycopg.Connection[Any], req: WriteRequest, prior: PgCommit | None, seq: int
    ) -> tuple[pa.Schema, dict[str, int], int]:
        ds = req.dataset
        if req.mode == "delete":
            assert prior is not None
            user_schema = prior.user_schema
        else:
            assert req.reader is not None
            user_schema = plan_schema(None if prior is None else prior.user_schema, user_fields(req.reader.schema), replace=req.mode == "replace")
        first = ds.next_row_index if prior is not None else 0
        with KeyedMerge(req.spill_dir, memory_limit=self.settings.duckdb_memory_limit, threads=self.settings.duckdb_threads) as merge:
            if req.mode == "delete" and req.row_filter:
                assert prior is not None
                removed = merge.plan_removal(self._scan(ds, prior, [ROW_ID], req.row_filter))
                counts = {"rows_written": 0, "deleted": removed, "preserved": 0, "skipped": 0}
                fresh = 0
            else:
                assert req.reader is not None
                merge.stage(req.reader, req.keys, keys_only=req.mode == "delete")
                merge.load_existing(self._existing_keys(ds, prior, req.keys, req.reader.schema))
                plan = merge.plan(req.mode, first_index=first, txn_id=req.txn_id, tau=req.tau)
                fresh = plan.fresh if req.mode != "delete" else 0
                counts = plan.counts(req.mode)
            replace = req.mode == "replace"
            gen = seq if (replace or prior is None) else prior.gen
            removed_n = 0
            if not replace and prior is not None:
                removed_n = self._remove(conn, ds, prior.gen, req.txn_id, merge.removed_ids())
            codec = JsonCodec(user_schema)
            full = with_identity(user_schema)
            try:
                added = self._copy(conn, (conform(b, full) for b in merge.added_rows()), codec, ds, gen, req.txn_id)
            finally:
                codec.close()
        before = 0 if (replace or prior is None) else ds.row_count
        next_index = first + fresh if (not replace or prior is not None) else fresh
        counts["row_count"] = before - removed_n + added
        counts["next_row_index"] = next_index
        return user_schema, counts, gen

    def _remove(self, conn: psycopg.Connection[Any], ds: DatasetRecord, gen: int, txn: uuid.UUID, ids: pa.RecordBatchReader) -> int:
        """Move the removed row versions of the current generation to the undo log."""
        conn.execute(q.PG_CREATE_GONE)
        with conn.cursor().copy(q.PG_COPY_GONE) as copy:
            for batch in ids:
                if batch.num_rows:
                    copy.write(("\n".join(batch.column(0).to_pylist()) + "\n").encode())
        cur = conn.execute(q.PG_MOVE_GONE_TO_UNDO, (ds.dataset_id, gen, txn))
        return cur.rowcount

    def _existing_keys(self, ds: DatasetRecord, prior: PgCommit | None, keys: tuple[str, ...], incoming: pa.Schema) -> pa.RecordBatchReader:
        if prior is None:
            fields = [pa.field(k, incoming.field(k).type) for k in keys if k in incoming.names]
            schema = pa.schema([*fields, pa.field(ROW_ID, pa.large_string()), pa.field(ROW_INDEX, pa.int64())])
            return pa.RecordBatchReader.from_batches(schema, [])
        missing = [k for k in keys if k not in prior.user_schema.names]
        if missing:
            raise SchemaMismatchError(f"key column(s) {missing} are not in the dataset (columns: {prior.user_schema.names})")
        return self._scan(ds, prior, [*keys, ROW_ID, ROW_INDEX], None)

    # -- recovery ---------------------------------------------------------------------------
    def find_committed(self, ds: DatasetRecord, txn_id: uuid.UUID) -> Outcome | None:
        with self.control.pool.connection() as conn:
            row = conn.execute(q.PG_COMMIT_OF_TXN, (txn_id,)).fetchone()
        if row is None:
            return None
        return Outcome(**row["outcome"])

    def undo(self, ds: DatasetRecord, txn_id: uuid.UUID) -> None:
        """Revert a committed pg write whose ledger COMMIT failed: drop the rows it wrote, restore
        the row versions it removed (a replace's old generation is still there), forget its marker."""
        with self.control.tx() as conn:
            if conn.execute(q.PG_COMMIT_OF_TXN, (txn_id,)).fetchone() is None:
                return
            conn.execute(q.PG_UNDO_DELETE_WRITTEN, (ds.dataset_id, txn_id))
            conn.execute(q.PG_UNDO_RESTORE, (txn_id,))
            conn.execute(q.PG_UNDO_FORGET, (txn_id,))
            conn.execute(q.PG_DELETE_COMMIT, (txn_id,))

    def discard(self, ds: DatasetRecord, txn_id: uuid.UUID, location: str | None = None) -> None:
        """Nothing to do: an unfinished pg write is an uncommitted Postgres transaction, which
        Postgres rolled back when the writer failed or its connection died."""

    # -- READ -------------------------------------------------------------------------------
    def _check_as_of(self, ds: DatasetRecord, state: PgCommit, as_of: AsOf) -> None:
        if as_of is None:
            return
        if isinstance(as_of, int) and as_of == state.seq:
            return
        if isinstance(as_of, (str, uuid.UUID)) and str(as_of) == str(state.txn_id):
            return
        raise UnsupportedBySinkError(
            f"dataset {ds.key!r} lives in the pg sink, which keeps only its current version; as_of "
            f"(time travel) needs iceberg_native: move it with `trident canary {ds.key}`"
        )

    def scan(self, ds: DatasetRecord, *, columns: list[str] | None, row_filter: str | None, as_of: AsOf) -> pa.RecordBatchReader:
        state = self._existing(ds)
        self._check_as_of(ds, state, as_of)
        return self._scan(ds, state, columns, row_filter)

    def _filter(self, full: pa.Schema, row_filter: str) -> Any:
        try:
            return expression_to_pyarrow(bind(to_iceberg(full), parse_filter(row_filter), case_sensitive=True))
        except Exception as exc:
            raise InvalidFilterError(
                f"invalid row_filter {row_filter!r}: {exc}. Use pyiceberg filter syntax, e.g. \"k > 5 and v = 'x'\""
            ) from exc

    def _scan(self, ds: DatasetRecord, state: PgCommit, columns: list[str] | None, row_filter: str | None) -> pa.RecordBatchReader:
        full = storage_schema(state.user_schema)
        if columns:
            unknown = [c for c in columns if c not in full.names]
            if unknown:
                raise SchemaMismatchError(f"unknown column(s) {unknown}; the dataset has {full.names}")
        wanted = pa.schema([full.field(c) for c in (columns or full.names)])
        expr = self._filter(full, row_filter) if row_filter else None
        decode_to = full if expr is not None else wanted
        pool, gen = self.control.pool, state.gen

        def batches() -> Iterator[pa.RecordBatch]:
            codec = JsonCodec(state.user_schema)
            try:
                with pool.connection() as conn, conn.transaction():
                    with conn.cursor(name=f"trident_scan_{uuid.uuid4().hex}", row_factory=tuple_row) as cur:
                        cur.itersize = FETCH_ROWS
                        cur.execute(q.PG_SCAN_ROWS, (ds.dataset_id, gen))
                        while rows := cur.fetchmany(FETCH_ROWS):
                            batch = codec.decode(rows, decode_to)
                            if expr is not None:
                                batch = pa.Table.from_batches([batch]).filter(expr).select(wanted.names)
                                for b in batch.to_batches():
                                    yield conform(b, wanted)
                            else:
                                yield batch
            finally:
                codec.close()

        return pa.RecordBatchReader.from_batches(wanted, batches())

    def arrow_source(self, ds: DatasetRecord) -> Any:
        """A re-scannable pyarrow dataset for DuckDB: the current version spilled once to an Arrow
        IPC file under ``<home>/tmp/pg_cache`` (bounded memory, column projection), reused until
        the dataset changes."""
        state = self._existing(ds)
        folder = self.settings.home / "tmp" / "pg_cache"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{ds.dataset_id}-{state.seq}.arrow"
        if not path.exists():
            self._spill(ds, state, folder, path)
        return pads.dataset(str(path), format="ipc")

    def _spill(self, ds: DatasetRecord, state: PgCommit, folder: Path, path: Path) -> None:
        for old in folder.glob(f"{ds.dataset_id}-*.arrow"):
            old.unlink(missing_ok=True)
        tmp = folder / f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
        reader = self._scan(ds, state, None, None)
        try:
            with ipc.new_file(str(tmp), reader.schema) as out:
                for batch in reader:
                    out.write_batch(batch)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)

    def drop(self, ds: DatasetRecord) -> None:
        with self.control.tx() as conn:
            conn.execute(q.PG_DROP_ROWS, (ds.dataset_id,))
            conn.execute(q.PG_DROP_UNDO, (ds.dataset_id,))
            conn.execute(q.PG_DROP_COMMITS, (ds.dataset_id,))
        for old in (self.settings.home / "tmp" / "pg_cache").glob(f"{ds.dataset_id}-*.arrow"):
            old.unlink(missing_ok=True)


__all__ = ["PgSink", "storage_schema", "CREATED_AT"]
