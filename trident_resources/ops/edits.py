"""``row.edit``: point updates by key. Deletes need nothing beyond the core's keyed delete; an update
may name only the columns it changes, so it is completed here from the current row before the
core's copy-on-write upsert (which keeps the edited rows' identity and leaves every other row as is).
"""

from __future__ import annotations

import duckdb
import pyarrow as pa

from ..core.errors import InvalidWriteError, KeyNotFoundError, NullKeyError
from ..core.identity import IDENTITY_COLUMNS, refuse_reserved
from ..core.keys import quote
from ..engine import Engine
from ..read import datasets


def complete_rows(engine: Engine, key: str, edits: pa.Table, keys: tuple[str, ...]) -> pa.Table:
    """The full new version of every edited row: current values overlaid with ``edits``' columns.

    Refuses keys the dataset lacks (an update is not an insert). The read happens before the write
    takes the dataset's writer lock, so two concurrent partial edits of the same row may race;
    send whole rows (every column) when that matters.
    """
    if not keys:
        raise InvalidWriteError("update_rows needs keys=[...] naming the key column(s)")
    refuse_reserved(edits.schema)
    missing = [k for k in keys if k not in edits.column_names]
    if missing:
        raise InvalidWriteError(f"key column(s) {missing} are not in the edits (columns: {edits.column_names})")
    schema = datasets.schema(engine, key)
    user = [f.name for f in schema if f.name not in IDENTITY_COLUMNS]
    unknown = [c for c in edits.column_names if c not in user]
    if unknown:
        raise InvalidWriteError(f"column(s) {unknown} are not in {key!r} (columns: {user}); add columns with write()")
    for k in keys:  # a null key names no row: say so, rather than "no row with key None"
        nulls = edits.column(k).null_count
        if nulls:
            raise NullKeyError(k, nulls)
    con = duckdb.connect(config={"threads": engine.settings.duckdb_threads, "memory_limit": engine.settings.duckdb_memory_limit})
    try:
        con.execute("SET TimeZone = 'UTC'")
        con.register("current_rows", datasets.arrow_source(engine, key))
        con.register("edits", edits)
        on = " AND ".join(f"e.{quote(k)} IS NOT DISTINCT FROM c.{quote(k)}" for k in keys)
        absent = con.execute(
            f"SELECT {', '.join('e.' + quote(k) for k in keys)} FROM edits e ANTI JOIN current_rows c ON {on} LIMIT 3"
        ).fetchall()
        if absent:
            shown = ", ".join(repr(a if len(a) > 1 else a[0]) for a in absent)
            raise KeyNotFoundError(
                f"{key!r} has no row with key {list(keys)} = {shown}; update_rows edits existing rows only "
                "(use write(mode='upsert') to insert new ones)"
            )
        if set(user) <= set(edits.column_names):
            return edits.select(user)
        cols = ", ".join(
            f"e.{quote(c)} AS {quote(c)}" if c in edits.column_names else f"c.{quote(c)} AS {quote(c)}" for c in user
        )
        out = con.sql(f"SELECT {cols} FROM edits e JOIN current_rows c ON {on}").to_arrow_table()
        return out.cast(pa.schema([schema.field(c) for c in user]))
    finally:
        con.close()
