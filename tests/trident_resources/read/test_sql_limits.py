"""Runaway SQL is stopped (issue 8, item 11): a statement timeout interrupts DuckDB, a result cap
stops a result that would not fit in the caller's memory; each is a named error."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import make_settings
from tests.support.helpers import table
from trident_resources import SqlResultTooLargeError, SqlTimeoutError, Trident, TridentError

SLOW = 'select sum(a.k * b.k * c.k) as s from "big/t" a, "big/t" b, "big/t" c'  # ~10 s unbounded on 2 cores


@pytest.fixture
def limited(trident_home: Path, pg_dsn: str) -> Iterator[Trident]:
    t = Trident(make_settings(trident_home, pg_dsn, sql_timeout_seconds=1, sql_max_rows=10_000, sql_max_bytes=1_000_000))
    t.write("big/t", table(k=list(range(1000))))
    yield t
    t.close()


def test_a_runaway_query_is_interrupted(limited: Trident) -> None:
    started = time.monotonic()
    with pytest.raises(SqlTimeoutError, match="1s") as info:
        limited.sql(SLOW)
    assert time.monotonic() - started < 8
    assert isinstance(info.value, TridentError) and info.value.__cause__ is not None
    # the connection is per query: the next one runs normally
    assert limited.sql('select count(*) as n from "big/t"').to_pylist() == [{"n": 1000}]


def test_a_result_over_the_row_cap_is_refused(limited: Trident) -> None:
    with pytest.raises(SqlResultTooLargeError, match="10000 rows"):
        limited.sql('select a.k, b.k as k2 from "big/t" a, "big/t" b')
    assert limited.sql('select a.k, b.k as k2 from "big/t" a, "big/t" b limit 10000').num_rows == 10_000


def test_a_result_over_the_byte_cap_is_refused(limited: Trident) -> None:
    with pytest.raises(SqlResultTooLargeError, match="bytes"):
        limited.sql("""select a.k, repeat('x', 1000) as pad from "big/t" a""")


def test_defaults(trident: Trident) -> None:
    s = trident.settings
    assert s.sql_timeout_seconds == 300
    assert s.sql_max_rows is not None and s.sql_max_bytes is not None
