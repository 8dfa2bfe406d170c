"""The statements that find a dataset's inlined tail, or its latest pg commit marker, read only
that dataset's entries, whatever plan Postgres picks.

A prepared statement (psycopg prepares a statement from its sixth run) and a plpgsql function's
statements switch to a generic plan, planned without the dataset id. With a few datasets, one of
them with a long tail, that plan walked the primary key (seq order) through every older block of
every dataset: an inlined commit took 2.7 ms of server time instead of 0.6 with 6,700 blocks of
another dataset before it (migrations/0015_tail_in_its_range.sql); the pg sink's latest-marker
lookups walked every newer marker the same way. Each statement is run here
under ``plan_cache_mode = force_generic_plan`` on a database of its own (its statistics are this
test's: one busy dataset, one quiet), and the buffers it touched are counted. The pg sink's
undo-log purge, which every pg write runs, is checked on its custom plan: it lacked an index by
dataset (migrations/0016_undo_by_dataset.sql)."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest

from tests.conftest import make_settings
from trident_resources import Trident
from trident_resources.control import queries as q

BUSY_BLOCKS = 300


def rows(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()), "v": [f"r{i}" for i in range(start, start + n)]})


@pytest.fixture
def own_database(pg_dsn: str) -> Iterator[str]:
    """A fresh database on the session's server, dropped afterwards."""
    name = f"plans_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'create database "{name}"')
    base, _, _ = pg_dsn.rpartition("/")
    yield f"{base}/{name}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'drop database if exists "{name}" with (force)')


@pytest.fixture
def tails(own_database: str, trident_home: Path) -> dict[str, Any]:
    """Dataset ``plan/busy`` with BUSY_BLOCKS inlined blocks, then ``plan/quiet`` with 2, none
    flushed; the quiet one's record and the analysed statistics of that state."""
    s = make_settings(trident_home, own_database, inline_max_rows=100, inline_flush_rows=10**6)
    with Trident(s) as t:
        t.write("plan/busy", rows(0, 10), mode="replace")
        t.write("plan/quiet", rows(0, 10), mode="replace")
        for i in range(BUSY_BLOCKS):
            t.write("plan/busy", rows(10 + i * 10, 10), mode="append")
        for i in range(2):
            t.write("plan/quiet", rows(10 + i * 10, 10), mode="append")
        assert t.describe("plan/busy").inlined_rows == BUSY_BLOCKS * 10
        assert t.describe("plan/quiet").inlined_rows == 20
        quiet = t.control.dataset(s.workspace, "plan/quiet")
    assert quiet is not None
    with psycopg.connect(own_database, autocommit=True) as conn:
        conn.execute("analyze trident_inline_tail")
    return {"dsn": own_database, "quiet": quiet}


def _positional(sql: str, names: list[str]) -> str:
    """``sql`` with its ``%(name)s`` placeholders as ``$n`` (a PREPAREd statement's)."""
    return re.sub(r"%\((\w+)\)s", lambda m: f"${names.index(m.group(1)) + 1}", sql)


