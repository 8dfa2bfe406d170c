"""Issue 28 item 4: a version's instant is when it became visible, the instant the Iceberg
snapshot log gives it, so ``read(as_of=t)`` answers what pyiceberg's
``snapshot_as_of_timestamp`` (and DuckDB's ``snapshot_from_timestamp``) answer at every t around
every commit, staged-then-published included. The rows' ``__created_at`` stays the transaction's
instant τ (when it began), which a staged version keeps through its publish."""

from __future__ import annotations

import time
from datetime import date, datetime, timedelta

import pyarrow as pa
import pytest
from pyiceberg.table import Table

from tests.support.helpers import iceberg_table
from trident_assets.strategies import Strategy, plan_output
from trident_resources import PartitionFilter, Trident

MS = timedelta(milliseconds=1)


def _ms(when: datetime) -> int:
    return int(when.timestamp() * 1000)


def _iceberg_ks(table: Table, when: datetime) -> list[int] | None:
    snap = table.snapshot_as_of_timestamp(_ms(when))
    if snap is None:
        return None
    return sorted(table.scan(snapshot_id=snap.snapshot_id).to_arrow().column("k").to_pylist())


def _trident_ks(t: Trident, key: str, when: datetime) -> list[int] | None:
    try:
        return sorted(t.read(key, as_of=when).column("k").to_pylist())
    except Exception:  # no version at or before ``when``
        return None


def _agree_around(t: Trident, key: str, instants: list[datetime]) -> None:
    table = iceberg_table(t, key)
    for at in instants:
        for when in (at - MS, at, at + MS):
            assert _trident_ks(t, key, when) == _iceberg_ks(table, when), f"at {when.isoformat()}"


@pytest.mark.usefixtures("iceberg_writes")  # compared with pyiceberg's snapshot log: every commit an Iceberg snapshot
def test_as_of_agrees_with_pyiceberg_around_every_commit(any_trident: Trident) -> None:
    t = any_trident
    r1 = t.write("tt/plain", pa.table({"k": [1]}))
    r2 = t.write("tt/plain", pa.table({"k": [2]}), mode="append")
    r3 = t.write("tt/plain", pa.table({"k": [3]}), mode="replace")
    table = iceberg_table(t, "tt/plain")
    logged = {e.snapshot_id: e.timestamp_ms for e in table.metadata.snapshot_log}
    for r in (r1, r2, r3):
        assert r.snapshot_id is not None
        assert _ms(r.committed_at) == logged[r.snapshot_id], "committed_at is the snapshot log's instant"
        assert r.created_at < r.committed_at  # τ: the transaction began before it became visible
    _agree_around(t, "tt/plain", [r1.committed_at, r2.committed_at, r3.committed_at])
    assert sorted(t.read("tt/plain", as_of=r2.committed_at).column("k").to_pylist()) == [1, 2]
    assert sorted(t.read("tt/plain", as_of=r2.committed_at - MS).column("k").to_pylist()) == [1]
    rows = t.read("tt/plain").to_pylist()
    assert {r["__created_at"] for r in rows} == {r3.created_at}  # __created_at is τ, not the commit's instant


def test_a_published_staged_version_is_visible_from_its_publish_not_its_staging(any_trident: Trident) -> None:
    t = any_trident
    base = t.write("tt/wap", pa.table({"k": [1]}))
    staged = t.write("tt/wap", pa.table({"k": [2]}), mode="append", stage=True)
    time.sleep(0.05)
    middle = datetime.now().astimezone()
    time.sleep(0.05)
    t.publish("tt/wap", staged.txn_id)
    entry = next(e for e in t.history("tt/wap") if e.txn_id == staged.txn_id)
    assert entry.status == "committed" and entry.staged_at is not None and entry.committed_at is not None
    assert entry.started_at < entry.staged_at < middle < entry.committed_at  # staging kept as its own instant
    table = iceberg_table(t, "tt/wap")
    assert _ms(entry.committed_at) == table.metadata.snapshot_log[-1].timestamp_ms
    assert sorted(t.read("tt/wap", as_of=middle).column("k").to_pylist()) == [1], "the old version was visible then"
    assert _iceberg_ks(table, middle) == [1]
    assert sorted(t.read("tt/wap", as_of=entry.committed_at).column("k").to_pylist()) == [1, 2]
    _agree_around(t, "tt/wap", [base.committed_at, entry.staged_at, middle, entry.committed_at])
    new = [r for r in t.read("tt/wap").to_pylist() if r["k"] == 2]
    assert [r["__created_at"] for r in new] == [entry.started_at]  # the staged rows keep their τ
    assert t.describe("tt/wap").committed_at == entry.committed_at


def test_a_delta_rebuilds_when_a_commit_after_its_watermark_began_before_it(trident: Trident) -> None:
    """Watermarks are visibility instants; a delta reads rows whose __created_at (τ) is after the
    mark. A staged partition version published over a later commit became visible after the mark
    but its rows are stamped before it: the plan rebuilds instead of missing them."""
    t = trident
    d0, d1 = date(2024, 1, 1), date(2024, 1, 2)

    def on(d: date) -> PartitionFilter:
        return PartitionFilter.time_window("d", d, d + timedelta(days=1), "day")

    t.write("tt/src", pa.table({"d": [d0], "k": [1]}), partition=on(d0))
    staged = t.write("tt/src", pa.table({"d": [d0], "k": [2]}), mode="append", partition=on(d0), stage=True)
    t.write("tt/src", pa.table({"d": [d1], "k": [3]}), partition=on(d1))
    src = t.describe("tt/src")
    assert src.committed_at is not None
    t.write("tt/out", pa.table({"k": [1, 3]}), watermarks={"tt/src": (src.committed_at, src.last_txn_id)})
    assert plan_output(t, "tt/out", ["tt/src"], Strategy(kind="delta")).incremental
    t.publish("tt/src", staged.txn_id)  # rebased onto d1's commit, visible now, stamped before the mark
    plan = plan_output(t, "tt/out", ["tt/src"], Strategy(kind="delta"))
    assert not plan.incremental and "began before the watermark" in plan.reason, plan.reason
