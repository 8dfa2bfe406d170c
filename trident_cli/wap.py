"""``trident staged``, ``trident publish``, ``trident discard``: the operator's side of
write-audit-publish (a staged version is audited with ``trident sql``/``Trident.read(staged=)``,
then published or discarded) and of transaction groups (``Trident.transaction()``: staged versions
of several datasets that publish or are discarded together). Ids may be given as a unique prefix."""

from __future__ import annotations

import click

from trident_resources.control.groups import KEPT_META

from .admin import open_trident
from .options import JSON_OPTION
from .render import console, entry_json, new_table, print_json, when
from .txn import resolve_decision


@click.command("staged")
@click.argument("key", required=False)
@JSON_OPTION
def staged(key: str | None, as_json: bool) -> None:
    """Staged versions waiting for publish or discard (all datasets, or KEY's), by transaction group."""
    with open_trident() as t:
        rows = sorted(t.staged(key), key=lambda r: (str(r[1].group_id or ""), r[0]))
        if as_json:
            print_json([{"key": k, "group_id": e.group_id, **entry_json(e)} for k, e in rows])
            return
        table = new_table(show_lines=False)
        for col in ("group", "dataset", "txn", "mode", "writer", "rows", "staged at"):
            table.add_column(col, overflow="fold")
        for k, e in rows:
            group = str(e.group_id)[:8] if e.group_id else ""
            table.add_row(group, k, str(e.txn_id), e.mode, e.writer, str(e.row_count), when(e.staged_at))
        console.print(table)
        groups = sorted({e.group_id for _, e in rows if e.group_id is not None}, key=str)
        console.print(f"{len(rows)} staged version(s)" + (f" in {len(groups)} transaction group(s)" if groups else ""))
        for g in groups:
            n = sum(1 for _, e in rows if e.group_id == g)
            record = t.transaction_group(g)
            label = f" ({record.label})" if record.label else ""
            kept = record.metadata.get(KEPT_META)
            console.print(
                f"group {g}{label}: {n} dataset(s)"
                + (f", kept for audit: {kept}" if kept else "")
                + f"; publish all with `trident publish {str(g)[:8]}`, or `trident discard {str(g)[:8]}`"
            )


@click.command("publish")
@click.argument("key_or_group")
@click.argument("txn", required=False)
def publish(key_or_group: str, txn: str | None) -> None:
    """Make staged transaction TXN the published version of KEY (metadata only), or, with one
    argument, publish every staged version of transaction group GROUP at once. Publishing a version
    that is published already succeeds with a note (a retried script is not an error)."""
    with open_trident() as t:
        if txn is None:
            done = t.publish_group(key_or_group)
            for k, r in sorted(done.results.items()):
                console.print(f"published {k}: txn {r.txn_id}, {r.row_count} rows, snapshot {r.snapshot_id}")
            console.print(f"published group {done.group_id}: {len(done.results)} dataset(s) at once")
            return
        key = key_or_group
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
@click.argument("key_or_group")
@click.argument("txn", required=False)
def discard(key_or_group: str, txn: str | None) -> None:
    """Drop staged transaction TXN of KEY (ledger 'rejected'; its files are removed), or, with one
    argument, every staged version of transaction group GROUP."""
    with open_trident() as t:
        if txn is None:
            gone = t.discard_group(key_or_group)
            console.print(f"discarded group {key_or_group}: {len(gone)} staged version(s)")
            return
        txn_id = resolve_decision(t, key_or_group, txn)
        t.discard(key_or_group, txn_id)
        console.print(f"discarded {key_or_group}: txn {txn_id}")


COMMANDS = [staged, publish, discard]
