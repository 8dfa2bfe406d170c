"""Inlined writes (transaction/inline.py): small appends to an iceberg_native dataset commit into
the control plane with their ledger row, and every read sees the snapshot plus the tail."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

from tests.conftest import backend_settings
from tests.support.helpers import cli_env, iceberg_table
from trident_cli.main import cli
from trident_resources import Trident, TridentSettings


def rows(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()), "v": [f"r{i}" for i in range(start, start + n)]})


@pytest.fixture
def t(settings: TridentSettings) -> Iterator[Trident]:
    tr = Trident(settings.model_copy(update={"inline_max_rows": 100}))
    yield tr
    tr.close()


def ids(table: pa.Table) -> list[int]:
    return sorted(table.column("id").to_pylist())


def test_small_append_is_inlined_with_iceberg_identity(t: Trident) -> None:
    base = t.write("ds/a", rows(0, 200), mode="replace")
    r = t.write("ds/a", rows(200, 10), mode="append")
    assert r.snapshot_id == base.snapshot_id  # no Iceberg commit
    assert r.rows_written == 10 and r.row_count == 210
    d = t.describe("ds/a")
    assert d.inlined_rows == 10 and d.row_count == 210
    got = t.read("ds/a")
    assert ids(got) == list(range(210))
    idx = sorted(got.column("__row_index").to_pylist())
    assert idx == list(range(210))
    tail = got.filter(pa.compute.greater_equal(got.column("id"), 200))
    assert set(tail.column("__created_at").to_pylist()) == {r.created_at}
    assert len(set(got.column("__row_id").to_pylist())) == 210
    assert ids(t.stream("ds/a").read_all()) == list(range(210))
    assert t.sql('select count(*) as n from "ds/a"').column("n").to_pylist() == [210]
    assert ids(t.read("ds/a", row_filter="id >= 205", columns=["id"])) == list(range(205, 210))
    assert ids(t.read("ds/a", as_of=base.txn_id)) == list(range(200))
    assert ids(t.read("ds/a", as_of=r.txn_id)) == list(range(210))
    assert [e.txn_id for e in t.history("ds/a")][:2] == [r.txn_id, base.txn_id]


def test_flush_moves_tail_into_one_snapshot(t: Trident) -> None:
    base = t.write("ds/b", rows(0, 50), mode="replace")
    writes = [t.write("ds/b", rows(50 + 10 * i, 10), mode="append") for i in range(5)]
    before = t.read("ds/b").sort_by("__row_index")
    entry = t.flush("ds/b")
    assert entry is not None and entry.snapshot_id != base.snapshot_id
    assert t.describe("ds/b").inlined_rows == 0
    after = t.read("ds/b").sort_by("__row_index")
    assert after.equals(before)
    assert t.flush("ds/b") is None
    assert ids(t.read("ds/b", as_of=writes[2].txn_id)) == list(range(80))
    assert ids(t.read("ds/b", as_of=entry.txn_id)) == list(range(100))


def test_upsert_flushes_first(t: Trident) -> None:
    t.write("ds/c", rows(0, 20), mode="replace")
    t.write("ds/c", rows(20, 5), mode="append")
    up = pa.table({"id": pa.array([22, 30], pa.int64()), "v": ["new", "x"]})
    r = t.write("ds/c", up, mode="upsert", keys=["id"])
    got = t.read("ds/c")
    assert ids(got) == [*range(25), 30]
    assert t.describe("ds/c").inlined_rows == 0
    assert r.row_count == 26


@pytest.mark.parametrize("backend", ["local", "s3", "rest"])
def test_every_read_door_sees_snapshot_plus_tail(
    request: pytest.FixtureRequest, trident_home: Path, pg_dsn: str, backend: str
) -> None:
    with Trident(backend_settings(request, backend, trident_home, pg_dsn, inline_max_rows=100)) as t:
        t.write("ds/doors", rows(0, 30), mode="replace")
        t.write("ds/doors", rows(30, 5), mode="append")
        plan = t.scan_plan("ds/doors")
        assert plan.tail is not None and plan.tail.num_rows == 5
        assert plan.path == ("native" if backend == "local" else "arrow")
        q = 'select count(*) as n, count(distinct __row_id) as u, max(__row_index) as m from "ds/doors" where id >= 28'
        assert t.sql(q).to_pylist() == [{"n": 7, "u": 7, "m": 34}]
        assert t.sql('select v from "ds/doors" where id = 33').column("v").to_pylist() == ["r33"]
        assert ids(t.arrow_source("ds/doors").to_table()) == list(range(35))
        assert t.stream("ds/doors", columns=[]).read_all().num_rows == 35
        assert t.read("ds/doors", columns=[]).num_rows == 35
        assert t.version_stats("ds/doors") is None  # the files' statistics miss the tail: callers count
        assert t.schema("ds/doors") == t.read("ds/doors").schema


def test_flush_on_threshold_and_on_maintain(settings: TridentSettings) -> None:
    with Trident(settings.model_copy(update={"inline_max_rows": 100, "inline_flush_rows": 30})) as t:
        t.write("ds/th", rows(0, 10), mode="replace")
        for i in range(3):
            t.write("ds/th", rows(10 + 10 * i, 10), mode="append")
        assert t.describe("ds/th").inlined_rows == 0  # the third append reached 30 and flushed
        flushes = [e for e in t.history("ds/th") if e.writer == "inline.flush"]
        assert len(flushes) == 1 and flushes[0].rows_written == 30 and flushes[0].status == "committed"
        t.write("ds/th", rows(40, 5), mode="append")
        assert t.describe("ds/th").inlined_rows == 5
        done = t.maintain("ds/th")
        assert done.flushed_rows == 5 and t.describe("ds/th").inlined_rows == 0
        assert ids(t.read("ds/th")) == list(range(45))
        assert sorted(iceberg_table(t, "ds/th").scan().to_arrow().column("id").to_pylist()) == list(range(45))


def test_writes_that_need_the_whole_dataset_flush_first(t: Trident) -> None:
    t.write("ds/w", rows(0, 10), mode="replace")
    small = t.write("ds/w", rows(10, 5), mode="append")
    t.write("ds/w", pa.table({"id": pa.array([3, 12], pa.int64())}), mode="delete", keys=["id"])
    assert ids(t.read("ds/w")) == [i for i in range(15) if i not in (3, 12)]
    t.write("ds/w", rows(15, 2), mode="append")
    t.write("ds/w", rows(100, 3), mode="replace")
    assert ids(t.read("ds/w")) == [100, 101, 102] and t.describe("ds/w").inlined_rows == 0
    assert ids(t.read("ds/w", as_of=small.txn_id)) == list(range(15))
    t.write("ds/w", rows(103, 2), mode="append")
    t.write("ds/w", rows(105, 1), mode="append", row_filter=None)
    assert t.describe("ds/w").inlined_rows == 3
    t.write("ds/w", rows(106, 300), mode="append")  # too big to inline: the Iceberg path, tail flushed first
    got = t.read("ds/w")
    assert ids(got) == list(range(100, 406)) and t.describe("ds/w").inlined_rows == 0
    assert sorted(got.column("__row_index").to_pylist()) == list(range(306))


def test_a_new_column_takes_the_iceberg_path(t: Trident) -> None:
    t.write("ds/n", rows(0, 10), mode="replace")
    t.write("ds/n", rows(10, 2), mode="append")
    wider = rows(12, 2).append_column("extra", pa.array([1.5, 2.5]))
    r = t.write("ds/n", wider, mode="append")
    assert r.schema_version == 2 and t.describe("ds/n").inlined_rows == 0
    got = t.read("ds/n").sort_by("__row_index")
    assert got.column("id").to_pylist() == list(range(14))
    assert got.column("extra").to_pylist() == [None] * 12 + [1.5, 2.5]


def test_a_staged_version_waiting_keeps_appends_on_the_iceberg_path(t: Trident) -> None:
    t.write("ds/s", rows(0, 10), mode="replace")
    t.write("ds/s", rows(10, 2), mode="append")
    staged = t.write("ds/s", rows(12, 2), mode="append", stage=True)
    assert t.describe("ds/s").inlined_rows == 0  # staging flushed first
    r = t.write("ds/s", rows(14, 2), mode="append")
    assert t.describe("ds/s").inlined_rows == 0 and r.snapshot_id != staged.snapshot_id
    assert ids(t.read("ds/s")) == [*range(12), 14, 15]


def test_trident_flush_command(t: Trident) -> None:
    t.write("ds/cli", rows(0, 10), mode="replace")
    t.write("ds/cli", rows(10, 4), mode="append")
    env = {**cli_env(t.settings), "TRIDENT_INLINE_MAX_ROWS": "100"}
    shown = CliRunner().invoke(cli, ["describe", "ds/cli"], env=env)
    assert shown.exit_code == 0 and "inlined rows" in shown.output, shown.output
    res = CliRunner().invoke(cli, ["flush", "ds/cli"], env=env)
    assert res.exit_code == 0, res.output
    assert "flushed" in res.output and t.describe("ds/cli").inlined_rows == 0
    again = CliRunner().invoke(cli, ["flush", "ds/cli"], env=env)
    assert again.exit_code == 0 and "nothing to flush" in again.output
    assert sorted(iceberg_table(t, "ds/cli").scan().to_arrow().column("id").to_pylist()) == list(range(14))


def test_flush_by_age(settings: TridentSettings) -> None:
    with Trident(settings.model_copy(update={"inline_max_rows": 100, "inline_flush_seconds": 1})) as t:
        t.write("ds/age", rows(0, 10), mode="replace")
        t.write("ds/age", rows(10, 2), mode="append")
        t.write("ds/age", rows(12, 2), mode="append")
        assert t.describe("ds/age").inlined_rows == 4  # the oldest is younger than a second
        time.sleep(1.2)
        t.write("ds/age", rows(14, 2), mode="append")
        assert t.describe("ds/age").inlined_rows == 0
        assert sorted(iceberg_table(t, "ds/age").scan().to_arrow().column("id").to_pylist()) == list(range(16))


def test_the_ledger_sensor_feed_and_delta_windows_see_inlined_commits(t: Trident) -> None:
    base = t.write("ds/feed", rows(0, 10), mode="replace")
    after = max((seq for seq, _, _ in t.commits_since()), default=0)
    small = t.write("ds/feed", rows(10, 3), mode="append")
    feed = t.commits_since(after)
    assert [(key, e.txn_id, e.rows_written) for _, key, e in feed] == [("ds/feed", small.txn_id, 3)]
    # a delta reader takes the rows stamped after its mark: exactly the inlined ones
    since = base.committed_at
    newer = t.read("ds/feed", row_filter=f"__created_at > '{since.isoformat()}'")
    assert ids(newer) == [10, 11, 12]
    out = t.write("ds/out", newer.select(["id", "v"]), mode="replace", watermarks={"ds/feed": (small.committed_at, small.txn_id)})
    assert out.row_count == 3 and t.watermarks("ds/out") == {"ds/feed": small.committed_at}
    assert small.committed_at >= small.created_at
