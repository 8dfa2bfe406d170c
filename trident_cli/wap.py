"""``trident staged``, ``trident publish KEY TXN``, ``trident discard KEY TXN``: the operator's side
of write-audit-publish (a staged version is audited with ``trident sql``/``Trident.read(staged=)``,
then published or discarded). TXN may be a unique prefix of the transaction id."""

from __future__ import annotations

import click

from .admin import open_trident
from .options import JSON_OPTION
from .render import console, entry_json, new_table, print_json, when
from .txn import resolve_decision


@click.command("staged")
@click.argument("key", required=False)
@JSON_OPTION
def staged(key: str | None, as_json: bool) -> None:
    """Staged versions waiting for publish or discard (all datasets, or KEY's)."""
    with open_trident() as t:
        rows = t.staged(key)
        if as_json:
            print_json([{"key": k, **entry_json(e)} for k, e in rows])
            return
        table = new_table(show_lines=False)
        for col in ("dataset", "txn", "mode", "writer", "rows", "staged at"):
            table.add_column(col, overflow="fold")
        for k, e in rows:
            table.add_row(k, str(e.txn_id), e.mode, e.writer, str(e.row_count), when(e.staged_at))
        console.print(table)
        console.print(f"{len(rows)} staged version(s)")


@click.command("publish")
@click.argument("key")
@click.argument("txn")
def publish(key: str, txn: str) -> None:
    """Make staged transaction TXN the published version of KEY (metadata only). Publishing a
    version that is published already succeeds with a note (a retried script is not an error)."""
    with open_trident() as t:
        txn_id = resolve_decision(t, key, txn)
        entry = next((e for e in t.history(key) if str(e.txn_id) == str(txn_id)), None)
        if entry is not None and entry.status == "committed" and entry.staged_at is not None:
            console.print(
                f"[yellow]note:[/] txn {entry.txn_id} of {key} is published already "
                f"(at {when(entry.committed_at)}, {entry.row_count} rows); nothing to do",
                highlight=False,
            )
            return
        r = t.publish(key, txn_id)
        console.print(f"published {key}: txn {r.txn_id}, {r.row_count} rows, snapshot {r.snapshot_id}")


@click.command("discard")
@click.argument("key")
@click.argument("txn")
def discard(key: str, txn: str) -> None:
    """Drop staged transaction TXN of KEY (ledger 'rejected'; its files are removed)."""
    with open_trident() as t:
        txn_id = resolve_decision(t, key, txn)
        t.discard(key, txn_id)
        console.print(f"discarded {key}: txn {txn_id}")


COMMANDS = [staged, publish, discard]
