"""Write-audit-publish in the facade (issue 11): a staged version is invisible until published,
readable for audits, publishable in one metadata step, discardable without a trace."""

from __future__ import annotations

import uuid
from datetime import date, timedelta

import pyarrow as pa
import pytest

from tests.support.helpers import counted_table_loads, table
from tests.trident_resources.transaction.test_transactions import _run_child, _txn_files
from trident_resources import (
    InvalidReadError,
    PartitionFilter,
    StagedVersionConflictError,
    Trident,
    TridentSettings,
    UnsupportedBySinkError,
)


def _ks(t: Trident, key: str, **kw: object) -> list[int]:
    return sorted(t.read(key, **kw).column("k").to_pylist())  # type: ignore[arg-type]


def test_a_staged_version_is_invisible_until_published(trident: Trident) -> None:
    t = trident
    t.write("wap/a", table(k=[1, 2]))
    before = t.describe("wap/a")
    r = t.write("wap/a", table(k=[3]), mode="append", stage=True)
    assert r.staged and r.snapshot_id is not None
    # every reader still sees the published version
    assert _ks(t, "wap/a") == [1, 2]
    assert t.sql('select count(*) as n from "wap/a"').column("n").to_pylist() == [2]
    assert (t.describe("wap/a").row_count, t.describe("wap/a").snapshot_id) == (2, before.snapshot_id)
    assert t.history("wap/a")[0].status == "staged"
    # the audit reads the staged version, through read() and SQL alike
    assert _ks(t, "wap/a", staged=r.txn_id) == [1, 2, 3]
    audited = t.sql('select count(*) as n from "wap/a"', staged={"wap/a": r.txn_id})
    assert audited.column("n").to_pylist() == [3]
    assert [k for k, _ in t.staged()] == ["wap/a"]
    published = t.publish("wap/a", r.txn_id)
    assert published.snapshot_id == r.snapshot_id  # exactly what was audited
    assert _ks(t, "wap/a") == [1, 2, 3]
    d = t.describe("wap/a")
    assert (d.row_count, d.snapshot_id, d.last_txn_id) == (3, r.snapshot_id, r.txn_id)
    assert t.history("wap/a")[0].status == "committed"
    assert t.staged() == []
    with pytest.raises(InvalidReadError):
        t.read("wap/a", staged=r.txn_id)


def test_a_staged_schema_change_is_invisible_until_published(trident: Trident) -> None:
    t = trident
    t.write("wap/s", table(k=[1]))
    r = t.write("wap/s", pa.table({"k": [2], "extra": ["x"]}), mode="append", stage=True)
    assert "extra" not in t.read("wap/s").column_names
    assert "extra" in t.read("wap/s", staged=r.txn_id).column_names
    t.publish("wap/s", r.txn_id)
    assert t.read("wap/s").column("extra").to_pylist() in ([None, "x"], ["x", None])


def test_discard_leaves_no_trace(trident: Trident) -> None:
    t = trident
    t.write("wap/d", table(k=[1]))
    r = t.write("wap/d", table(k=[9, 9, 9]), mode="append", stage=True)
    assert _txn_files(t, "wap/d", r.txn_id)
    t.discard("wap/d", r.txn_id)
    assert _txn_files(t, "wap/d", r.txn_id) == []
    assert t.history("wap/d")[0].status == "rejected"
    assert _ks(t, "wap/d") == [1]
    with pytest.raises(InvalidReadError):
        t.read("wap/d", staged=r.txn_id)
    tbl = t.driver.sinks["iceberg_native"].tables.table(t.dataset_record("wap/d"))  # type: ignore[attr-defined]
    assert not [ref for ref in tbl.metadata.refs if ref != "main"]


def test_a_staged_first_write_creates_no_dataset_until_published(trident: Trident) -> None:
    t = trident
    r = t.write("wap/new", table(k=[5]), stage=True)
    assert not t.exists("wap/new")
    assert _ks(t, "wap/new", staged=r.txn_id) == [5]
    assert t.sql('select sum(k) as s from "wap/new"', staged={"wap/new": r.txn_id}).column("s").to_pylist() == [5]
    t.publish("wap/new", r.txn_id)
    assert t.exists("wap/new") and _ks(t, "wap/new") == [5]


