"""``trident staged``, ``trident publish KEY TXN``, ``trident discard KEY TXN``: the operator's side
of write-audit-publish (a staged version is audited with ``trident sql``/``Trident.read(staged=)``,
then published or discarded)."""

from __future__ import annotations

import click
from rich.table import Table

from .admin import open_trident
from .render import console


@click.command("staged")
@click.argument("key", required=False)
def staged(key: str | None) -> None:
    """Staged versions waiting for publish or discard (all datasets, or KEY's)."""
    with open_trident() as t:
        rows = t.staged(key)
        table = Table(show_lines=False)
        for col in ("dataset", "txn", "mode", "writer", "rows", "staged at"):
            table.add_column(col, overflow="fold")
        for k, e in rows:
            table.add_row(
                k, str(e.txn_id), e.mode, e.writer, str(e.row_count), f"{e.staged_at:%Y-%m-%d %H:%M:%S%z}" if e.staged_at else ""
            )
        console.print(table)
        console.print(f"{len(rows)} staged version(s)")


@click.command("publish")
@click.argument("key")
@click.argument("txn")
def publish(key: str, txn: str) -> None:
    """Make staged transaction TXN the published version of KEY (metadata only)."""
    with open_trident() as t:
        r = t.publish(key, txn)
        console.print(f"published {key}: txn {r.txn_id}, {r.row_count} rows, snapshot {r.snapshot_id}")


@click.command("discard")
@click.argument("key")
@click.argument("txn")
def discard(key: str, txn: str) -> None:
    """Drop staged transaction TXN of KEY (ledger 'rejected'; its files are removed)."""
    with open_trident() as t:
        t.discard(key, txn)
        console.print(f"discarded {key}: txn {txn}")


COMMANDS = [staged, publish, discard]
