"""Multi-dataset transactions (groups): staged writes of several datasets published in one
control-plane transaction; all or none, also when the writer is SIGKILLed at any step."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pytest

from tests.support.helpers import day_rows, day_window, iceberg_table
from trident_resources import (
    StagedVersionConflictError,
    TransactionGroupError,
    Trident,
    TridentSettings,
    UnsupportedBySinkError,
)

REPO = Path(__file__).resolve().parents[3]
KEYS = [f"grp/d{i}" for i in range(5)]


def _gen(t: Trident, key: str) -> set[int]:
    return set(t.read(key).column("v").to_pylist())


def _seed(t: Trident) -> None:
    for k in KEYS:
        t.write(k, pa.table({"v": [1, 1]}))


def test_a_group_publishes_every_write_at_once(trident: Trident) -> None:
    t = trident
    _seed(t)
    with t.transaction(label="nightly") as tx:
        staged = [tx.write(k, pa.table({"v": [2, 2, 2]})) for k in KEYS]
        tx.write("grp/new", pa.table({"v": [2]}))  # a dataset born in the group
        assert all(r.staged for r in staged)
        # nothing is visible before the block ends: not by read, not by SQL, not a new dataset
        assert all(_gen(t, k) == {1} for k in KEYS) and not t.exists("grp/new")
        assert t.sql('select max(v) as m from "grp/d3"').column("m").to_pylist() == [1]
        # the staged versions can be audited meanwhile
        assert t.read(KEYS[0], staged=staged[0].txn_id).num_rows == 3
    assert all(_gen(t, k) == {2} for k in KEYS) and _gen(t, "grp/new") == {2}
    entries = [t.history(k)[0] for k in [*KEYS, "grp/new"]]
    assert {e.status for e in entries} == {"committed"}
    assert len({e.committed_at for e in entries}) == 1  # one instant: the group's
    assert {e.group_id for e in entries} == {tx.group_id} and not any(e.ref_pending for e in entries)
    # every table's main is the published snapshot (other engines read it), no audit branch left
    for k in [*KEYS, "grp/new"]:
        table = iceberg_table(t, k)
        head = table.current_snapshot()
        assert head is not None and head.snapshot_id == t.describe(k, storage=False).snapshot_id
        assert set(table.metadata.refs) == {"main"}
    # on the SQL catalog every main moved in ONE Postgres transaction: the rows share their xmin
    import psycopg

    names = [iceberg_table(t, k).name() for k in [*KEYS, "grp/new"]]
    assert t.settings.pg_dsn is not None
    with psycopg.connect(t.settings.pg_dsn.get_secret_value()) as conn:
        xmins = {
            conn.execute(
                "SELECT xmin::text FROM iceberg_tables WHERE table_namespace = %s AND table_name = %s",
                (".".join(n[:-1]), n[-1]),
            ).fetchone()
            for n in names
        }
    assert len(xmins) == 1, xmins


def test_an_exception_in_the_block_discards_the_group(trident: Trident) -> None:
    t = trident
    _seed(t)
    with pytest.raises(RuntimeError, match="boom"), t.transaction() as tx:
        for k in KEYS:
            tx.write(k, pa.table({"v": [2]}))
        raise RuntimeError("boom")
    assert all(_gen(t, k) == {1} for k in KEYS)
    assert {t.history(k)[0].status for k in KEYS} == {"rejected"}
    assert all(set(iceberg_table(t, k).metadata.refs) == {"main"} for k in KEYS)
    with pytest.raises(TransactionGroupError, match="discarded"):
        tx.write(KEYS[0], pa.table({"v": [3]}))


def test_a_group_whose_dataset_changed_meanwhile_publishes_nothing(trident: Trident) -> None:
    t = trident
    _seed(t)
    with pytest.raises(StagedVersionConflictError, match="grp/d2"), t.transaction() as tx:
        for k in KEYS:
            tx.write(k, pa.table({"v": [2]}))
        t.write("grp/d2", pa.table({"v": [9]}))  # another writer commits one member's dataset
    assert [_gen(t, k) for k in KEYS] == [{1}, {1}, {9}, {1}, {1}]
    assert {t.history(k)[0].status for k in KEYS if k != "grp/d2"} == {"rejected"}


def test_group_refusals_are_named(trident: Trident) -> None:
    t = trident
    with t.transaction() as tx:
        tx.write("grp/a", pa.table({"v": [1]}))
        with pytest.raises(TransactionGroupError, match="already written"):
            tx.write("grp/a", pa.table({"v": [2]}))
        with pytest.raises(TransactionGroupError, match="whole-dataset"):
            tx.write("grp/b", pa.table({"v": [2]}), partition={"v": 2})  # type: ignore[arg-type]
        member = t.history("grp/a")[0]
        # a member is decided by its group, never on its own
        with pytest.raises(TransactionGroupError, match="publish or discard the whole group"):
            t.publish("grp/a", member.txn_id)
        with pytest.raises(TransactionGroupError, match="publish or discard the whole group"):
            t.discard("grp/a", member.txn_id)
    assert _gen(t, "grp/a") == {1}
    with pytest.raises(TransactionGroupError, match="no transaction group"):
        t.publish_group(uuid.uuid4())


def test_a_group_with_a_pg_dataset_is_refused_up_front(trident: Trident) -> None:
    t = trident
    t.router.set_pin("grp/rows", "pg")
    t.write("grp/rows", pa.table({"v": [1]}))
    with pytest.raises(UnsupportedBySinkError, match="cannot hold a staged version"), t.transaction() as tx:
        tx.write("grp/ok", pa.table({"v": [2]}))
        tx.write("grp/rows", pa.table({"v": [2]}))
    assert _gen(t, "grp/rows") == {1} and not t.exists("grp/ok")
    assert t.history("grp/rows")[0].status == "committed"  # the refused write opened no transaction


def test_a_group_is_published_and_discarded_by_id_prefix(trident: Trident) -> None:
    t = trident
    _seed(t)
    tx = t.transaction().open()
    for k in KEYS[:2]:
        tx.write(k, pa.table({"v": [5]}))
    done = t.publish_group(str(tx.group_id)[:8])
    assert set(done.results) == set(KEYS[:2]) and done.refs_moved
    assert _gen(t, KEYS[0]) == {5}
    with pytest.raises(TransactionGroupError, match="was published"):
        tx.discard()  # published by id elsewhere: the control plane says so, not this object
    with pytest.raises(TransactionGroupError, match="was published"):
        t.discard_group(done.group_id)
    assert _gen(t, KEYS[0]) == {5}


# -- crash safety: SIGKILL of the writer at each step ------------------------------------------------
_CHILD = """
import pyarrow as pa
from trident_resources import Trident
from trident_resources.core.failpoints import armed
t = Trident.from_env()
tx = t.transaction().open()
print(tx.group_id, flush=True)
for i, k in enumerate({keys!r}):
    if i == {kill_at_write}:
        with armed({point!r}, "kill"):
            tx.write(k, pa.table({{"v": [2, 2]}}))
    else:
        tx.write(k, pa.table({{"v": [2, 2]}}))
