"""``trident staged``, ``trident publish``, ``trident discard``: the operator's side of
write-audit-publish (a staged version is audited with ``trident sql``/``Trident.read(staged=)``,
then published or discarded) and of transaction groups (``Trident.transaction()``: staged versions
of several datasets that publish or are discarded together). Ids may be given as a unique prefix."""

from __future__ import annotations

import uuid

import click
from rich.table import Table

from trident_resources import LedgerEntry, Trident

from .admin import open_trident
from .render import console


@click.command("staged")
@click.argument("key", required=False)
def staged(key: str | None) -> None:
    """Staged versions waiting for publish or discard (all datasets, or KEY's), by transaction group."""
    with open_trident() as t:
        rows = sorted(t.staged(key), key=lambda r: (str(r[1].group_id or ""), r[0]))
        table = Table(show_lines=False)
        for col in ("group", "dataset", "txn", "mode", "writer", "rows", "staged at"):
            table.add_column(col, overflow="fold")
        for k, e in rows:
            table.add_row(
                str(e.group_id)[:8] if e.group_id else "",
                k,
                str(e.txn_id),
                e.mode,
                e.writer,
                str(e.row_count),
                f"{e.staged_at:%Y-%m-%d %H:%M:%S%z}" if e.staged_at else "",
            )
        console.print(table)
        groups = sorted({e.group_id for _, e in rows if e.group_id is not None}, key=str)
        console.print(f"{len(rows)} staged version(s)" + (f" in {len(groups)} transaction group(s)" if groups else ""))
        for g in groups:
            n = sum(1 for _, e in rows if e.group_id == g)
            console.print(
                f"group {g}: {n} dataset(s); publish all with `trident publish {str(g)[:8]}`, or `trident discard {str(g)[:8]}`"
            )


def _staged_txn(t: Trident, key: str, txn: str) -> uuid.UUID:
    """The staged transaction of ``key`` that ``txn`` (a whole id or a unique prefix) names."""
    text = txn.strip().lower()
    try:
        return uuid.UUID(text)
    except ValueError:
        pass
    found: list[LedgerEntry] = [e for _, e in t.staged(key) if str(e.txn_id).startswith(text)]
    if len(found) != 1:
        what = "no" if not found else "several"
        raise click.BadParameter(f"{what} staged transaction(s) of {key!r} start with {txn!r} (see `trident staged {key}`)")
    return found[0].txn_id


@click.command("publish")
@click.argument("key_or_group")
@click.argument("txn", required=False)
def publish(key_or_group: str, txn: str | None) -> None:
    """Publish staged transaction TXN of KEY (metadata only), or, with one argument, every staged
    version of transaction group GROUP at once."""
    with open_trident() as t:
        if txn is None:
            done = t.publish_group(key_or_group)
            for k, r in sorted(done.results.items()):
                console.print(f"published {k}: txn {r.txn_id}, {r.row_count} rows, snapshot {r.snapshot_id}")
            console.print(f"published group {done.group_id}: {len(done.results)} dataset(s) at once")
            return
        r = t.publish(key_or_group, _staged_txn(t, key_or_group, txn))
        console.print(f"published {key_or_group}: txn {r.txn_id}, {r.row_count} rows, snapshot {r.snapshot_id}")


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
        chosen = _staged_txn(t, key_or_group, txn)
        t.discard(key_or_group, chosen)
        console.print(f"discarded {key_or_group}: txn {chosen}")


COMMANDS = [staged, publish, discard]
