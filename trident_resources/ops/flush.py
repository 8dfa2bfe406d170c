"""``Trident.flush`` and the flush every other write of an inlined dataset runs first: the
inlined tail of an ``iceberg_native`` dataset moved into ONE Iceberg snapshot
(``transaction/inline.py`` has the rules)."""

from __future__ import annotations

import logging

from ..control.plane import DatasetRecord, LedgerEntry
from ..core.errors import TridentError
from ..core.keys import validate_key
from ..engine import Engine
from ..transaction import inline

log = logging.getLogger("trident")


def flush(engine: Engine, key: str) -> LedgerEntry | None:
    """``Trident.flush`` (see there)."""
    ds = engine.dataset_record(validate_key(key))
    if ds.sink != inline.INLINE_SINK:
        return None
    with engine.driver.locked(ds) as ds:
        return inline.flush(engine.driver, ds)


def flushed_first(engine: Engine, ds: DatasetRecord, tail_rows: int | None = None) -> DatasetRecord:
    """Before a write that is not inlined (the caller holds the dataset's whole writer lock):
    the inlined tail flushed into Iceberg, so the write finds the whole dataset there. Returns the
    dataset's record as it is now. ``tail_rows``: what the caller already knows of the tail."""
    if ds.sink != inline.INLINE_SINK or engine.driver.shares(ds):
        return ds
    if tail_rows is None:
        tail_rows = engine.control.inline_state(ds.dataset_id).rows
    if not tail_rows:
        return ds
    entry = inline.flush(engine.driver, ds)
    if entry is not None:
        log.info("trident flush %s: %s inlined rows into snapshot %s before a write", ds.key, tail_rows, entry.snapshot_id)
    return engine.control.dataset_by_id(ds.dataset_id) or ds


def flush_after(engine: Engine, ds: DatasetRecord) -> None:
    """After an inlined write that left ``TRIDENT_INLINE_FLUSH_ROWS`` or more inlined rows (the
    caller holds the lock): flush them. The write has committed; a flush that fails is logged and
    left to the next write, ``maintain`` or ``trident flush``, never the write's error."""
    fresh = engine.control.dataset_by_id(ds.dataset_id) or ds
    try:
        inline.flush(engine.driver, fresh)
    except TridentError as exc:
        log.warning("trident flush %s after an inlined write failed (%s); the next write or maintain retries", ds.key, exc)


def flush_locking(engine: Engine, ds: DatasetRecord) -> None:
    """``flush_after`` for a caller that does not hold the lock (an inlined write committed in
    one call): taken here. A flush that cannot run now is logged and left to the next write,
    ``maintain`` or ``trident flush``, never the write's error."""
    try:
        with engine.driver.locked(ds) as now:
            flush_after(engine, now)
    except TridentError as exc:
        log.warning("trident flush %s after an inlined write did not run (%s); the next write or maintain retries", ds.key, exc)
