"""``trident sql-server start|stop|status``: a warm process that answers ``trident sql`` for one
user and one settings context (docs/cli.md#a-warm-sql-server), so a one-shot query from a shell
or a script pays a Python start-up and a socket round trip instead of the ~1.5 s of imports and
catalog set-up a fresh CLI process does.

The server holds one ``Trident`` open and runs each request through the very ``sql`` command a
fresh process runs (same parsing, sandbox, version resolution per call, output and exit status);
requests are served one at a time. It answers only requests whose settings context, current-folder
home and code stamp (``launch.code_stamp``) are its own, exits when the code changed under it or
after ``--idle-minutes`` without a request, and its socket lives in a folder only its user can
enter (``launch.private_dir``), checked against the peer's uid on every connection.
"""

from __future__ import annotations

import fcntl
import io
import logging
import os
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, redirect_stderr, redirect_stdout, suppress
from pathlib import Path
from typing import Any

import click

from trident_resources import Trident
from trident_resources.core.home import find_home
from trident_resources.core.settings import settings_from_env

from . import admin, launch, render
from .environ import temporarily

log = logging.getLogger("trident")
DEFAULT_IDLE_MINUTES = 30.0
_START_WAIT_SECONDS = 60.0
_SO_PEERCRED = getattr(socket, "SO_PEERCRED", 17)


def ping(path: Path, timeout: float = 2.0) -> dict[str, Any] | None:
    """The status of the server at ``path`` (pid, home, requests served), or None when none answers."""
    if not launch.private_dir(path.parent, create=False) or not path.exists():
        return None
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout)
            conn.connect(str(path))
            launch.send(conn, {"op": "status"})
            header, _ = launch.receive(conn)
    except (OSError, ValueError):
        return None
    return header


