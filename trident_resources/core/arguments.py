"""Argument checks for the client's methods: a malformed argument is a named error at the call,
never a raw ``TypeError`` from deep inside (unchecked, ``keys=5`` would fail as "'int' object is
not iterable", ``columns='a'`` inside pyarrow, ``txn_id='nope'`` in ``uuid.UUID``)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any

import pyarrow as pa

from .errors import InvalidArgumentError, InvalidReadError, InvalidWriteError, PartitionError, TridentError
from .partitions import PartitionFilter
from .write_modes import WRITE_MODES

_BIGINT_MAX = 2**63 - 1


def write_keys(keys: Iterable[str] | str | None) -> tuple[str, ...]:
    """Key column names as a tuple: ``None``, one name, or an iterable of non-empty names."""
    return tuple(
        _names(
            keys,
            "keys",
            refused=(bytes, dict, set, frozenset),
            shape="a column name or a list of column names, e.g. keys=['order_id']",
            items="non-empty column names (strings)",
        )
    )


def _names(value: Any, what: str, *, refused: tuple[type, ...], shape: str, items: str) -> list[str]:
    """One name or an iterable of non-empty strings, as a list: a bare string is ONE name (iterating
    it would record it letter by letter), and an unordered or byte container is refused."""
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    elif isinstance(value, refused) or not isinstance(value, Iterable):
        raise InvalidWriteError(f"{what} must be {shape}, got {value!r}")
    out = list(value)
    bad = [v for v in out if not isinstance(v, str) or not v]
    if bad:
        raise InvalidWriteError(f"{what} must be {items}; got {bad!r} in {what}={out!r}")
    return out


def txn_id(value: Any) -> uuid.UUID | None:
    """A caller's transaction id as a UUID (a UUID or its text), or None when not given."""
    if value is None or isinstance(value, uuid.UUID):
        return value
    if isinstance(value, str):
        try:
            return uuid.UUID(value)
        except ValueError as exc:
            raise InvalidWriteError(f"txn_id must be a UUID (or its text), got {value!r}") from exc
    raise InvalidWriteError(f"txn_id must be a UUID (or its text), got a {type(value).__name__}: {value!r}")


def read_columns(columns: Any) -> list[str] | None:
    """Columns to read: ``None`` (all) or a list/tuple of names. A bare string is refused rather
    than guessed at (``'ab'`` is not ``['a', 'b']``, and ``['ab']`` may not be what was meant)."""
    if columns is None:
        return None
    if isinstance(columns, str) or not isinstance(columns, (list, tuple)):
        raise InvalidReadError(f"columns must be a list of column names, e.g. columns=['a', 'b'], got {columns!r}")
    bad = [c for c in columns if not isinstance(c, str)]
    if bad:
        raise InvalidReadError(f"columns must be column names (strings); got {bad!r}")
    twice = sorted({c for c in columns if columns.count(c) > 1})
    if twice:  # a table with two columns of one name cannot be written back, nor read by name
        raise InvalidReadError(f"columns= lists {twice} more than once; name each column once")
    return list(columns)


def maintenance_window(older_than: Any, retain_last: Any, uploads_older_than: Any) -> None:
    """Refuse knobs that would make maintenance delete more than asked: a negative age puts the
    cut-off in the future (every version "expired"), and keeping fewer than one version is not a
    retention policy."""
    for name, value in (("older_than", older_than), ("uploads_older_than", uploads_older_than)):
        if not isinstance(value, timedelta) or value < timedelta(0):
            raise InvalidArgumentError(f"{name} must be a timedelta of zero or more, got {value!r}")
    if isinstance(retain_last, bool) or not isinstance(retain_last, int) or retain_last < 1:
        raise InvalidArgumentError(f"retain_last must be an integer of at least 1 (the current version), got {retain_last!r}")


def partition_filter(partition: Any) -> PartitionFilter | None:
    """``partition=`` is a ``PartitionFilter`` or None. A bare value (``partition='2024-01-01'``)
    is refused: it does not say which column it is of (unchecked, it fails as "'str' object has
    no attribute 'bind'")."""
    if partition is None or isinstance(partition, PartitionFilter):
        return partition
    raise PartitionError(
        f"partition must be a PartitionFilter, e.g. PartitionFilter.of_values('region', 'eu') or "
        f"PartitionFilter.time_window('order_date', start, end), got a {type(partition).__name__}: {partition!r}"
    )


