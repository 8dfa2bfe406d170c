"""``trident ui``: the Dagster UI on a persistent instance, as one command.

Without ``DAGSTER_HOME`` ``dagster dev`` keeps runs, schedule on/off state, sensor cursors and
check history in a temporary folder that goes away with it. This command gives it a home that
lasts: ``$TRIDENT_HOME/dagster`` with a ``dagster.yaml`` written there when absent (edit it freely;
it is never overwritten), whose storage is Postgres (dagster-postgres) at the URL in
``TRIDENT_DAGSTER_PG_URL``:

* set by the deployment in production (its own database, or schema, next to the control plane);
* otherwise derived here: the embedded Postgres (started if needed) or the ``TRIDENT_PG_DSN``
  server, database ``dagster`` (created when missing), handed to ``dagster dev`` in that variable.
  The URL is not written into the yaml because the embedded server's port can change between starts.

The command also holds one connection to the embedded server while the UI runs: Dagster's storage
opens and closes connections per query, which the embedded server's idle watchdog could miss and
then stop the server under a running UI.

Dagster and psycopg are imported lazily, as in the other commands: ``trident --help`` stays fast.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from trident_resources import TridentError
from trident_resources.core.settings import TridentSettings, settings_from_env

DAGSTER_DATABASE = "dagster"
URL_VARIABLE = "TRIDENT_DAGSTER_PG_URL"  # Dagster reads it from dagster.yaml ({env: ...}); we only provide it
DEFAULT_MODULE = "trident_assets.definitions"
KEEPALIVE_APP = "trident-ui"  # not the embedded server's bookkeeping prefix: it counts as a client

INSTANCE_YAML = f"""\
# The Dagster instance of Trident, written by `trident ui` because it was absent: edit freely,
# it is never overwritten. See docs/operations.md for production (k8s, celery, docker).

# Runs, event logs (materializations, check results), schedule and sensor state: Postgres.
# `trident ui` sets {URL_VARIABLE} (the embedded server's `dagster` database by default);
# a deployment sets it to its own Postgres.
# dagster-postgres's storage, with its first claim of a pool safe when runs race for it
# (trident_resources/dagster/instance_storage.py).
storage:
  custom:
    module: trident_resources.dagster.instance_storage
    class: TridentPostgresStorage
    config:
      postgres_url:
        env: {URL_VARIABLE}

# Runs go through Dagster's run queue (the default QueuedRunCoordinator, run by the daemon).
concurrency:
  runs:
    max_concurrent_runs: 4
  # Every Trident asset declares the pool `trident/<dataset key>` (partitioned ones excepted):
  # with one slot per pool, two runs never write the same dataset at once, so a step waits for
  # its slot in Dagster instead of timing out on the dataset's writer lock.
  pools:
    default_limit: 1
    granularity: op

# A run whose worker died is marked failed instead of hanging in STARTED.
run_monitoring:
  enabled: true

telemetry:
  enabled: false
"""


class InstanceStorageError(TridentError):
    """The Dagster instance's Postgres could not be prepared (database missing and not creatable)."""


def dagster_home(settings: TridentSettings) -> Path:
    """Where the persistent instance lives: next to the embedded Postgres and the warehouse."""
    return (Path(settings.home) / "dagster").expanduser().resolve()


def write_instance_config(home: Path) -> Path:
    """Write ``dagster.yaml`` into ``home`` unless one is there (a user's edits win); return it."""
    home.mkdir(parents=True, exist_ok=True)
    path = home / "dagster.yaml"
    if not path.exists():
        tmp = home / f".dagster.yaml.{os.getpid()}"
        tmp.write_text(INSTANCE_YAML)
        tmp.replace(path)
    return path


def _with_database(dsn: str, dbname: str) -> str:
    """The same server and credentials, another database (libpq URL or key=value DSN)."""
    from psycopg.conninfo import conninfo_to_dict

    from trident_resources.dagster.instance_storage import DRIVER

    params = conninfo_to_dict(dsn)
    params["dbname"] = dbname
    host, port = params.get("host") or "localhost", params.get("port") or "5432"
    user = params.get("user") or ""
    password = params.get("password")
    if not str(host).startswith("/"):  # a URL: what Dagster's postgres_url takes (driver named, see DRIVER)
        from urllib.parse import quote

        auth = quote(str(user), safe="") + (":" + quote(str(password), safe="") if password else "")
        extra = {k: v for k, v in params.items() if k not in ("host", "port", "user", "password", "dbname")}
        query = "&".join(f"{k}={quote(str(v), safe='')}" for k, v in extra.items())
        return f"{DRIVER}://{auth}{'@' if auth else ''}{host}:{port}/{dbname}" + (f"?{query}" if query else "")
    return f"{DRIVER}:///{dbname}?" + "&".join(f"{k}={v}" for k, v in params.items() if k != "dbname" and v)