def stop(path: Path) -> bool:
    """Ask the server at ``path`` to exit; False when none answered."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(5.0)
            conn.connect(str(path))
            launch.send(conn, {"op": "stop"})
            launch.receive(conn)
    except (OSError, ValueError):
        return False
    return True


def start_detached(idle_minutes: float = DEFAULT_IDLE_MINUTES, *, wait: bool = True) -> dict[str, Any] | None:
    """Start this context's server in its own session (it outlives this process) and, with
    ``wait``, return its status once it answers (None if it did not within a minute: its log,
    next to its socket, says why)."""
    path = launch.socket_path(launch.context())
    launch.private_dir(path.parent, create=True)
    logfile = path.with_suffix(".log")
    with open(logfile, "ab") as out:
        subprocess.Popen(
            [sys.executable, "-m", "trident_cli.sql_server", "--idle-minutes", str(idle_minutes)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
            env={**os.environ, launch.SERVER_VARIABLE: "off"},  # the server never asks a server
        )
    if not wait:
        return None
    deadline = time.monotonic() + _START_WAIT_SECONDS
    while time.monotonic() < deadline:
        status = ping(path)
        if status is not None:
            return status
        time.sleep(0.05)
    return None


class _Server:
    """The serving loop of one context (see the module)."""

    def __init__(self, t: Trident, idle_seconds: float) -> None:
        self.t = t
        self.idle_seconds = idle_seconds
        self.context = launch.context()
        self.stamp = launch.code_stamp()
        self.home = t.settings.home
        self.path = launch.socket_path(self.context)
        self.served = 0
        self.started = time.time()
        self.running = True

    def serve(self) -> None:
        if not launch.private_dir(self.path.parent, create=True):
            raise click.ClickException(f"{self.path.parent} is not a folder only this user can enter: refusing to serve there")
        with open(self.path.with_suffix(".lock"), "a") as lock:
            try:  # one server per context: a second one started at the same moment leaves
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                click.echo(f"trident sql-server: one already serves {self.path}", err=True)
                return
            self._listen()

    def _listen(self) -> None:
        with suppress(FileNotFoundError):
            self.path.unlink()  # a dead server's socket
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
            listener.bind(str(self.path))
            os.chmod(self.path, 0o600)
            listener.listen(16)
            listener.settimeout(self.idle_seconds)
            log.warning("trident sql-server %d serving %s (home %s)", os.getpid(), self.path, self.home)
            try:
                while self.running:
                    try:
                        conn, _ = listener.accept()
                    except TimeoutError:
                        log.warning("trident sql-server: idle for %.0f s, exiting", self.idle_seconds)
                        return
                    with conn:
                        self._answer(conn)
            finally:
                with suppress(FileNotFoundError):
                    self.path.unlink()

    def _answer(self, conn: socket.socket) -> None:
        conn.settimeout(30.0)  # a request arrives at once; a client that sends nothing is dropped
        try:
            if not _same_user(conn):
                return
            header, _ = launch.receive(conn)
            op = header.get("op", "sql")
            if op == "status":
                launch.send(conn, self.status())
            elif op == "stop":
                self.running = False
                launch.send(conn, {"status": "stopping"})
            else:
                refused = self._refusal(header)
                if refused is not None:
                    launch.send(conn, {"status": refused})
                    return
                ran = self._run(header)
                if ran is None:  # failed as click does not report: the client runs it, and shows it, itself
                    launch.send(conn, {"status": "failed"})
                    return
                code, out, err = ran
                self.served += 1
                conn.settimeout(300.0)  # a large answer to a slow reader; a client gone fails at once
                launch.send(conn, {"status": "done", "code": code, "stdout": len(out)}, out + err)
        except (OSError, ValueError) as exc:
            log.warning("trident sql-server: a request failed: %s: %s", type(exc).__name__, exc)

    def status(self) -> dict[str, Any]:
        return {
            "status": "serving",
            "pid": os.getpid(),
            "home": str(self.home),
            "workspace": self.t.workspace,
            "environment": self.t.environment,
            "served": self.served,
            "up_seconds": round(time.time() - self.started, 1),
            "idle_seconds": self.idle_seconds,
        }

    def _refusal(self, request: Mapping[str, Any]) -> str | None:
        """Why this server must not answer ``request`` (None: it may)."""
        if request.get("stamp") != self.stamp:
            self.running = False  # the code changed under this server: it answers nothing more
            return "stale code"
        if request.get("context") != self.context:
            return "another context"
        argv = request.get("argv") or []
        if not argv or argv[0] != "sql":
            return "not a sql command"
        if "TRIDENT_HOME" not in self.context and find_home(Path(str(request.get("cwd", "/")))).path != self.home:
            return "another home"  # the home was found from the client's folder, not the server's
        return None

    def _run(self, request: Mapping[str, Any]) -> tuple[int, bytes, bytes] | None:
        """Run the request's ``sql`` command as the CLI would, on the warm client: its exit status,
        stdout and stderr; None when it failed in a way the CLI reports with a traceback (the
        client then runs the read-only command itself, so the user sees exactly that)."""
        from .main import cli

        out, err = io.StringIO(), io.StringIO()
        code = 0
        with _client_terminal(request), admin.warm(self.t), redirect_stdout(out), redirect_stderr(err):
            try:
                cli.main(args=list(request["argv"]), prog_name="trident", standalone_mode=True)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
                if isinstance(exc.code, str):
                    print(exc.code, file=sys.stderr)
            except Exception:  # not a TridentError (click's group reports those): a bug a fresh process shows as a traceback
                log.exception("trident sql-server: a request failed; the client runs it itself")
                return None
        return code, out.getvalue().encode(), err.getvalue().encode()


@contextmanager
def _client_terminal(request: Mapping[str, Any]) -> Iterator[None]:
    """The console laid out for the client's stdout (a terminal of its width, or a pipe), with its
    ``COLUMNS`` and ``NO_COLOR``, for the length of one request."""
    terminal = bool(request.get("terminal"))
    width = request.get("width")
    client = {
        k: None if request.get(f) is None else str(request.get(f)) for k, f in (("COLUMNS", "columns"), ("NO_COLOR", "no_color"))
    }
    try:
        with temporarily(client):
            render.console.__init__(force_terminal=terminal, width=int(width) if terminal and width else None)  # type: ignore[misc]
            yield
    finally:
        render.console.__init__()  # type: ignore[misc]  # with the server's own variables back


def _same_user(conn: socket.socket) -> bool:
    """Is the peer this user (its uid, as the kernel reports it)?"""
    try:
        creds = conn.getsockopt(socket.SOL_SOCKET, _SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return False
    _, uid, _ = struct.unpack("3i", creds)
    return uid == os.getuid()


@click.group("sql-server")
def sql_server() -> None:
    """A warm process that answers `trident sql` of this settings context (docs/cli.md)."""


@sql_server.command("start")
@click.option(
    "--idle-minutes",
    type=float,
    default=DEFAULT_IDLE_MINUTES,
    show_default=True,
    help="Exit after this long without a request.",
)
@click.option("--foreground", is_flag=True, help="Serve in this process (logs on stderr) instead of in the background.")
def start(idle_minutes: float, foreground: bool) -> None:
    """Start this context's server (nothing to do when one runs); `trident sql` uses it from then on."""
    path = launch.socket_path(launch.context())
    running = ping(path)
    if running is not None:
        click.echo(f"trident sql-server: already serving (pid {running['pid']}, home {running['home']})")
        return
    if foreground:
        serve(idle_minutes)
        return
    status = start_detached(idle_minutes)
    if status is None:
        raise click.ClickException(f"the sql server did not start within a minute; see {path.with_suffix('.log')}")
    click.echo(f"trident sql-server: serving (pid {status['pid']}, home {status['home']}, workspace {status['workspace']})")


@sql_server.command("stop")
def stop_command() -> None:
    """Stop this context's server."""
    path = launch.socket_path(launch.context())
    click.echo("trident sql-server: stopped" if stop(path) else "trident sql-server: none was running")


@sql_server.command("status")
def status_command() -> None:
    """Whether this context's server runs, and what it served (exit 1 when none runs)."""
    running = ping(launch.socket_path(launch.context()))
    if running is None:
        click.echo("trident sql-server: not running")
        sys.exit(1)
    click.echo(
        f"trident sql-server: serving (pid {running['pid']}, home {running['home']}, workspace {running['workspace']}, "
        f"environment {running['environment']}, {running['served']} request(s) in {running['up_seconds']} s)"
    )


def serve(idle_minutes: float) -> None:
    """Serve this process's settings context until stopped, idle or outdated."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    with Trident(settings_from_env()) as t:
        _Server(t, idle_minutes * 60).serve()


COMMANDS = [sql_server]


if __name__ == "__main__":  # ``start_detached`` runs the server as this module
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--idle-minutes", type=float, default=DEFAULT_IDLE_MINUTES)
    serve(ap.parse_args().idle_minutes)
