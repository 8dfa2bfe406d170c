"""Canary migration: move one dataset from its sink to another (``pg`` -> ``iceberg_native``).

One ledger transaction (writer ``canary``) under the dataset's writer lock:
1. COPY the rows, identity preserved (``__row_id``, ``__row_index``, ``__created_at`` unchanged),
   computing an order-independent checksum of the source rows as they stream past;
2. VERIFY: read the copy back from the target sink and checksum it the same way;
3. FLIP only on parity (same row count as the ledger, same checksum, same schema): the dataset's
   sink becomes the target, the ledger row commits, the old copy is deleted and a pin on the old
   sink follows the dataset. Otherwise REVERT: the copy is undone and the ledger row aborted, so
   the dataset stays exactly where and what it was.

The checksum is the sum (mod 2^128) and xor of DuckDB's ``hash()`` of each row's values in
column-name order: equal multisets of rows give equal checksums whatever the order of the rows.
Used only through ``Trident.migrate`` (the client is the one door to rows).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import duckdb
import pyarrow as pa

from ..control.router import SINK_NAMES, RouteDecision, clamp, writer_spec
from ..core.errors import MigrationError
from ..core.failpoints import armed_action, failpoint
from ..core.identity import public_schema
from ..core.keys import quote
from ..core.schemas import conform
from ..engine import Engine
from ..transaction.driver import CANARY_WRITER, Intent

Progress = Callable[[str, int, int], None]  # (phase, rows done, rows total)


class RowChecksum:
    """Order-independent checksum of a stream of rows (all columns, identity included)."""

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = pa.schema(sorted(schema, key=lambda f: f.name))
        self.rows = 0
        self.total = 0
        self.xor = 0
        self._con = duckdb.connect(config={"threads": 1})
        self._con.execute("SET TimeZone = 'UTC'")
        cols = ", ".join(quote(f.name) for f in self.schema)
        self._sql = f"SELECT count(*), coalesce(sum(hash({cols})::HUGEINT), 0), coalesce(bit_xor(hash({cols})), 0) FROM chunk"

    def update(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        chunk = conform(batch, self.schema)  # noqa: F841 - DuckDB replacement scan
        n, total, xor = self._con.execute(self._sql).fetchall()[0]
        self.rows += n
        self.total = (self.total + int(total)) % (1 << 128)
        self.xor ^= int(xor)

    def close(self) -> None:
        self._con.close()

    @property
    def digest(self) -> str:
        return f"{self.rows}:{self.total:032x}:{self.xor:016x}"


@dataclass(frozen=True)
class MigrationReport:
    key: str
    from_sink: str
    to_sink: str
    txn_id: uuid.UUID
    ledger_rows: int
    source_rows: int
    target_rows: int
    source_checksum: str
    target_checksum: str
    schema_equal: bool
    parity: bool
    flipped: bool
    copy_seconds: float
    verify_seconds: float
    message: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _tee(reader: pa.RecordBatchReader, check: RowChecksum, total: int, progress: Progress | None) -> pa.RecordBatchReader:
    def batches() -> Iterator[pa.RecordBatch]:
        done = 0
        corrupt = armed_action("canary.drop_row") is not None  # test fault: lose one row in the copy
        for batch in reader:
            check.update(batch)
            done += batch.num_rows
            if corrupt and batch.num_rows:
                batch, corrupt = batch.slice(1), False
            if progress:
                progress("copy", done, total)
            yield batch

    return pa.RecordBatchReader.from_batches(reader.schema, batches())


def _checksum(reader: pa.RecordBatchReader, schema: pa.Schema, total: int, progress: Progress | None) -> RowChecksum:
    check = RowChecksum(schema)
    try:
        for batch in reader:
            check.update(batch)
            if progress:
                progress("verify", check.rows, total)
    except BaseException:
        check.close()
        raise
    check.close()
    return check


def move_refusal(engine: Engine, dataset_id: uuid.UUID, key: str, to_sink: str) -> str | None:
    """Why ``key`` may not move to ``to_sink``, or None. A dataset may only go where every writer
    that writes it may go: otherwise the router would clamp its own writer back and refuse it
    forever after (the split rule)."""
    writers = {e.writer for e in engine.control.history(dataset_id, None) if e.status == "committed"} - {CANARY_WRITER}
    for writer in sorted(writers):
        spec = writer_spec(writer)
        if clamp(to_sink, spec.max_mode)[1]:
            return (
                f"dataset {key!r} is written by {writer!r}, whose sinks end at {spec.max_mode!r}: moved to "
                f"{to_sink!r} it could never be written by {writer!r} again"
            )
    return None


def _refuse_a_move_its_writers_cannot_follow(engine: Engine, dataset_id: uuid.UUID, key: str, to_sink: str) -> None:
    reason = move_refusal(engine, dataset_id, key, to_sink)
    if reason is not None:
        raise MigrationError(f"{reason}. Not moved")


def migrate(engine: Engine, key: str, to_sink: str, progress: Progress | None = None) -> MigrationReport:
    if to_sink not in SINK_NAMES:
        raise MigrationError(f"unknown sink {to_sink!r}; sinks are {list(SINK_NAMES)}")
    ds = engine.dataset_record(key)
    if ds.sink == to_sink:
        raise MigrationError(f"dataset {key!r} already lives in {to_sink!r}; nothing to migrate")
    _refuse_a_move_its_writers_cannot_follow(engine, ds.dataset_id, key, to_sink)
    driver = engine.driver
    with driver.locked(ds) as ds:
        source, target = driver.sink(ds.sink), driver.sink(to_sink)
        from_sink = ds.sink
        source_schema = source.schema(ds)
        target.drop(ds)  # leftovers of an earlier reverted canary: the dataset does not live there
        intent = Intent(
            txn_id=uuid.uuid4(),
            mode="replace",
            writer=CANARY_WRITER,
            sink=to_sink,
            route=RouteDecision(sink=to_sink, requested=to_sink, clamped=False, reason="canary"),
            metadata={"migrated_from": from_sink, "rows": ds.row_count},
        )
        txn = driver.open(ds, intent)
        assert txn is not None  # a fresh txn id
        src_sum = RowChecksum(source_schema)
        t0 = time.perf_counter()
        try:
            reader = source.scan(ds, columns=None, row_filter=None, as_of=None)
            outcome = txn.write(_tee(reader, src_sum, ds.row_count, progress), preserve_identity=True)
        finally:
            src_sum.close()
        copy_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        try:
            target_schema = target.schema(ds)
            dst_sum = _checksum(target.scan(ds, columns=None, row_filter=None, as_of=None), source_schema, ds.row_count, progress)
        except BaseException as exc:
            txn.fail(exc)
            raise
        verify_s = time.perf_counter() - t1
        failpoint("canary.verify")
        # compared as readers see them: the pg sink keeps ids as text, a new Iceberg table stores
        # 16-byte uuids (the checksum compares both as text: ``conform`` converts the copy's ids)
        schema_equal = [(f.name, str(f.type)) for f in public_schema(source_schema)] == [
            (f.name, str(f.type)) for f in public_schema(target_schema)
        ]
        parity = schema_equal and src_sum.digest == dst_sum.digest and src_sum.rows == ds.row_count
        if parity:
            txn.commit(outcome, flip_to=to_sink)
            source.drop(ds)
            pins = engine.router.pins()
            note = ""
            if pins.get(key) == from_sink:
                engine.router.set_pin(key, to_sink)
                note = f"; its pin now points to {to_sink}"
            message = f"parity: {src_sum.rows} rows, checksum {src_sum.digest}; flipped {from_sink} -> {to_sink}{note}"
        else:
            why = []
            if not schema_equal:
                why.append("schemas differ")
            if src_sum.rows != ds.row_count:
                why.append(f"source read {src_sum.rows} rows but the ledger says {ds.row_count}")
            if src_sum.digest != dst_sum.digest:
                why.append(f"checksums differ (source {src_sum.digest}, copy {dst_sum.digest})")
            message = "no parity: " + "; ".join(why) + f". Reverted: {key!r} stays in {from_sink}, unchanged"
            txn.fail(MigrationError(message))
        return MigrationReport(
            key=key,
            from_sink=from_sink,
            to_sink=to_sink,
            txn_id=txn.txn_id,
            ledger_rows=ds.row_count,
            source_rows=src_sum.rows,
            target_rows=dst_sum.rows,
            source_checksum=src_sum.digest,
            target_checksum=dst_sum.digest,
            schema_equal=schema_equal,
            parity=parity,
            flipped=parity,
            copy_seconds=copy_s,
            verify_seconds=verify_s,
            message=message,
        )