def test_publish_after_another_commit_is_refused(trident: Trident) -> None:
    t = trident
    t.write("wap/c", table(k=[1]))
    r = t.write("wap/c", table(k=[2]), mode="append", stage=True)
    t.write("wap/c", table(k=[3]), mode="append")  # main moves on
    with pytest.raises(StagedVersionConflictError):
        t.publish("wap/c", r.txn_id)
    assert _ks(t, "wap/c") == [1, 3]  # nothing lost
    t.discard("wap/c", r.txn_id)


def test_staging_on_the_pg_sink_is_refused_with_the_way_out(trident: Trident) -> None:
    t = trident
    t.router.set_pin("wap/pg", "pg")
    t.write("wap/pg", table(k=[1]))
    with pytest.raises(UnsupportedBySinkError, match="trident canary wap/pg"):
        t.write("wap/pg", table(k=[2]), mode="append", stage=True)
    assert _ks(t, "wap/pg") == [1]


def test_maintain_discards_old_staged_versions(trident: Trident, settings: TridentSettings) -> None:
    t = trident
    t.write("wap/m", table(k=[1]))
    r = t.write("wap/m", table(k=[2]), mode="append", stage=True)
    with Trident(settings.model_copy(update={"staged_max_age_days": 0})) as t0:
        report = t0.maintain("wap/m")
    assert report.discarded_staged == [r.txn_id]
    assert t.history("wap/m")[0].status == "rejected" and _txn_files(t, "wap/m", r.txn_id) == []


@pytest.mark.parametrize(
    "point,expect",
    [("write.before_commit=exit", "old"), ("commit.before_ledger=exit", "old"), ("publish.before_ledger=exit", "new")],
)
def test_a_kill_at_any_step_ends_old_or_new_whole(trident: Trident, settings: TridentSettings, point: str, expect: str) -> None:
    t = trident
    t.write("wap/k", table(k=[1, 2]))
    txn = uuid.uuid4()
    code = f"r = t.write('wap/k', pa.table({{'k': [3, 4]}}), mode='append', stage=True, txn_id='{txn}')\n"
    if point.startswith("publish"):
        code += "t.publish('wap/k', r.txn_id)\n"
    child = _run_child(settings, point, code)
    assert child.returncode == 137, child.stderr
    t.reconcile()
    assert all(e.status not in ("open",) for e in t.history("wap/k"))
    if expect == "old":
        assert _ks(t, "wap/k") == [1, 2]
        assert _txn_files(t, "wap/k", txn) == []
        assert t.history("wap/k")[0].status == "aborted"
    else:
        assert _ks(t, "wap/k") == [1, 2, 3, 4]
        assert t.describe("wap/k").row_count == 4
        assert t.history("wap/k")[0].status == "committed"
    tbl = t.driver.sinks["iceberg_native"].tables.table(t.dataset_record("wap/k"))  # type: ignore[attr-defined]
    assert not [ref for ref in tbl.metadata.refs if ref != "main"]


def test_publish_records_the_provenance_and_watermarks_given_when_staging(trident: Trident) -> None:
    t = trident
    src = t.write("wap/src", table(k=[1]))
    t.write("wap/out", table(k=[1]), provenance={"contract": "c-1"})
    r = t.write(
        "wap/out",
        table(k=[2]),
        mode="append",
        stage=True,
        provenance={"contract": "c-2"},
        watermarks={"wap/src": (src.committed_at, src.txn_id)},
    )
    assert t.describe("wap/out").provenance == {"contract": "c-1"} and t.watermarks("wap/out") == {}
    t.publish("wap/out", r.txn_id)
    assert t.describe("wap/out").provenance == {"contract": "c-2"}
    assert t.watermarks("wap/out") == {"wap/src": src.committed_at}


