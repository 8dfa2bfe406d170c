"""The pg sink behaves like the lakehouse through every facade door: modes, identity, types,
describe/history, stream/read/sql/arrow_source, and the failure paths (undo, crash, reconcile)."""

from __future__ import annotations

import datetime as dt
import decimal
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from tests.support.sink_helpers import comparable
from trident_resources import Trident, TridentSettings
from trident_resources.core.errors import SchemaMismatchError, UnsupportedBySinkError
from trident_resources.core.failpoints import InjectedFault, armed
from trident_resources.sinks.contract import WriteMode
from trident_resources.transaction.inline import FLUSH_WRITER

REPO = Path(__file__).resolve().parents[4]
SINKS = ("pg", "iceberg_native")


def _pin_both(t: Trident, key: str) -> dict[str, str]:
    keys = {s: f"{key}_{s}" for s in SINKS}
    for s, k in keys.items():
        t.router.set_pin(k, s)
    return keys


def _step(t: Trident, names: dict[str, str], data: pa.Table | None, **kw: object) -> None:
    results = {s: t.write(k, data, **kw) for s, k in names.items()}  # type: ignore[call-overload]
    pg, ice = results["pg"], results["iceberg_native"]
    assert (pg.sink, ice.sink) == ("pg", "iceberg_native")
    counts = ("rows_written", "row_count", "skipped", "preserved", "deleted", "schema_version")
    assert {c: getattr(pg, c) for c in counts} == {c: getattr(ice, c) for c in counts}, kw
    a, b = (t.read(names[s]) for s in SINKS)
    assert a.schema.equals(b.schema)
    assert comparable(a, drop=("__row_id", "__created_at")) == comparable(b, drop=("__row_id", "__created_at"))
    assert t.describe(names["pg"]).row_count == a.num_rows


def test_every_mode_gives_the_same_rows_in_both_sinks(trident: Trident) -> None:
    t = trident
    keys = _pin_both(t, "m/orders")
    base = pa.table({"id": [1, 2, 3, 4], "amount": [10.0, 20.0, 30.0, 40.0], "tag": ["a", "b", "c", "d"]})
    _step(t, keys, base, mode="replace")
    _step(t, keys, pa.table({"id": [5, 6], "amount": [50.0, 60.0], "tag": ["e", "f"]}), mode="append")
    _step(t, keys, pa.table({"id": [2, 7], "amount": [21.0, 70.0], "tag": ["B", "g"]}), mode="upsert", keys=["id"])
    _step(t, keys, pa.table({"id": [3, 8], "amount": [0.0, 80.0], "tag": ["x", "h"]}), mode="append_new", keys=["id"])
    _step(t, keys, pa.table({"id": [1]}), mode="delete", keys=["id"])
    _step(t, keys, None, mode="delete", row_filter="amount > 65")
    _step(
        t,
        keys,
        pa.table({"id": [2, 5, 9], "amount": [1.0, 2.0, 3.0], "tag": ["r", "s", "t"], "extra": [1, 2, 3]}),
        mode="replace",
        keys=["id"],
    )
    _step(t, keys, pa.table({"id": [10], "amount": [4.0], "tag": ["u"], "extra": [4]}), mode="append")
    # identity rules: a keyed replace kept id 2's and 5's __row_index, id 9 got a new one
    pg = {r["id"]: r for r in t.read(keys["pg"]).to_pylist()}
    assert [pg[i]["__row_index"] for i in (2, 5, 9, 10)] == [1, 4, 8, 9]
    # the same reads through every other door
    for s, k in keys.items():
        assert t.describe(k).sink == s
        # the same 8 writes; the Iceberg dataset's small appends were inlined, and the writes that
        # need the whole dataset in Iceberg flushed them first: a flush is a transaction of its own
        assert [e.status for e in t.history(k) if e.writer != FLUSH_WRITER] == ["committed"] * 8
        assert all(e.status == "committed" for e in t.history(k))
    d_pg, d_ice = (t.describe(keys[s]) for s in SINKS)
    assert (d_pg.schema, d_pg.schema_version, d_pg.row_count) == (d_ice.schema, d_ice.schema_version, d_ice.row_count)
    sel = {s: t.read(k, columns=["tag", "id"], row_filter="id >= 5") for s, k in keys.items()}
    assert sel["pg"].schema.equals(sel["iceberg_native"].schema)
    assert comparable(sel["pg"], order_by="id") == comparable(sel["iceberg_native"], order_by="id")
    streamed = {s: t.stream(k).read_all() for s, k in keys.items()}
    assert comparable(streamed["pg"], drop=("__row_id", "__created_at")) == comparable(
        streamed["iceberg_native"], drop=("__row_id", "__created_at")
    )
    q = 'select tag, sum(amount) s, count(*) n from "{}" group by tag order by tag'
    assert t.sql(q.format(keys["pg"])).to_pylist() == t.sql(q.format(keys["iceberg_native"])).to_pylist()
    joined = t.sql(f'select count(*) n from "{keys["pg"]}" p join "{keys["iceberg_native"]}" i using (id, tag)')
    assert joined.column("n").to_pylist() == [4]
    con = duckdb.connect()
    src = t.arrow_source(keys["pg"])  # noqa: F841 - read by DuckDB (replacement scan), re-scannable: it reads it twice
    assert con.execute("select count(*) from src").fetchall() == con.execute("select count(*) from src").fetchall()


