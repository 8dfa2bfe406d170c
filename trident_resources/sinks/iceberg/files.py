"""Streaming Parquet data files for one transaction.

pyiceberg's own ``append`` of a RecordBatchReader hands every file task to a thread pool at once,
so memory grows with the input. Here a single writer buffers one row group, rolls to a new file
at a target size, and returns the ``DataFile`` records for ONE commit at the end.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from abc import ABC, abstractmethod
from collections import OrderedDict, deque
from collections.abc import Callable, Collection, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import IO, Any, cast

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyiceberg.io import FileIO
from pyiceberg.io.fsspec import FsspecFileIO
from pyiceberg.io.pyarrow import PyArrowFileIO, schema_to_pyarrow
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.schema import Schema
from pyiceberg.typedef import Record

from ...core.errors import StorageCredentialsError
from ...core.failpoints import failpoint
from ...core.identity import CREATED_AT, ROW_ID, ROW_INDEX
from ...core.pyiceberg_compat import parquet_writer_kwargs
from .encoding import DELTA, EncodingChoice
from .partition_spec import Partitioner
from .stats import FileStats


def file_schema(table_schema: pa.Schema, keep: Collection[str] = ()) -> pa.Schema:
    """The Arrow schema a write's batches are encoded from: the table's, its text columns as
    ``string_view``. Parquet stores text one way (BYTE_ARRAY, UTF8) whatever the Arrow type it came
    from, and the engines Trident's nodes run (DuckDB, Polars, tpchgen-cli's files) produce views:
    casting them to ``large_string`` first copied every string (0.7 s of the example pipeline's
    6.7 s at SF1), while a ``large_string`` input becomes views without copying its bytes. The
    files keep no Arrow schema of their own (``store_schema=False``): readers take a column's
    type from the table's schema, which still says ``large_string``. ``__row_id`` keeps its type
    (the identity code mints it in the table's own type), and so do the columns in ``keep``: a
    partitioned table's partition columns, which the partition checks and the split by partition
    compute on (``is_in`` and the hash kernels take no views)."""
    return pa.schema(
        [
            f.with_type(pa.string_view())
            if f.name != ROW_ID and f.name not in keep and (pa.types.is_large_string(f.type) or pa.types.is_string(f.type))
            else f
            for f in table_schema
        ],
        metadata=table_schema.metadata,
    )


class _ParquetFile:
    """One Parquet data file, written with pyiceberg's writer settings and statistics, except for
    the encodings: only the columns where it makes the data smaller get a dictionary, integers
    without one are delta-encoded (``encoding.EncodingChoice``, decided from the first row group
    the transaction writes). The Parquet writer opens with the first row group, so that choice
    can be made from it."""

    def __init__(
        self, io: FileIO, path: str, arrow_schema: pa.Schema, writer_kwargs: dict[str, Any], encodings: EncodingChoice
    ) -> None:
        self._output = io.new_output(path)
        self._arrow_schema = arrow_schema
        self._writer_kwargs = writer_kwargs
        self._encodings = encodings
        self._stream = self._output.create(overwrite=True)  # buffered by pyiceberg (write.buffer-size)
        self._writer: pq.ParquetWriter | None = None

    def _open(self, first: pa.Table) -> pq.ParquetWriter:
        if self._writer is None:
            try:
                dictionary, encodings = self._encodings.choose(first)
                self._writer = pq.ParquetWriter(
                    cast(IO[Any], self._stream),
                    schema=self._arrow_schema,
                    store_schema=False,  # (see ``file_schema``)
                    store_decimal_as_integer=True,
                    use_dictionary=dictionary,
                    column_encoding=encodings,
                    **self._writer_kwargs,
                )
            except Exception:
                self._stream.close()
                raise
        return self._writer

    def write(self, table: pa.Table) -> None:
        self._open(table).write_table(table, row_group_size=max(table.num_rows, 1))

    def close(self, stats: FileStats) -> tuple[dict[str, Any], int]:
        """Finish the file: its statistics (from the footer just written, no read back) and size."""
        with self._stream:
            # an empty table only for a file never written to (building one costs ~0.2 ms with
            # the GIL held, per file: a backfill closes thousands)
            writer = self._writer or self._open(self._arrow_schema.empty_table())
            writer.close()
            size = self._stream.tell()
        return stats.of(writer.writer.metadata), size

    def abort(self) -> None:
        with self._stream:
            if self._writer is not None:
                self._writer.close()


_NEVER_REPEATING = frozenset({ROW_ID, ROW_INDEX})  # unique by construction: no dictionary, no trial
# One value per transaction that wrote the rows: a dictionary without a trial (a constant column is
# a few bytes either way, so a trial on a small head calls it a tie and may pick plain; across a
# compacted file's or a merge's rows, a dictionary of a few timestamps is what keeps it small)
_FEW_VALUES = frozenset({CREATED_AT})
# Encodings decided by what the identity columns hold, never tried. ``__row_index`` counts up by
# one: DELTA_BINARY_PACKED stores 1M of them in ~6 KB instead of ~1 MB, ~4x faster, and every
# mainstream reader decodes it on an integer column. ``__row_id`` (16 bytes in a uuid table, a
# 36-character string in one created before) is PLAIN: DELTA_BYTE_ARRAY would store it smaller
# (a block of ids shares its head), but polars' native reader refuses it on FIXED_LEN_BYTE_ARRAY,
# DuckDB 1.4 reads it only on strings and blobs and Velox not at all, so every Trident table would be
# unreadable there; BYTE_STREAM_SPLIT on FIXED_LEN_BYTE_ARRAY is as new to readers (DuckDB reads
# it only on numbers). ``bench/encoding_bench.py`` measures what PLAIN costs. Compaction writes
# through this same writer, so it rewrites older files in these encodings too.
_IDENTITY_ENCODING = {ROW_ID: "PLAIN", ROW_INDEX: DELTA}

# The fewest rows a write's last row group is cut to so that its lanes encode it together: a row
# group of fewer rows costs more in its own metadata and per-column overhead than a lane saves
# (the dictionary trial reads this many, ``encoding.TRIAL_MAX_ROWS``)
_MIN_PIECE_ROWS = 16_384
_WHOLE_FILES = 8  # small whole files written by one pool task
_DELETE_THREADS = 8  # deletions in flight at once (``delete_paths``)

log = logging.getLogger("trident")


class _Lane:
    """One Parquet data file of the write and the task in flight to it. A file's tasks run in
    order (the next one is submitted after, or waits for, the previous one); the file itself is
    opened by its first write, on the pool, so that opening thousands of small files (a
    backfill's partitions) does not hold up the thread feeding the writer."""

    def __init__(self, path: str, opener: Callable[[str], _ParquetFile]) -> None:
        self.path = path
        self._opener = opener
        self.writer: _ParquetFile | None = None
        self.bytes = 0
        self.pending: Future[None] | None = None

    def write(self, table: pa.Table) -> None:
        if self.writer is None:
            self.writer = self._opener(self.path)
        self.writer.write(table)

    def wait(self) -> None:
        if self.pending is not None:
            pending, self.pending = self.pending, None
            pending.result()

    def abort(self) -> None:
        if self.writer is not None:
            self.writer.abort()


class _TxnFileWriter(ABC):
    """What both data-file writers share: a transaction's files under ``<location>/data``, named
    ``<txn_id>-NNNNN.parquet`` (so a crashed writer's files can be found by txn id), written with
    pyiceberg's settings on a small thread pool, each closed into a ``DataFile`` record for ONE
    commit, and deleted together when the transaction is discarded."""

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
        parallelism: int,
    ) -> None:
        self._io = io
        self._dir = f"{location.rstrip('/')}/data"
        self._txn_id = txn_id
        self._schema = schema
        self.table_schema = schema_to_pyarrow(schema, include_field_ids=True)  # what the table holds
        self.arrow_schema = file_schema(self.table_schema)  # what the batches are written in
        self._properties = properties
        self._spec_id = spec_id
        self._target_file_bytes = target_file_bytes
        self._row_group_bytes = row_group_bytes
        self._stats = FileStats(schema, properties)  # worked out once for all its files
        self._writer_kwargs = parquet_writer_kwargs(properties)  # the same for every file: derived once
        self._encodings = EncodingChoice(_NEVER_REPEATING, self._writer_kwargs, _FEW_VALUES, _IDENTITY_ENCODING)
        self._pool = ThreadPoolExecutor(max_workers=max(1, parallelism), thread_name_prefix="trident-parquet")
        self._seq = 0
        self.paths: list[str] = []
        self.data_files: list[DataFile] = []
        self.rows = 0

    @abstractmethod
    def write(self, batch: pa.RecordBatch, *, clustered: bool = False) -> None:
        """Buffer ``batch`` (already in ``arrow_schema``) into this transaction's files.
        ``clustered``: the batches come grouped by partition (``clustering.py``), so a partition
        whose rows stop is complete."""

    def write_all(self, batches: Iterable[pa.RecordBatch], *, clustered: bool = False) -> None:
        for batch in batches:
            self.write(batch, clustered=clustered)

    def _new_lane(self) -> _Lane:
        path = f"{self._dir}/{self._txn_id}-{self._seq:05d}.parquet"
        self._seq += 1
        self.paths.append(path)
        return _Lane(path, self._open_file)

    def _open_file(self, path: str) -> _ParquetFile:
        return _ParquetFile(self._io, path, self.arrow_schema, self._writer_kwargs, self._encodings)

    def _finish(self, lane: _Lane, partition: Record) -> None:
        """Close ``lane``'s file and record it as a DataFile of ``partition``."""
        lane.wait()
        self.data_files.append(self._data_file(lane, partition))

    def _data_file(self, lane: _Lane, partition: Record) -> DataFile:
        """Close ``lane``'s file (its last write done) into its ``DataFile`` record."""
        assert lane.writer is not None, "a lane is created to be written"
        stats, size = lane.writer.close(self._stats)
        data_file = DataFile.from_args(
            content=DataFileContent.DATA,
            file_path=lane.path,
            file_format=FileFormat.PARQUET,
            partition=partition,
            file_size_in_bytes=size,
            sort_order_id=None,
            spec_id=self._spec_id,
            equality_ids=None,
            key_metadata=None,
            **stats,
        )
        data_file.spec_id = self._spec_id  # ``from_args`` drops it (not a manifest field): manifests group by it
        return data_file

    def _delete_all(self, lanes: Iterable[_Lane]) -> None:
        """Discard: stop the open files and delete every file this writer created."""
        for lane in lanes:
            with contextlib.suppress(Exception):  # the file is being deleted anyway
                lane.wait()
                lane.abort()
        self._pool.shutdown(wait=True)
        delete_paths(self._io, self.paths)


class DataFileWriter(_TxnFileWriter):
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
        partition: Record | None = None,
        spread_last: bool = True,
    ) -> None:
        super().__init__(
            io,
            location,
            txn_id,
            schema,
            properties,
            spec_id=spec_id,
            target_file_bytes=target_file_bytes,
            row_group_bytes=row_group_bytes,
            parallelism=parallelism,
        )
        self._buffer: list[pa.RecordBatch] = []
        self._buffered_bytes = 0
        # every file's partition (of spec ``spec_id``): none for an unpartitioned spec; compaction
        # rewrites one partition's files at a time and keeps them in that partition
        self._partition = partition if partition is not None else Record()
        self._lanes: list[_Lane | None] = [None] * max(1, parallelism)
        self._turn = 0
        self._row_groups = 0  # handed to the lanes so far
        # the last row group across the lanes (see ``_flush_last``); compaction, whose point is fewer
        # files, keeps a small output in one
        self._spread_last = spread_last

    def write(self, batch: pa.RecordBatch, *, clustered: bool = False) -> None:
        if batch.num_rows == 0:
            return
        self._buffer.append(batch)
        self._buffered_bytes += batch.nbytes
        self.rows += batch.num_rows
        if self._buffered_bytes >= self._row_group_bytes:
            self._flush()

    def _credentials_expiring(self) -> bool:
        """Vended credentials about to be reloaded (see ``credentials.VendedFileIO``)."""
        expiring = getattr(self._io, "expiring", None)
        return bool(expiring()) if callable(expiring) else False

    def _flush(self) -> None:
        """Hand the buffered batches to the lanes as row groups of at most ``row_group_bytes``
        (a batch alone over it is a row group of its own); the batches short of one stay
        buffered. A row group ending at the first batch end past the budget would let two 15 MiB
        batches make one 30 MiB row group: one lane encoding twice what the other does."""
        if not self._buffer:
            return
        self._close_lanes_if_credentials_expire()
        while self._buffered_bytes >= self._row_group_bytes:
            take = size = 0
            for batch in self._buffer:
                if take and size + batch.nbytes > self._row_group_bytes:
                    break
                take, size = take + 1, size + batch.nbytes
            group, self._buffer = self._buffer[:take], self._buffer[take:]
            self._buffered_bytes -= size
            self._submit(pa.Table.from_batches(group, schema=self.arrow_schema))

    def _flush_last(self) -> None:
        """Hand what is left to the lanes, cut into one row group per lane (at least
        ``_MIN_PIECE_ROWS`` rows each): nothing follows that the other lanes could encode
        meanwhile, so a small write or a long write's tail would otherwise encode on one core."""
        if not self._buffer:
            return
        self._close_lanes_if_credentials_expire()
        table = pa.Table.from_batches(self._buffer, schema=self.arrow_schema)
        self._buffer, self._buffered_bytes = [], 0
        rows = table.num_rows
        pieces = (min(len(self._lanes), rows // _MIN_PIECE_ROWS) if self._spread_last else 1) or 1
        step = -(-rows // pieces)
        slices = [table.slice(start, step) for start in range(0, rows, step)]
        if self._row_groups == 1 and len(slices) > 1:
            # One row group so far, in lane 0's file: the first piece follows it there and the
            # rest go to the next lanes' new files, so the files still hold the rows in the order
            # they came (as they do when no row group came before). The idle lanes are handed
            # theirs first: waiting for lane 0 must not leave them waiting too.
            for j in sorted(range(len(slices)), key=lambda j: j == 0):
                self._submit(slices[j], lane=j)
        else:
            for piece in slices:
                self._submit(piece)

    def _close_lanes_if_credentials_expire(self) -> None:
        """Finish every open file while its upload's credentials are still valid; the next file
        opens on a filesystem built from freshly reloaded ones."""
        if self._credentials_expiring():
            for j, open_lane in enumerate(self._lanes):
                if open_lane is not None:
                    self._close_lane(open_lane)
                    self._lanes[j] = None

    def _submit(self, table: pa.Table, *, lane: int | None = None) -> None:
        """Hand one row group to the next lane in turn (or to ``lane``), once that lane's
        previous one is done."""
        i = self._turn if lane is None else lane
        self._turn = (i + 1) % len(self._lanes)
        self._row_groups += 1
        target = self._lanes[i]
        if target is not None:
            target.wait()  # bounds what is in flight, and keeps each file's row groups in order
            if target.bytes >= self._target_file_bytes:
                self._close_lane(target)
                target = None
        if target is None:
            target = self._lanes[i] = self._new_lane()
        target.bytes += table.nbytes
        target.pending = self._pool.submit(target.write, table)
        del table
        failpoint("write.file_flushed")

    def _close_lane(self, lane: _Lane) -> None:
        self._finish(lane, self._partition)

    def close(self) -> list[DataFile]:
        self._flush_last()
        for i, lane in enumerate(self._lanes):
            if lane is not None:
                self._close_lane(lane)
                self._lanes[i] = None
        self._pool.shutdown()
        return self.data_files

    def discard(self) -> None:
        """Delete every file this writer created (a failed or aborted transaction)."""
        lanes = [lane for lane in self._lanes if lane is not None]
        self._lanes = [None] * len(self._lanes)
        self._delete_all(lanes)


def delete_paths(io: FileIO, paths: Iterable[str], *, best_effort: bool = False) -> None:
    """Delete files, a few at a time: on object storage each is a request (~10-50 ms), and a
    dropped table or a maintenance run can have thousands. A file already gone is fine. Any other
    failure is raised once every file was tried, or with ``best_effort`` logged and the file left
    (a dropped table's files, whose table is already gone from the catalog)."""
    todo = list(paths)
    if not todo:
        return

    def delete(path: str) -> OSError | None:
        try:
            io.delete(path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if not best_effort:
                return exc
            log.warning("left %s behind (%s)", path, exc)
        return None

    with ThreadPoolExecutor(max_workers=min(_DELETE_THREADS, len(todo)), thread_name_prefix="trident-delete") as pool:
        failures = [e for e in pool.map(delete, todo) if e is not None]
    if failures:
        raise failures[0]


def filesystem_for(io: FileIO, location: str) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem behind a location, and the path in it, from the table's own FileIO:
    its credentials, refreshes and request signing apply to every read, listing and delete.
    (Rebuilding a ``PyArrowFileIO`` from the properties would drop a signer on the floor.)"""
    scheme, netloc, path = PyArrowFileIO.parse_location(location)
    if isinstance(io, PyArrowFileIO) and callable(getattr(io, "expiring", None)):
        return pafs.PyFileSystem(_CurrentFileSystem(io, scheme, netloc)), path
    if isinstance(io, PyArrowFileIO):
        return io.fs_by_scheme(scheme, netloc), path
    if isinstance(io, FsspecFileIO):
        return pafs.PyFileSystem(pafs.FSSpecHandler(io.get_fs(scheme, netloc))), path
    raise StorageCredentialsError(
        f"cannot read {location!r} through a {type(io).__name__}: Trident reads tables through "
        "pyiceberg's PyArrowFileIO or FsspecFileIO (py-io-impl)"
    )


class _CurrentFileSystem(pafs.FileSystemHandler):
    """A pyarrow filesystem that asks the FileIO for its current filesystem on every call, so a
    long scan over many files opens each one with credentials that are fresh at that moment
    (``credentials.VendedFileIO`` reloads them before they expire). A file already open keeps the
    credentials it was opened with."""

    def __init__(self, io: PyArrowFileIO, scheme: str, netloc: str) -> None:
        self._io, self._scheme, self._netloc = io, scheme, netloc

    def _fs(self) -> pafs.FileSystem:
        return self._io.fs_by_scheme(self._scheme, self._netloc)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _CurrentFileSystem) and other._io is self._io and other._scheme == self._scheme

    def __ne__(self, other: object) -> bool:
        return not self == other

    def get_type_name(self) -> str:
        return f"trident-{self._scheme}"

    def normalize_path(self, path: str) -> str:
        return self._fs().normalize_path(path)

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        return self._fs().get_file_info(paths)

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        return self._fs().get_file_info(selector)

    def create_dir(self, path: str, recursive: bool) -> None:
        self._fs().create_dir(path, recursive=recursive)

    def delete_dir(self, path: str) -> None:
        self._fs().delete_dir(path)

    def delete_dir_contents(self, path: str, missing_dir_ok: bool = False) -> None:
        self._fs().delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self) -> None:
        raise OSError("refusing to delete a bucket's contents")

    def delete_file(self, path: str) -> None:
        self._fs().delete_file(path)

    def move(self, src: str, dest: str) -> None:
        self._fs().move(src, dest)

    def copy_file(self, src: str, dest: str) -> None:
        self._fs().copy_file(src, dest)

    def open_input_stream(self, path: str) -> Any:
        return self._fs().open_input_stream(path)

    def open_input_file(self, path: str) -> Any:
        return self._fs().open_input_file(path)

    def open_output_stream(self, path: str, metadata: Any) -> Any:
        return self._fs().open_output_stream(path, metadata=metadata)

    def open_append_stream(self, path: str, metadata: Any) -> Any:
        return self._fs().open_append_stream(path, metadata=metadata)


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
        io,
        f"{location.rstrip('/')}/metadata",
        lambda name: name.startswith(manifest) or (name.startswith("snap-") and name.endswith(manifest_list)),
    )


def _list(io: FileIO, folder: str, wanted: Callable[[str], bool]) -> list[str]:
    fs, path = filesystem_for(io, folder)
    infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    scheme = folder.split("://", 1)[0] if "://" in folder else "file"
    return [f"{scheme}://{info.path}" for info in infos if info.type == pafs.FileType.File and wanted(info.base_name)]


class _PartitionState:
    """One partition's buffered rows and its open file (if any)."""

    def __init__(self, key: tuple[Any, ...], record: Record) -> None:
        self.key = key
        self.record = record
        self.buffer: list[pa.Table] = []
        self.buffered = 0
        self.lane: _Lane | None = None


class PartitionedDataFileWriter(_TxnFileWriter):
    """``DataFileWriter`` for a partitioned table: rows are split by the table's partition spec
    and each partition gets its own files (``DataFile.partition`` set, never two partitions in one
    file, so a partition replace deletes whole files and pyiceberg prunes reads by partition).

    Each partition buffers up to a row group; when all buffers together exceed ``buffer_bytes``
    the least recently extended one is flushed, and at most ``max_open`` files are open (the least
    recently written one is closed first). Input clustered by partition (the planner clusters a
    wide backfill) thus yields one file per partition, holding one row group when the partition
    fits in one; ``parallelism`` row groups are encoded at once.
    """

    def __init__(
        self,
        io: FileIO,
        location: str,
        txn_id: uuid.UUID,
        schema: Schema,
        properties: dict[str, str],
        *,
        partitioner: Partitioner,
        spec_id: int,
        target_file_bytes: int,
        row_group_bytes: int,
        parallelism: int = 2,
        max_open: int = 32,
    ) -> None:
        super().__init__(
            io,
            location,
            txn_id,
            schema,
            properties,
            spec_id=spec_id,
            target_file_bytes=target_file_bytes,
            row_group_bytes=row_group_bytes,
            parallelism=parallelism,
        )
        self._partitioner = partitioner
        self.arrow_schema = file_schema(self.table_schema, keep={c for c, _ in partitioner.fields})
        self._buffer_bytes = 4 * row_group_bytes
        self._parallelism = max(1, parallelism)
        self._max_open = max(1, max_open)
        self._states: dict[tuple[Any, ...], _PartitionState] = {}
        self._open: OrderedDict[tuple[Any, ...], _PartitionState] = OrderedDict()  # LRU of open files
        self._pending: OrderedDict[tuple[Any, ...], _PartitionState] = OrderedDict()  # LRU of non-empty buffers
        self._inflight: deque[Future[Any]] = deque()
        self._closing: list[Future[list[DataFile]]] = []  # files being closed on the pool, in order
        self._whole: list[tuple[_Lane, Record, pa.Table]] = []  # small whole files not yet handed on
        self._whole_bytes = 0
        self._buffered = 0
        self._run: tuple[Any, ...] | None = None  # the partition clustered input is in

    def write(self, batch: pa.RecordBatch, *, clustered: bool = False) -> None:
        if batch.num_rows == 0:
            return
        self.rows += batch.num_rows
        for key, piece in self._partitioner.split(pa.Table.from_batches([batch])):
            if clustered and key != self._run:
                if self._run is not None:
                    self._complete(self._run)
                self._run = key
            st = self._states.get(key)
            if st is None:
                st = self._states[key] = _PartitionState(key, self._partitioner.record(key))
            st.buffer.append(piece)
            st.buffered += piece.nbytes
            self._buffered += piece.nbytes
            self._pending[key] = st
            self._pending.move_to_end(key)
            if st.buffered >= self._row_group_bytes:
                self._flush(st)
        while self._buffered > self._buffer_bytes and self._pending:
            self._flush(next(iter(self._pending.values())))

    def _complete(self, key: tuple[Any, ...]) -> None:
        """Clustered input has moved past partition ``key``: its file is finished now, in ONE
        pool task when all its rows are still buffered (a backfill's small days), instead of
        waiting in the buffers and the open-file LRU for the end of the input. Should the input
        bring that partition back after all, it simply starts another file of its own."""
        st = self._states.pop(key, None)
        if st is None:
            return
        if st.lane is None and st.buffer:
            self._write_whole(st)
        else:
            self._flush(st)
            self._close(st)

    def _take_buffer(self, st: _PartitionState) -> pa.Table:
        """The partition's buffered rows as one table in the write's schema; the buffer empties."""
        table = st.buffer[0] if len(st.buffer) == 1 else pa.concat_tables(st.buffer)
        if not table.schema.equals(self.arrow_schema, check_metadata=True):
            table = table.cast(self.arrow_schema)
        self._buffered -= st.buffered
        st.buffer, st.buffered = [], 0
        self._pending.pop(st.key, None)
        return table

    def _flush(self, st: _PartitionState) -> None:
        if not st.buffer:
            return
        table = self._take_buffer(st)
        lane = st.lane
        if lane is not None and lane.bytes >= self._target_file_bytes:
            self._close(st)
            lane = None
        if lane is None:
            while len(self._open) >= self._max_open:
                self._close(next(iter(self._open.values())))
            lane = st.lane = self._new_lane()
            self._open[st.key] = st
        self._open.move_to_end(st.key)
        while len(self._inflight) >= self._parallelism:
            self._inflight.popleft().result()
        lane.wait()  # one file's row groups stay in order
        lane.bytes += table.nbytes
        lane.pending = self._pool.submit(lane.write, table)
        self._inflight.append(lane.pending)
        failpoint("write.file_flushed")

    def _close(self, st: _PartitionState) -> None:
        """Close the partition's open file on the pool, after its last write (a backfill closes
        thousands of small files: footer, statistics and ``DataFile`` are done off this thread)."""
        lane = st.lane
        if lane is None:
            return
        st.lane = None
        self._open.pop(st.key, None)
        last, lane.pending = lane.pending, None
        record = st.record

        def finish() -> list[DataFile]:
            if last is not None:
                last.result()
            return [self._data_file(lane, record)]

        self._closing.append(self._pool.submit(finish))

    def _write_whole(self, st: _PartitionState) -> None:
        """A partition with no open file and all its rows buffered (a finished partition of
        clustered input, or the end of the input): open, write and close its file in ONE task on
        the pool, together with the next few such small files (a backfill of small partitions is
        mostly these; a task per step, then a task per file, cost more in thread hand-offs, each
        a wake-up and a GIL hand-over, than the small file's own Python work)."""
        table = self._take_buffer(st)
        self._whole.append((self._new_lane(), st.record, table))
        self._whole_bytes += table.nbytes
        if len(self._whole) >= _WHOLE_FILES or self._whole_bytes >= self._row_group_bytes:
            self._hand_on_whole()
        failpoint("write.file_flushed")

    def _hand_on_whole(self) -> None:
        """Submit the small whole files gathered so far as one pool task (bounded: each holds rows)."""
        if not self._whole:
            return
        group, self._whole, self._whole_bytes = self._whole, [], 0

        def whole() -> list[DataFile]:
            out = []
            for lane, record, table in group:
                lane.write(table)
                out.append(self._data_file(lane, record))
            return out

        while len(self._inflight) >= self._parallelism:
            self._inflight.popleft().result()
        task = self._pool.submit(whole)
        self._closing.append(task)
        self._inflight.append(task)

    def close(self) -> list[DataFile]:
        for st in list(self._states.values()):
            if st.lane is None and st.buffer:
                self._write_whole(st)
            else:
                self._flush(st)
        self._hand_on_whole()
        for st in list(self._states.values()):
            self._close(st)
        closing, self._closing = self._closing, []
        for f in closing:
            self.data_files.extend(f.result())
        self._pool.shutdown()
        return self.data_files

    def discard(self) -> None:
        """Delete every file this writer created (a failed or aborted transaction)."""
        lanes = [st.lane for st in self._states.values() if st.lane is not None]
        for st in self._states.values():
            st.lane = None
        self._open.clear()
        self._closing = []  # the pool finishes them before the files are deleted
        self._whole, self._whole_bytes = [], 0  # never opened: nothing to delete but their paths
        self._delete_all(lanes)