tx.publish()
"""

# (where, failpoint, at which write it is armed (-1: armed for the whole run), all or none)
STEPS = [
    ("before staging", "group.opened", -1, False),
    ("inside the first staging", "intent.after", 0, False),
    ("between stagings", "intent.after", 3, False),
    ("staged on the branch, not in the ledger", "commit.before_ledger", 4, False),
    ("before the publish", "group.before_publish", -1, False),
    ("inside the publish transaction", "group.publishing", -1, False),
    ("after the control-plane publish, before the refs", "group.after_publish", -1, True),
    ("between two ref moves", "group.ref_moved", -1, True),
]


def _run(settings: TridentSettings, point: str, at: int) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIDENT_")}
    env |= {
        "TRIDENT_HOME": str(settings.home),
        "TRIDENT_PG_DSN": settings.pg_dsn.get_secret_value() if settings.pg_dsn else "",
        "TRIDENT_WORKSPACE": settings.workspace,
        "PYTHONPATH": str(REPO),
    }
    if at < 0:
        env["TRIDENT_FAILPOINTS"] = f"{point}=kill"
    code = _CHILD.format(keys=KEYS, kill_at_write=at, point=point)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True, timeout=180)


def _stray_files(t: Trident, key: str) -> list[str]:
    """Data files under the table's folder that no snapshot of it references."""
    table = iceberg_table(t, key)
    referenced = {f.file_path for s in table.snapshots() for f in _files(t, table, s.snapshot_id)}
    root = Path(unquote(urlparse(table.location()).path)) / "data"
    on_disk = {p.as_uri() for p in root.rglob("*.parquet")} if root.exists() else set()
    return sorted(p for p in on_disk if p not in {Path(unquote(urlparse(r).path)).as_uri() for r in referenced})


