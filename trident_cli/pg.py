"""``trident pg status | start | stop``: the embedded Postgres, visible and stoppable.

These commands never open the trident (that would start the server): they look at the data dir
(``$TRIDENT_HOME/pg``) and ask the server directly. With ``TRIDENT_PG_DSN`` set the control plane
is somebody else's Postgres; they say so and leave it alone.

``stop`` refuses while a write holds a dataset's writer lock (the session advisory lock of
``ControlPlane.writer_lock``, seen in ``pg_locks``): stopping would abort that write. ``--force``
stops anyway; the interrupted transaction is repaired by the next write of that dataset or by
``trident reconcile``.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import click
import psycopg
from rich.markup import escape

from trident_resources.control.embedded_pg import (
    DATABASE,
    EmbeddedStatus,
    embedded_status,
    ensure_embedded_postgres,
    stop_embedded_postgres,
)
from trident_resources.core.errors import EmbeddedPostgresBusyError, NotEmbeddedPostgresError
from trident_resources.core.settings import TridentSettings, settings_from_env

from .render import console, new_table, when

# The writer lock is pg_try_advisory_lock(hashtextextended(dataset_id::text, 7)) (queries.py); a
# bigint advisory key shows in pg_locks as classid = high half, objid = low half, objsubid = 1.
WRITER_HOLDS = """
SELECT d.workspace, d.key, l.pid AS backend_pid, o.txn_id, o.writer, o.pid AS writer_pid, o.host, o.started_at
FROM pg_locks l
JOIN trident_datasets d
  ON l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
 AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
 AND l.classid::bigint = ((hashtextextended(d.dataset_id::text, 7) >> 32) & 4294967295)
 AND l.objid::bigint = (hashtextextended(d.dataset_id::text, 7) & 4294967295)
