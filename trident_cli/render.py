"""Readable terminal output: Arrow tables as rich tables, long work as progress bars.

Outside a terminal (a pipe, a CI log, a file) rich would lay tables out for 80 columns and cut
cells with an ellipsis, so a dataset key or a transaction id in a log would be unusable. There
the console is as wide as the content needs (``COLUMNS`` still wins when set)."""

from __future__ import annotations

import os

import pyarrow as pa
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


def print_table(table: pa.Table, *, title: str | None = None, max_rows: int = 50) -> None:
    out = Table(title=title, show_lines=False)
    for name in table.column_names:
        out.add_column(name, overflow="fold")
    max_rows = min(max_rows, table.num_rows)  # --max-rows beyond a C long overflowed pyarrow's slice
    for row in table.slice(0, max_rows).to_pylist():
        out.add_row(*("" if v is None else str(v) for v in row.values()))
    console.print(out)
    if table.num_rows > max_rows:
        console.print(f"... {table.num_rows - max_rows} more rows ({table.num_rows} in all)")
