"""Issue 12: ``Trident.sql`` reuses a locked sandbox for a repeated query over the same dataset
versions (its fixed cost was most of a small query). Reuse must never widen what a query can
read: a sandbox serves only queries naming exactly the datasets, versions and files it was built
for; a new version, another set of datasets, or expired files get a fresh one."""

from __future__ import annotations

import os
import threading
from datetime import timedelta

import duckdb
import pyarrow as pa
import pytest

from trident_resources import SqlNotAllowedError, Trident, TridentSettings


def _file(t: Trident, key: str) -> str:
    return t.scan_plan(key).files[0]


def test_a_new_version_is_read_and_the_old_files_are_refused_after_reuse(trident: Trident) -> None:
    t = trident
    t.write("r/v", pa.table({"a": [1, 2]}))
    old = _file(t, "r/v")
    for _ in range(3):  # the same query over the same version: served by the kept sandbox
        assert t.sql('select sum(a) as s from "r/v"').column("s").to_pylist() == [3]
    with pytest.raises(SqlNotAllowedError):  # the files only through the view, even from a kept sandbox
        t.sql(f"select count(*) as n from \"r/v\", read_parquet('{old}')")
    assert t.sql('select sum(a) as s from "r/v"').column("s").to_pylist() == [3]  # and the kept one still serves
    t.write("r/v", pa.table({"a": [10]}))
    assert t.sql('select sum(a) as s from "r/v"').column("s").to_pylist() == [10]
    with pytest.raises(SqlNotAllowedError):
        t.sql(f"select * from \"r/v\", read_parquet('{old}')")


def test_a_sandbox_kept_for_two_datasets_is_not_used_for_one(trident: Trident) -> None:
    t = trident
    t.write("r/a", pa.table({"x": [1]}))
    t.write("r/b", pa.table({"y": ["secret"]}))
    b_file = _file(t, "r/b")
    both = 'select count(*) as n from "r/a", "r/b"'
    assert t.sql(both).column("n").to_pylist() == [1]
    assert t.sql(both).column("n").to_pylist() == [1]
    assert t.sql('select count(*) as n from "r/a"').column("n").to_pylist() == [1]
    with pytest.raises(SqlNotAllowedError):
        t.sql(f"select * from \"r/a\", read_parquet('{b_file}')")
    with pytest.raises(SqlNotAllowedError):  # and the kept sandbox of r/a alone is not widened by the failure
        t.sql(f"select * from \"r/a\", read_parquet('{b_file}')")


@pytest.mark.usefixtures("iceberg_writes")  # about the files maintenance deletes under a reused sandbox
def test_queries_after_maintenance_deleted_the_files_still_work(trident: Trident) -> None:
    t = trident
    t.write("r/m", pa.table({"a": [1]}))
    for i in range(2, 8):
        t.write("r/m", pa.table({"a": [i]}), mode="append")
    q = 'select sum(a) as s from "r/m"'
    assert t.sql(q).column("s").to_pylist() == [28]
    t.maintain("r/m", older_than=timedelta(0), retain_last=1)  # compacts, then deletes the small files
    assert len(t.scan_plan("r/m").files) == 1
    assert t.sql(q).column("s").to_pylist() == [28]


def test_concurrent_queries_each_get_a_sandbox_of_their_own(trident: Trident) -> None:
    t = trident
    t.write("r/c", pa.table({"a": list(range(1000))}))
    results: list[object] = []

    def run() -> None:
        for _ in range(5):
            results.append(t.sql('select sum(a) as s from "r/c"').column("s").to_pylist())

    threads = [threading.Thread(target=run) for _ in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert results == [[499500]] * 15


def test_a_sandbox_is_configured_on_a_database_opened_ahead_and_is_just_as_closed(
    trident: Trident, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 12: opening a DuckDB database was ~15-20 ms of every sandbox, on the caller's path;
    the next one is now opened ahead on a helper thread. A sandbox built on it allows exactly its
    files, as before; a forked child never uses its parent's spare."""
    import os
    import time

    from trident_resources.sql import sandbox as sql

    t = trident
    t.write("r/spare", pa.table({"a": [1, 2]}))
    t.write("r/other", pa.table({"a": [5]}))
    mine, other = _file(t, "r/spare"), _file(t, "r/other")
    sql.sandbox("256MB", 1, [mine]).close()  # takes (or opens) one; the next is opened ahead
    deadline = time.monotonic() + 60
    while ("256MB", 1) not in sql.SPARES._spares and time.monotonic() < deadline:
        time.sleep(0.01)

    def no_connect(*_: object) -> None:
        raise AssertionError("opened a database on the caller's path although a spare was ready")

    monkeypatch.setattr(sql, "_connect", no_connect)
    con = sql.sandbox("256MB", 1, [mine])
    try:
        assert con.execute(f"select sum(a) from read_parquet('{mine}')").fetchall() == [(3,)]
        with pytest.raises(duckdb.PermissionException):
            con.execute(f"select * from read_parquet('{other}')")
        with pytest.raises(duckdb.PermissionException):
            con.execute("select * from read_csv('/etc/passwd')")
    finally:
        con.close()
    monkeypatch.setattr(sql.SPARES, "_pid", os.getpid() + 1)  # as a forked child sees its parent's spares
    with pytest.raises(AssertionError, match="spare was ready"):
        sql.sandbox("256MB", 1, [mine])


def test_a_process_that_queried_and_exits_at_once_exits_cleanly(settings: TridentSettings) -> None:
    """A spare database may still be opening on its helper thread when the process ends: the exit
    waits for it (a daemon thread cut off inside DuckDB aborted the process: SIGABRT)."""
    from tests.support.helpers import fresh_python

    assert settings.pg_dsn is not None
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": "/tmp",
        "TRIDENT_HOME": str(settings.home),
        "TRIDENT_PG_DSN": settings.pg_dsn.get_secret_value(),
        "TRIDENT_WORKSPACE": settings.workspace,
    }
    code = "from trident_resources import Trident\nt = Trident.from_env()\nprint(t.sql('select 41 + 1 as x').column(0)[0])"
    for _ in range(3):
        assert fresh_python(code, env=env) == "42"


def test_checking_a_query_does_not_open_duckdbs_default_database(trident: Trident, monkeypatch: pytest.MonkeyPatch) -> None:
    """``duckdb.extract_statements`` parses on DuckDB's module-level default connection, opening
    that in-memory database on first use (~15-20 ms of a run's first query, issue 12); the
    statement check parses on the thread's parser connection, opened ahead like a sandbox's."""

    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("the default DuckDB connection was used")

    monkeypatch.setattr(duckdb, "extract_statements", refuse)
    trident.write("r/p", pa.table({"a": [1, 2]}))
    assert trident.sql('select sum(a) as s from "r/p"').column("s").to_pylist() == [3]
    with pytest.raises(SqlNotAllowedError, match="exactly one statement"):
        trident.sql("select 1; select 2")
    with pytest.raises(SqlNotAllowedError, match="only SELECT"):
        trident.sql('delete from "r/p"')