# -- staged partition writes (issue 11 item 4): publish re-bases onto other partitions' commits ----
D0 = date(2024, 1, 1)
D1 = date(2024, 1, 2)


def _day(d: date, values: list[int]) -> pa.Table:
    return pa.table({"d": [d] * len(values), "v": values})


def _on(d: date) -> PartitionFilter:
    return PartitionFilter.time_window("d", d, d + timedelta(days=1), "day")


def _status(t: Trident, key: str, txn_id: uuid.UUID) -> str:
    return next(e.status for e in t.history(key) if e.txn_id == txn_id)


def _rows(t: Trident, key: str, **kw: object) -> list[tuple[date, int]]:
    return sorted((r["d"], r["v"]) for r in t.read(key, **kw).to_pylist())  # type: ignore[arg-type]


def test_a_staged_partition_publishes_onto_other_partitions_committed_meanwhile(trident: Trident) -> None:
    t = trident
    t.write("wap/p", _day(D0, [1, 2]), partition=_on(D0))
    t.write("wap/p", _day(D1, [10]), partition=_on(D1))
    staged = t.write("wap/p", _day(D0, [3, 4, 5]), partition=_on(D0), stage=True)
    assert staged.staged
    assert _rows(t, "wap/p") == [(D0, 1), (D0, 2), (D1, 10)]  # readers see nothing new
    assert _rows(t, "wap/p", staged=staged.txn_id) == [(D0, 3), (D0, 4), (D0, 5), (D1, 10)]
    other = t.write("wap/p", _day(D1, [20, 21]), partition=_on(D1))  # another partition commits meanwhile
    published = t.publish("wap/p", staged.txn_id)
    assert _rows(t, "wap/p") == [(D0, 3), (D0, 4), (D0, 5), (D1, 20), (D1, 21)]  # both kept
    d = t.describe("wap/p")
    assert (d.row_count, d.snapshot_id, d.last_txn_id) == (5, published.snapshot_id, staged.txn_id)
    assert published.row_count == 5 and published.rows_written == 3
    assert t.history("wap/p")[0].status == "committed"
    assert t.staged() == []
    tbl = t.driver.sinks["iceberg_native"].tables.table(t.dataset_record("wap/p"))  # type: ignore[attr-defined]
    assert not [ref for ref in tbl.metadata.refs if ref != "main"]  # the audit branch went in the same commit
    rows = t.read("wap/p").to_pylist()
    indexes = [r["__row_index"] for r in rows]
    assert len(set(indexes)) == len(indexes)  # each partition writer's reserved range, no reuse
    after = t.write("wap/p", pa.table({"d": [D1], "v": [99]}), mode="append", partition=_on(D1))
    new = [r["__row_index"] for r in t.read("wap/p").to_pylist() if r["v"] == 99]
    assert after.rows_written == 1 and new[0] > max(indexes)
    assert other.txn_id in {e.txn_id for e in t.history("wap/p") if e.status == "committed"}


def test_a_staged_partition_is_refused_when_that_partition_changed(trident: Trident) -> None:
    t = trident
    t.write("wap/q", _day(D0, [1]), partition=_on(D0))
    t.write("wap/q", _day(D1, [10]), partition=_on(D1))
    staged = t.write("wap/q", _day(D0, [2]), partition=_on(D0), stage=True)
    t.write("wap/q", _day(D0, [7, 8]), partition=_on(D0))  # the same partition, committed directly
    with pytest.raises(StagedVersionConflictError, match="partition"):
        t.publish("wap/q", staged.txn_id)
    assert _rows(t, "wap/q") == [(D0, 7), (D0, 8), (D1, 10)]  # nothing lost
    assert _status(t, "wap/q", staged.txn_id) == "staged"  # still there for an operator
    assert _rows(t, "wap/q", staged=staged.txn_id) == [(D0, 2), (D1, 10)]
    t.discard("wap/q", staged.txn_id)
    assert _rows(t, "wap/q") == [(D0, 7), (D0, 8), (D1, 10)]


