"""``trident env list | show NAME | diff NAME | promote NAME | drop NAME``: environments
(docs/environments.md). The commands act on production's workspace whatever ``TRIDENT_ENVIRONMENT``
says, except ``promote``, which publishes into production and so runs from it."""

from __future__ import annotations

import click

from .admin import open_trident
from .options import JSON_OPTION
from .render import console, new_table, print_json, when


@click.group("env")
def env() -> None:
    """Environments: zero-copy branches of every dataset a pull request's runs write
    (TRIDENT_ENVIRONMENT=pr-42), diffed against production, promoted at once, dropped."""


@env.command("list")
@JSON_OPTION
def list_(as_json: bool) -> None:
    """Every environment of the workspace."""
    with open_trident() as t:
        found = t.environments.list()
        if as_json:
            print_json(found)
            return
        table = new_table(show_lines=False)
        for col in ("environment", "datasets", "created", "last written", "idle days"):
            table.add_column(col)
        for e in found:
            table.add_row(e.name, str(e.dataset_count), when(e.created_at), when(e.last_used_at), f"{e.idle_days:.1f}")
        console.print(table)
        console.print(f"{len(found)} environment(s)")


@env.command("show")
@click.argument("name")
@JSON_OPTION
def show(name: str, as_json: bool) -> None:
    """The datasets environment NAME wrote: fork, current version, whether production moved."""
    with open_trident() as t:
        info = t.environments.show(name)
        if as_json:
            print_json(info)
            return
        table = new_table(title=f"environment {info.name}", show_lines=False)
        for col in ("dataset", "rows", "txn", "forked from", "production moved"):
            table.add_column(col, overflow="fold")
        for d in info.datasets:
            fork = "born here" if d.born_in_env else str(d.fork_txn_id)
            table.add_row(d.key, str(d.row_count), str(d.txn_id), fork, "yes" if d.production_moved else "no")
        console.print(table)
        console.print(f"{info.dataset_count} dataset(s); last written {when(info.last_used_at)}")


@env.command("diff")
@click.argument("name")
@JSON_OPTION
def diff(name: str, as_json: bool) -> None:
    """What environment NAME changed against the production version it forked, per dataset."""
    with open_trident() as t:
        found = t.environments.diff(name)
        if as_json:
            print_json(found.datasets)
            return
        table = new_table(title=f"environment {found.name} vs production", show_lines=False)
        for col in ("dataset", "added", "removed", "changed", "matched by", "schema", "production moved"):
            table.add_column(col, overflow="fold")
        for d in found.datasets:
            schema = ", ".join(
                [f"+{c}" for c in d.columns_added] + [f"-{c}" for c in d.columns_removed] + [f"~{c}" for c in d.columns_retyped]
            )
            name_ = f"{d.key} (new)" if d.born_in_env else d.key
            table.add_row(
                name_,
                str(d.rows_added),
                str(d.rows_removed),
                str(d.rows_changed),
                ",".join(d.matched_by),
                schema,
                "yes" if d.production_moved else "no",
            )
        console.print(table)
        console.print(f"{len(found.changed)} of {len(found.datasets)} dataset(s) changed")


@env.command("promote")
@click.argument("name")
def promote(name: str) -> None:
    """Publish every dataset environment NAME changed into production as ONE transaction group:
    all of them or none. Refused, changing nothing, when production changed a dataset in a way
    the environment's change cannot be rebased onto."""
    with open_trident() as t:
        done = t.environments.promote(name)
        for key, how in sorted(done.promoted.items()):
            console.print(f"promoted {key} ({'metadata only' if how == 'fast' else 'rebased: ' + how})")
        if done.group_id is None:
            console.print(f"environment {done.name}: nothing changed, nothing to promote")
            return
        console.print(f"promoted environment {done.name}: {len(done.promoted)} dataset(s) at once in group {done.group_id}")


@env.command("drop")
@click.argument("name")
def drop(name: str) -> None:
    """Remove environment NAME: its branches, the files only it used, its control-plane rows.
    Nothing production or another environment reads is deleted."""
    with open_trident() as t:
        done = t.environments.drop(name)
        gone = f"; tables born in it removed: {', '.join(done.dropped_tables)}" if done.dropped_tables else ""
        console.print(
            f"dropped environment {done.name}: {done.datasets} dataset branch(es), {done.deleted_files} file(s) deleted{gone}"
        )


COMMANDS = [env]
