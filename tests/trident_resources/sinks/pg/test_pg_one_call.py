"""A small append to a pg dataset commits in ONE call (migrations/0014_pg_append.sql,
``transaction/pg_append.py``): rows, block, commit marker and ledger row in the Postgres
transaction that takes the writer lock, stamped from the record this process's last write left.

These check that it stores exactly what the normal door stores (the same jsonb, block and
identity), that a stale record or a held lock never lets a row land twice or at a taken index,
and that many processes appending at once lose and double nothing."""

from __future__ import annotations

import logging
import math
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tests.support.helpers import append_waits_for_held_lock, settings_env, writers_take_turns
from trident_resources import SchemaMismatchError, Trident, TridentSettings

REPO = Path(__file__).resolve().parents[4]


def rows(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()), "v": [f"r{i}" for i in range(start, start + n)]})


@pytest.fixture
def pair(settings: TridentSettings) -> Iterator[tuple[Trident, Trident]]:
    s = settings.model_copy(update={"inline_max_rows": 100})
    a, b = Trident(s), Trident(s)
    yield a, b
    a.close()
    b.close()


def start(t: Trident, key: str, data: pa.Table) -> None:
    t.router.set_pin(key, "pg")
    t.write(key, data, mode="replace")


def whole(t: Trident, key: str, n: int) -> None:
    got = t.read(key)
    assert sorted(got.column("id").to_pylist()) == list(range(n))
    assert sorted(got.column("__row_index").to_pylist()) == list(range(n))
    assert len(set(got.column("__row_id").to_pylist())) == n
    assert t.describe(key).row_count == n