def history_limit(limit: Any) -> int | None:
    """How many ledger entries to return: None (all) or a positive count. Zero or a negative
    count would reach Postgres' LIMIT as a raw psycopg error (or silently show nothing)."""
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidArgumentError(f"limit must be a positive number of entries (or None for all), got {limit!r}")
    return None if limit > _BIGINT_MAX else limit  # more than any ledger holds is all (Postgres' LIMIT is a bigint)


def source_refs(refs: Any) -> list[str]:
    """What a write was derived from: None, one reference, or an iterable of non-empty strings. A
    bare string is one reference (iterated, ``"raw/orders"`` would become ``['r', 'a', ...]``)."""
    return _names(
        refs,
        "source_refs",
        refused=(bytes, Mapping),
        shape="a list of references, e.g. ['raw/orders']",
        items="non-empty strings",
    )


def metadata(value: Any, name: str = "metadata", error: type[TridentError] = InvalidWriteError) -> dict[str, Any]:
    """A write's ledger metadata or provenance: None or a mapping that Postgres' jsonb can hold,
    checked before the transaction opens: unchecked, ``metadata=5`` would be a raw TypeError and a
    NaN or a NUL character a Postgres error (for provenance, met only at COMMIT)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise error(f"{name} must be a mapping of names to values, got a {type(value).__name__}: {value!r}")
    out = dict(value)
    try:
        text = json.dumps(out, default=str, allow_nan=False)  # what the control plane stores (other values as str)
    except ValueError as exc:
        raise error(f"{name} holds NaN or infinity, which JSON cannot; store None or a string instead") from exc
    if "\\u0000" in text:
        raise error(f"{name} holds a NUL character, which Postgres jsonb cannot store; drop it")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise error(f"{name} holds text that is not valid Unicode (a lone surrogate): {exc.reason}") from exc
    return out


def sql_arguments(query: Any, staged: Any) -> dict[str, Any]:
    """``Trident.sql``'s query is a string and ``staged`` a mapping of keys to staged transaction
    ids: a number reached DuckDB's parser as a raw TypeError, a list ``dict()`` as a raw ValueError."""
    if not isinstance(query, str):
        raise InvalidArgumentError(f"query must be a string of SQL, got a {type(query).__name__}: {query!r}")
    if staged is None:
        return {}
    if not isinstance(staged, Mapping):
        raise InvalidReadError(
            f"staged must map dataset keys to staged transaction ids, e.g. {{'sales/orders': txn_id}}, got {staged!r}"
        )
    return dict(staged)


def stream_session(schema: Any, max_queued: Any) -> None:
    """An ingest stream's knobs: ``schema`` a pyarrow Schema (a dict failed as "no attribute
    'names'"), ``max_queued`` a count of at least one: 0 or less made the queue unbounded, which
    breaks the session's bounded-memory promise, and a string failed at the first append."""
    if schema is not None and not isinstance(schema, pa.Schema):
        raise InvalidWriteError(f"schema must be a pyarrow Schema, e.g. pa.schema([('id', pa.int64())]), got {schema!r}")
    if isinstance(max_queued, bool) or not isinstance(max_queued, int) or max_queued < 1:
        raise InvalidWriteError(f"max_queued must be a number of batches of at least 1, got {max_queued!r}")


def write_mode(mode: str, keys: tuple[str, ...], row_filter: str | None, data: Any) -> None:
    """A write mode with the arguments it needs (keys for keyed modes, exactly one of keys or row_filter
    for a delete, data unless deleting), refused before any transaction opens."""
    if mode not in WRITE_MODES:
        raise InvalidWriteError(f"unknown mode {mode!r}; modes are {list(WRITE_MODES)}")
    if mode in ("upsert", "append_new") and not keys:
        raise InvalidWriteError(f"mode {mode!r} needs keys=[...] naming the key column(s)")
    if mode == "append" and keys:
        raise InvalidWriteError("mode 'append' takes no keys; use 'append_new' to skip existing keys or 'upsert'")
    if mode == "delete":
        if bool(keys) == bool(row_filter):
            raise InvalidWriteError(
                "mode 'delete' needs exactly one of keys=[...] (with data holding the keys) or row_filter=..."
            )
        if keys and data is None:
            raise InvalidWriteError("a delete by keys needs data: the key values of the rows to delete")
    elif row_filter is not None:
        raise InvalidWriteError("row_filter is only for mode='delete'; reads take row_filter in read()/stream()")
    if mode != "delete" and data is None:
        raise InvalidWriteError(f"mode {mode!r} needs data")