def test_types_round_trip_through_jsonb(trident: Trident) -> None:
    t = trident
    keys = _pin_both(t, "types/all")
    when = dt.datetime(2024, 1, 1, 1, 2, 3, 456789, tzinfo=dt.UTC)
    data = pa.table(
        {
            "i": pa.array([1, None, 2**62], pa.int64()),
            "i32": pa.array([1, -2, None], pa.int32()),
            "f": [1.1, float("nan"), float("-inf")],
            "f32": pa.array([0.1, None, 3.5], pa.float32()),
            "d": pa.array([decimal.Decimal("12.34"), None, decimal.Decimal("1234567890123456789012.99")], pa.decimal128(38, 2)),
            "ts": pa.array([when] * 3, pa.timestamp("us", tz="UTC")),
            "naive": pa.array([when.replace(tzinfo=None)] * 3),
            "day": pa.array([dt.date(2024, 2, 29)] * 3),
            "tm": pa.array([dt.time(1, 2, 3, 4)] * 3, pa.time64("us")),
            "s": ['quote" back\\slash \t tab \n nl', "é ✓", None],
            "b": pa.array([b"\x00\x01\xff", b"", None]),
            "l": [[1, 2], None, []],
            "st": [{"x": 1, "y": "a"}, None, {"x": None, "y": "b"}],
            "ok": [True, False, None],
        }
    )
    for k in keys.values():
        t.write(k, data)
    a, b = (t.read(keys[s]) for s in SINKS)
    assert a.schema.equals(b.schema)
    assert comparable(a, drop=("__row_id", "__created_at")) == comparable(b, drop=("__row_id", "__created_at"))
    assert comparable(a, drop=("__row_id", "__created_at"))[0]["s"] == 'quote" back\\slash \t tab \n nl'


def test_jsonb_refuses_nul_characters_loudly(trident: Trident) -> None:
    trident.router.set_pin("bad/nul", "pg")
    with pytest.raises(SchemaMismatchError, match=r"jsonb|refused"):
        trident.write("bad/nul", pa.table({"s": ["a\x00b"]}))
    assert not trident.exists("bad/nul")


def test_time_travel_is_refused_on_pg_with_the_way_out(trident: Trident) -> None:
    trident.router.set_pin("tt/x", "pg")
    r = trident.write("tt/x", pa.table({"a": [1]}))
    assert trident.read("tt/x", as_of=r.txn_id).num_rows == 1  # the current version is fine
    with pytest.raises(UnsupportedBySinkError, match="trident canary tt/x"):
        trident.read("tt/x", as_of=dt.datetime(2000, 1, 1))


@pytest.mark.parametrize("mode", ["replace", "upsert", "delete"])
def test_commit_failure_undoes_the_pg_write_exactly(trident: Trident, mode: WriteMode) -> None:
    t = trident
    t.router.set_pin("undo/x", "pg")
    t.write("undo/x", pa.table({"k": [1, 2, 3], "v": ["a", "b", "c"]}))
    t.write("undo/x", pa.table({"k": [4], "v": ["d"]}), mode="append")
    before = t.read("undo/x")
    data = pa.table({"k": [2, 9], "v": ["B", "z"]}) if mode != "delete" else pa.table({"k": [2, 3]})
    with armed("commit.before_ledger"), pytest.raises(InjectedFault):
        t.write("undo/x", data, mode=mode, keys=None if mode == "replace" else ["k"])
    assert comparable(t.read("undo/x")) == comparable(before)
    assert t.history("undo/x")[0].status == "aborted"
    r = t.write("undo/x", pa.table({"k": [5], "v": ["e"]}), mode="append")  # purges the undo log, still right
    assert r.row_count == 5 and t.read("undo/x").num_rows == 5