@pytest.fixture
def calls(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    with caplog.at_level(logging.INFO, logger="trident"):
        yield caplog


def one_calls(caplog: pytest.LogCaptureFixture, key: str) -> int:
    """How many writes of ``key`` this process made in one call (the write's log line says so)."""
    return sum(1 for r in caplog.records if r.getMessage().startswith(f"trident write {key} ") and "(one call)" in r.getMessage())


AWKWARD: dict[str, Any] = {
    "i": pa.array([0, -1, 2**62, None, 7, -(2**63), 3], pa.int64()),
    "u8": pa.array([0, 255, None, 1, 2, 3, 4], pa.uint8()),
    "b": pa.array([True, False, None, True, False, True, None]),
    "f": pa.array([0.1, -0.0, float("nan"), float("inf"), float("-inf"), 5e-324, 1e16]),
    "g": pa.array([None, 1.5, -2.25, 1 / 3, 0.0, 1e-7, 123456789.123]),
    "s": pa.array(['a "q", v', "line\nbreak\r\n", "back\\slash \\n", "tab\there", "ünï ☃ 𝄞", None, "\u2028{}[]"]),
    "ls": pa.array(["", "x", None, "y" * 300, "'", '"', "\x01\x1f"], pa.large_string()),
}


def test_a_one_call_append_stores_what_the_normal_door_stores(settings: TridentSettings, calls: pytest.LogCaptureFixture) -> None:
    """Python's encoding of flat columns, and the DuckDB encoding kept for the rest, give the
    same jsonb and row blocks as the normal door's COPY: read back equal, jsonb equal."""
    fast = Trident(settings.model_copy(update={"inline_max_rows": 100}))
    slow = Trident(settings.model_copy(update={"inline_max_rows": 0}))
    seed = pa.table({k: v.slice(0, 1) for k, v in AWKWARD.items()})
    data = pa.table(AWKWARD).slice(1)
    nested = pa.table({"d": pa.array([1, 2], pa.int32()), "ts": pa.array([0, 10**15], pa.timestamp("us", "UTC"))})
    try:
        for t, key in ((fast, "enc/fast"), (slow, "enc/slow")):
            start(t, key, seed)
            t.write(key, data, mode="append")
            start(t, key + "_t", nested.slice(0, 1))
            t.write(key + "_t", nested.slice(1), mode="append")
        assert one_calls(calls, "enc/fast") == 1 and one_calls(calls, "enc/slow") == 0
        assert one_calls(calls, "enc/fast_t") == 1
        for a, b in (("enc/fast", "enc/slow"), ("enc/fast_t", "enc/slow_t")):
            got, want = fast.read(a).sort_by("__row_index"), slow.read(b).sort_by("__row_index")
            assert got.schema.equals(want.schema)
            user = [n for n in got.column_names if not n.startswith("__")]
            assert repr(got.select(user).to_pylist()) == repr(want.select(user).to_pylist())  # nan, -0.0 by repr
            assert got.column("__row_index").to_pylist() == want.column("__row_index").to_pylist()
            with fast.control.connection() as conn:  # jsonb's own equality (1e+16 = 10000000000000000.0)
                same = conn.execute(
                    "SELECT count(*) AS n, count(*) FILTER (WHERE x.data = y.data) AS equal FROM trident_rows x"
                    " JOIN trident_datasets dx ON dx.dataset_id = x.dataset_id"
                    " JOIN trident_datasets dy ON dy.workspace = dx.workspace AND dy.key = %s"
                    " JOIN trident_rows y ON y.dataset_id = dy.dataset_id AND y.row_index = x.row_index"
                    " WHERE dx.workspace = %s AND dx.key = %s",
                    (b, fast.workspace, a),
                ).fetchone()
            assert same is not None and same["n"] == got.num_rows and same["equal"] == same["n"]
        f = fast.read("enc/fast").sort_by("__row_index").column("f").to_pylist()
        assert math.isnan(f[2]) and math.copysign(1.0, f[1]) < 0 and f[3] == math.inf
    finally:
        fast.close()
        slow.close()


def test_writers_taking_turns_restamp_from_the_dataset_as_it_is(
    pair: tuple[Trident, Trident], calls: pytest.LogCaptureFixture
) -> None:
    a, b = pair
    start(a, "pg1/turns", rows(0, 10))
    n = writers_take_turns(a, b, "pg1/turns", 10)
    assert one_calls(calls, "pg1/turns") == 20
    whole(a, "pg1/turns", n)
    whole(b, "pg1/turns", n)


def test_a_dataset_replaced_by_another_process_is_appended_to_as_it_is_now(pair: tuple[Trident, Trident]) -> None:
    a, b = pair
    start(a, "pg1/replaced", rows(0, 10))
    a.write("pg1/replaced", rows(10, 5), mode="append")  # a remembers the record and the generation
    b.write("pg1/replaced", rows(0, 3), mode="replace")  # a new generation, next_row_index back to 3
    r = a.write("pg1/replaced", rows(3, 4), mode="append")
    assert r.row_count == 7
    whole(a, "pg1/replaced", 7)
    b.write("pg1/replaced", rows(7, 1), mode="append")
    b.write("pg1/replaced", pa.table({"id": [3], "v": ["again"]}), mode="upsert", keys=["id"])  # keyed: the undo log
    a.write("pg1/replaced", rows(8, 2), mode="append")
    whole(a, "pg1/replaced", 10)
    assert settled(a, "pg1/replaced") == (1, 0)  # the older generation and the upsert's undo log purged
    assert a.read("pg1/replaced", row_filter="id = 3").column("v").to_pylist() == ["again"]


def settled(t: Trident, key: str) -> tuple[int, int]:
    """The generations the dataset's rows are in, and its undo log's rows."""
    ds = t.control.dataset(t.workspace, key)
    assert ds is not None
    with t.control.connection() as conn:
        gens = conn.execute(
            "SELECT count(DISTINCT gen) AS n FROM trident_rows WHERE dataset_id = %s", (ds.dataset_id,)
        ).fetchone()
        undo = conn.execute("SELECT count(*) AS n FROM trident_rows_undo WHERE dataset_id = %s", (ds.dataset_id,)).fetchone()
    assert gens is not None and undo is not None
    return int(gens["n"]), int(undo["n"])


def test_a_new_column_takes_the_normal_door(pair: tuple[Trident, Trident], calls: pytest.LogCaptureFixture) -> None:
    a, _ = pair
    start(a, "pg1/wider", rows(0, 3))
    a.write("pg1/wider", pa.table({"id": [3], "v": ["x"], "extra": [1.5]}), mode="append")
    got = a.read("pg1/wider").sort_by("id")
    assert got.column("extra").to_pylist() == [None, None, None, 1.5]
    a.write("pg1/wider", pa.table({"id": [4], "v": ["y"], "extra": [2.5]}), mode="append")  # one call again
    assert one_calls(calls, "pg1/wider") == 1
    whole(a, "pg1/wider", 5)


def test_an_append_while_another_writer_holds_the_lock_waits_for_it(pair: tuple[Trident, Trident]) -> None:
    a, b = pair
    start(a, "pg1/held", rows(0, 10))
    a.write("pg1/held", rows(10, 5), mode="append")
    append_waits_for_held_lock(a, b, "pg1/held", rows(15, 5))
    whole(a, "pg1/held", 20)


def test_eight_processes_appending_lose_and_double_nothing(settings: TridentSettings) -> None:
    writers, seconds, batch = 8, 6.0, 10
    s = settings.model_copy(update={"inline_max_rows": 100, "writer_wait_seconds": 120})
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIDENT_")} | settings_env(s) | {"PYTHONPATH": str(REPO)}
    with Trident(s) as t:
        t.router.set_pin("pgc/x", "pg")
        t.write("pgc/x", pa.table({"w": pa.array([-1], pa.int64()), "n": pa.array([0], pa.int64())}), mode="replace")
        code = textwrap.dedent(
            f"""
            import time, pyarrow as pa
            from trident_resources import Trident
            t = Trident.from_env()
            end, n = time.monotonic() + {seconds}, 0
            while time.monotonic() < end:
                t.write("pgc/x", pa.table({{"w": pa.array([W] * {batch}, pa.int64()),
                                            "n": pa.array(range(n, n + {batch}), pa.int64())}}), mode="append")
                n += {batch}
            print(n)
            """
        )
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", code.replace("W", str(w))],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for w in range(writers)
        ]
        written = {}
        for w, p in enumerate(procs):
            out, err = p.communicate(timeout=300)
            assert p.returncode == 0, err[-3000:]
            written[w] = int(out.split()[-1])
        assert t.reconcile().aborted == []
        got = t.read("pgc/x")
        total = 1 + sum(written.values())
        assert got.num_rows == total and t.describe("pgc/x").row_count == total
        pairs = list(zip(got.column("w").to_pylist(), got.column("n").to_pylist(), strict=True))
        assert sorted(pairs) == sorted([(-1, 0)] + [(w, n) for w, k in written.items() for n in range(k)])
        assert sorted(got.column("__row_index").to_pylist()) == list(range(total))
        assert len(set(got.column("__row_id").to_pylist())) == total


def test_a_value_jsonb_refuses_fails_the_one_call_by_name_and_loses_nothing(
    pair: tuple[Trident, Trident], calls: pytest.LogCaptureFixture
) -> None:
    a, _ = pair
    start(a, "pg1/nul", rows(0, 3))
    with pytest.raises(SchemaMismatchError, match="Postgres refused"):
        a.write("pg1/nul", pa.table({"id": [3], "v": ["a\x00b"]}), mode="append")
    whole(a, "pg1/nul", 3)
    [failed, *_] = a.history("pg1/nul")
    assert failed.status == "aborted" and failed.sink == "pg" and "trident.inlined" not in failed.metadata
    a.write("pg1/nul", rows(3, 2), mode="append")
    assert one_calls(calls, "pg1/nul") == 1
    whole(a, "pg1/nul", 5)