def test_a_discarded_staged_partition_leaves_no_file_and_reconcile_leaves_it_alone(trident: Trident) -> None:
    t = trident
    t.write("wap/r", _day(D0, [1]), partition=_on(D0))
    staged = t.write("wap/r", _day(D0, [2, 3]), partition=_on(D0), stage=True)
    t.write("wap/r", _day(D1, [10]), partition=_on(D1))
    report = t.reconcile()
    assert staged.txn_id not in report.rolled_forward + report.aborted
    assert _status(t, "wap/r", staged.txn_id) == "staged"
    assert _rows(t, "wap/r", staged=staged.txn_id) == [(D0, 2), (D0, 3)]
    assert _txn_files(t, "wap/r", staged.txn_id)
    t.discard("wap/r", staged.txn_id)
    assert _txn_files(t, "wap/r", staged.txn_id) == []
    assert _rows(t, "wap/r") == [(D0, 1), (D1, 10)]
    tbl = t.driver.sinks["iceberg_native"].tables.table(t.dataset_record("wap/r"))  # type: ignore[attr-defined]
    assert not [ref for ref in tbl.metadata.refs if ref != "main"]


def test_a_kill_mid_rebased_publish_is_rolled_forward(trident: Trident, settings: TridentSettings) -> None:
    t = trident
    t.write("wap/kp", _day(D0, [1]), partition=_on(D0))
    staged = t.write("wap/kp", _day(D0, [2, 3]), partition=_on(D0), stage=True)
    t.write("wap/kp", _day(D1, [10, 11]), partition=_on(D1))
    child = _run_child(settings, "publish.before_ledger=exit", f"t.publish('wap/kp', '{staged.txn_id}')\n")
    assert child.returncode == 137, child.stderr
    assert staged.txn_id in t.reconcile().rolled_forward
    assert _status(t, "wap/kp", staged.txn_id) == "committed"
    assert _rows(t, "wap/kp") == [(D0, 2), (D0, 3), (D1, 10), (D1, 11)]
    assert t.describe("wap/kp").row_count == 4
    indexes = [r["__row_index"] for r in t.read("wap/kp").to_pylist()]
    t.write("wap/kp", pa.table({"d": [D1], "v": [99]}), mode="append", partition=_on(D1))
    new = [r["__row_index"] for r in t.read("wap/kp").to_pylist() if r["v"] == 99]
    assert new[0] > max(indexes)  # the reservation survived the roll-forward


def test_staging_and_publishing_reload_no_table_after_their_commits(trident: Trident, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 12: a commit leaves pyiceberg's table at the metadata it committed, so neither the
    audit branch's creation (a staged write of an existing dataset) nor a publish loads the table
    again after committing; what they report is still the staged version's (schema included)."""
    from typing import Any

    t = trident
    t.write("wap/loads", table(k=[1, 2]))
    catalog = t.driver.sinks["iceberg_native"].catalog  # type: ignore[attr-defined]
    loads = counted_table_loads(t, monkeypatch)
    commits = {"n": 0}
    real_commit = catalog.commit_table

    def counting_commit(*args: Any, **kwargs: Any) -> Any:
        commits["n"] += 1
        return real_commit(*args, **kwargs)

    monkeypatch.setattr(catalog, "commit_table", counting_commit)
    staged = t.write("wap/loads", pa.table({"k": [3], "extra": ["x"]}), mode="append", stage=True)
    # one load of the table for the write, and what the catalog's own commit reads: the audit
    # branch and the snapshot on it are ONE commit
    assert len(loads) == 1 + commits["n"] and commits["n"] == 1, loads
    loads.clear()
    commits["n"] = 0
    done = t.publish("wap/loads", staged.txn_id)
    # no load to publish from (the table the stage commit left, checked by the commit itself),
    # only the commit's own
    assert len(loads) == commits["n"] == 1, loads
    assert [c["name"] for c in t.describe("wap/loads").schema if not c["name"].startswith("__")] == ["k", "extra"]
    assert done.snapshot_id == staged.snapshot_id and _ks(t, "wap/loads") == [1, 2, 3]
