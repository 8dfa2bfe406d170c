"""``trident``: one click group; each command family lives in its own module and registers here."""

from __future__ import annotations

import logging
import sys

import click

from trident_resources import TridentError


class _Group(click.Group):
    """Turn Trident's named errors into one readable line and exit code 2, not a traceback."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except TridentError as exc:
            click.secho(f"error: {exc}", fg="red", err=True)
            sys.exit(2)


@click.group(cls=_Group)
@click.option("-v", "--verbose", is_flag=True, help="Log what the trident does (routing, transactions).")
def cli(verbose: bool) -> None:
    """Trident: datasets on object storage + Iceberg + a Postgres control plane, in Dagster."""
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")


def _register() -> None:
    from . import admin, check, demo, pg, ui, wap

    for module in (demo, check, admin, pg, ui, wap):
        for command in module.COMMANDS:
            cli.add_command(command)


_register()


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