def ensure_database(server_dsn: str, dbname: str = DAGSTER_DATABASE) -> str:
    """Create ``dbname`` on the server of ``server_dsn`` if missing; return a URL to it."""
    import psycopg

    try:
        with psycopg.connect(server_dsn, autocommit=True, connect_timeout=10) as conn:
            if conn.execute("select 1 from pg_database where datname = %s", (dbname,)).fetchone() is None:
                conn.execute(f'create database "{dbname}"')
    except psycopg.errors.DuplicateDatabase:
        pass  # a concurrent `trident ui` created it first
    except psycopg.Error as exc:
        raise InstanceStorageError(
            f"could not prepare the Dagster instance database {dbname!r} on the control-plane server: {exc}; "
            f"create it, or set {URL_VARIABLE} to a Postgres URL for Dagster's storage"
        ) from exc
    return _with_database(server_dsn, dbname)


def instance_storage_url(settings: TridentSettings, environ: dict[str, str] | None = None) -> tuple[str, str]:
    """(URL for Dagster's storage, where it came from). The deployment's variable wins; else the
    ``dagster`` database next to the control plane (the embedded server, started if needed)."""
    environ = dict(os.environ) if environ is None else environ
    if environ.get(URL_VARIABLE):
        from trident_resources.dagster.instance_storage import with_driver

        return with_driver(environ[URL_VARIABLE]), URL_VARIABLE
    if settings.pg_dsn is not None:
        return ensure_database(settings.pg_dsn.get_secret_value()), "TRIDENT_PG_DSN's server, database 'dagster'"
    from trident_resources.control.embedded_pg import ensure_embedded_postgres

    dsn = ensure_embedded_postgres(Path(settings.home) / "pg")
    return ensure_database(dsn), "the embedded Postgres, database 'dagster'"


@contextlib.contextmanager
def keepalive(url: str) -> Iterator[Any]:
    """Hold one connection for the life of the UI (see the module docstring)."""
    import psycopg

    from trident_resources.dagster.instance_storage import DRIVER

    conn = psycopg.connect(
        url.replace(DRIVER + "://", "postgresql://", 1), autocommit=True, application_name=KEEPALIVE_APP, connect_timeout=10
    )
    try:
        yield conn
    finally:
        with contextlib.suppress(psycopg.Error):
            conn.close()


def dagster_dev_command(host: str, port: int, workspace: Path | None, module: str | None, file: Path | None) -> list[str]:
    """``dagster dev`` on the same interpreter, serving the chosen Definitions (default: the
    ``workspace.yaml`` of the current directory, else the example's module)."""
    cmd = [sys.executable, "-m", "dagster", "dev", "--host", host, "--port", str(port)]
    if workspace is not None:
        return [*cmd, "-w", str(workspace)]
    if file is not None:
        return [*cmd, "-f", str(file)]
    if module is not None:
        return [*cmd, "-m", module]
    if Path("workspace.yaml").is_file():
        return [*cmd, "-w", "workspace.yaml"]
    return [*cmd, "-m", DEFAULT_MODULE]


def _interruptible() -> None:
    """In the child, before exec: a shell's background job inherits SIGINT ignored, and Python
    (and so dagster dev, which maps SIGTERM to SIGINT's handler) would keep ignoring it; restore
    the default so that the child turns SIGINT into KeyboardInterrupt and shuts down its services."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@click.command("ui")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address the webserver listens on.")
@click.option("--port", default=3000, show_default=True, type=click.IntRange(1, 65535), help="Port of the webserver.")
@click.option("-w", "--workspace", type=click.Path(exists=True, dir_okay=False, path_type=Path), help="A Dagster workspace.yaml.")
@click.option("-m", "--module-name", "--module", "module", help="A module holding Definitions (as dagster dev -m).")
@click.option(
    "-f",
    "--python-file",
    "--file",
    "file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A file holding Definitions (as dagster dev -f).",
)
def ui(host: str, port: int, workspace: Path | None, module: str | None, file: Path | None) -> None:
    """Serve the Dagster UI (dagster dev) on a persistent instance under TRIDENT_HOME/dagster."""
    settings = settings_from_env()
    home = dagster_home(settings)
    config = write_instance_config(home)
    url, origin = instance_storage_url(settings)
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        URL_VARIABLE: url,
        "TRIDENT_HOME": str(Path(settings.home).expanduser().resolve()),
    }
    cmd = dagster_dev_command(host, port, workspace, module, file)
    from .home import where

    click.echo(f"trident ui: {where(settings)}; Dagster instance {config} (storage: {origin}); http://{host}:{port}", err=True)
    embedded = origin.startswith("the embedded")
    with keepalive(url) if embedded else contextlib.nullcontext():
        proc = subprocess.Popen(cmd, env=env, preexec_fn=_interruptible)
        # dagster dev shuts down cleanly on SIGINT (and maps SIGTERM to it): pass ours on
        previous = signal.signal(signal.SIGTERM, lambda *_: proc.send_signal(signal.SIGINT))
        try:
            while True:
                try:
                    rc = proc.wait()
                    break
                except KeyboardInterrupt:  # dagster dev got the same SIGINT (one process group): let it finish
                    continue
        finally:
            signal.signal(signal.SIGTERM, previous)
    if rc not in (0, -signal.SIGTERM, -signal.SIGINT):
        sys.exit(rc)


COMMANDS = [ui]