def _files(t: Trident, table: Any, snapshot_id: int) -> list[Any]:
    sink = t.driver.sink("iceberg_native")
    return list(sink.tables.data_files(table, snapshot_id=snapshot_id))  # type: ignore[attr-defined]


@pytest.mark.parametrize(("where", "point", "at", "lands"), STEPS, ids=[s[0] for s in STEPS])
def test_sigkill_at_each_step_then_reconcile_is_all_or_none(
    trident: Trident, where: str, point: str, at: int, lands: bool
) -> None:
    t = trident
    _seed(t)
    child = _run(t.settings, point, at)
    assert child.returncode == -9, f"{where}: the writer was not killed there: {child.returncode} {child.stderr[-2000:]}"
    want = {2} if lands else {1}
    # Trident's readers already see all or none, before any repair
    assert [_gen(t, k) for k in KEYS] == [want] * len(KEYS), where
    report = t.reconcile()
    assert report.still_running == [], where
    assert [_gen(t, k) for k in KEYS] == [want] * len(KEYS), where
    for k in KEYS:
        entries = t.history(k)
        assert not [e for e in entries if e.status in ("open", "staged")], (where, k, entries[0])
        assert not [e for e in entries if e.ref_pending], (where, k)
        table = iceberg_table(t, k)
        head = table.current_snapshot()
        # the table's main is the published version, for every engine; no audit branch, no stray file
        assert head is not None and head.snapshot_id == t.describe(k, storage=False).snapshot_id, (where, k)
        assert set(table.metadata.refs) == {"main"}, (where, k, set(table.metadata.refs))
        assert _stray_files(t, k) == [], (where, k)
    # a second reconcile finds nothing left, and the datasets take writes again
    again = t.reconcile()
    assert again.rolled_forward == [] and again.aborted == [], where
    with t.transaction() as tx:
        for k in KEYS:
            tx.write(k, pa.table({"v": [3]}))
    assert [_gen(t, k) for k in KEYS] == [{3}] * len(KEYS)


def test_the_next_writer_moves_a_dead_publishers_ref_before_it_writes(trident: Trident) -> None:
    """A publisher killed after the control-plane publish leaves the tables' main behind; a writer
    of one of the datasets (no reconcile in between) must build on the published version, not on
    the stale main, or the group's version of that dataset would be lost under its commit."""
    t = trident
    _seed(t)
    child = _run(t.settings, "group.after_publish", -1)
    assert child.returncode == -9, child.stderr[-2000:]
    assert iceberg_table(t, KEYS[0]).current_snapshot().snapshot_id != t.describe(KEYS[0], storage=False).snapshot_id  # type: ignore[union-attr]
    t.write(KEYS[0], pa.table({"v": [7]}), mode="append")
    assert sorted(t.read(KEYS[0]).column("v").to_pylist()) == [2, 2, 7]
    table = iceberg_table(t, KEYS[0])
    assert table.current_snapshot().snapshot_id == t.describe(KEYS[0], storage=False).snapshot_id  # type: ignore[union-attr]
    assert set(table.metadata.refs) == {"main"}
    # the other members' refs are still pending until reconcile (or their next writer) moves them
    assert [e.ref_pending for e in (t.history(k)[0] for k in KEYS[1:])] == [True] * 4
    report = t.reconcile()
    assert len(report.rolled_forward) == 4
    assert [_gen(t, k) for k in KEYS[1:]] == [{2}] * 4


