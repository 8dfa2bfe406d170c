"""Which home a command uses, said when it matters: when the command creates a home (a typo in
the folder, or a command run outside the project, would otherwise start a second, empty embedded
Postgres in silence) and when it finds nothing there. Said on stderr: stdout may be JSON."""

from __future__ import annotations

import click

from trident_resources import TridentSettings
from trident_resources.core.home import find_home


def where(settings: TridentSettings) -> str:
    """Where this command's datasets live, and why there: the control plane named by
    ``TRIDENT_PG_DSN``, or the home and how it was found."""
    if settings.pg_dsn is not None:
        return f"control plane TRIDENT_PG_DSN, TRIDENT_HOME {settings.home}"
    found = find_home()
    origin = found.origin if found.path == settings.home else "set explicitly"
    return f"TRIDENT_HOME {settings.home}, from {origin}"


def announce_new_home(where_it_is: str) -> None:
    """Say that a home was created, and why there (``where`` of it, taken before it existed)."""
    click.echo(
        f"trident: created a new home ({where_it_is}); set TRIDENT_HOME, or run from the project's folder, to use another",
        err=True,
    )
