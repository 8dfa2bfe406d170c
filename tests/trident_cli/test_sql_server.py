"""The warm sql server (``trident sql-server``): ``trident sql`` answered by it prints exactly what
a fresh process prints and exits the same way, sees every commit made since it started, and is
never used across users' folders, settings contexts or code versions; a dead server only makes
``trident sql`` cold again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from tests.support.helpers import cli_env
from trident_cli import launch
from trident_resources import Trident, TridentSettings

REPO = Path(__file__).resolve().parents[2]
TRIDENT = Path(sys.executable).with_name("trident")
QUERY = 'select count(*) as n, sum(id) as s from "srv/t"'


def _env(settings: TridentSettings, runtime: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRIDENT_", "DAGSTER_HOME", "XDG_RUNTIME_DIR"))}
    return env | cli_env(settings) | {"PYTHONPATH": str(REPO), "XDG_RUNTIME_DIR": str(runtime)} | extra


def _trident(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(TRIDENT), *args], env=env, capture_output=True, text=True, timeout=300)


def _served(env: dict[str, str]) -> int | None:
    done = _trident(["sql-server", "status"], env)
    if done.returncode != 0:
        return None
    return int(done.stdout.split(" request(s)")[0].rsplit(" ", 1)[1])


@pytest.fixture
def runtime(tmp_path: Path) -> Path:
    folder = tmp_path / "run"
    folder.mkdir(mode=0o700)
    return folder


@pytest.fixture
def server(settings: TridentSettings, runtime: Path) -> Iterator[dict[str, str]]:
    env = _env(settings, runtime)
    started = _trident(["sql-server", "start", "--idle-minutes", "5"], env)
    assert started.returncode == 0, started.stderr
    assert "serving" in started.stdout
    yield env
    _trident(["sql-server", "stop"], env)


def test_a_warm_answer_is_the_cold_answer_and_sees_every_commit(trident: Trident, server: dict[str, str]) -> None:
    trident.write("srv/t", pa.table({"id": [1, 2, 3]}))
    cold_env = server | {launch.SERVER_VARIABLE: "off"}
    for args in (
        ["sql", QUERY, "--format", "csv"],
        ["sql", QUERY, "--format", "json"],
        ["sql", QUERY],
        ["sql", 'select * from "srv/nope"'],  # an error: exit 2, its message on stderr
        ["sql", "drop table x"],  # refused by the sandbox
    ):
        before = _served(server)
        warm, cold = _trident(args, server), _trident(args, cold_env)
        assert (warm.returncode, warm.stdout, warm.stderr) == (cold.returncode, cold.stdout, cold.stderr), args
        assert _served(server) == (before or 0) + 1, args  # the server answered it, not a fresh process
    assert _trident(["sql", QUERY, "--format", "csv"], server).stdout.splitlines()[1] == "3,6"
    # a commit after the server started is seen by its next answer (versions resolve per call)
    trident.write("srv/t", pa.table({"id": [10]}), mode="append")
    assert _trident(["sql", QUERY, "--format", "csv"], server).stdout.splitlines()[1] == "4,16"


def test_another_context_or_code_is_never_answered(trident: Trident, settings: TridentSettings, server: dict[str, str]) -> None:
    trident.write("srv/t", pa.table({"id": [1]}))
    served = _served(server)
    # another workspace is another context: its own socket, no server, answered cold
    other = server | {"TRIDENT_WORKSPACE": f"{settings.workspace}_other"}
    done = _trident(["sql", "select 1 as one", "--format", "csv"], other)
    assert done.returncode == 0 and done.stdout.splitlines() == ['"one"', "1"]
    assert _served(server) == served
    # the code changed under the server: it answers nothing more, exits, and the query runs cold
    source = Path(launch.__file__)
    st = source.stat()
    os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    try:
        done = _trident(["sql", QUERY, "--format", "csv"], server)
        assert done.returncode == 0 and done.stdout.splitlines()[1] == "1,1"
        deadline = time.monotonic() + 30
        while _served(server) is not None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _served(server) is None  # the outdated server left
    finally:
        os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_a_folder_others_may_enter_is_never_used(trident: Trident, server: dict[str, str]) -> None:
    trident.write("srv/t", pa.table({"id": [1]}))
    served = _served(server)
    folder = launch.socket_dir(server)
    folder.chmod(0o755)  # anyone may now put a socket there: the client trusts none of it
    try:
        done = _trident(["sql", QUERY, "--format", "csv"], server)
        assert done.returncode == 0 and done.stdout.splitlines()[1] == "1,1"
    finally:
        folder.chmod(0o700)
    assert _served(server) == served


def test_a_killed_server_makes_sql_cold_and_a_new_one_starts(trident: Trident, server: dict[str, str]) -> None:
    trident.write("srv/t", pa.table({"id": [5]}))
    status = _trident(["sql-server", "status"], server).stdout
    pid = int(status.split("pid ")[1].split(",")[0])
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    assert launch.socket_path(launch.context(server), server).exists()  # its socket stayed behind
    done = _trident(["sql", QUERY, "--format", "csv"], server)
    assert done.returncode == 0 and done.stdout.splitlines()[1] == "1,5"
    again = _trident(["sql-server", "start", "--idle-minutes", "5"], server)
    assert again.returncode == 0 and "serving" in again.stdout, again.stderr
    assert _trident(["sql", QUERY, "--format", "csv"], server).stdout.splitlines()[1] == "1,5"
    assert _served(server) == 1


def test_auto_starts_a_server_after_a_cold_answer(trident: Trident, settings: TridentSettings, runtime: Path) -> None:
    trident.write("srv/t", pa.table({"id": [2]}))
    env = _env(settings, runtime, **{launch.SERVER_VARIABLE: "auto"})
    try:
        assert _served(env) is None
        first = _trident(["sql", QUERY, "--format", "csv"], env)
        assert first.returncode == 0 and first.stdout.splitlines()[1] == "1,2"
        deadline = time.monotonic() + 60
        while _served(env) is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _served(env) == 0
        assert _trident(["sql", QUERY, "--format", "csv"], env).stdout.splitlines()[1] == "1,2"
        assert _served(env) == 1
    finally:
        _trident(["sql-server", "stop"], env)
