"""Model nodes: a Python function over Arrow batches, applied lazily as the client pulls rows."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from trident_resources import IDENTITY_COLUMNS, TridentError

from .compute import SOURCE_ROW_INDEX


class ModelOutputError(TridentError):
    """A model function returned something that cannot be written or correlated to its source."""


def model_reader(source: pa.RecordBatchReader, fn: Callable[[pa.RecordBatch], Any], key: str) -> pa.RecordBatchReader:
    """Stream ``fn`` over ``source``; the first output batch fixes the schema (an empty source
    still calls ``fn`` once, on an empty batch, to learn it)."""
    batches = iter(source)
    first_in = next(batches, None)
    if first_in is None:
        first_in = pa.RecordBatch.from_pylist([], schema=source.schema)
    first = _apply(fn, first_in, key)
    schema = first.schema

    def rest() -> Iterator[pa.RecordBatch]:
        yield from first.to_batches()
        for b in batches:
            for out in _apply(fn, b, key).to_batches():
                if not out.schema.equals(schema):
                    try:
                        out = out.cast(schema)
                    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                        raise ModelOutputError(
                            f"model {key!r} changed its output schema mid-stream:\n{out.schema}\nexpected:\n{schema}"
                        ) from exc
                yield out

    return pa.RecordBatchReader.from_batches(schema, rest())


def _apply(fn: Callable[[pa.RecordBatch], Any], batch: pa.RecordBatch, key: str) -> pa.Table:
    result = fn(batch)
    if isinstance(result, pa.Table):
        table = result
    elif isinstance(result, pa.RecordBatch):
        table = pa.Table.from_batches([result])
    else:
        raise ModelOutputError(f"model {key!r} must return a pyarrow RecordBatch or Table, got {type(result).__name__}")
    leaked = [c for c in table.column_names if c in IDENTITY_COLUMNS]
    if leaked:
        raise ModelOutputError(f"model {key!r} returned engine identity column(s) {leaked}; drop them")
    if SOURCE_ROW_INDEX not in table.column_names:
        if table.num_rows != batch.num_rows:
            raise ModelOutputError(
                f"model {key!r} returned {table.num_rows} rows for {batch.num_rows} input rows without "
                f"{SOURCE_ROW_INDEX!r}: keep that column so each output row names its source row"
            )
        table = table.append_column(SOURCE_ROW_INDEX, batch.column(SOURCE_ROW_INDEX))
    elif table.num_rows and not pc.all(pc.is_in(table[SOURCE_ROW_INDEX], value_set=batch.column(SOURCE_ROW_INDEX))).as_py():
        raise ModelOutputError(f"model {key!r} returned {SOURCE_ROW_INDEX} values that are not in the batch it was given")
    # the source row index first: it is the row's lineage, then the model's columns
    cols = [SOURCE_ROW_INDEX, *[c for c in table.column_names if c != SOURCE_ROW_INDEX]]
    return table.select(cols).combine_chunks()
