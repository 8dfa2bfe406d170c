"""A write's rows clustered by partition (each partition's rows contiguous), in bounded memory.

A wide backfill (thousands of daily partitions) arrives in source order, every batch holding rows
of many partitions. Split straight into files it would need a file and a buffer open per
partition (unbounded) or scatter each partition over many small files. So the rows are first
bucketed, a radix partition in two linear passes:

1. each batch is reordered by bucket (a bucket is a set of partitions, assigned as they are first
   seen) and its slices appended to the buckets' Arrow IPC spill files on local disk
   (uncompressed: a copy into the page cache);
2. each bucket is read back memory-mapped, its rows grouped by partition (a stable sort of small
   integer codes, then one ``take``) and handed on in batches; the next bucket is grouped on a
   helper thread meanwhile.

A full sort of the rows (DuckDB's ``ORDER BY``, what this replaces) compares and moves whole rows
through DuckDB's format and back: about three times slower on TPC-H SF1 ``lineitem`` by
``l_shipdate``, and it held up to its memory limit (1 GB by default) meanwhile.

Memory: one input batch (twice: reordered) being spilled and the next one being read in pass 1;
in pass 2 one bucket being handed on (grouped) and the next one (twice: sorted) being grouped. A
bucket over ``bucket_bytes`` is bucketed again (its partitions spread over new buckets) rather
than loaded, unless it holds a single partition, which needs no grouping and is streamed as is.
"""

from __future__ import annotations

import os
import shutil
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

KeyFn = Callable[[pa.RecordBatch], Sequence[pa.Array]]
"""The partition key arrays of a batch (one array per partition dimension)."""

BUCKETS = 64  # at most 256 (bucket numbers are sorted as uint8)
BUCKET_BYTES = 128 * 1024 * 1024
OUT_ROWS = 65_536
_MAX_DEPTH = 4
_WRITE_BUFFER = 256 * 1024
_SPILL_AHEAD = 1  # batches being spilled while the next one is read


def cluster(
    reader: pa.RecordBatchReader, keys: KeyFn, spill_dir: Path, *, bucket_bytes: int = BUCKET_BYTES
) -> pa.RecordBatchReader:
    """``reader``'s rows, every partition's rows contiguous (partitions in no particular order;
    rows of one partition in input order). Spill files live under ``spill_dir`` and are deleted
    as soon as their bucket has been handed on. String and binary *view* columns come out as
    large ones (Arrow's ``take`` has no kernel for views; tpchgen-cli and polars produce them)."""
    schema = _without_views(reader.schema)
    source = reader if schema.equals(reader.schema) else (b.cast(schema) for b in reader)

    def batches() -> Iterator[pa.RecordBatch]:
        try:
            yield from _Buckets(schema, keys, spill_dir, bucket_bytes, depth=0).run(source)
        finally:
            shutil.rmtree(spill_dir, ignore_errors=True)

    return pa.RecordBatchReader.from_batches(schema, batches())


def _without_views(schema: pa.Schema) -> pa.Schema:
    def plain(t: pa.DataType) -> pa.DataType:
        if pa.types.is_string_view(t):
            return pa.large_string()
        if pa.types.is_binary_view(t):
            return pa.large_binary()
        return t

    return pa.schema([f.with_type(plain(f.type)) for f in schema], metadata=schema.metadata)


def codes(arrays: Sequence[pa.Array]) -> tuple[np.ndarray, list[tuple[Any, ...]]]:
    """Per row a code in ``[0, n)`` naming its key combination, and the ``n`` combinations present
    (codes number them in order of first appearance along each dimension)."""
    n_rows = len(arrays[0])
    combined = np.zeros(n_rows, dtype=np.int64)
    dicts: list[list[Any]] = []
    for a in arrays:
        enc = pc.dictionary_encode(a, null_encoding="encode")
        if isinstance(enc, pa.ChunkedArray):
            enc = enc.combine_chunks()
        values = enc.dictionary.to_pylist()
        dicts.append(values)
        combined = combined * max(len(values), 1) + enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    if len(arrays) == 1:
        return combined, [(v,) for v in dicts[0]]
    uniq, inverse = np.unique(combined, return_inverse=True)
    sizes = [max(len(d), 1) for d in dicts]
    present = []
    for code in uniq.tolist():
        parts = []
        for size in reversed(sizes):
            code, p = divmod(code, size)
            parts.append(p)
        parts.reverse()
        present.append(tuple(d[p] for d, p in zip(dicts, parts, strict=True)))
    return inverse.astype(np.int64).reshape(-1), present