def _generic_buffers(dsn: str, sql: str, types: list[str], args: list[str], plan: str = "generic") -> int:
    """Shared buffers one run of ``sql`` touched, on its generic plan (or its ``custom`` one)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"set plan_cache_mode = force_{plan}_plan")
        conn.execute(f"prepare probe({', '.join(types)}) as {sql}")
        got = conn.execute(f"explain (analyze, buffers, format json) execute probe({', '.join(args)})").fetchone()
    assert got is not None
    top = (got[0] if isinstance(got[0], list) else json.loads(got[0]))[0]
    return int(top["Plan"]["Shared Hit Blocks"]) + int(top["Plan"]["Shared Read Blocks"])


def test_the_oldest_unflushed_block_is_found_in_the_datasets_own_range(tails: dict[str, Any]) -> None:
    ds = tails["quiet"].dataset_id
    sql = _positional(q.INLINE_STATE, ["ds"])
    touched = _generic_buffers(tails["dsn"], sql, ["uuid"], [f"'{ds}'"])
    assert touched < 40, f"the writer's tail state touched {touched} buffers (the busy dataset's blocks)"
    with psycopg.connect(tails["dsn"]) as conn:
        got = conn.execute(q.INLINE_STATE, {"ds": ds}).fetchone()
    assert got is not None and got[0] == 20


def test_the_tail_a_record_names_is_read_in_the_datasets_own_range(tails: dict[str, Any]) -> None:
    quiet = tails["quiet"]
    sql = _positional(q.INLINE_TAIL_RANGE, ["ds", "after", "through"])
    args = [f"'{quiet.dataset_id}'", str(quiet.inline_flushed), str(quiet.inline_through)]
    touched = _generic_buffers(tails["dsn"], sql, ["uuid", "bigint", "bigint"], args)
    assert touched < 40, f"reading the tail touched {touched} buffers (the busy dataset's blocks)"


def test_an_inlined_commit_finds_its_tail_in_its_own_range(tails: dict[str, Any]) -> None:
    ds = tails["quiet"].dataset_id
    touched = _generic_buffers(tails["dsn"], "SELECT * FROM trident_oldest_unflushed($1)", ["uuid"], [f"'{ds}'"])
    assert touched < 40, f"the inlined commit's tail lookup touched {touched} buffers"


@pytest.fixture
def markers(own_database: str, trident_home: Path) -> dict[str, Any]:
    """pg datasets: ``plan/quiet`` written first (2 commits), then ``plan/busy`` with BUSY_BLOCKS
    one-call appends after it; analysed."""
    s = make_settings(trident_home, own_database, inline_max_rows=100)
    with Trident(s) as t:
        for key in ("plan/quiet", "plan/busy"):
            t.router.set_pin(key, "pg")
        t.write("plan/quiet", rows(0, 10), mode="replace")
        t.write("plan/quiet", rows(10, 10), mode="append")
        t.write("plan/busy", rows(0, 10), mode="replace")
        for i in range(BUSY_BLOCKS):
            t.write("plan/busy", rows(10 + i * 10, 10), mode="append")
        quiet = t.control.dataset(s.workspace, "plan/quiet")
    assert quiet is not None
    with psycopg.connect(own_database, autocommit=True) as conn:
        conn.execute("analyze trident_pg_commits")
    return {"dsn": own_database, "quiet": quiet}


@pytest.mark.parametrize("name", ["PG_LATEST_COMMIT", "PG_LATEST_SEQ"])
def test_a_pg_datasets_latest_commit_is_found_in_its_own_range(markers: dict[str, Any], name: str) -> None:
    quiet = markers["quiet"]
    sql = _positional(getattr(q, name), ["ds"])
    touched = _generic_buffers(markers["dsn"], sql, ["uuid"], [f"'{quiet.dataset_id}'"])
    assert touched < 40, f"{name} touched {touched} buffers (the busy dataset's markers)"
    with psycopg.connect(markers["dsn"]) as conn:
        got = conn.execute(getattr(q, name), {"ds": quiet.dataset_id}).fetchone()
    assert got is not None and got[0] == quiet.snapshot_id


@pytest.fixture
def undo(own_database: str, trident_home: Path) -> dict[str, Any]:
    """pg datasets: ``plan/busy`` whose upsert replaced 5,000 rows (kept in the undo log until its
    next write), and ``plan/quiet``; analysed."""
    s = make_settings(trident_home, own_database)
    with Trident(s) as t:
        for key in ("plan/quiet", "plan/busy"):
            t.router.set_pin(key, "pg")
        t.write("plan/quiet", rows(0, 10), mode="replace")
        t.write("plan/busy", rows(0, 5000), mode="replace")
        changed = rows(0, 5000).set_column(1, "v", pa.array([f"changed {i}" for i in range(5000)]))
        t.write("plan/busy", changed, mode="upsert", keys=["id"])
        quiet = t.control.dataset(s.workspace, "plan/quiet")
    assert quiet is not None
    with psycopg.connect(own_database, autocommit=True) as conn:
        kept = conn.execute("select count(*) from trident_rows_undo").fetchone()
        conn.execute("analyze trident_rows_undo")
    assert kept is not None and kept[0] >= 5000
    return {"dsn": own_database, "quiet": quiet}


def test_a_pg_write_purges_its_undo_log_without_reading_the_others(undo: dict[str, Any]) -> None:
    """(On its custom plan: a generic one costs the whole log, so Postgres keeps custom plans
    for it; without an index by dataset even those read the whole log.)"""
    quiet = undo["quiet"]
    sql = q.PG_PURGE_UNDO.replace("%s", "$1")
    touched = _generic_buffers(undo["dsn"], sql, ["uuid"], [f"'{quiet.dataset_id}'"], plan="custom")
    assert touched < 40, f"purging a quiet dataset's undo log touched {touched} buffers (the busy one's undo rows)"
