"""Readable terminal output: Arrow tables as rich tables, long work as progress bars."""

from __future__ import annotations

import pyarrow as pa
from rich.console import Console
from rich.table import Table

console = Console()


def print_table(table: pa.Table, *, title: str | None = None, max_rows: int = 50) -> None:
    out = Table(title=title, show_lines=False)
    for name in table.column_names:
        out.add_column(name, overflow="fold")
    for row in table.slice(0, max_rows).to_pylist():
        out.add_row(*("" if v is None else str(v) for v in row.values()))
    console.print(out)
    if table.num_rows > max_rows:
        console.print(f"... {table.num_rows - max_rows} more rows ({table.num_rows} in all)")
