"""The pg sink's read cache (issue 12.3, ``sinks/pg/blocks.py``): replace/append batches are also
stored as Arrow row blocks and reads take their rows from them; every change of a row a block
holds (keyed writes, undo, SQL by hand) drops that block, so reads always return the jsonb truth.

Each test compares a read through blocks with a read of the same dataset by a Trident that
reads jsonb only (``pg_row_blocks=False``, the ``jsonb_only`` fixture), and checks the blocks it expects are there (or gone).
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from tests.support.sink_helpers import comparable
from trident_resources import Trident, TridentSettings
from trident_resources.core.failpoints import InjectedFault, armed
from trident_resources.sinks.pg import blocks
from trident_resources.sinks.pg.blocks import decode_block

from .test_pg_sink import _child


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch, every_write_blocked: None) -> None:
    monkeypatch.setattr(blocks, "BLOCK_ROWS", 10)


def _blocks(t: Trident, key: str) -> list[dict[str, Any]]:
    ds = t.control.dataset(t.settings.workspace, key)
    assert ds is not None
    with t.control.pool.connection() as conn:
        rows = conn.execute(
            "SELECT gen, first_row_index, last_row_index, n_rows, txn_id, octet_length(ipc) AS bytes "
            "FROM trident_row_blocks WHERE dataset_id = %s ORDER BY gen, first_row_index",
            (ds.dataset_id,),
        ).fetchall()
    return [dict(r) for r in rows]


def _sql(t: Trident, statement: str, key: str, **params: Any) -> int:
    """``statement`` run by hand on the dataset ``%(ds)s``; the rows it changed."""
    ds = t.control.dataset(t.settings.workspace, key)
    assert ds is not None
    with t.control.tx() as conn:
        return conn.execute(statement, {"ds": ds.dataset_id, **params}).rowcount


def _forge_block(t: Trident, key: str, first: int, rows: pa.Table) -> None:
    """Overwrite the block starting at row index ``first`` with ``rows`` by hand (its jsonb rows
    untouched, so no trigger fires): a read that shows them took its rows from the block."""
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, rows.schema) as out:
        out.write_table(rows)
    forge = "UPDATE trident_row_blocks SET ipc = %(ipc)s WHERE dataset_id = %(ds)s AND first_row_index = %(first)s"
    assert _sql(t, forge, key, ipc=sink.getvalue().to_pybytes(), first=first) == 1


def _data(lo: int, hi: int) -> pa.Table:
    return pa.table({"k": list(range(lo, hi)), "v": [f"v{i}" for i in range(lo, hi)], "f": [i * 0.5 for i in range(lo, hi)]})


def test_replace_and_append_write_blocks_that_reads_use(trident: Trident, jsonb_only: Trident, small_blocks: None) -> None:
    t = trident
    t.router.set_pin("blk/a", "pg")
    t.write("blk/a", _data(0, 25))
    r = t.write("blk/a", _data(25, 31), mode="append")
    got = _blocks(t, "blk/a")
    assert [(b["first_row_index"], b["last_row_index"]) for b in got] == [(0, 9), (10, 19), (20, 24), (25, 30)]
    assert got[-1]["txn_id"] == r.txn_id and all(b["bytes"] > 0 for b in got)
    assert comparable(t.read("blk/a")) == comparable(jsonb_only.read("blk/a"))
    # the read really takes its rows from the blocks: a block forged by hand (rows untouched) shows
    forged = pa.table({"k": list(range(25, 31)), "v": ["forged"] * 6, "f": [0.0] * 6})
    stamped = t.read("blk/a", row_filter="k >= 25").drop_columns(["k", "v", "f"])
    batch = pa.Table.from_arrays([*stamped.columns, *forged.columns], names=[*stamped.column_names, *forged.column_names])
    _forge_block(t, "blk/a", 25, batch)
    assert set(t.read("blk/a", row_filter="k >= 25").column("v").to_pylist()) == {"forged"}
    assert set(jsonb_only.read("blk/a", row_filter="k >= 25").column("v").to_pylist()) != {"forged"}
    assert jsonb_only.write("blk/b", _data(0, 5)).row_count == 5  # a writer with the cache off writes none
    assert _blocks(t, "blk/b") == []


def _keyed_edits(t: Trident, key: str) -> None:
    """40 rows in blocks of 10 (``small_blocks``), then an upsert (k=3 and a new k=100), an
    update (k=25) and a delete (k=38): every block but 10-19 is touched."""
    t.write(key, _data(0, 40))
    t.write(key, pa.table({"k": [3, 100], "v": ["up", "new"], "f": [1.0, 2.0]}), mode="upsert", keys=["k"])
    t.update_rows(key, pa.table({"k": [25], "v": ["edited"]}), keys="k")
    t.delete_rows(key, where="k = 38")


def test_keyed_writes_drop_the_blocks_they_touch_and_write_none(
    trident: Trident, jsonb_only: Trident, small_blocks: None
) -> None:
    t = trident
    t.router.set_pin("blk/k", "pg")
    _keyed_edits(t, "blk/k")
    spans = [(b["first_row_index"], b["last_row_index"]) for b in _blocks(t, "blk/k")]
    assert spans == [(10, 19)]  # 0-9 held k=3, 20-29 k=25, 30-39 k=38; the upsert wrote no block
    assert comparable(t.read("blk/k")) == comparable(jsonb_only.read("blk/k"))
    got = {r["k"]: r["v"] for r in t.read("blk/k", columns=["k", "v"]).to_pylist()}
    assert got[3] == "up" and got[25] == "edited" and got[100] == "new" and 38 not in got and got[12] == "v12"


def test_rows_changed_by_hand_are_seen_by_the_next_read(trident: Trident, jsonb_only: Trident, small_blocks: None) -> None:
    """An UPDATE or DELETE of trident_rows in plain SQL drops the blocks holding those rows (the
    trigger); the next read shows the change."""
    t = trident
    t.router.set_pin("blk/h", "pg")
    t.write("blk/h", _data(0, 30))
    assert len(_blocks(t, "blk/h")) == 3
    changed = _sql(
        t,
        "UPDATE trident_rows SET data = jsonb_set(data, '{v}', '\"by hand\"') WHERE dataset_id = %(ds)s AND row_index = 4",
        "blk/h",
    )
    assert changed == 1
    assert t.read("blk/h", row_filter="k = 4").column("v").to_pylist() == ["by hand"]
    assert _sql(t, "DELETE FROM trident_rows WHERE dataset_id = %(ds)s AND row_index = 27", "blk/h") == 1
    assert 27 not in t.read("blk/h").column("k").to_pylist()
    assert [b["first_row_index"] for b in _blocks(t, "blk/h")] == [10]
    # a row moved into a block's span by hand breaks that block too
    _sql(t, "UPDATE trident_rows SET row_index = 15 WHERE dataset_id = %(ds)s AND row_index = 26", "blk/h")
    assert _blocks(t, "blk/h") == []
    assert comparable(t.read("blk/h")) == comparable(jsonb_only.read("blk/h"))


def test_added_and_widened_columns_across_blocks(trident: Trident, jsonb_only: Trident, small_blocks: None) -> None:
    t = trident
    for key, sink in (("blk/e", "pg"), ("blk/e_ice", "iceberg_native")):
        t.router.set_pin(key, sink)
        t.write(key, pa.table({"k": list(range(12)), "n": pa.array(range(12), pa.int64())}))
        t.write(key, pa.table({"k": [12, 13], "n": pa.array([2**31 - 1, -5], pa.int32()), "s": ["a", None]}), mode="append")
        t.write(key, pa.table({"k": [14], "g": pa.array([0.1], pa.float32())}), mode="append")
    assert len(_blocks(t, "blk/e")) == 4
    user = ["k", "n", "s", "g"]
    for cols in (None, ["k", "s"], ["g", "n", "k"]):
        pg = t.read("blk/e", columns=cols)
        assert comparable(pg, order_by="k") == comparable(jsonb_only.read("blk/e", columns=cols), order_by="k")
        ice = t.read("blk/e_ice", columns=cols)
        assert pg.schema.equals(ice.schema)
        assert pg.select(cols or user).sort_by("k").equals(ice.select(cols or user).sort_by("k"))
    assert t.read("blk/e", row_filter="s is null and n < 20").column("k").to_pylist() == [*range(12), 13]


def test_a_widened_float32_block_reads_as_the_jsonb_text_does() -> None:
    """jsonb holds a float32 as its shortest text ('0.1'), which reads as the float64 0.1: a block
    of that float32 read into a float64 column must give the same, not 0.10000000149011612."""
    batch = pa.record_batch(
        {"__row_index": pa.array([0, 1, 2, 3], pa.int64()), "g": pa.array([0.1, -0.0, float("nan"), None], pa.float32())}
    )
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, batch.schema) as out:
        out.write_batch(batch)
    got = decode_block(sink.getvalue().to_pybytes(), 4, pa.schema([("g", pa.float64())]))
    assert [repr(v) for v in got.column(0).to_pylist()] == ["0.1", "-0.0", "nan", "None"]


def test_undo_and_killed_writers_leave_no_block(trident: Trident, settings: TridentSettings, small_blocks: None) -> None:
    t = trident
    t.router.set_pin("crash/x", "pg")
    t.write("crash/x", pa.table({"k": [1], "v": ["a"]}))
    first = _blocks(t, "crash/x")
    with armed("commit.before_ledger"), pytest.raises(InjectedFault):  # Postgres committed, the ledger did not
        t.write("crash/x", pa.table({"k": [5, 6], "v": ["x", "y"]}), mode="append")
    assert _blocks(t, "crash/x") == first and t.read("crash/x").column("k").to_pylist() == [1]
    proc = _child(settings, "write.before_commit=exit", WRITE)  # blocks written, then the process dies
    assert proc.returncode == 137, proc.stderr
    assert _blocks(t, "crash/x") == first
    assert t.reconcile().aborted
    t.write("crash/x", pa.table({"k": [2], "v": ["b"]}), mode="append")
    assert sorted(t.read("crash/x").column("k").to_pylist()) == [1, 2] and len(_blocks(t, "crash/x")) == 2


WRITE = """
import pyarrow as pa
from trident_resources import Trident
t = Trident.from_env()
t.write("crash/x", pa.table({"k": list(range(7, 1207)), "v": ["n"] * 1200}), mode="append")
"""


def test_a_replace_purges_old_generation_blocks_and_drop_removes_all(trident: Trident, every_write_blocked: None) -> None:
    t = trident
    t.router.set_pin("blk/g", "pg")
    for lo in (0, 100, 200):
        t.write("blk/g", _data(lo, lo + 5))
    gens = {b["gen"] for b in _blocks(t, "blk/g")}
    assert len(gens) == 2  # the previous generation is kept until the next write (undo of a replace)
    assert t.read("blk/g").column("k").to_pylist() == list(range(200, 205))
    ds = t.control.dataset(t.settings.workspace, "blk/g")
    assert ds is not None
    t.drop("blk/g")
    with t.control.pool.connection() as conn:
        left = conn.execute("SELECT count(*) AS n FROM trident_row_blocks WHERE dataset_id = %s", (ds.dataset_id,)).fetchone()
    assert left is not None and left["n"] == 0


def test_blocks_are_bounded_and_cover_a_large_write(trident: Trident, jsonb_only: Trident) -> None:
    t = trident
    t.router.set_pin("blk/big", "pg")
    n = 150_000
    t.write("blk/big", pa.table({"k": pa.array(range(n), pa.int64()), "s": pa.array([str(uuid.UUID(int=i)) for i in range(n)])}))
    got = _blocks(t, "blk/big")
    assert sum(b["n_rows"] for b in got) == n and max(b["n_rows"] for b in got) <= blocks.BLOCK_ROWS
    assert comparable(t.read("blk/big", row_filter="k >= 65000 and k < 70000")) == comparable(
        jsonb_only.read("blk/big", row_filter="k >= 65000 and k < 70000")
    )


def test_truncate_of_the_rows_drops_every_block(trident: Trident, every_write_blocked: None) -> None:
    """TRUNCATE fires no row trigger: a statement trigger empties the blocks with it (checked
    inside a transaction that is rolled back, so the other tests' rows stay)."""
    t = trident
    t.router.set_pin("blk/t", "pg")
    t.write("blk/t", _data(0, 5))
    before = _blocks(t, "blk/t")
    assert before
    with t.control.pool.connection() as conn, conn.transaction(force_rollback=True):
        conn.execute("TRUNCATE trident_rows")
        left = conn.execute("SELECT count(*) AS n FROM trident_row_blocks").fetchone()
        assert left is not None and left["n"] == 0
    assert _blocks(t, "blk/t") == before


def test_maintain_rebuilds_the_blocks_keyed_writes_dropped(
    trident: Trident, jsonb_only: Trident, small_blocks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keyed writes write no block and drop the ones they touch, so an upserted dataset read from
    jsonb until its next replace; ``maintain`` rebuilds blocks over every long enough run of
    consecutive row indexes no block holds, from the rows themselves, and reads stay the truth."""
    monkeypatch.setattr(blocks, "MIN_BLOCK_ROWS", 3)
    t = trident
    t.router.set_pin("blk/m", "pg")
    _keyed_edits(t, "blk/m")
    assert [(b["first_row_index"], b["last_row_index"]) for b in _blocks(t, "blk/m")] == [(10, 19)]
    done = t.maintain("blk/m")
    # runs 0-9, 20-37 (38 was deleted) and 39-40 (k=39 and the upsert's new row: too short)
    assert done.skipped is None and done.rebuilt_blocks == 3
    got = _blocks(t, "blk/m")
    assert [(b["first_row_index"], b["last_row_index"]) for b in got] == [(0, 9), (10, 19), (20, 29), (30, 37)]
    assert comparable(t.read("blk/m")) == comparable(jsonb_only.read("blk/m"))
    # the rebuilt blocks stay under the triggers' watch: a change by hand drops its block
    assert (
        _sql(
            t, 'UPDATE trident_rows SET data = data || \'{"v": "by hand"}\' WHERE dataset_id = %(ds)s AND row_index = 5', "blk/m"
        )
        == 1
    )
    assert [b["first_row_index"] for b in _blocks(t, "blk/m")] == [10, 20, 30]
    assert {r["k"]: r["v"] for r in t.read("blk/m", columns=["k", "v"]).to_pylist()}[5] == "by hand"
    assert t.maintain("blk/m").rebuilt_blocks == 1  # only the run the hand edit broke
    assert comparable(t.read("blk/m")) == comparable(jsonb_only.read("blk/m"))
    # and reads really take those rows from the rebuilt blocks: one forged by hand shows
    stamped = t.read("blk/m", row_filter="k >= 20 and k < 30")
    forged = stamped.set_column(stamped.schema.get_field_index("v"), "v", pa.array(["forged"] * 10, pa.large_string()))
    _forge_block(t, "blk/m", 20, forged)
    assert set(t.read("blk/m", row_filter="k >= 20 and k < 30").column("v").to_pylist()) == {"forged"}


def test_small_writes_write_no_block_and_maintain_gathers_them_into_full_ones(
    trident: Trident, jsonb_only: Trident, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A block per small write made a dataset fed by small appends read from thousands of tiny
    blocks, ~28x slower than from jsonb. Writes of fewer than ``MIN_BLOCK_ROWS`` rows (through
    the normal door and in one call) write none; ``maintain`` drops the tiny blocks an earlier
    rule wrote and rebuilds full blocks over the runs."""
    monkeypatch.setattr(blocks, "MIN_BLOCK_ROWS", 40)
    t = trident
    t.router.set_pin("blk/small", "pg")
    t.write("blk/small", _data(0, 50))
    assert [(b["first_row_index"], b["n_rows"]) for b in _blocks(t, "blk/small")] == [(0, 50)]
    slow = Trident(t.settings.model_copy(update={"inline_max_rows": 0}))  # the normal door
    try:
        for i in range(5):
            (t if i % 2 else slow).write("blk/small", _data(50 + 10 * i, 60 + 10 * i), mode="append")
    finally:
        slow.close()
    assert len(_blocks(t, "blk/small")) == 1
    monkeypatch.setattr(blocks, "MIN_BLOCK_ROWS", 1)  # as before the rule: a block per write
    for i in range(5):
        t.write("blk/small", _data(100 + 10 * i, 110 + 10 * i), mode="append")
    assert len(_blocks(t, "blk/small")) == 6
    monkeypatch.setattr(blocks, "MIN_BLOCK_ROWS", 40)
    assert t.maintain("blk/small").rebuilt_blocks == 1
    assert [(b["first_row_index"], b["n_rows"]) for b in _blocks(t, "blk/small")] == [(0, 50), (50, 100)]
    assert comparable(t.read("blk/small")) == comparable(jsonb_only.read("blk/small"))
    assert t.maintain("blk/small").rebuilt_blocks == 0


def test_maintain_rebuilds_nothing_with_the_cache_off_or_nothing_dropped(trident: Trident, jsonb_only: Trident) -> None:
    t = trident
    t.router.set_pin("blk/n", "pg")
    t.write("blk/n", _data(0, 3000))
    before = _blocks(t, "blk/n")
    assert t.maintain("blk/n").rebuilt_blocks == 0 and _blocks(t, "blk/n") == before
    t.write("blk/n", pa.table({"k": [7], "v": ["up"], "f": [0.0]}), mode="upsert", keys=["k"])
    assert _blocks(t, "blk/n") == []
    assert jsonb_only.maintain("blk/n").rebuilt_blocks == 0 and _blocks(t, "blk/n") == []


def test_a_change_by_hand_during_the_rebuild_waits_and_then_drops_the_block(
    trident: Trident, jsonb_only: Trident, small_blocks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rebuild holds the rows it encodes until its blocks commit: an UPDATE by hand issued
    meanwhile waits, and its trigger then finds the new block and drops it. Without the hold the
    UPDATE's trigger would run first, find no block, and the block committed after it would keep
    the old row."""
    monkeypatch.setattr(blocks, "MIN_BLOCK_ROWS", 3)
    t = trident
    t.router.set_pin("blk/r", "pg")
    t.write("blk/r", _data(0, 10))
    t.write("blk/r", pa.table({"k": [3], "v": ["up"], "f": [0.0]}), mode="upsert", keys=["k"])
    assert _blocks(t, "blk/r") == []
    done: list[Any] = []
    with armed("pg.blocks_rebuilt", "sleep:1.5"):
        rebuild = threading.Thread(target=lambda: done.append(t.maintain("blk/r")))
        rebuild.start()
        deadline = time.monotonic() + 60
        with t.control.pool.connection() as conn:  # wait until the rebuild holds its new block
            while not conn.execute(
                "SELECT 1 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
                "WHERE c.relname = 'trident_row_blocks' AND l.mode = 'RowExclusiveLock' AND l.pid <> pg_backend_pid()"
            ).fetchone():
                assert time.monotonic() < deadline and rebuild.is_alive()
                time.sleep(0.02)
        hand = 'UPDATE trident_rows SET data = data || \'{"v": "by hand"}\' WHERE dataset_id = %(ds)s AND row_index = 5'
        assert _sql(t, hand, "blk/r") == 1  # waits for the rebuild's commit
        rebuild.join()
    assert done and done[0].rebuilt_blocks == 1
    assert _blocks(t, "blk/r") == []  # the UPDATE's trigger dropped the block built a moment before
    assert {r["k"]: r["v"] for r in t.read("blk/r", columns=["k", "v"]).to_pylist()}[5] == "by hand"
    assert comparable(t.read("blk/r")) == comparable(jsonb_only.read("blk/r"))
