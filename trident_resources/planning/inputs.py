"""Turn whatever a producer hands us into one bounded-memory ``RecordBatchReader``.

Everything downstream (both sinks, the merges) consumes a reader batch by batch, so accepting a
new input kind means adding a branch here and nowhere else.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa

from ..core.errors import EmptyInputError, InvalidWriteError

MAX_BATCH_ROWS = 131_072


def to_reader(data: Any) -> pa.RecordBatchReader:
    """Accept Arrow data, anything speaking the Arrow C stream protocol (polars, DuckDB relations,
    pandas...), an iterable of batches, or a polars LazyFrame.

    pandas is taken before the protocol only because its ``__arrow_c_stream__`` exports a
    non-default index as an extra column: a DataFrame's rows are its columns plus its *named*
    index levels (see ``_from_pandas``).
    """
    if isinstance(data, pa.RecordBatchReader):
        return data
    if isinstance(data, pa.Table):
        return pa.RecordBatchReader.from_batches(data.schema, data.to_batches(max_chunksize=MAX_BATCH_ROWS))
    if isinstance(data, pa.RecordBatch):
        return pa.RecordBatchReader.from_batches(data.schema, [data])
    module = type(data).__module__.split(".")[0]
    if module == "pandas":
        return to_reader(_from_pandas(data))
    if hasattr(data, "__arrow_c_stream__"):
        return pa.RecordBatchReader.from_stream(data)
    if module == "polars" and hasattr(data, "collect"):  # a LazyFrame runs its plan first
        return to_reader(data.collect())
    if isinstance(data, Iterable) and not isinstance(data, (str, bytes, dict)):
        return _reader_from_batches(iter(data))
    raise InvalidWriteError(
        f"cannot write a {type(data).__name__}: pass a pyarrow Table, RecordBatchReader, an object with "
        "__arrow_c_stream__ (polars, DuckDB...), an iterable of RecordBatches, or a pandas DataFrame"
    )


def _from_pandas(frame: Any) -> pa.Table:
    """A pandas DataFrame as Arrow. A named index holds data: ``df.groupby("region").sum()`` keeps
    ``region`` only in its index, and dropping it wrote the sums with nothing saying which region
    each was. An unnamed index (0..n-1, or what is left of it after a filter) is position, not data,
    and is dropped. A frame pyarrow cannot convert (a column of mixed types, a Series) is an
    InvalidWriteError naming why, not a raw pyarrow error."""
    if hasattr(frame, "to_frame") and not hasattr(frame, "columns"):  # a Series: one column, named as it is
        frame = frame.to_frame()
    names = getattr(getattr(frame, "index", None), "names", None) or [None]
    try:
        return pa.Table.from_pandas(frame, preserve_index=any(n is not None for n in names))
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError, AttributeError) as exc:
        raise InvalidWriteError(
            f"cannot convert the {type(frame).__name__} to Arrow: {exc}; give each column one type "
            "(e.g. df[col].astype(str)) or pass a pyarrow Table"
        ) from exc


def _reader_from_batches(batches: Iterator[Any]) -> pa.RecordBatchReader:
    first = next(batches, None)
    if first is None:
        raise EmptyInputError(
            "the input iterable yielded no batches, so it has no schema; pass an empty pyarrow Table to write zero rows"
        )
    first = _as_batch(first)
    schema = first.schema

    def checked() -> Iterator[pa.RecordBatch]:
        for b in itertools.chain([first], batches):
            b = _as_batch(b)
            if not b.schema.equals(schema):
                raise InvalidWriteError(f"batch schema changed mid-stream:\n{b.schema}\nexpected:\n{schema}")
            yield b

    return pa.RecordBatchReader.from_batches(schema, checked())


def _as_batch(item: Any) -> pa.RecordBatch:
    if isinstance(item, pa.RecordBatch):
        return item
    if isinstance(item, pa.Table):
        return item.combine_chunks().to_batches()[0] if item.num_rows else pa.RecordBatch.from_pylist([], schema=item.schema)
    raise InvalidWriteError(f"an iterable input must yield pyarrow RecordBatches, got {type(item).__name__}")
