"""``ingest.stream``: a write session fed batch by batch over minutes, committed as ONE transaction.

The session runs the ordinary write (INTENT -> WRITE -> COMMIT) on a background thread whose
input is a bounded queue, so the sink streams the rows to storage as they arrive (bounded memory,
``max_queued`` batches of back-pressure) and nothing is visible until the one commit at the end.
Leaving the ``with`` block normally commits; an exception or ``abort()`` aborts the transaction
(ledger ``aborted``, files removed); a killed process leaves an ``open`` ledger row that
``Trident.reconcile()`` aborts, deleting the files it wrote.
"""

from __future__ import annotations

import logging
import queue
import threading
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..core.errors import InvalidWriteError, StreamClosedError, TridentError
from ..core.identity import refuse_reserved
from ..core.partitions import PartitionFilter
from ..core.results import WriteResult
from ..core.schemas import conform
from ..engine import Engine
from ..planning.inputs import to_reader
from . import write

if TYPE_CHECKING:
    from ..core.write_modes import WriteMode

log = logging.getLogger("trident")

_END = object()
_ABORT = object()
_POLL_SECONDS = 0.5


@dataclass(frozen=True)
class WriteOptions:
    """What a session's one write records besides its rows: ``Trident.write``'s keywords of the
    same names, handed to it when the session commits."""

    source_refs: Iterable[str] | None = None
    metadata: Mapping[str, Any] | None = None
    txn_id: uuid.UUID | str | None = None
    provenance: Mapping[str, Any] | None = None
    watermarks: Mapping[str, tuple[datetime, uuid.UUID | None]] | None = None
    stage: bool = False
    partition: PartitionFilter | None = None


class StreamAborted(TridentError):
    """Raised inside the writer thread to abort the session's transaction (never escapes)."""


class IngestStream:
    """Use through ``Trident.ingest_stream``. ``rows``/``batches`` count what was appended."""

    def __init__(
        self,
        engine: Engine,
        key: str,
        *,
        mode: WriteMode,
        keys: tuple[str, ...],
        writer: str,
        schema: pa.Schema | None,
        max_queued: int,
        options: WriteOptions,
    ) -> None:
        self._engine = engine
        self.key = key
        self._mode = mode
        self._keys = keys
        self._writer = writer
        self._options = options
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max_queued)
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self.schema: pa.Schema | None = None
        self.result: WriteResult | None = None
        self.rows = 0
        self.batches = 0
        self.state = "open"  # open -> committed | aborted | failed
        if schema is not None:
            self._start(schema)

    # -- context manager --------------------------------------------------------------------
    def __enter__(self) -> IngestStream:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if self.state != "open":
            return
        if t is None:
            self.commit()
        else:
            self.abort(f"the ingest session raised {t.__name__}: {e}")

    def __repr__(self) -> str:
        return f"IngestStream({self.key!r}, state={self.state}, rows={self.rows}, batches={self.batches})"

    # -- producer side ----------------------------------------------------------------------
    def append(self, data: Any) -> None:
        """Queue rows (Arrow table/batch/reader, pandas/polars DataFrame); blocks while the writer
        is ``max_queued`` batches behind. The first batch fixes the stream's schema; later ones are
        cast to it (missing columns become null, extra columns are refused)."""
        if self.state != "open":
            raise StreamClosedError(f"the ingest stream of {self.key!r} is {self.state}; open a new one")
        self._raise_if_failed()
        reader = to_reader(data)
        if self.schema is None:
            # The input's schema, not its first batch's: an empty table has no batch at all, and
            # write() of it commits a version, so the session must too.
            self._start(reader.schema)
        for batch in reader:
            assert self.schema is not None
            if not batch.schema.equals(self.schema):
                extra = [n for n in batch.schema.names if n not in self.schema.names]
                if extra:
                    raise InvalidWriteError(
                        f"columns {extra} are not in this stream's schema {self.schema.names} (fixed by the "
                        "first batch, or schema=); write them in a separate transaction or declare them up front"
                    )
                batch = conform(batch, self.schema)
            self._put(batch)
            self.rows += batch.num_rows
            self.batches += 1

    def commit(self) -> WriteResult | None:
        """Finish the input and wait for the ONE commit. ``None`` when nothing was ever appended
        (and no schema declared): no transaction was opened."""
        if self.state != "open":
            raise StreamClosedError(f"the ingest stream of {self.key!r} is already {self.state}")
        if self._thread is None:
            self.state = "committed"
            return None
        self._put(_END)
        self._thread.join()
        if self._error is not None:
            self.state = "failed"
            raise self._error
        self.state = "committed"
        return self.result

    def abort(self, reason: str = "aborted by the caller") -> None:
        """Abort the transaction: nothing becomes visible and the files written so far are removed."""
        if self.state != "open":
            return
        self.state = "aborted"
        self._reason = reason
        if self._thread is None:
            return
        self._put(_ABORT, abort=True)
        self._thread.join()
        if self._error is not None and not isinstance(self._error, StreamAborted):
            log.warning("ingest stream of %s: the writer had already failed: %s", self.key, self._error)

    # -- internals --------------------------------------------------------------------------
    def _start(self, schema: pa.Schema) -> None:
        refuse_reserved(schema)
        self.schema = schema
        reader = pa.RecordBatchReader.from_batches(schema, self._drain())
        self._thread = threading.Thread(target=self._run, args=(reader,), name=f"trident-stream-{self.key}", daemon=True)
        self._thread.start()

    def _drain(self) -> Any:
        while True:
            item = self._queue.get()
            if item is _END:
                return
            if item is _ABORT:
                raise StreamAborted(getattr(self, "_reason", "aborted"))
            yield item

    def _run(self, reader: pa.RecordBatchReader) -> None:
        try:
            o = self._options
            self.result = write.write(
                self._engine,
                self.key,
                reader,
                mode=self._mode,
                keys=self._keys or None,
                writer=self._writer,
                source_refs=o.source_refs,
                metadata=o.metadata,
                txn_id=o.txn_id,
                provenance=o.provenance,
                watermarks=o.watermarks,
                stage=o.stage,
                partition=o.partition,
                allow_inline=False,  # one commit per session already; its transaction is open from the first batch
            )
        except BaseException as exc:  # handed to the producer thread
            self._error = exc

    def _put(self, item: Any, *, abort: bool = False) -> None:
        assert self._thread is not None
        while True:
            if not self._thread.is_alive():
                if abort or item is _END:
                    return
                self._raise_if_failed()
                raise StreamClosedError(f"the ingest stream writer of {self.key!r} has stopped")
            try:
                self._queue.put(item, timeout=_POLL_SECONDS)
                return
            except queue.Full:
                continue

    def _raise_if_failed(self) -> None:
        if self._error is not None and not isinstance(self._error, StreamAborted):
            self.state = "failed"
            raise self._error
