"""The embedded Postgres is visible, stoppable and not left running by surprise (issue 16).

Every test runs the real ``trident`` CLI in subprocesses under its own temporary TRIDENT_HOME, so
each starts (and must stop) its own real embedded Postgres; processes are checked with psutil."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import psycopg
import pytest

from trident_cli.pg import writer_holds
from trident_resources.control.embedded_pg import embedded_status, stop_embedded_postgres

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "home"
    try:
        yield path
    finally:
        stop_embedded_postgres(path / "pg")


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIDENT_")}
    env.update(TRIDENT_HOME=str(home), PYTHONPATH=str(REPO), **extra)
    return env


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trident_cli.main", *args],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
    )


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def _processes(data_dir: Path) -> list[str]:
    """Processes serving this data dir: the postmaster (``-D .../pgdata``) and the watchdog."""
    needle = str(data_dir.resolve())
    found = []
    for proc in psutil.process_iter(["cmdline", "pid"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        if needle in cmd and proc.info["pid"] != os.getpid():
            found.append(f"{proc.info['pid']}: {cmd}")
    return found


def _wait_gone(data_dir: Path, timeout: float) -> float:
    t0 = time.monotonic()
    while _processes(data_dir):
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"still running after {timeout}s: {_processes(data_dir)}")
        time.sleep(0.1)
    return time.monotonic() - t0


def _status(env: dict[str, str]) -> dict[str, Any]:
    done = _cli(["pg", "status", "--json"], env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _select_one(dsn: str) -> int:
    with psycopg.connect(dsn, connect_timeout=5) as conn:
        row = conn.execute("select 1").fetchone()
    assert row is not None
    return int(row[0])


def test_pg_status_start_stop(home: Path) -> None:
    env, data_dir = _env(home), home / "pg"
    before = _status(env)
    assert before["embedded"] and not before["running"] and not before["initialized"]

    started = _cli(["pg", "start"], env)
    assert started.returncode == 0, started.stderr
    assert "started the embedded Postgres" in started.stdout and "trident pg stop" in started.stdout
    st = _status(env)
    assert st["running"] and st["initialized"] and isinstance(st["port"], int)
    assert st["data_dir"] == str(data_dir.resolve()) and st["size_bytes"] > 1_000_000
    assert st["clients"] == 0 and st["writes"] == [] and st["idle_minutes"] == 30
    assert psutil.pid_exists(st["watchdog_pid"]) and psutil.pid_exists(st["pid"])
    assert _select_one(st["dsn"]) == 1

    again = _cli(["pg", "start"], env)
    assert again.returncode == 0 and "already running" in again.stdout, again.stdout + again.stderr
    table = _cli(["pg", "status"], env)
    assert table.returncode == 0
    for text in ("running", f"127.0.0.1:{st['port']}", str(data_dir.resolve()), "after 30 idle minute(s)"):
        assert text in table.stdout, table.stdout

    stopped = _cli(["pg", "stop"], env)
    assert stopped.returncode == 0 and "stopped the embedded Postgres" in stopped.stdout, stopped.stdout + stopped.stderr
    assert _processes(data_dir) == []  # postmaster and watchdog both gone when stop returns
    after = _status(env)
    assert not after["running"] and after["initialized"]
    with pytest.raises(psycopg.OperationalError):
        _select_one(st["dsn"])
    not_running = _cli(["pg", "stop"], env)
    assert not_running.returncode == 0 and "not running" in not_running.stdout


def test_pg_commands_leave_a_production_dsn_alone(home: Path, pg_dsn: str) -> None:
    env = _env(home, TRIDENT_PG_DSN=pg_dsn.replace("postgres@", "postgres:s3cret@"))
    with psycopg.connect(pg_dsn) as conn:
        server_pid = conn.execute("select pg_postmaster_start_time()").fetchone()
    shown = _cli(["pg", "status"], env)
    assert shown.returncode == 0 and "TRIDENT_PG_DSN is set" in shown.stdout and "s3cret" not in shown.stdout
    for action in ("stop", "start"):
        done = _cli(["pg", action], env)
        assert done.returncode == 2, done.stdout + done.stderr
        (line,) = _lines(done.stderr)
        assert "TRIDENT_PG_DSN is set" in line and "nothing was" in line and "s3cret" not in line
    with psycopg.connect(pg_dsn) as conn:  # the same server, never restarted
        assert conn.execute("select pg_postmaster_start_time()").fetchone() == server_pid
    assert not (home / "pg").exists()


HOLD_A_WRITE = """
import sys
import pyarrow as pa
from trident_resources import Trident

with Trident.from_env() as t:
    with t.ingest_stream("locks/held") as s:
        s.append(pa.table({"a": [1, 2, 3]}))
        print("appended", flush=True)
        sys.stdin.readline()
        s.append(pa.table({"a": [4]}))
