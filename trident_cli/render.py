"""Readable terminal output: Arrow tables as rich tables, long work as progress bars, and the
machine-readable forms scripts and CI take (``--json``, ``sql --format csv|json``).

Outside a terminal (a pipe, a CI log, a file) rich would lay tables out for 80 columns and cut
cells with an ellipsis, so a dataset key or a transaction id in a log would be unusable. There
the console is as wide as the content needs (``COLUMNS`` still wins when set), and table titles
start at the left margin (centred over a table as wide as its content, they read as stray text in
a log).

Every instant is shown one way (``when``): UTC, to the second, ``2026-12-02 06:02:19Z``; in JSON it
is the ISO 8601 form with its offset.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, is_dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, TextIO
from uuid import UUID

import click
import pyarrow as pa
import pyarrow.csv as pacsv
from rich.console import Console, ConsoleDimensions
from rich.table import Table

UNBOUNDED_WIDTH = 10_000  # wide enough for any row we print; tables are not expanded to it


class _Console(Console):
    """A rich Console that does not wrap or cut output that is not going to a terminal."""

    @property
    def size(self) -> ConsoleDimensions:
        dims = super().size
        if self._width is None and not self.is_terminal and "COLUMNS" not in os.environ:
            return ConsoleDimensions(UNBOUNDED_WIDTH, dims.height)
        return dims

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        self._width, self._height = new_size


console = _Console()


def new_table(title: str | None = None, **kwargs: Any) -> Table:
    """A rich table; outside a terminal its title is left-aligned (module docstring)."""
    return Table(title=title, title_justify="center" if console.is_terminal else "left", **kwargs)


def when(value: datetime | None) -> str:
    """The one text form of an instant in tables (module docstring); "" for none."""
    if value is None:
        return ""
    if value.tzinfo is not None:
        value = value.astimezone(UTC)
    return f"{value:%Y-%m-%d %H:%M:%S}" + ("Z" if value.tzinfo is not None else "")


def plain(value: Any) -> Any:
    """``value`` as JSON takes it: dataclasses as objects, instants as ISO 8601, ids as text."""
    if is_dataclass(value) and not isinstance(value, type):
        return plain(asdict(value))
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [plain(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (date, UUID, Decimal, Path)):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    return value


def entry_json(e: Any) -> dict[str, Any]:
    """A ledger entry as ``--json`` prints it (every field but the writer's pid and host)."""
    return {
        "txn_id": e.txn_id,
        "status": e.status,
        "mode": e.mode,
        "writer": e.writer,
        "sink": e.sink,
        "requested_sink": e.requested_sink,
        "clamped": e.clamped,
        "route_reason": e.route_reason,
        "started_at": e.started_at,
        "committed_at": e.committed_at,
        "ended_at": e.ended_at,
        "staged_at": e.staged_at,
        "rows_written": e.rows_written,
        "row_count": e.row_count,
        "skipped": e.skipped,
        "preserved": e.preserved,
        "snapshot_id": e.snapshot_id,
        "schema_version": e.schema_version,
        "source_refs": e.source_refs,
        "metadata": e.metadata,
        "error": e.error,
    }


def print_json(value: Any) -> None:
    """One JSON document on stdout, indented, nothing else: what ``--json`` prints."""
    click.echo(json.dumps(plain(value), indent=2, default=str))


def json_block(value: Any, indent: str = "  ") -> None:
    """A JSON value shown below a table, indented (a JSON object folded into a table cell is
    unreadable in a log)."""
    text = json.dumps(plain(value), indent=2, default=str)
    console.out("\n".join(indent + line for line in text.splitlines()), highlight=False)


def print_table(table: pa.Table, *, title: str | None = None, limit: int = 50) -> None:
    """An Arrow table as a rich table of at most ``limit`` rows (0: all), saying what it left out."""
    out = new_table(title, show_lines=False)
    for name in table.column_names:
        out.add_column(name, overflow="fold")
    shown = table.num_rows if limit <= 0 else min(limit, table.num_rows)  # beyond a C long overflowed pyarrow's slice
    for row in table.slice(0, shown).to_pylist():
        out.add_row(*("" if v is None else when(v) if isinstance(v, datetime) else str(v) for v in row.values()))
    console.print(out)
    if table.num_rows > shown:
        console.print(f"... {table.num_rows - shown} more rows ({table.num_rows} in all; --limit 0 prints all)")


def write_rows(table: pa.Table, fmt: str, *, limit: int = 0, out: TextIO | None = None) -> None:
    """``table`` as CSV (header, then rows; Arrow's writer) or JSON (an array of row objects) on
    stdout, at most ``limit`` rows (0: all): for scripts, nothing but the rows."""
    if limit > 0:
        table = table.slice(0, limit)
    stream = out or sys.stdout
    if fmt == "csv":
        sink = pa.BufferOutputStream()
        pacsv.write_csv(table, sink)
        stream.write(sink.getvalue().to_pybytes().decode())
    else:
        stream.write(json.dumps(plain(table.to_pylist()), indent=2, default=str) + "\n")
    stream.flush()
