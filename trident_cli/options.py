"""Options that mean the same in every command, declared once so that they are spelt the same:
``--json`` (one JSON document on stdout instead of tables), ``--limit`` (how many rows of output
a command prints; 0 prints all), and the Definitions' ``-w/-f/-m/-a`` as Dagster's CLI names them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

JSON_OPTION = click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON document (indented) instead of tables; for scripts and CI."
)

LIMIT_HELP = "0 prints all"


def limit_option(default: int | None, what: str) -> Callable[[F], F]:
    """``--limit N``: the one name for "at most N rows of output" (0: all)."""
    shown = f" [default: {default}]" if default is not None else ""
    return click.option(
        "--limit",
        "limit",
        type=click.IntRange(min=0),
        default=default,
        help=f"{what}; {LIMIT_HELP}.{shown}",
    )


def definitions_options(f: F) -> F:
    """``-w/--workspace``, ``-f/--python-file``, ``-m/--module-name``, ``-a/--attribute``: which
    Definitions, as ``dagster dev`` / ``dagster asset materialize`` take them (the short forms and
    Dagster's long names; ``--file`` and ``--module`` are kept as aliases)."""
    for option in reversed(
        (
            click.option(
                "-w",
                "--workspace",
                "workspaces",
                multiple=True,
                type=click.Path(path_type=Path, dir_okay=False),
                help="A Dagster workspace.yaml (its python_module / python_file entries); repeatable.",
            ),
            click.option(
                "-f",
                "--python-file",
                "--file",
                "files",
                multiple=True,
                type=click.Path(path_type=Path, dir_okay=False),
                help="A Python file holding Definitions; its directory goes on sys.path. Repeatable.",
            ),
            click.option(
                "-m",
                "--module-name",
                "--module",
                "modules",
                multiple=True,
                metavar="MODULE",
                help="A module holding Definitions, imported with the current directory on sys.path. Repeatable.",
            ),
            click.option(
                "-a", "--attribute", default=None, help="The Definitions' name in the file or module (default: the only one)."
            ),
        )
    ):
        f = option(f)
    return f
