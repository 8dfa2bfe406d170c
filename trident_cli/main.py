"""``trident``: one click group; each command family lives in its own module and registers here.

Exit status, for scripts and CI: 0 success; 1 a check failed (``trident check``'s blocking
checks, ``--fail-on-staged``, a canary whose copies differed); 2 the command could not do what it
was asked (a usage error, a selection that matches nothing, or any named ``TridentError``)."""

from __future__ import annotations

import logging
import sys
from importlib.metadata import PackageNotFoundError, version

import click

from trident_resources import DatasetNotFoundError, TridentError

USAGE_EXIT = 2


def _version() -> str:
    try:
        return version("trident")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


class _Group(click.Group):
    """Turn Trident's named errors into one readable line and exit code 2, not a traceback; and
    give click's own errors (a bad file, ``ClickException``) exit 2 too, so that 1 means only "a
    check failed"."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except TridentError as exc:
            message = str(exc)
            if isinstance(exc, DatasetNotFoundError):
                from trident_resources.core.settings import settings_from_env

                from .home import where

                message += f" (looked in {where(settings_from_env())})"
            click.secho(f"error: {message}", fg="red", err=True)
            sys.exit(USAGE_EXIT)
        except click.ClickException as exc:
            if exc.exit_code != USAGE_EXIT:  # a ClickException (FileError...) is 1 by click's default
                exc.show()
                sys.exit(USAGE_EXIT)
            raise


@click.group(cls=_Group)
@click.version_option(_version(), "--version", prog_name="trident", message="%(prog)s %(version)s")
@click.option("-v", "--verbose", is_flag=True, help="Show what happens: the trident's log (routing, transactions) and Dagster's.")
def cli(verbose: bool) -> None:
    """Trident: datasets on object storage + Iceberg + a Postgres control plane, in Dagster."""
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")


def _register() -> None:
    from . import admin, check, demo, env, pg, sql_server, ui, wap

    for module in (demo, check, admin, pg, ui, wap, env, sql_server):
        for command in module.COMMANDS:
            cli.add_command(command)


_register()


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