def test_maintenance_leaves_a_groups_members_and_a_group_missing_one_never_publishes(settings: TridentSettings) -> None:
    with Trident(settings.model_copy(update={"staged_max_age_days": 0})) as t:
        _seed(t)
        tx = t.transaction().open()
        for k in KEYS[:2]:
            tx.write(k, pa.table({"v": [2]}))
        done = t.maintain(KEYS[0])  # every staged version is "stale" at age 0: not a group's
        assert done.discarded_staged == []
        assert t.history(KEYS[0])[0].status == "staged"
        # a member decided on its own (here by the driver itself, below every refusal)
        entry = t.history(KEYS[1])[0]
        t.driver.discard_staged(t.dataset_record(KEYS[1]), entry, "by hand")
        with pytest.raises(TransactionGroupError, match="lost member"):
            tx.publish()
        assert [_gen(t, k) for k in KEYS[:2]] == [{1}, {1}]
        assert t.history(KEYS[0])[0].status == "rejected"  # the refused group was discarded whole


def test_a_groups_partition_member_is_rebased_onto_other_partitions_commits(trident: Trident) -> None:
    """A group (a Dagster run publishing once) staged day 2 of a dataset; meanwhile another
    writer committed day 3. The group's publish re-bases day 2 onto that commit (as a single
    publish of a staged partition write does) instead of refusing: both days land, identity
    unique, and the table's main holds both. A change to the member's OWN partition is still a
    conflict that publishes nothing."""
    t = trident
    t.write(
        "grp/days",
        pa.concat_tables([day_rows(0, 0), day_rows(1, 1)]),
        partition=day_window(0, 2),
    )
    t.write("grp/other", pa.table({"v": [1]}))
    group = uuid.uuid4()
    with t.transaction(group_id=group, external=True) as tx:
        staged = tx.write("grp/days", day_rows(1, 11), partition=day_window(1))
        tx.write("grp/other", pa.table({"v": [2]}))
    # the member replaced its partition, not the dataset
    assert sorted(t.read("grp/days", staged=staged.txn_id).column("v").to_pylist()) == [0, 0, 11, 11]
    t.write("grp/days", day_rows(2, 22), partition=day_window(2))  # another run's partition, committed meanwhile
    done = t.publish_group(group)
    assert set(done.results) == {"grp/days", "grp/other"}
    got = t.read("grp/days")
    assert sorted(got.column("v").to_pylist()) == [0, 0, 11, 11, 22, 22]
    assert got.num_rows == len(set(got.column("__row_id").to_pylist())) == len(set(got.column("__row_index").to_pylist()))
    assert _gen(t, "grp/other") == {2}
    table = iceberg_table(t, "grp/days")
    head = table.current_snapshot()
    assert head is not None and head.snapshot_id == t.describe("grp/days", storage=False).snapshot_id
    assert set(table.metadata.refs) == {"main"}
    assert t.describe("grp/days").row_count == 6

    # the member's own partition changed meanwhile: nothing of the group publishes
    clash = uuid.uuid4()
    with t.transaction(group_id=clash, external=True) as tx:
        tx.write("grp/days", day_rows(1, 111), partition=day_window(1))
        tx.write("grp/other", pa.table({"v": [3]}))
    t.write("grp/days", day_rows(1, 99), partition=day_window(1))
    with pytest.raises(StagedVersionConflictError, match="grp/days"):
        t.publish_group(clash)
    assert sorted(t.read("grp/days").column("v").to_pylist()) == [0, 0, 22, 22, 99, 99]
    assert _gen(t, "grp/other") == {2}
