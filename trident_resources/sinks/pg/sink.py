"""The ``pg`` sink: rows as jsonb in the control-plane Postgres (the legacy store, and the home of
``dataset.manifest`` by design), with the same semantics as the lakehouse.

- One Postgres transaction per write: rows and a commit marker (``trident_pg_commits``, carrying the
  txn id, the Arrow schema and the outcome) become visible together or not at all; a killed
  process leaves nothing because Postgres rolls its transaction back.
- Bulk writes use COPY with lines built in DuckDB; reads are row-index ranges read by aggregated
  binary COPYs on a few connections sharing one snapshot (``reader.py``), each wanted member
  extracted by Postgres and typed by pyarrow (``columns.py``); both run in bounded memory
  whatever the size. Replace/append batches are also kept as Arrow row blocks, a read cache
  that reads take rows from where one holds them (``blocks.py``).
- Keyed modes reuse the sink-neutral ``KeyedMerge``; identity rules are the lakehouse's.
- A replace writes a new generation; the old one (and the undo log of keyed writes) is purged by
  the next write, so ``undo`` of a write whose ledger COMMIT failed is exact and cheap.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import uuid
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

import psycopg
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.ipc as ipc
from psycopg.rows import DictRow
from pyiceberg.io.pyarrow import schema_to_pyarrow

from ...control import queries as q
from ...control.plane import ControlPlane, DatasetRecord, Outcome
from ...core.errors import (
    DatasetChangedError,
    DatasetNotFoundError,
    SchemaMismatchError,
    StorageUnavailableError,
    UnsupportedBySinkError,
)
from ...core.failpoints import failpoint
from ...core.filters import arrow_filter, check_columns
from ...core.identity import CREATED_AT, ROW_ID, ROW_ID_TEXT, ROW_INDEX
from ...core.partitions import PartitionFilter
from ...core.recent import Recent
from ...core.schemas import conform, describe_schema, to_iceberg, with_identity
from ...core.settings import TridentSettings
from ..contract import AsOf, Discarded, Maintenance, Removal, Sink, SinkWrite, StoredVersion, WriteCounts, WriteRequest
from . import blocks as block_cache
from .blocks import block_slices
from .codec import JsonCodec
from .reader import fetch_rows, read_ranges


@dataclass(frozen=True)
class PgCommit:
    seq: int
    gen: int
    user_schema: pa.Schema
    outcome: dict[str, Any]
    txn_id: uuid.UUID


# user schema -> its storage schema: the conversion goes through pyiceberg's schema (~1 ms), and a
# write and a read each ask for it, for a schema that changes only with a replace or a new column
_STORAGE: Recent[pa.Schema, pa.Schema] = Recent(256)


# (dataset, seq) -> that commit: a commit never changes, only which one is the latest (``commit_at``)
_COMMITS: Recent[tuple[uuid.UUID, int | None], PgCommit] = Recent(512)


def storage_schema(user_schema: pa.Schema) -> pa.Schema:
    """Identity + user columns exactly as the lakehouse would describe them (same canonical types)."""
    found = _STORAGE.get(user_schema)
    if found is None:
        full = schema_to_pyarrow(to_iceberg(with_identity(user_schema, ROW_ID_TEXT)), include_field_ids=False)
        found = pa.schema([pa.field(f.name, f.type, f.nullable) for f in full])
        _STORAGE.put(user_schema, found)
    return found


def _schema_bytes(schema: pa.Schema) -> bytes:
    return schema.serialize().to_pybytes()


def _commit_row(row: dict[str, Any] | None) -> PgCommit | None:
    if row is None:
        return None
    schema = ipc.read_schema(pa.py_buffer(bytes(row["arrow_schema"])))
    return PgCommit(seq=row["seq"], gen=row["gen"], user_schema=schema, outcome=row["outcome"], txn_id=row["txn_id"])


class PgVersion(StoredVersion):
    """The dataset's latest pg commit (its generation, schema and outcome)."""

    def __init__(self, sink: PgSink, ds: DatasetRecord, prior: PgCommit | None) -> None:
        self.sink = sink
        self.ds = ds
        self.prior = prior
        self.schema = None if prior is None else storage_schema(prior.user_schema)

    def existing_keys(self, keys: tuple[str, ...], partition: PartitionFilter | None = None) -> pa.RecordBatchReader:
        assert self.prior is not None
        return self.sink.scan_rows(self.ds, self.prior, [*keys, ROW_ID, ROW_INDEX], None)

    def matching_ids(self, expr: Any) -> pa.RecordBatchReader:
        assert self.prior is not None
        return self.sink.scan_rows(self.ds, self.prior, [ROW_ID], expr)

    def begin(self, req: WriteRequest, user_schema: pa.Schema, *, replace: bool) -> PgWrite:
        return PgWrite(self, req, user_schema, replace=replace)


