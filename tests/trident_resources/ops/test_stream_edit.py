"""ingest.stream (one snapshot at commit; nothing visible before; nothing left after an abort or a
killed process) and row.edit (point edits keep every other row's identity)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from trident_resources import Trident, TridentSettings
from trident_resources.core.errors import InvalidWriteError, KeyNotFoundError, StreamClosedError

REPO = Path(__file__).resolve().parents[3]


def _batch(i: int, n: int = 1000) -> pa.Table:
    return pa.table({"k": list(range(i * n, (i + 1) * n)), "v": [f"row {i}"] * n})


def _txn_files(settings: TridentSettings, txn: object) -> list[Path]:
    return [p for p in (settings.home / "warehouse").rglob(f"{txn}-*.parquet")]


def test_stream_commits_one_snapshot_and_nothing_is_visible_before(trident: Trident) -> None:
    t = trident
    t.write("st/x", _batch(0))
    table = t.driver.sinks["iceberg_native"].tables.table(t.dataset_record("st/x"))  # type: ignore[attr-defined]
    snapshots = len(table.metadata.snapshots)
    with t.ingest_stream("st/x") as s:
        for i in range(1, 6):
            s.append(_batch(i))
            assert t.read("st/x").num_rows == 1000  # readers still see only the committed rows
        assert t.history("st/x")[0].status == "open"
    assert s.result is not None and s.result.rows_written == 5000 and s.rows == 5000
    assert s.result.writer == "ingest.stream" and s.result.sink == "iceberg_native"
    table = table.refresh()
    assert len(table.metadata.snapshots) == snapshots + 1
    assert sorted(t.read("st/x").column("k").to_pylist()) == list(range(6000))
    with pytest.raises(StreamClosedError):
        s.append(_batch(9))


def test_stream_into_pg_and_schema_rules(trident: Trident) -> None:
    t = trident
    t.router.set_pin("st/pg", "pg")
    with t.ingest_stream("st/pg") as s:
        s.append(_batch(0, 10))
        s.append(pa.table({"v": ["only v"]}))  # missing columns become null
        with pytest.raises(InvalidWriteError, match="not in this stream's schema"):
            s.append(pa.table({"k": [1], "zzz": [2]}))
    assert s.result is not None and s.result.sink == "pg" and s.result.row_count == 11
    assert t.read("st/pg", row_filter="k is null").column("v").to_pylist() == ["only v"]


@pytest.mark.parametrize("sink", ["iceberg_native", "pg"])
def test_an_exception_aborts_the_stream_and_leaves_nothing(trident: Trident, settings: TridentSettings, sink: str) -> None:
    t = trident
    t.router.set_pin("st/abort", sink)
    t.write("st/abort", _batch(0))
    before = t.read("st/abort")
    with pytest.raises(RuntimeError, match="producer died"):
        with t.ingest_stream("st/abort", max_queued=1) as s:
            for i in range(1, 20):
                s.append(_batch(i))
            raise RuntimeError("producer died")
    entry = t.history("st/abort")[0]
    assert entry.status == "aborted" and "producer died" in (entry.error or "")
    assert t.read("st/abort").equals(before)
    assert _txn_files(settings, entry.txn_id) == []


KILLED = """
import os, sys, time
import pyarrow as pa
from trident_resources import Trident
t = Trident.from_env()
s = t.ingest_stream("st/killed")
for i in range(30):
    s.append(pa.table({"k": list(range(i * 5000, (i + 1) * 5000)), "v": ["x" * 50] * 5000}))