class _Buckets:
    """One level of bucketing: pass 1 into spill files, pass 2 out of them."""

    def __init__(self, schema: pa.Schema, keys: KeyFn, folder: Path, bucket_bytes: int, *, depth: int) -> None:
        self._schema = schema
        self._keys = keys
        self._dir = folder
        self._bucket_bytes = bucket_bytes
        self._depth = depth
        self._bucket_of: dict[tuple[Any, ...], int] = {}
        self._writers: list[ipc.RecordBatchStreamWriter | None] = [None] * BUCKETS
        self._sinks: list[Any] = [None] * BUCKETS

    def run(self, source: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        self._dir.mkdir(parents=True, exist_ok=True)
        self._spill_all(source)
        buckets = [b for b in range(BUCKETS) if self._path(b).exists()]
        # Pass 2 groups the NEXT bucket on a helper thread while the consumer (stamping, splitting
        # into files, feeding the Parquet writers) works through this one: the grouping (read
        # back, key codes, a sort of small integers, one ``take``) runs in C++ and numpy without
        # the GIL, and on the consumer's thread it held up the writers every bucket. One bucket
        # more is held (grouped) meanwhile.
        ahead: dict[int, Future[pa.Table]] = {}
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="trident-cluster") as helper:
            try:
                for i, b in enumerate(buckets):
                    nxt = buckets[i + 1] if i + 1 < len(buckets) else None
                    if nxt is not None and self._groupable(nxt):
                        ahead[nxt] = helper.submit(self._group, nxt)
                    try:
                        grouped = ahead.pop(b, None)
                        if grouped is not None:
                            yield from grouped.result().to_batches(max_chunksize=OUT_ROWS)
                        else:
                            yield from self._drain(b, self._path(b))
                    finally:
                        self._path(b).unlink(missing_ok=True)
            finally:
                for f in ahead.values():
                    f.cancel()
                wait(ahead.values())  # the helper is done with the spill files before they go

    # -- pass 1 -------------------------------------------------------------------------------
    def _spill_all(self, source: Iterable[pa.RecordBatch]) -> None:
        """Spill every batch of ``source``: this thread reads it and cuts it into its buckets'
        slices (key codes, a sort of small integers, one ``take``) while a helper thread appends
        the previous batch's slices to the spill files. Reading (Parquet decoding, an upstream
        computation), the ``take`` and the appends (a copy into the page cache) all run in C++
        without the GIL, so pass 1, during which nothing else of a write can run yet, uses two
        cores instead of one. (The cutting stays on the reading thread: on the helper it would be
        the bottleneck, the reading thread mostly waiting for it.) One thread appends, in input order, so each
        partition's rows stay in input order; one batch more is held."""
        pending: deque[Future[None]] = deque()
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="trident-cluster") as spiller:
            try:
                for batch in source:
                    if batch.num_rows:
                        pieces = self._cut(batch)
                        while len(pending) >= _SPILL_AHEAD:
                            pending.popleft().result()
                        pending.append(spiller.submit(self._append_all, pieces))
                while pending:
                    pending.popleft().result()
            finally:
                for f in pending:
                    f.cancel()
                wait(pending)  # the spiller is done with the writers before they are closed
                self._close_writers()

    def _cut(self, batch: pa.RecordBatch) -> list[tuple[int, pa.RecordBatch]]:
        """``batch`` as (bucket, slice) pairs, each bucket's rows in input order."""
        row_code, present = codes(self._keys(batch))
        bucket_of = self._bucket_of
        per_code = np.fromiter(
            (bucket_of.setdefault(k, len(bucket_of) % BUCKETS) for k in present), dtype=np.int64, count=len(present)
        )
        if len(set(per_code.tolist())) == 1:  # the whole batch falls into one bucket
            return [(int(per_code[0]), batch)]
        row_bucket = per_code[row_code].astype(np.uint8)  # BUCKETS <= 256: numpy radix-sorts it
        order = np.argsort(row_bucket, kind="stable")
        ordered = batch.take(pa.array(order))
        bounds = np.concatenate([[0], np.cumsum(np.bincount(row_bucket, minlength=BUCKETS))])
        return [
            (b, ordered.slice(int(bounds[b]), int(bounds[b + 1] - bounds[b])))
            for b in range(BUCKETS)
            if bounds[b + 1] > bounds[b]
        ]

    def _append_all(self, pieces: list[tuple[int, pa.RecordBatch]]) -> None:
        for bucket, piece in pieces:
            self._append(bucket, piece)

    def _append(self, bucket: int, batch: pa.RecordBatch) -> None:
        writer = self._writers[bucket]
        if writer is None:
            # buffered: an IPC message is many small writes (a few per column)
            sink = self._sinks[bucket] = pa.output_stream(str(self._path(bucket)), buffer_size=_WRITE_BUFFER)
            writer = self._writers[bucket] = ipc.new_stream(sink, self._schema)
        writer.write_batch(batch)

    def _close_writers(self) -> None:
        for i, writer in enumerate(self._writers):
            if writer is not None:
                writer.close()
                self._sinks[i].close()
        self._writers = [None] * BUCKETS

    def _path(self, bucket: int) -> Path:
        return self._dir / f"b{bucket:03d}.arrow"

    # -- pass 2 -------------------------------------------------------------------------------
    def _partitions(self, bucket: int) -> int:
        return sum(1 for b in self._bucket_of.values() if b == bucket)

    def _groupable(self, bucket: int) -> bool:
        """Whether the bucket is grouped whole in memory (several partitions, small enough);
        otherwise it is streamed as it is (one partition) or bucketed again (too large)."""
        if self._partitions(bucket) == 1:
            return False
        return os.path.getsize(self._path(bucket)) <= self._bucket_bytes or self._depth >= _MAX_DEPTH

    def _drain(self, bucket: int, path: Path) -> Iterator[pa.RecordBatch]:
        if self._groupable(bucket):
            yield from self._group(bucket).to_batches(max_chunksize=OUT_ROWS)
            return
        with pa.memory_map(str(path)) as src:
            stream = ipc.open_stream(src)
            if self._partitions(bucket) == 1:  # one partition: already contiguous, streamed as it is
                yield from stream
                return
            deeper = _Buckets(self._schema, self._keys, self._dir / f"b{bucket:03d}", self._bucket_bytes, depth=self._depth + 1)
            yield from deeper.run(stream)

    def _group(self, bucket: int) -> pa.Table:
        """The bucket's rows, each partition's together (in input order within it)."""
        with pa.memory_map(str(self._path(bucket))) as src:
            table = ipc.open_stream(src).read_all()
            if table.num_rows == 0:
                return table
            row_code, present = codes([a.combine_chunks() for a in self._keys_of(table)])
            if len(present) <= 1 << 16:
                row_code = row_code.astype(np.uint16)  # radix-sorted (numpy does for 16 bits and less)
            return table.take(pa.array(np.argsort(row_code, kind="stable")))  # a copy: the map can close

    def _keys_of(self, table: pa.Table) -> list[pa.ChunkedArray]:
        """The key arrays of a whole bucket (computed batch by batch, as in pass 1)."""
        per_batch = [self._keys(b) for b in table.to_batches()]
        return [pa.chunked_array([k[i] for k in per_batch]) for i in range(len(per_batch[0]))]
