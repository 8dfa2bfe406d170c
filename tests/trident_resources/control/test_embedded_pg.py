"""Real-server tests for trident_resources.control.embedded_pg (they start actual Postgres processes)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import psycopg
import pytest

from trident_resources.control.embedded_pg import (
    EmbeddedPostgresError,
    ensure_embedded_postgres,
    stop_embedded_postgres,
)

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "nested" / "pg"  # parents must be created too
    try:
        yield path
    finally:
        stop_embedded_postgres(path)


def _select_one(dsn: str) -> int:
    with psycopg.connect(dsn, connect_timeout=5) as conn:
        row = conn.execute("select 1").fetchone()
    assert row is not None
    return row[0]


def _postmasters(data_dir: Path) -> list[psutil.Process]:
    pgdata = str(data_dir.resolve() / "pgdata")
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if cmd and cmd[0].endswith("postgres") and pgdata in cmd:
            found.append(proc)
    return found


def _server_starts(data_dir: Path) -> int:
    return (data_dir / "pgdata" / "server.log").read_text().count("starting PostgreSQL")


def test_first_start_then_fast_reuse(data_dir: Path) -> None:
    t0 = time.perf_counter()
    dsn = ensure_embedded_postgres(data_dir)
    first = time.perf_counter() - t0
    assert dsn.startswith("postgresql://") and "@127.0.0.1:" in dsn and dsn.endswith("/trident")
    assert _select_one(dsn) == 1
    with psycopg.connect(dsn) as conn:
        assert conn.execute("select current_database()").fetchone() == ("trident",)
        assert conn.execute("show listen_addresses").fetchone() == ("127.0.0.1",)

    reuse = []
    for _ in range(5):
        t0 = time.perf_counter()
        assert ensure_embedded_postgres(data_dir) == dsn
        reuse.append(time.perf_counter() - t0)
    print(f"first start {first:.2f}s, reuse best {min(reuse) * 1000:.1f}ms worst {max(reuse) * 1000:.1f}ms")
    assert min(reuse) < 0.1
    assert len(_postmasters(data_dir)) == 1


def test_concurrent_processes_share_one_server(data_dir: Path) -> None:
    """Both children sleep until the same wall-clock instant, then race; the server must also
    outlive them (we connect after they have exited)."""
    start_at = time.time() + 3.0  # leaves time for interpreter start + imports
    script = (
        "import json, sys, time\n"
        "from pathlib import Path\n"
        "from trident_resources.control.embedded_pg import ensure_embedded_postgres\n"
        "time.sleep(max(0.0, float(sys.argv[2]) - time.time()))\n"
        "t0 = time.perf_counter()\n"
        "dsn = ensure_embedded_postgres(Path(sys.argv[1]))\n"
        "print(json.dumps({'dsn': dsn, 'elapsed': time.perf_counter() - t0}))\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(data_dir), str(start_at)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    print("concurrent:", results)

    assert results[0]["dsn"] == results[1]["dsn"]
    assert _select_one(results[0]["dsn"]) == 1  # starters are gone; server is not
    assert len(_postmasters(data_dir)) == 1
    assert _server_starts(data_dir) == 1
    assert ensure_embedded_postgres(data_dir) == results[0]["dsn"]


def test_stopped_server_is_restarted(data_dir: Path) -> None:
    dsn = ensure_embedded_postgres(data_dir)
    stop_embedded_postgres(data_dir)
    assert _postmasters(data_dir) == []
    with pytest.raises(psycopg.OperationalError):
        _select_one(dsn)

    t0 = time.perf_counter()
    assert ensure_embedded_postgres(data_dir) == dsn  # recorded port is reused
    print(f"restart after stop {time.perf_counter() - t0:.2f}s")
    assert _select_one(dsn) == 1


def test_restart_moves_off_a_taken_port(data_dir: Path) -> None:
    dsn = ensure_embedded_postgres(data_dir)
    stop_embedded_postgres(data_dir)
    port = int(dsn.rsplit(":", 1)[1].split("/")[0])
    with socket.socket() as squatter:
        # the stopped server's connections may leave the port in TIME_WAIT; a listener may still take it
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        new_dsn = ensure_embedded_postgres(data_dir)
    assert new_dsn != dsn
    assert _select_one(new_dsn) == 1
    assert ensure_embedded_postgres(data_dir) == new_dsn


def test_stale_postmaster_pid_after_reboot(data_dir: Path) -> None:
    """After a reboot postmaster.pid survives and its pid may now belong to an unrelated process."""
    dsn = ensure_embedded_postgres(data_dir)
    pid_file = data_dir / "pgdata" / "postmaster.pid"
    lines = pid_file.read_text().splitlines()
    stop_embedded_postgres(data_dir)
    impostor = subprocess.Popen(["sleep", "60"])
    try:
        pid_file.write_text("\n".join([str(impostor.pid), *lines[1:]]) + "\n")
        assert ensure_embedded_postgres(data_dir) == dsn
        assert _select_one(dsn) == 1
    finally:
        impostor.kill()
        impostor.wait()


def test_start_failure_raises_with_log_tail(data_dir: Path) -> None:
    ensure_embedded_postgres(data_dir)
    stop_embedded_postgres(data_dir)
    with (data_dir / "pgdata" / "postgresql.conf").open("a") as conf:
        conf.write("trident_bogus_setting = 1\n")
    t0 = time.perf_counter()
    with pytest.raises(EmbeddedPostgresError, match="trident_bogus_setting"):
        ensure_embedded_postgres(data_dir, timeout_s=20)
    assert time.perf_counter() - t0 < 20
    assert _postmasters(data_dir) == []