LEFT JOIN trident_ledger o ON o.dataset_id = d.dataset_id AND o.status = 'open'
ORDER BY d.workspace, d.key
"""


@dataclass(frozen=True)
class WriterHold:
    """A write in progress: a dataset whose writer lock a live connection holds."""

    workspace: str
    key: str
    backend_pid: int
    txn_id: str | None
    writer: str | None
    writer_pid: int | None
    host: str | None
    started_at: datetime | None

    def describe(self) -> str:
        where = f"dataset {self.key!r} (workspace {self.workspace!r})"
        if self.txn_id is None:
            return f"{where} is locked by a writer (postgres backend {self.backend_pid})"
        since = f", open since {when(self.started_at)}" if self.started_at else ""
        return (
            f"{where} is being written by transaction {self.txn_id} (writer {self.writer}, "
            f"pid {self.writer_pid} on {self.host}{since})"
        )


def writer_holds(port: int) -> list[WriterHold]:
    """Writes holding a dataset writer lock on the embedded server at ``port`` (none before the
    control plane's tables exist)."""
    with psycopg.connect(
        f"postgresql://postgres@127.0.0.1:{port}/{DATABASE}",
        connect_timeout=5,
        autocommit=True,
        application_name="trident-embedded-pg-admin",
    ) as conn:
        if conn.execute(
            "SELECT to_regclass('trident_datasets') IS NOT NULL AND to_regclass('trident_ledger') IS NOT NULL"
        ).fetchone() != (True,):
            return []
        return [
            WriterHold(ws, key, bpid, None if txn is None else str(txn), writer, wpid, host, started)
            for ws, key, bpid, txn, writer, wpid, host, started in conn.execute(WRITER_HOLDS)
        ]


def _external(settings: TridentSettings) -> str | None:
    """Where TRIDENT_PG_DSN points (host:port/db, never credentials), or None for the embedded default."""
    if settings.pg_dsn is None:
        return None
    try:
        parts = psycopg.conninfo.conninfo_to_dict(settings.pg_dsn.get_secret_value())
        where = f"{parts.get('host', 'localhost')}:{parts.get('port', 5432)}/{parts.get('dbname', '')}"
    except psycopg.Error:
        where = "(a DSN that does not parse)"
    return (
        f"TRIDENT_PG_DSN is set: the control plane is the Postgres at {where}, which Trident does not manage; "
        "`trident pg` only starts and stops the embedded Postgres and leaves that server alone"
    )


def _data_dir(settings: TridentSettings) -> Path:
    return settings.home / "pg"


def _human(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def _policy(idle_minutes: float | None) -> str:
    if idle_minutes is None:
        return "none: no watchdog (it runs until `trident pg stop`)"
    if idle_minutes == 0:
        return "when the process that started it ends"
    return f"after {idle_minutes:g} idle minute(s)"


@click.group("pg")
def pg() -> None:
    """The embedded Postgres (the control plane when TRIDENT_PG_DSN is unset): status, start, stop."""


@pg.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
def status(as_json: bool) -> None:
    """Running or not, address, data dir, size, connected clients, writes in progress, idle policy."""
    settings = settings_from_env()
    if (msg := _external(settings)) is not None:
        click.echo(json.dumps({"embedded": False, "message": msg}) if as_json else msg)
        return
    st = embedded_status(_data_dir(settings))
    holds: list[WriterHold] | None = []
    if st.running and st.port is not None and st.clients is not None:
        try:
            holds = writer_holds(st.port)
        except psycopg.Error:  # stopping or recovering between the two looks: unknown, not an error
            holds = None
    if as_json:
        out: dict[str, Any] = {
            "embedded": True,
            **asdict(st),
            "dsn": st.dsn,
            "writes": None if holds is None else [asdict(h) for h in holds],
        }
        click.echo(json.dumps(out, default=str))
        return
    state = (
        "running" + (f" (pid {st.pid})" if st.pid else "")
        if st.running
        else "stopped"
        if st.initialized
        else "not created yet (the first use creates it)"
    )
    rows: list[tuple[str, str]] = [
        ("state", state),
        ("address", f"127.0.0.1:{st.port}" if st.running and st.port else ""),
        ("data dir", str(st.data_dir)),
        ("size", _human(st.size_bytes)),
        ("postgres", st.version or ""),
        ("clients connected", "" if not st.running else "?" if st.clients is None else str(st.clients)),
        (
            "writes in progress",
            "?" if holds is None else "; ".join(h.describe() for h in holds) if holds else ("0" if st.running else ""),
        ),
        (
            "idle shutdown",
            _policy(st.idle_minutes) + (f" (watchdog pid {st.watchdog_pid})" if st.watchdog_pid else "") if st.running else "",
        ),
        ("last use", when(st.last_use)),
    ]
    table = new_table("embedded Postgres", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    for k, v in rows:
        table.add_row(k, escape(v))
    console.print(table)


@pg.command("start")
@click.option(
    "--idle-minutes",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Stop after this many minutes without a client (default: TRIDENT_EMBEDDED_PG_IDLE_MINUTES).",
)
@click.option("--keep-running", is_flag=True, help="Run until `trident pg stop`, however long it is idle.")
def start(idle_minutes: float | None, keep_running: bool) -> None:
    """Start the embedded Postgres (every command starts it when needed; this is for symmetry).

    Idle minutes mean what TRIDENT_EMBEDDED_PG_IDLE_MINUTES means; its 0 ("stop when the process
    that started it ends") would stop a server this command started at once, so there it runs
    until `trident pg stop`, as with --keep-running."""
    if keep_running and idle_minutes is not None:
        raise click.UsageError("--keep-running and --idle-minutes contradict each other; give one")
    settings = settings_from_env()
    if (msg := _external(settings)) is not None:
        raise NotEmbeddedPostgresError(msg + "; nothing was started")
    root = _data_dir(settings)
    before = embedded_status(root)
    if before.running:
        click.echo(
            f"the embedded Postgres is already running on 127.0.0.1:{before.port} (data in {before.data_dir}); "
            f"idle shutdown: {_policy(before.idle_minutes)}"
        )
        return
    idle = math.inf if keep_running else settings.embedded_pg_idle_minutes if idle_minutes is None else idle_minutes
    if idle == 0:
        idle = math.inf
    ensure_embedded_postgres(root, idle_minutes=idle, announce=False)
    after = embedded_status(root)
    policy = "it runs until `trident pg stop`" if math.isinf(idle) else f"it stops after {idle:g} idle minute(s)"
    click.echo(
        f"started the embedded Postgres on 127.0.0.1:{after.port} (data in {after.data_dir}); {policy}; "
        "stop it with `trident pg stop`"
    )


@pg.command("stop")
@click.option("--force", is_flag=True, help="Stop even while a write is in progress (the write is aborted).")
def stop(force: bool) -> None:
    """Fast shutdown of the embedded Postgres; refused while a write holds a dataset's writer lock."""
    settings = settings_from_env()
    if (msg := _external(settings)) is not None:
        raise NotEmbeddedPostgresError(msg + "; nothing was stopped")
    root = _data_dir(settings)
    st: EmbeddedStatus = embedded_status(root)
    if not st.running:
        click.echo(f"the embedded Postgres is not running (data in {st.data_dir})")
        return
    holds: list[WriterHold] = []
    if st.port is not None and st.clients is not None:
        try:
            holds = writer_holds(st.port)
        except psycopg.Error as exc:
            if not force:
                raise EmbeddedPostgresBusyError(
                    f"cannot tell whether a write is in progress ({type(exc).__name__}: {exc}); "
                    "pass --force to stop the embedded Postgres anyway"
                ) from exc
    if holds and not force:
        raise EmbeddedPostgresBusyError(
            f"refusing to stop the embedded Postgres: {'; '.join(h.describe() for h in holds)}. Stopping would abort "
            f"{'that write' if len(holds) == 1 else 'those writes'}: wait for it to finish, or pass --force"
        )
    if not stop_embedded_postgres(root):
        click.echo(f"the embedded Postgres is not running (data in {st.data_dir})")
        return
    detail = f"; {st.clients} client connection(s) closed" if st.clients else ""
    if holds:
        detail += f"; {len(holds)} write(s) aborted (the next write of the dataset, or `trident reconcile`, cleans up after it)"
    click.echo(f"stopped the embedded Postgres (127.0.0.1:{st.port}, data in {st.data_dir}){detail}")


COMMANDS = [pg]
