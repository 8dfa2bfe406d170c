"""Read-side faults as named errors.

A sink's scan is lazy: pyarrow opens data files when the first batch is pulled, so a missing,
truncated or corrupt file (or storage going away mid-read) surfaces while the caller iterates, as a
raw ``ArrowInvalid``/``OSError``. Both the eager and the lazy half go through here, so a reader
never sees an engine's exception, only a named one with the engine's error chained.

It is also where ``__row_id`` becomes text: a uuid table stores 16 bytes per id, readers get the
36-character UUID string docs/python-api.md promises (``identity.public``), whichever door they use.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import duckdb
import psycopg
import pyarrow as pa

from ..core.errors import ControlPlaneUnavailableError, StorageUnavailableError, TridentError, UnreadableDataError
from ..core.identity import public, public_schema


def named(exc: BaseException, key: str) -> BaseException:
    """The named error a reader of ``key`` gets for ``exc`` (``exc`` itself when already named)."""
    if isinstance(exc, TridentError) or not isinstance(exc, Exception):
        return exc
    if isinstance(exc, psycopg.Error):
        return ControlPlaneUnavailableError(f"reading {key!r}: the control-plane Postgres failed: {exc}")
    if isinstance(exc, (FileNotFoundError, pa.ArrowInvalid)) or (
        isinstance(exc, (pa.ArrowException, duckdb.Error)) and not isinstance(exc, OSError)
    ):
        first = (str(exc).strip().splitlines() or [""])[0]
        return UnreadableDataError(
            f"a data file of {key!r} could not be read (missing, truncated or corrupt): {type(exc).__name__}: {first}. "
            "The ledger and older versions are intact: restore the file from storage, or read an older version (as_of=...)"
        )
    if isinstance(exc, OSError):
        return StorageUnavailableError(f"reading {key!r}: storage unavailable: {type(exc).__name__}: {exc}")
    return exc


def guarded(key: str, open_reader: Callable[[], pa.RecordBatchReader]) -> pa.RecordBatchReader:
    """``open_reader()``, with its opening and every batch it yields naming their faults."""
    try:
        reader = open_reader()
    except Exception as exc:
        err = named(exc, key)
        if err is exc:  # already named: ``raise exc from exc`` would make it its own cause and lose the real one
            raise
        raise err from exc

    schema = public_schema(reader.schema)
    convert = schema is not reader.schema

    def batches() -> Iterator[pa.RecordBatch]:
        try:
            for b in reader:
                yield public(b) if convert else b
        except Exception as exc:
            err = named(exc, key)
            if err is exc:
                raise
            raise err from exc

    return pa.RecordBatchReader.from_batches(schema, batches())


def read_all(key: str, read: Callable[[], pa.Table]) -> pa.Table:
    """``read()``, naming its faults (the eager path reads every file before it returns), with
    ``__row_id`` as text."""
    try:
        return public(read())
    except Exception as exc:
        err = named(exc, key)
        if err is exc:
            raise
        raise err from exc
