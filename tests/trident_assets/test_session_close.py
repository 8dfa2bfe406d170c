"""A node's DuckDB databases are closed off the step's thread (issue 12): closing one frees its
buffers and joins its worker threads, 5-10 ms that the step does not need to wait for."""

from __future__ import annotations

import threading
import time

import duckdb
import pytest

from trident_assets.compute import Session
from trident_resources.sql import sandbox as sql


class _Recorder:
    """Stands in for DuckDB's connection (a third-party object): records where it was closed."""

    def __init__(self) -> None:
        self.closed_on: list[str] = []
        self.done = threading.Event()

    def close(self) -> None:
        self.closed_on.append(threading.current_thread().name)
        self.done.set()


def test_a_sessions_database_is_closed_on_a_helper_thread() -> None:
    con = _Recorder()
    Session(con=con, plan=None, sources={}).close()  # type: ignore[arg-type]
    assert con.done.wait(30)
    assert con.closed_on == ["trident-duckdb-close"]
    assert threading.current_thread().name not in con.closed_on


def test_a_database_handed_over_is_closed_for_good() -> None:
    con = duckdb.connect()
    assert con.execute("select 41 + 1").fetchall() == [(42,)]
    sql.close_soon(con)
    deadline = time.monotonic() + 30
    while any(t.name == "trident-duckdb-close" for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(duckdb.ConnectionException):
        con.execute("select 1")