print(s.rows, flush=True)
time.sleep(600)  # killed here, mid-session
"""


@pytest.mark.parametrize("sink", ["iceberg_native", "pg"])
def test_a_killed_stream_leaves_nothing_after_reconcile(trident: Trident, settings: TridentSettings, sink: str) -> None:
    t = trident
    t.router.set_pin("st/killed", sink)
    env = {
        **os.environ,
        "TRIDENT_HOME": str(settings.home),
        "TRIDENT_PG_DSN": settings.pg_dsn.get_secret_value(),  # type: ignore[union-attr]
        "TRIDENT_WORKSPACE": settings.workspace,
        "TRIDENT_ROW_GROUP_BYTES": "65536",
        "TRIDENT_TARGET_FILE_BYTES": "262144",
    }
    child = subprocess.Popen([sys.executable, "-c", KILLED], env=env, cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "150000"
        entry = next(e for e in t.history("st/killed") if e.status == "open")
        if sink == "iceberg_native":
            assert _txn_files(settings, entry.txn_id), "the session should have written files before the kill"
        assert not t.exists("st/killed")
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    report = t.reconcile()
    assert entry.txn_id in report.aborted
    assert not t.exists("st/killed")
    assert _txn_files(settings, entry.txn_id) == []
    assert t.history("st/killed")[0].status == "aborted"


def test_row_edits_keep_every_other_rows_identity(trident: Trident) -> None:
    t = trident
    t.write("ed/x", pa.table({"id": list(range(100)), "name": [f"n{i}" for i in range(100)], "qty": list(range(100))}))
    before = {r["id"]: r for r in t.read("ed/x").to_pylist()}
    r = t.update_rows("ed/x", pa.table({"id": [7], "qty": [700]}), keys="id")  # only the changed column
    assert (r.writer, r.preserved, r.rows_written, r.row_count) == ("row.edit", 1, 1, 100)
    d = t.delete_rows("ed/x", pa.table({"id": [8]}), keys="id")
    assert d.deleted == 1 and d.row_count == 99
    assert t.delete_rows("ed/x", where="id = 9").deleted == 1
    after = {r["id"]: r for r in t.read("ed/x").to_pylist()}
    assert set(after) == set(before) - {8, 9}
    for i, row in after.items():
        if i == 7:
            assert (row["qty"], row["name"]) == (700, "n7")  # untouched column kept its value
            assert (row["__row_id"], row["__row_index"]) == (before[7]["__row_id"], before[7]["__row_index"])
            assert row["__created_at"] == r.created_at
        else:
            assert row == before[i]
    with pytest.raises(KeyNotFoundError, match="404"):
        t.update_rows("ed/x", pa.table({"id": [404], "qty": [1]}), keys="id")
    assert len(t.read("ed/x")) == 98


def test_edits_manifests_and_streams_take_writes_keywords_by_name() -> None:
    """``update_rows``, ``delete_rows``, ``write_manifest`` and ``ingest_stream`` name each of
    ``write``'s keywords they pass on, typed as ``write`` types them (no ``**kwargs`` a type
    checker cannot see through); ``delete_rows`` has no ``partition``, as ``write``'s delete has none."""
    import inspect

    write = inspect.signature(Trident.write).parameters
    passed = ("source_refs", "metadata", "txn_id", "provenance", "watermarks", "stage")
    for method in (Trident.update_rows, Trident.delete_rows, Trident.write_manifest, Trident.ingest_stream):
        params = inspect.signature(method).parameters
        assert not [p for p in params.values() if p.kind is inspect.Parameter.VAR_KEYWORD], method.__name__
        for name in (*passed, *(() if method is Trident.delete_rows else ("partition",))):
            assert params[name].kind is inspect.Parameter.KEYWORD_ONLY, (method.__name__, name)
            assert (params[name].annotation, params[name].default) == (write[name].annotation, write[name].default), (
                method.__name__,
                name,
            )
    assert "partition" not in inspect.signature(Trident.delete_rows).parameters


def test_edits_and_streams_record_what_write_records(trident: Trident) -> None:
    t = trident
    t.write("ed/meta", pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}))
    u = t.update_rows("ed/meta", pa.table({"id": [1], "v": ["A"]}), keys="id", source_refs=["raw/a"], metadata={"why": "fix"})
    d = t.delete_rows("ed/meta", where="id = 2", provenance={"owner": "ops"})
    with t.ingest_stream("ed/meta", metadata={"batch": 7}) as s:
        s.append(pa.table({"id": [4], "v": ["d"]}))
    assert s.result is not None
    entries = {e.txn_id: e for e in t.history("ed/meta")}
    assert entries[u.txn_id].source_refs == ["raw/a"] and entries[u.txn_id].metadata.get("why") == "fix"
    assert entries[s.result.txn_id].metadata.get("batch") == 7
    assert d.deleted == 1 and t.provenance("ed/meta") == {"owner": "ops"}