class PgWrite(SinkWrite):
    """One Postgres transaction: rows COPYed in, removed versions moved to the undo log, and the
    commit marker, all visible together at ``commit`` or rolled back by ``discard`` (or by
    Postgres itself when the process dies)."""

    def __init__(self, version: PgVersion, req: WriteRequest, user_schema: pa.Schema, *, replace: bool) -> None:
        self.version, self.req, self.user_schema, self.replace = version, req, user_schema, replace
        self.arrow_schema = with_identity(user_schema, ROW_ID_TEXT)  # the rows table keeps ids as text
        self.added = 0
        self.removed = 0
        self._stack = ExitStack()
        try:
            with _translated():
                self.conn = self._stack.enter_context(version.sink.control.pool.connection())
                self._stack.enter_context(self.conn.transaction())
                prior, ds_id = version.prior, req.dataset.dataset_id
                if prior is not None:  # every earlier transaction is settled: we hold the writer lock
                    kept = {"ds": ds_id, "gen": prior.gen}
                    self.conn.execute(q.PG_PURGE_OLD_BLOCKS, kept)  # first: the rows' trigger then finds none
                    self.conn.execute(q.PG_PURGE_OLD_GENS, kept)
                    self.conn.execute(q.PG_PURGE_UNDO, (ds_id,))
                self.seq: int = cast(DictRow, self.conn.execute(q.PG_NEXT_SEQ).fetchone())["seq"]
        except BaseException as exc:
            self._stack.__exit__(type(exc), exc, exc.__traceback__)  # rolls back, releases
            raise
        self.gen = self.seq if (replace or version.prior is None) else version.prior.gen
        self.codec = JsonCodec(user_schema)

    def put(self, batches: Iterable[pa.RecordBatch], *, clustered: bool = False) -> int:
        # Only replace/append batches carry contiguous new row indexes; a keyed write's rows keep
        # scattered indexes (and its removals drop blocks anyway), so it writes none (blocks.py).
        blocks = self.version.sink.settings.pg_row_blocks and self.req.mode in ("append", "replace") and not self.req.keys
        with _translated():
            n = self.version.sink.copy_rows(
                self.conn, batches, self.codec, self.req.dataset, self.gen, self.req.txn_id, blocks=blocks
            )
        self.added += n
        return n

    def remove(self, removal: Removal) -> None:
        assert self.version.prior is not None
        with _translated():
            self.removed += self.version.sink.move_to_undo(
                self.conn, self.req.dataset, self.version.prior.gen, self.req.txn_id, removal.removed_ids()
            )

    def commit(self, counts: WriteCounts) -> Outcome:
        before = 0 if (self.replace or self.version.prior is None) else self.req.dataset.row_count
        outcome = Outcome(
            schema=describe_schema(storage_schema(self.user_schema)),
            snapshot_id=self.seq,
            row_count=before - self.removed + self.added,
            **asdict(counts),
        )
        with _translated():
            self.conn.execute(
                q.PG_INSERT_COMMIT,
                (
                    self.seq,
                    self.req.dataset.dataset_id,
                    self.req.txn_id,
                    self.gen,
                    _schema_bytes(self.user_schema),
                    json.dumps(outcome.__dict__),
                ),
            )
            failpoint("write.before_commit")
            self.req.fence()
            self._close(None)
        return outcome

    def discard(self) -> None:
        self._close(StoredWriteDiscarded())

    def _close(self, exc: BaseException | None) -> None:
        self.codec.close()
        if exc is None:
            self._stack.close()  # commits the Postgres transaction
            return
        with contextlib.suppress(Exception):  # the connection may be gone; Postgres has rolled back anyway
            self._stack.__exit__(type(exc), exc, None)  # rolls it back


