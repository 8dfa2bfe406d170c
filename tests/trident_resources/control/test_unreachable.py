"""Parts of the trident that cannot be reached are named at once (issue 8, item 12): an Iceberg
REST catalog nobody answers is StorageUnavailableError (not a raw requests.ConnectionError), and a
control-plane Postgres that refuses the credentials says "authentication failed" immediately
(not a pool timeout after 30 s with the cause hidden)."""

from __future__ import annotations

import re
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pyarrow as pa
import pytest

from tests.conftest import make_settings
from trident_resources import ControlPlaneUnavailableError, StorageUnavailableError, Trident, TridentError


def _dead_port() -> int:
    with socket.socket() as s:  # a loopback port with nobody listening
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_rest_catalog_is_storage_unavailable(trident_home: Path, pg_dsn: str) -> None:
    settings = make_settings(
        trident_home,
        pg_dsn,
        catalog_uri=f"http://127.0.0.1:{_dead_port()}/catalog",
        catalog_warehouse="wh",
        catalog_token="s3cr3t-token",
    )
    started = time.monotonic()
    with pytest.raises(StorageUnavailableError, match="Iceberg catalog") as info:
        Trident(settings)
    assert time.monotonic() - started < 20
    assert info.value.__cause__ is not None
    assert "s3cr3t-token" not in str(info.value)


@pytest.fixture
def password_role(pg_dsn: str) -> Iterator[str]:
    """A login role that must authenticate with a password (scram), on the session's real Postgres:
    a pg_hba line for this role only, ahead of the embedded server's trust lines."""
    role = f"pw_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'right-password'")
        hba = Path(conn.execute("SHOW hba_file").fetchone()[0])  # type: ignore[index]
        original = hba.read_text()
        hba.write_text(f"host all {role} 127.0.0.1/32 scram-sha-256\n" + original)
        conn.execute("SELECT pg_reload_conf()")
    time.sleep(0.3)
    try:
        yield role
    finally:
        hba.write_text(original)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_reload_conf()")
            conn.execute(f"DROP ROLE IF EXISTS {role}")


def test_a_wrong_postgres_password_says_authentication_failed_at_once(
    trident_home: Path, pg_dsn: str, password_role: str
) -> None:
    dsn = re.sub(r"//[^@]*@", f"//{password_role}:wrong-password@", pg_dsn)
    started = time.monotonic()
    with pytest.raises(ControlPlaneUnavailableError, match="authentication failed") as info:
        Trident(make_settings(trident_home, dsn))
    assert time.monotonic() - started < 10
    assert isinstance(info.value, StorageUnavailableError) and isinstance(info.value, TridentError)
    assert isinstance(info.value.__cause__, psycopg.OperationalError)
    assert "wrong-password" not in str(info.value)


@pytest.mark.parametrize("what", ["no_database", "no_server"])
def test_other_control_plane_faults_are_named_at_once_with_their_reason(trident_home: Path, pg_dsn: str, what: str) -> None:
    dsn = pg_dsn.rsplit("/", 1)[0] + "/no_such_db" if what == "no_database" else f"postgresql://x@127.0.0.1:{_dead_port()}/db"
    started = time.monotonic()
    with pytest.raises(ControlPlaneUnavailableError, match="does not exist" if what == "no_database" else "refused"):
        Trident(make_settings(trident_home, dsn))
    assert time.monotonic() - started < 10


def test_a_control_plane_lost_after_opening_is_a_named_error_at_every_door(trident: Trident) -> None:
    """Prober 3: with the control-plane connections dropped after the Trident opened (a Postgres
    restart, a network cut), ``dataset_record``, ``exists``, ``describe``, ``history``,
    ``datasets``, ``sql`` and the eager half of ``read`` raised psycopg's own OperationalError
    (then psycopg_pool.PoolTimeout once the pool's wait ran out). Each is now a
    ControlPlaneUnavailableError with psycopg's error chained, and the Trident reconnects."""
    from tests.support.tcp_proxy import TcpProxy

    assert trident.settings.pg_dsn is not None
    real = trident.settings.pg_dsn.get_secret_value()
    host, port = real.split("@", 1)[1].split("/", 1)[0].rsplit(":", 1)
    with TcpProxy(host, int(port)) as proxy:
        dsn = real.replace(f"{host}:{port}", f"127.0.0.1:{proxy.port}")
        with Trident(make_settings(trident.settings.home, dsn, workspace=trident.settings.workspace)) as t:
            t.router.set_pin("cp/pg", "pg")
            t.write("cp/pg", pa.table({"k": [1]}))
            doors = {
                "dataset_record": lambda: t.dataset_record("cp/pg"),
                "exists": lambda: t.exists("cp/pg"),
                "describe": lambda: t.describe("cp/pg"),
                "history": lambda: t.history("cp/pg"),
                "datasets": t.datasets,
                "read": lambda: t.read("cp/pg"),
                "sql": lambda: t.sql('select count(*) from "cp/pg"'),
                # the router's own doors (the CLI's pin/flag commands call them directly)
                "set_pin": lambda: t.router.set_pin("cp/other", "pg"),
                "clear_pin": lambda: t.router.clear_pin("cp/pg"),
                "set_flag": lambda: t.router.set_flag("sync.full", "pg"),
                "clear_flag": lambda: t.router.clear_flag("sync.full"),
                # the control plane itself, called below the client (the plane names its faults)
                "control.dataset": lambda: t.control.dataset(t.workspace, "cp/pg"),
                "control.history_by_key": lambda: t.control.history_by_key(t.workspace, "cp/pg"),
                "control.tx": lambda: t.control.execute("SELECT 1"),
            }
            t.control.pool.timeout = 1  # the pool's wait for a connection (30 s) shortened
            proxy.down()  # pooled connections reset, new ones refused
            for name, call in doors.items():
                with pytest.raises(ControlPlaneUnavailableError) as info:
                    call()
                assert isinstance(info.value.__cause__, psycopg.Error), name
            proxy.up()
            t.control.pool.timeout = 30
            assert t.read("cp/pg").column("k").to_pylist() == [1]