def _child(settings: TridentSettings, failpoint: str, script: str, *, one_call: bool = False) -> subprocess.CompletedProcess[str]:
    """``script`` in a child process with ``failpoint`` armed; its small appends take the normal
    door (two transactions) unless ``one_call`` (``transaction/pg_append.py``)."""
    env = {
        **os.environ,
        "TRIDENT_FAILPOINTS": failpoint,
        "TRIDENT_HOME": str(settings.home),
        "TRIDENT_PG_DSN": settings.pg_dsn.get_secret_value(),  # type: ignore[union-attr]
        "TRIDENT_WORKSPACE": settings.workspace,
        "TRIDENT_INLINE_MAX_ROWS": "1000" if one_call else "0",
    }
    return subprocess.run([sys.executable, "-c", script], env=env, cwd=REPO, capture_output=True, text=True, timeout=120)


WRITE = """
import pyarrow as pa
from trident_resources import Trident
t = Trident.from_env()
t.write("crash/x", pa.table({"k": [7, 8], "v": ["n", "m"]}), mode="append")
"""


@pytest.mark.parametrize(
    "point,expect", [("write.before_commit=exit", "aborted"), ("commit.before_ledger=exit", "rolled_forward")]
)
def test_killed_pg_writer_is_reconciled(trident: Trident, settings: TridentSettings, point: str, expect: str) -> None:
    t = trident
    t.router.set_pin("crash/x", "pg")
    t.write("crash/x", pa.table({"k": [1], "v": ["a"]}))
    proc = _child(settings, point, WRITE)
    assert proc.returncode == 137, proc.stderr
    assert t.history("crash/x")[0].status == "open"
    report = t.reconcile()
    got = "aborted" if report.aborted else "rolled_forward" if report.rolled_forward else None
    assert got == expect
    rows = sorted(t.read("crash/x").column("k").to_pylist())
    assert rows == ([1] if expect == "aborted" else [1, 7, 8])
    assert t.describe("crash/x").row_count == len(rows)


@pytest.mark.parametrize("point", ["intent.after=exit", "commit.before_ledger=exit", "pg.appended=exit"])
def test_a_killed_one_call_append_left_nothing_or_everything(trident: Trident, settings: TridentSettings, point: str) -> None:
    """A small append's one call is one Postgres transaction: killed before it, the write left no
    row and no ledger entry; killed after it, the write is committed whole. Nothing to reconcile."""
    t = trident
    t.router.set_pin("crash/x", "pg")
    t.write("crash/x", pa.table({"k": [1], "v": ["a"]}))
    t.write("crash/x", pa.table({"k": [2], "v": ["b"]}), mode="append")
    before = t.history("crash/x")
    proc = _child(settings, point, WRITE, one_call=True)
    assert proc.returncode == 137, proc.stderr
    done = point.startswith("pg.appended")
    history = t.history("crash/x")
    assert len(history) == len(before) + done and all(e.status == "committed" for e in history)
    report = t.reconcile()
    assert not (report.aborted or report.rolled_forward)
    rows = t.read("crash/x")
    assert sorted(rows.column("k").to_pylist()) == ([1, 2, 7, 8] if done else [1, 2])
    assert sorted(rows.column("__row_index").to_pylist()) == list(range(rows.num_rows))
    assert t.describe("crash/x").row_count == rows.num_rows


def test_copy_out_reads_back_awkward_text_exactly(trident: Trident) -> None:
    """Reads stream COPY ... TO STDOUT as CSV (issue 12): quotes, commas, newlines, backslashes,
    tabs, unicode and NULLs must survive both the CSV quoting and the jsonb round trip."""
    t = trident
    t.router.set_pin("pg/awk", "pg")
    values = ['a "quoted", value', "line\nbreak\r\n", "back\\slash \\n", "tab\there", "ünï ☃ 𝄞", None, "", '{"json": [1]}', ","]
    data = pa.table({"s": values, "n": list(range(len(values))), "b": [v.encode() if v else None for v in values]})
    t.write("pg/awk", data)
    got = t.read("pg/awk").sort_by("n")
    assert got.column("s").to_pylist() == values and got.column("b").to_pylist() == data.column("b").to_pylist()
    assert t.read("pg/awk", columns=["s"], row_filter="n >= 7").column("s").to_pylist() == values[7:]