class StoredWriteDiscarded(Exception):
    """Passed to the Postgres transaction's exit so that it rolls back (never raised)."""


@contextmanager
def _translated() -> Iterator[None]:
    """Postgres errors of a pg-sink write, named."""
    try:
        yield
    except psycopg.errors.UntranslatableCharacter as exc:
        raise SchemaMismatchError(f"the pg sink (jsonb) cannot store this value: {exc}") from exc
    except psycopg.errors.DataError as exc:
        raise SchemaMismatchError(f"Postgres refused a value of the input: {exc}") from exc
    except psycopg.OperationalError as exc:
        raise StorageUnavailableError(f"the pg sink lost Postgres; nothing was committed: {exc}") from exc


_READ_ATTEMPTS = 3  # reads of the current version retried when a commit lands between planning and snapshot


class PgSink(Sink):
    name = "pg"
    time_travel = False  # only the current version is kept: scan checks ``as_of`` itself

    def __init__(self, control: ControlPlane, settings: TridentSettings) -> None:
        self.control = control
        self.settings = settings

    # -- state ------------------------------------------------------------------------------
    def _latest(self, conn: psycopg.Connection[Any], dataset_id: uuid.UUID) -> PgCommit | None:
        return _commit_row(conn.execute(q.PG_LATEST_COMMIT, {"ds": dataset_id}).fetchone())

    def current_commit(self, ds: DatasetRecord) -> PgCommit | None:
        with self.control.connection() as conn:
            return self._latest(conn, ds.dataset_id)

    def commit_at(self, ds: DatasetRecord) -> PgCommit | None:
        """The dataset's latest commit if it is the one ``ds`` records (its ``snapshot_id``), else
        ``None``; remembered per (dataset, seq), so a stream of small appends reads it once."""
        key = (ds.dataset_id, ds.snapshot_id)
        found = _COMMITS.get(key)
        if found is None:
            found = self.current_commit(ds)
            if found is None or found.seq != ds.snapshot_id:
                return None
            _COMMITS.put(key, found)
        return found

    @staticmethod
    def appended(ds: DatasetRecord, prior: PgCommit, seq: int, txn_id: uuid.UUID) -> PgCommit:
        """The commit an append ``txn_id`` (seq ``seq``) made on top of ``prior``, remembered as the
        dataset's latest: an append keeps the generation and the schema."""
        after = dataclasses.replace(prior, seq=seq, txn_id=txn_id)
        _COMMITS.put((ds.dataset_id, seq), after)
        return after

    def _existing(self, ds: DatasetRecord) -> PgCommit:
        state = self.current_commit(ds)
        if state is None:
            raise DatasetNotFoundError(ds.key, ds.workspace)
        return state

    def schema(self, ds: DatasetRecord) -> pa.Schema:
        return storage_schema(self._existing(ds).user_schema)

    # -- WRITE (storage only: the planner decides the rows) ------------------------------------
    def current(self, ds: DatasetRecord) -> PgVersion:
        return PgVersion(self, ds, self.current_commit(ds))

    def copy_rows(
        self,
        conn: psycopg.Connection[Any],
        batches: Iterable[pa.RecordBatch],
        codec: JsonCodec,
        ds: DatasetRecord,
        gen: int,
        txn: uuid.UUID,
        *,
        blocks: bool = False,
    ) -> int:
        """COPY the batches' rows; with ``blocks``, each batch's row blocks follow its rows in the
        same transaction (one COPY per batch, so the block INSERTs can run between them)."""
        n = 0
        for batch in batches:
            if batch.num_rows == 0:
                continue
            with conn.cursor().copy(q.PG_COPY_ROWS) as copy:
                copy.write(codec.copy_payload(batch, ds.dataset_id, gen, txn))
            if blocks and batch.num_rows >= block_cache.MIN_BLOCK_ROWS:
                for first, last, data in block_slices(batch):
                    conn.execute(q.PG_INSERT_BLOCK, (ds.dataset_id, gen, first, last, txn, last - first + 1, data))
            n += batch.num_rows
            failpoint("write.file_flushed")
        return n

    def move_to_undo(
        self, conn: psycopg.Connection[Any], ds: DatasetRecord, gen: int, txn: uuid.UUID, ids: pa.RecordBatchReader
    ) -> int:
        """Move the removed row versions of the current generation to the undo log."""
        conn.execute(q.PG_CREATE_GONE)
        with conn.cursor().copy(q.PG_COPY_GONE) as copy:
            for batch in ids:
                if batch.num_rows:
                    copy.write(("\n".join(batch.column(0).to_pylist()) + "\n").encode())
        cur = conn.execute(q.PG_MOVE_GONE_TO_UNDO, (ds.dataset_id, gen, txn))
        return cur.rowcount

    # -- recovery ---------------------------------------------------------------------------
    def find_committed(self, ds: DatasetRecord, txn_id: uuid.UUID) -> Outcome | None:
        with self.control.connection() as conn:
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
            conn.execute(q.PG_UNDO_DELETE_BLOCKS, (ds.dataset_id, txn_id))
            conn.execute(q.PG_UNDO_DELETE_WRITTEN, (ds.dataset_id, txn_id))
            conn.execute(q.PG_UNDO_RESTORE, (txn_id,))
            conn.execute(q.PG_UNDO_FORGET, (txn_id,))
            conn.execute(q.PG_DELETE_COMMIT, (txn_id,))

    def discard(self, ds: DatasetRecord, txn_id: uuid.UUID, location: str | None = None) -> Discarded:
        """Nothing to do: an unfinished pg write is an uncommitted Postgres transaction, which
        Postgres rolled back when the writer failed or its connection died."""
        return Discarded()

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
        full = storage_schema(state.user_schema)
        return self.scan_rows(ds, state, columns, arrow_filter(full, row_filter) if row_filter else None)

    def scan_rows(self, ds: DatasetRecord, state: PgCommit, columns: list[str] | None, expr: Any) -> pa.RecordBatchReader:
        full = storage_schema(state.user_schema)
        check_columns(columns, full)
        wanted = pa.schema([full.field(c) for c in (columns or full.names)])
        decode_to = full if expr is not None else wanted
        pool, gen, seq, use_blocks = self.control.pool, state.gen, state.seq, self.settings.pg_row_blocks

        def batches() -> Iterator[pa.RecordBatch]:
            codec = JsonCodec(state.user_schema)
            try:
                for batch in read_ranges(pool, ds.dataset_id, gen, codec.reader(decode_to, blocks=use_blocks), seq=seq):
                    if expr is not None:
                        for b in pa.Table.from_batches([batch]).filter(expr).select(wanted.names).to_batches():
                            yield conform(b, wanted)
                    else:
                        yield batch
            finally:
                codec.close()

        return pa.RecordBatchReader.from_batches(wanted, batches())

    def read(self, ds: DatasetRecord, *, columns: list[str] | None, row_filter: str | None, as_of: AsOf) -> pa.Table:
        """The current version; a commit between planning the read and its snapshot
        (``DatasetChangedError``) is answered by reading again, as a read begun a moment later would."""
        for attempt in range(_READ_ATTEMPTS):
            try:
                return self.scan(ds, columns=columns, row_filter=row_filter, as_of=as_of).read_all()
            except DatasetChangedError:
                if attempt + 1 == _READ_ATTEMPTS or as_of is not None:  # a named version cannot be read again
                    raise
        raise AssertionError("unreachable")

    def arrow_source(self, ds: DatasetRecord, partition: Any = None, snapshot_id: int | None = None) -> Any:
        """A re-scannable pyarrow dataset for DuckDB: the current version spilled once to an Arrow
        IPC file under ``<home>/tmp/pg_cache`` (bounded memory, column projection), reused until
        the dataset changes (a commit during the spill: spilled again, see ``read``)."""
        folder = self.settings.home / "tmp" / "pg_cache"
        folder.mkdir(parents=True, exist_ok=True)
        for attempt in range(_READ_ATTEMPTS):
            state = self._existing(ds)
            path = folder / f"{ds.dataset_id}-{state.seq}.arrow"
            try:
                if not path.exists():
                    self._spill(ds, state, folder, path)
                break
            except DatasetChangedError:
                if attempt + 1 == _READ_ATTEMPTS:
                    raise
        return pads.dataset(str(path), format="ipc")

    def _spill(self, ds: DatasetRecord, state: PgCommit, folder: Path, path: Path) -> None:
        for old in folder.glob(f"{ds.dataset_id}-*.arrow"):
            old.unlink(missing_ok=True)
        tmp = folder / f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
        reader = self.scan_rows(ds, state, None, None)
        try:
            with ipc.new_file(str(tmp), reader.schema) as out:
                for batch in reader:
                    out.write_batch(batch)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)

    def compact(self, ds: DatasetRecord) -> Maintenance:
        """Rebuild the row blocks (the read cache, ``blocks.py``) over the current rows no block
        holds: keyed writes drop the blocks they touch and write none, so an upserted dataset read
        at jsonb speed until its next replace, and small writes write none. Blocks smaller than
        ``MIN_BLOCK_ROWS`` (left by earlier versions, one per small append) are dropped first, so
        their rows are rebuilt into full blocks. There are no files or past versions to compact or
        expire. The caller (``maintain``) holds the writer lock, so no commit lands meanwhile; the
        blocks are encoded from the rows read in the same transaction that inserts them, which
        holds those rows (``PG_UNCOVERED_RUNS``), so they are exactly what a jsonb read returns."""
        state = self.current_commit(ds)
        if state is None or not self.settings.pg_row_blocks:
            return Maintenance(key=ds.key, expired_snapshots=0, deleted_files=0)
        written = 0
        codec = JsonCodec(state.user_schema)
        try:
            query = codec.reader(storage_schema(state.user_schema), blocks=False)
            # the raw pool: this sink names its own faults (``_translated``)
            with _translated(), self.control.pool.connection() as conn, conn.transaction():
                conn.execute("SET LOCAL client_encoding TO 'UTF8'")  # the reader parses raw bytes
                params = {"ds": ds.dataset_id, "gen": state.gen, "min_rows": block_cache.MIN_BLOCK_ROWS}
                conn.execute(q.PG_DROP_SMALL_BLOCKS, params)  # their rows join the runs rebuilt below
                for run in conn.execute(q.PG_UNCOVERED_RUNS, params).fetchall():
                    first, last = (run["first"], run["last"]) if isinstance(run, dict) else run
                    for lo in range(first, last + 1, block_cache.BLOCK_ROWS):
                        batch = fetch_rows(
                            conn, ds.dataset_id, state.gen, (lo, min(lo + block_cache.BLOCK_ROWS, last + 1)), query
                        )
                        for a, z, data in block_slices(batch) if batch is not None else ():
                            if z - a + 1 < block_cache.MIN_BLOCK_ROWS:  # a run's short end stays in jsonb
                                continue
                            conn.execute(q.PG_INSERT_BLOCK, (ds.dataset_id, state.gen, a, z, state.txn_id, z - a + 1, data))
                            written += 1
                failpoint("pg.blocks_rebuilt")  # the blocks inserted, their rows still held
        finally:
            codec.close()
        return Maintenance(key=ds.key, expired_snapshots=0, deleted_files=0, rebuilt_blocks=written)

    def drop(self, ds: DatasetRecord) -> None:
        with self.control.tx() as conn:
            conn.execute(q.PG_DROP_BLOCKS, (ds.dataset_id,))
            conn.execute(q.PG_DROP_ROWS, (ds.dataset_id,))
            conn.execute(q.PG_DROP_UNDO, (ds.dataset_id,))
            conn.execute(q.PG_DROP_COMMITS, (ds.dataset_id,))
        for old in (self.settings.home / "tmp" / "pg_cache").glob(f"{ds.dataset_id}-*.arrow"):
            old.unlink(missing_ok=True)


__all__ = ["CREATED_AT", "PgSink", "storage_schema"]
