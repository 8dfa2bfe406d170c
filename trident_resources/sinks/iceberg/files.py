"""Streaming Parquet data files for one transaction.

pyiceberg's own ``append`` of a RecordBatchReader hands every file task to a thread pool at once,
so memory grows with the input. Here a single writer buffers one row group, rolls to a new file
at a target size, and returns the ``DataFile`` records for ONE commit at the end.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import IO, Any, cast

import pyarrow as pa
import pyarrow.parquet as pq
import pyarrow.fs as pafs
from pyiceberg.io import FileIO
from pyiceberg.io.fileformat import DataFileStatistics
from pyiceberg.io.pyarrow import (
    PyArrowFileIO,
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
    schema_to_pyarrow,
)
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.schema import Schema
from pyiceberg.typedef import Record

from ...failpoints import failpoint
from ...identity import ROW_ID, ROW_INDEX
from ...pyiceberg_compat import parquet_writer_kwargs


class _ParquetFile:
    """One Parquet data file, written with pyiceberg's writer settings and statistics, except that
    dictionary encoding is off for the identity columns: ``__row_id`` and ``__row_index`` never
    repeat, so trying a dictionary for them is pure cost (about a fifth of the encoding time)."""

    def __init__(self, io: FileIO, path: str, schema: Schema, arrow_schema: pa.Schema, properties: dict[str, str]) -> None:
        self._output = io.new_output(path)
        self._schema = schema
        self._properties = properties
        self._stream = self._output.create(overwrite=True)
        try:
            self._writer = pq.ParquetWriter(
                cast(IO[Any], self._stream), schema=arrow_schema, store_decimal_as_integer=True,
                use_dictionary=[n for n in arrow_schema.names if n not in _NEVER_REPEATING],
                **parquet_writer_kwargs(properties),
            )
        except Exception:
            self._stream.close()
            raise

    def write(self, table: pa.Table) -> None:
        self._writer.write_table(table, row_group_size=max(table.num_rows, 1))

    def close(self) -> DataFileStatistics:
        with self._stream:
            self._writer.close()
        return data_file_statistics_from_parquet_metadata(
            parquet_metadata=self._writer.writer.metadata,
            stats_columns=compute_statistics_plan(self._schema, self._properties),
            parquet_column_mapping=parquet_path_to_id_mapping(self._schema),
        )


_NEVER_REPEATING = frozenset({ROW_ID, ROW_INDEX})


class _Lane:
    """One open Parquet file and the write in flight to it (writes to one file are sequential)."""

    def __init__(self, path: str, writer: _ParquetFile) -> None:
        self.path = path
        self.writer = writer
        self.bytes = 0
        self.pending: Future[None] | None = None

    def wait(self) -> None:
        if self.pending is not None:
            pending, self.pending = self.pending, None
            pending.result()


class DataFileWriter:
    """Writes batches (already in the table's Arrow schema) into rolling Parquet files.

    Parquet encoding is the expensive part of a write and pyarrow releases the GIL while doing it,
    so ``parallelism`` files are written at once, one row group each in flight. Memory stays
    bounded: at most ``parallelism`` row groups being encoded plus the one being buffered.
    """

    def __init__(
        self,
        io: FileIO,
        location: str,
        txn_id: uuid.UUID,
        schema: Schema,
        properties: dict[str, str],
        *,
        spec_id: int,
        target_file_bytes: int,
        row_group_bytes: int,
        parallelism: int = 2,
    ) -> None:
        self._io = io
        self._dir = f"{location.rstrip('/')}/data"
        self._txn_id = txn_id
        self._schema = schema
        self.arrow_schema = schema_to_pyarrow(schema, include_field_ids=True)
        self._properties = properties
        self._spec_id = spec_id
        self._target_file_bytes = target_file_bytes
        self._row_group_bytes = row_group_bytes
        self._buffer: list[pa.RecordBatch] = []
        self._buffered_bytes = 0
        self._lanes: list[_Lane | None] = [None] * max(1, parallelism)
        self._turn = 0
        self._pool = ThreadPoolExecutor(max_workers=len(self._lanes), thread_name_prefix="trident-parquet")
        self._seq = 0
        self.paths: list[str] = []
        self.data_files: list[DataFile] = []
        self.rows = 0

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        self._buffer.append(batch)
        self._buffered_bytes += batch.nbytes
        self.rows += batch.num_rows
        if self._buffered_bytes >= self._row_group_bytes:
            self._flush()

    def write_all(self, batches: Iterable[pa.RecordBatch]) -> None:
        for batch in batches:
            self.write(batch)

    def _open_lane(self) -> _Lane:
        path = f"{self._dir}/{self._txn_id}-{self._seq:05d}.parquet"
        self._seq += 1
        self.paths.append(path)
        return _Lane(path, _ParquetFile(self._io, path, self._schema, self.arrow_schema, self._properties))

    def _flush(self) -> None:
        if not self._buffer:
            return
        table = pa.Table.from_batches(self._buffer, schema=self.arrow_schema)
        self._buffer, self._buffered_bytes = [], 0
        i = self._turn
        self._turn = (self._turn + 1) % len(self._lanes)
        lane = self._lanes[i]
        if lane is not None:
            lane.wait()  # bounds what is in flight, and keeps each file's row groups in order
            if lane.bytes >= self._target_file_bytes:
                self._close_lane(lane)
                lane = None
        if lane is None:
            lane = self._lanes[i] = self._open_lane()
        lane.bytes += table.nbytes
        lane.pending = self._pool.submit(lane.writer.write, table)
        del table
        failpoint("write.file_flushed")

    def _close_lane(self, lane: _Lane) -> None:
        lane.wait()
        stats = lane.writer.close()
        self.data_files.append(
            DataFile.from_args(
                content=DataFileContent.DATA,
                file_path=lane.path,
                file_format=FileFormat.PARQUET,
                partition=Record(),
                file_size_in_bytes=len(self._io.new_input(lane.path)),
                sort_order_id=None,
                spec_id=self._spec_id,
                equality_ids=None,
                key_metadata=None,
                **stats.to_serialized_dict(),
            )
        )

    def close(self) -> list[DataFile]:
        self._flush()
        for i, lane in enumerate(self._lanes):
            if lane is not None:
                self._close_lane(lane)
                self._lanes[i] = None
        self._pool.shutdown()
        return self.data_files

    def discard(self) -> None:
        """Delete every file this writer created (a failed or aborted transaction)."""
        for lane in self._lanes:
            if lane is None:
                continue
            try:
                lane.wait()
                lane.writer.close()
            except Exception:  # the file is being deleted anyway
                pass
        self._lanes = [None] * len(self._lanes)
        self._pool.shutdown(wait=True)
        delete_paths(self._io, self.paths)


def delete_paths(io: FileIO, paths: Iterable[str]) -> None:
    for path in paths:
        try:
            io.delete(path)
        except FileNotFoundError:
            pass


def filesystem_for(io: FileIO, location: str) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem behind a location, and the path in it (credentials come from the io)."""
    if not isinstance(io, PyArrowFileIO):
        io = PyArrowFileIO(io.properties)
    scheme, netloc, path = PyArrowFileIO.parse_location(location)
    return io.fs_by_scheme(scheme, netloc), path


def list_txn_files(io: FileIO, location: str, txn_id: uuid.UUID) -> list[str]:
    """Data files a transaction wrote under the table location (named ``<txn_id>-NNNNN.parquet``)."""
    prefix = f"{txn_id}-"
    return _list(io, f"{location.rstrip('/')}/data", lambda name: name.startswith(prefix))


def list_txn_metadata(io: FileIO, location: str, txn_id: uuid.UUID) -> list[str]:
    """The manifests and manifest list a transaction's snapshot commit wrote (named after the txn
    id: ``<txn_id>-m<n>.avro``, ``snap-<id>-<attempt>-<txn_id>.avro``), for a commit that never
    landed: they are garbage only when no snapshot of the table is the transaction's."""
    manifest, manifest_list = f"{txn_id}-m", f"-{txn_id}.avro"
    return _list(
        io, f"{location.rstrip('/')}/metadata",
        lambda name: name.startswith(manifest) or (name.startswith("snap-") and name.endswith(manifest_list)),
    )


def _list(io: FileIO, folder: str, wanted: Callable[[str], bool]) -> list[str]:
    fs, path = filesystem_for(io, folder)
    infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    scheme = folder.split("://", 1)[0] if "://" in folder else "file"
    return [f"{scheme}://{info.path}" for info in infos if info.type == pafs.FileType.File and wanted(info.base_name)]