"""


def test_stop_is_refused_while_a_write_holds_a_writer_lock(home: Path) -> None:
    env, data_dir = _env(home), home / "pg"
    child = subprocess.Popen(
        [sys.executable, "-c", HOLD_A_WRITE],
        cwd=REPO,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "appended"
        port = embedded_status(data_dir).port
        assert port is not None
        deadline = time.monotonic() + 30
        # the stream's writer thread takes the lock, then opens its ledger row
        while not (holds := writer_holds(port)) or holds[0].txn_id is None:
            assert time.monotonic() < deadline, "the writer lock was never taken"
            time.sleep(0.1)
        assert [(h.key, h.writer) for h in holds] == [("locks/held", "ingest.stream")]

        reuse = _cli(["datasets"], env)  # a reuse of the running server prints no start line
        assert reuse.returncode == 0 and reuse.stderr.strip() == "", reuse.stderr
        st = _status(env)
        assert [w["key"] for w in st["writes"]] == ["locks/held"] and st["clients"] >= 1

        refused = _cli(["pg", "stop"], env)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        (line,) = _lines(refused.stderr)
        assert "locks/held" in line and str(holds[0].txn_id) in line and "--force" in line and "Traceback" not in line
        assert _select_one(f"postgresql://postgres@127.0.0.1:{port}/trident") == 1  # untouched

        forced = _cli(["pg", "stop", "--force"], env)
        assert forced.returncode == 0 and "1 write(s) aborted" in forced.stdout, forced.stdout + forced.stderr
        assert _processes(data_dir) == []
    finally:
        out, err = child.communicate("\n", timeout=60)
    assert child.returncode != 0, out  # its transaction could not commit: the server went away under it
    start_lines = [ln for ln in _lines(err) if ln.startswith("trident: started the embedded Postgres")]
    assert len(start_lines) == 1 and "trident pg stop" in start_lines[0] and str(data_dir.resolve()) in start_lines[0]


WRITE_WITH_IDLE_ZERO = """
import sys
from pathlib import Path
import pyarrow as pa
from trident_resources import Trident, TridentSettings

with Trident(TridentSettings(home=Path(sys.argv[1]), embedded_pg_idle_minutes=0)) as t:
    print(t.write("t/x", pa.table({"a": [1, 2]})).row_count)
"""


def test_a_command_with_idle_zero_leaves_no_server_running(home: Path) -> None:
    env, data_dir = _env(home, TRIDENT_EMBEDDED_PG_IDLE_MINUTES="0"), home / "pg"
    done = _cli(["datasets"], env)
    assert done.returncode == 0, done.stderr
    # two lines: where the server runs and how to stop it, and the home it created (and why there)
    line, created = _lines(done.stderr)
    assert created.startswith("trident: created a new home (TRIDENT_HOME ") and str(home.resolve()) in created
    assert line.startswith("trident: started the embedded Postgres on 127.0.0.1:") and str(data_dir.resolve()) in line
    assert "trident pg stop" in line and "when this process ends" in line
    assert (data_dir / "pgdata" / "PG_VERSION").exists()
    assert _wait_gone(data_dir, 5.0) < 5.0  # normally already gone: the command stopped it on its way out

    # the same from Python, with the setting given in code rather than the environment
    wrote = subprocess.run(
        [sys.executable, "-c", WRITE_WITH_IDLE_ZERO, str(home)],
        cwd=REPO,
        env=_env(home),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert wrote.returncode == 0 and wrote.stdout.strip() == "2", wrote.stderr
    _wait_gone(data_dir, 5.0)

    counted = _cli(["sql", 'select count(*) as n from "t/x"'], env)  # started again, transparently; data kept
    assert counted.returncode == 0 and " 2 " in counted.stdout, counted.stdout + counted.stderr
    _wait_gone(data_dir, 5.0)


def test_idle_shutdown_stops_the_server_and_the_next_use_restarts_it(home: Path) -> None:
    idle_s = 3.0
    env, data_dir = _env(home, TRIDENT_EMBEDDED_PG_IDLE_MINUTES=str(idle_s / 60)), home / "pg"
    done = _cli(["datasets"], env)
    ended = time.monotonic()
    assert done.returncode == 0, done.stderr
    assert "stops after 0.05 idle minute(s)" in done.stderr
    assert _processes(data_dir), "the server should outlive the command until it has been idle"
    _wait_gone(data_dir, 60.0)
    waited = time.monotonic() - ended  # idle time is counted from the command's last connection
    assert idle_s * 0.8 <= waited <= 60, waited
    assert "stopped postgres" in (data_dir / "watchdog.log").read_text()

    again = _cli(["datasets"], env)  # the next use starts it again
    assert again.returncode == 0 and "trident: started the embedded Postgres" in again.stderr, again.stderr
    st = embedded_status(data_dir)
    assert st.running and st.dsn is not None
    with psycopg.connect(st.dsn) as conn:  # a connected client keeps it up past the idle time
        time.sleep(idle_s * 2.5)
        assert conn.execute("select 1").fetchone() == (1,)
    _wait_gone(data_dir, 60.0)


@pytest.mark.skipif(os.geteuid() != 0, reason="only under root does the server run as another OS user")
def test_stop_works_when_the_cluster_owner_lost_its_way_to_the_data_dir(tmp_path: Path) -> None:
    """Under root the server runs as the cluster's owner; when an ancestor directory loses o+x
    (pytest resets /tmp/pytest-of-<user> to 0700 at each session start) pg_ctl, run as that owner,
    cannot reach the data dir. Stopping must still work."""
    fenced = tmp_path / "fenced"
    data_dir = fenced / "pg"
    from trident_resources.control.embedded_pg import ensure_embedded_postgres

    dsn = ensure_embedded_postgres(data_dir, idle_minutes=float("inf"))
    try:
        fenced.chmod(0o700)
        assert stop_embedded_postgres(data_dir) is True
        assert _processes(data_dir) == []
        with pytest.raises(psycopg.OperationalError):
            _select_one(dsn)
    finally:
        fenced.chmod(0o711)
        stop_embedded_postgres(data_dir)
