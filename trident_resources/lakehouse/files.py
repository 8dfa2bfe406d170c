"""Streaming Parquet data files for one transaction.

pyiceberg's own ``append`` of a RecordBatchReader hands every file task to a thread pool at once,
so memory grows with the input. Here a single writer buffers one row group, rolls to a new file
at a target size, and returns the ``DataFile`` records for ONE commit at the end.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

import pyarrow as pa
import pyarrow.fs as pafs
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import ParquetFormatWriter, PyArrowFileIO, schema_to_pyarrow
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.schema import Schema
from pyiceberg.typedef import Record

from ..failpoints import failpoint


class DataFileWriter:
    """Writes batches (already in the table's Arrow schema) into rolling Parquet files."""

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
        self._writer: ParquetFormatWriter | None = None
        self._current_path: str | None = None
        self._current_bytes = 0
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

    def _flush(self) -> None:
        if not self._buffer:
            return
        if self._writer is None:
            self._current_path = f"{self._dir}/{self._txn_id}-{self._seq:05d}.parquet"
            self._seq += 1
            self.paths.append(self._current_path)
            self._writer = ParquetFormatWriter(self._io.new_output(self._current_path), self._schema, self._properties)
        table = pa.Table.from_batches(self._buffer, schema=self.arrow_schema)
        self._buffer, self._buffered_bytes = [], 0
        self._writer.write(table)
        self._current_bytes += table.nbytes
        del table
        failpoint("write.file_flushed")
        if self._current_bytes >= self._target_file_bytes:
            self._close_file()

    def _close_file(self) -> None:
        if self._writer is None:
            return
        stats = self._writer.close()
        path = self._current_path
        assert path is not None
        self.data_files.append(
            DataFile.from_args(
                content=DataFileContent.DATA,
                file_path=path,
                file_format=FileFormat.PARQUET,
                partition=Record(),
                file_size_in_bytes=len(self._io.new_input(path)),
                sort_order_id=None,
                spec_id=self._spec_id,
                equality_ids=None,
                key_metadata=None,
                **stats.to_serialized_dict(),
            )
        )
        self._writer, self._current_path, self._current_bytes = None, None, 0

    def close(self) -> list[DataFile]:
        self._flush()
        self._close_file()
        return self.data_files

    def discard(self) -> None:
        """Delete every file this writer created (a failed or aborted transaction)."""
        if self._writer is not None:
            try:
                self._writer.close()
            except Exception:  # the file is being deleted anyway
                pass
            self._writer = None
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
    data_dir = f"{location.rstrip('/')}/data"
    fs, path = filesystem_for(io, data_dir)
    infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    prefix = f"{txn_id}-"
    scheme = data_dir.split("://", 1)[0] if "://" in data_dir else "file"
    found = []
    for info in infos:
        if info.type == pafs.FileType.File and info.base_name.startswith(prefix):
            found.append(f"{scheme}://{info.path}" if scheme != "file" else f"file://{info.path}")
    return found
