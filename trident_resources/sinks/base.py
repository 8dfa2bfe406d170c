"""The contract every sink fulfils, so the facade (and every reader above it) never branches on
where a dataset lives. Implementations: ``lakehouse.IcebergSink`` and ``pg_sink.PgSink``."""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from collections.abc import Callable
from typing import Any, ClassVar

import pyarrow as pa

from ..control_plane import DatasetRecord, Outcome

WRITE_MODES = ("replace", "append", "upsert", "append_new", "delete")


@dataclass(frozen=True)
class WriteRequest:
    dataset: DatasetRecord
    mode: str
    keys: tuple[str, ...]
    row_filter: str | None
    txn_id: uuid.UUID
    tau: datetime  # the transaction's instant: ledger committed_at and every new row's __created_at
    reader: pa.RecordBatchReader | None  # None for a delete by row_filter
    spill_dir: Path
    note_location: Callable[[str], None]  # records where files go, for cleanup after a crash
    # Migration copies (canary): the reader already carries the identity columns, which the sink
    # keeps as they are instead of stamping new ones. Only the facade's migrate() sets this.
    preserve_identity: bool = False


@dataclass(frozen=True)
class Maintenance:
    key: str
    expired_snapshots: int
    deleted_files: int


AsOf = int | str | uuid.UUID | datetime | None


class Sink(ABC):
    name: ClassVar[str]

    @abstractmethod
    def write(self, req: WriteRequest) -> Outcome:
        """WRITE: make the request's rows durable as ONE atomic change, carrying the txn id."""

    @abstractmethod
    def undo(self, ds: DatasetRecord, txn_id: uuid.UUID) -> None:
        """Revert a change ``write`` made when the COMMIT step could not record it."""

    @abstractmethod
    def discard(self, ds: DatasetRecord, txn_id: uuid.UUID, location: str | None = None) -> None:
        """Remove anything an unfinished transaction left behind (files it never committed);
        ``location`` is where the ledger says it wrote, for a writer that died mid-way."""

    @abstractmethod
    def find_committed(self, ds: DatasetRecord, txn_id: uuid.UUID) -> Outcome | None:
        """The outcome of ``txn_id`` when its change is part of the dataset's current state."""

    @abstractmethod
    def scan(
        self, ds: DatasetRecord, *, columns: list[str] | None, row_filter: str | None, as_of: AsOf
    ) -> pa.RecordBatchReader:
        """Stream the dataset's rows (bounded memory)."""

    @abstractmethod
    def arrow_source(self, ds: DatasetRecord) -> Any:
        """Something DuckDB can scan repeatedly with projection pushdown (SQL over datasets)."""

    @abstractmethod
    def schema(self, ds: DatasetRecord) -> pa.Schema:
        """The dataset's current Arrow schema, identity columns first."""

    def maintain(self, ds: DatasetRecord, *, older_than: datetime, retain_last: int) -> Maintenance:
        """Expire old versions and delete the storage only they used (nothing to do by default)."""
        return Maintenance(key=ds.key, expired_snapshots=0, deleted_files=0)

    @abstractmethod
    def drop(self, ds: DatasetRecord) -> None:
        """Delete the dataset's rows and storage."""
