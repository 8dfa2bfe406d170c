"""The control plane's migrations: applied automatically, idempotently, and safely from two
processes at the same moment."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg

from trident_resources.control.plane import ControlPlane, migration_files

REPO = Path(__file__).resolve().parents[3]


def _fresh_database(dsn: str) -> str:
    name = f"mig_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return dsn.rsplit("/", 1)[0] + f"/{name}"


def test_migrations_apply_once_and_are_idempotent(pg_dsn: str) -> None:
    dsn = _fresh_database(pg_dsn)
    cp = ControlPlane(dsn)
    try:
        assert cp.migrate() == []  # the constructor applied everything; a second run finds nothing
        rows = cp.execute("SELECT version FROM trident_migrations ORDER BY version")
        assert [r["version"] for r in rows] == [v for v, _, _ in migration_files()]
    finally:
        cp.close()


def test_two_processes_migrating_at_once_is_harmless(pg_dsn: str) -> None:
    dsn = _fresh_database(pg_dsn)
    code = "import sys; from trident_resources.control.plane import ControlPlane; ControlPlane(sys.argv[1]).close()"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([sys.executable, "-c", code, dsn], env=env, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    with psycopg.connect(dsn) as conn:
        versions = [r[0] for r in conn.execute("SELECT version FROM trident_migrations ORDER BY version")]
        tables = {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
    assert versions == [v for v, _, _ in migration_files()]
    assert {
        "trident_datasets",
        "trident_ledger",
        "trident_schema_versions",
        "trident_sync_log",
        "trident_provenance",
        "trident_writer_flags",
        "trident_dataset_pins",
        "trident_watermarks",
        "iceberg_tables",
    } <= tables
