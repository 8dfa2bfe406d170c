"""Transaction groups inside an environment: a group's writes stage on the environment's versions,
its publish moves every member's environment head at once (one Postgres transaction) and then the
members' environment branches, never ``main``; a publisher killed between the two leaves the
branches for the reconciler or the dataset's next writer of that environment."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pytest

from tests.support.helpers import day_rows, day_window, settings_env
from trident_resources import Trident, TridentSettings
from trident_resources.core.errors import StagedVersionConflictError, TransactionGroupError
from trident_resources.sinks.iceberg.snapshots import env_branch

REPO = Path(__file__).resolve().parents[3]
ENV = "pr-grp"
KEYS = ["envgrp/a", "envgrp/b", "envgrp/c"]


@contextmanager
def in_env(settings: TridentSettings, name: str = ENV) -> Iterator[Trident]:
    t = Trident(settings.model_copy(update={"environment": name}))
    try:
        yield t
    finally:
        t.close()


def _ids(t: Trident, key: str) -> list[int]:
    return sorted(t.read(key, columns=["id"]).column("id").to_pylist())


def _table(t: Trident, key: str) -> object:
    ds = t.control.dataset(t.workspace, key)
    assert ds is not None
    return t.engine.sink("iceberg_native").tables.table(ds)  # type: ignore[attr-defined]


def _refs(t: Trident, key: str) -> dict[str, int]:
    table = _table(t, key)
    return {name: ref.snapshot_id for name, ref in table.metadata.refs.items()}  # type: ignore[attr-defined]


def _seed(prod: Trident) -> None:
    prod.write(KEYS[0], pa.table({"id": [1]}))
    prod.write(KEYS[1], pa.table({"id": [10]}))


def test_a_group_in_an_environment_publishes_into_it_all_at_once(trident: Trident, settings: TridentSettings) -> None:
    prod = trident
    _seed(prod)
    main_before = {k: _refs(prod, k)["main"] for k in KEYS[:2]}
    with in_env(settings) as env:
        with env.transaction() as tx:
            tx.write(KEYS[0], pa.table({"id": [2]}), mode="append")
            tx.write(KEYS[1], pa.table({"id": [11]}))
            tx.write(KEYS[2], pa.table({"id": [20]}))  # born in the environment, inside the group
            # staged: neither the environment nor production sees any of it yet
            assert _ids(env, KEYS[0]) == [1] and _ids(env, KEYS[1]) == [10] and not env.exists(KEYS[2])
        assert _ids(env, KEYS[0]) == [1, 2] and _ids(env, KEYS[1]) == [11] and _ids(env, KEYS[2]) == [20]
        heads = env.control.env_heads(env.workspace, ENV)
        committed = {h.committed_at for h in heads.values()}
        assert len(heads) == 3 and len(committed) == 1  # every member at one instant
        for k in KEYS:
            refs = _refs(prod, k)
            assert refs[env_branch(ENV)] == env.describe(k).snapshot_id, k  # the branch followed the head
            assert not [n for n in refs if n not in ("main", env_branch(ENV))], refs  # no audit branch left
            assert not [e for e in env.history(k) if e.ref_pending or e.status == "staged"], k
    # production saw nothing of it: records, reads and main
    assert _ids(prod, KEYS[0]) == [1] and _ids(prod, KEYS[1]) == [10] and not prod.exists(KEYS[2])
    assert {k: _refs(prod, k)["main"] for k in KEYS[:2]} == main_before
    assert all(e.metadata.get("trident.environment") is None for e in prod.history(KEYS[0]))
    # the environment's group is promoted like any environment write
    done = prod.environments.promote(ENV)
    assert done.promoted == {KEYS[0]: "fast", KEYS[1]: "fast", KEYS[2]: "fast"}
    assert _ids(prod, KEYS[0]) == [1, 2] and _ids(prod, KEYS[1]) == [11] and _ids(prod, KEYS[2]) == [20]


def test_a_discarded_group_in_an_environment_leaves_it_as_it_was(trident: Trident, settings: TridentSettings) -> None:
    prod = trident
    _seed(prod)
    with in_env(settings) as env:
        env.write(KEYS[0], pa.table({"id": [5]}), mode="append")
        before = _refs(prod, KEYS[0])
        with pytest.raises(ZeroDivisionError):
            with env.transaction() as tx:
                tx.write(KEYS[0], pa.table({"id": [6]}), mode="append")
                tx.write(KEYS[2], pa.table({"id": [7]}))
                raise ZeroDivisionError
        assert _ids(env, KEYS[0]) == [1, 5] and not env.exists(KEYS[2])
        assert _refs(prod, KEYS[0]) == before
        assert env.staged() == []
    assert _ids(prod, KEYS[0]) == [1]


def test_an_environment_head_moved_since_staging_refuses_the_whole_group(trident: Trident, settings: TridentSettings) -> None:
    prod = trident
    _seed(prod)
    with in_env(settings) as env, in_env(settings) as other_writer:
        env.write(KEYS[0], pa.table({"id": [2]}), mode="append")
        tx = env.transaction().open()
        tx.write(KEYS[0], pa.table({"id": [3]}), mode="append")
        tx.write(KEYS[1], pa.table({"id": [12]}), mode="append")
        other_writer.write(KEYS[0], pa.table({"id": [4]}), mode="append")  # the environment's head moved
        heads = {k: env.describe(k).snapshot_id for k in KEYS[:2]}
        with pytest.raises(StagedVersionConflictError, match=KEYS[0]):
            tx.publish()
        assert {k: env.describe(k).snapshot_id for k in KEYS[:2]} == heads  # nothing of the group landed
        assert _ids(env, KEYS[0]) == [1, 2, 4] and _ids(env, KEYS[1]) == [10]
        assert env.staged() == []
    # a production commit after the fork does not conflict with the environment's group
    with in_env(settings) as env:
        tx = env.transaction().open()
        tx.write(KEYS[1], pa.table({"id": [13]}), mode="append")
        prod.write(KEYS[1], pa.table({"id": [99]}), mode="append")
        tx.publish()
        assert _ids(env, KEYS[1]) == [10, 13] and _ids(prod, KEYS[1]) == [10, 99]


_CHILD = """
import pyarrow as pa
from trident_resources import Trident
with Trident() as t:
    with t.transaction() as tx:
        tx.write({a!r}, pa.table({{"id": [2]}}), mode="append")
        tx.write({b!r}, pa.table({{"id": [11]}}), mode="append")
"""


def _killed_after_publish(settings: TridentSettings) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIDENT_")}
    env |= settings_env(settings.model_copy(update={"environment": ENV}))
    env |= {"TRIDENT_FAILPOINTS": "group.after_publish=kill", "PYTHONPATH": str(REPO)}
    code = textwrap.dedent(_CHILD.format(a=KEYS[0], b=KEYS[1]))
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=180)


def test_a_publisher_killed_before_the_branches_moved_is_finished_on_the_branches_never_main(
    trident: Trident, settings: TridentSettings
) -> None:
    prod = trident
    _seed(prod)
    main_before = {k: _refs(prod, k)["main"] for k in KEYS[:2]}
    child = _killed_after_publish(settings)
    assert child.returncode == -9, child.stderr[-2000:]
    with in_env(settings) as env:
        # the control plane published the group: the environment's readers see all of it already
        assert _ids(env, KEYS[0]) == [1, 2] and _ids(env, KEYS[1]) == [10, 11]
        assert all(env.history(k)[0].ref_pending for k in KEYS[:2])
        assert all(env_branch(ENV) not in _refs(prod, k) for k in KEYS[:2])  # the branches did not move yet
        # the environment's next writer of a finishes a's branch first, then builds on it
        env.write(KEYS[0], pa.table({"id": [3]}), mode="append")
        assert _ids(env, KEYS[0]) == [1, 2, 3]
        assert _refs(prod, KEYS[0])[env_branch(ENV)] == env.describe(KEYS[0]).snapshot_id
    report = prod.reconcile()  # production's reconciler finishes b's branch
    assert report.still_running == []
    with in_env(settings) as env:
        assert _refs(prod, KEYS[1])[env_branch(ENV)] == env.describe(KEYS[1]).snapshot_id
        assert not [e for k in KEYS[:2] for e in env.history(k) if e.ref_pending]
        for k in KEYS[:2]:
            assert set(_refs(prod, k)) == {"main", env_branch(ENV)}, _refs(prod, k)
    assert {k: _refs(prod, k)["main"] for k in KEYS[:2]} == main_before  # main never moved
    assert _ids(prod, KEYS[0]) == [1] and _ids(prod, KEYS[1]) == [10]


def test_an_environments_group_is_decided_only_in_that_environment(trident: Trident, settings: TridentSettings) -> None:
    prod = trident
    _seed(prod)
    with in_env(settings) as env, in_env(settings, "pr-other") as other:
        tx = env.transaction().open()
        tx.write(KEYS[0], pa.table({"id": [2]}), mode="append")
        for outsider in (prod, other):
            with pytest.raises(TransactionGroupError, match="no transaction group"):
                outsider.publish_group(tx.group_id)
            with pytest.raises(TransactionGroupError, match="no transaction group"):
                outsider.discard_group(tx.group_id)
        assert _ids(env, KEYS[0]) == [1]
        tx.publish()
        assert _ids(env, KEYS[0]) == [1, 2] and _ids(other, KEYS[0]) == [1] and _ids(prod, KEYS[0]) == [1]


def test_drop_discards_the_environments_staged_versions_and_open_groups(trident: Trident, settings: TridentSettings) -> None:
    """Staged versions of an environment (alone, or in a group still open) are its state too: a
    drop discards them (ledger ``rejected``, audit branches and files gone), so nothing of the
    dropped environment can be published afterwards, and a table born staged there goes with it."""
    prod = trident
    _seed(prod)
    with in_env(settings) as env:
        alone = env.write(KEYS[0], pa.table({"id": [2]}), mode="append", stage=True)  # no head there: a staged first write
        born = env.write(KEYS[2], pa.table({"id": [30]}), stage=True)  # born staged in the environment
        tx = env.transaction().open()
        member = tx.write(KEYS[1], pa.table({"id": [12]}), mode="append")
        prod_files = {k: _refs(prod, k)["main"] for k in KEYS[:2]}
        prod.environments.drop(ENV)
        for key, txn in ((KEYS[0], alone.txn_id), (KEYS[1], member.txn_id)):
            entry = next(e for e in prod.control.history_in(prod.dataset_record(key).dataset_id, ENV) if e.txn_id == txn)
            assert entry.status == "rejected", (key, entry.status)
            assert set(_refs(prod, key)) == {"main"}, _refs(prod, key)  # no audit branch left
        assert prod.control.dataset(prod.workspace, KEYS[2]) is None  # the table born staged went with it
        assert env.transaction_group(tx.group_id).status == "aborted"
        with pytest.raises(TransactionGroupError):
            tx.publish()
        assert env.staged() == [] and not env.exists(KEYS[2])
        assert born.txn_id not in {e.txn_id for _, e in prod.staged()}
    assert {k: _refs(prod, k)["main"] for k in KEYS[:2]} == prod_files
    assert _ids(prod, KEYS[0]) == [1] and _ids(prod, KEYS[1]) == [10]
    for key in KEYS[:2]:  # every file any ref reads is still there, and no file of the staged versions is
        table = _table(prod, key)
        table.scan(snapshot_id=_refs(prod, key)["main"]).to_arrow()  # type: ignore[attr-defined]
        folder = Path(table.location().removeprefix("file://")) / "data"  # type: ignore[attr-defined]
        on_disk = {str(p) for p in folder.rglob("*.parquet")}
        read = {f.removeprefix("file://") for s in table.snapshots() for f in _data_files(prod, table, s.snapshot_id)}  # type: ignore[attr-defined]
        assert on_disk <= read, sorted(on_disk - read)


def _data_files(t: Trident, table: object, snapshot_id: int) -> list[str]:
    sink = t.engine.sink("iceberg_native")
    return [f.file_path for f in sink.tables.data_files(table, snapshot_id=snapshot_id)]  # type: ignore[attr-defined]


def test_concurrent_partition_runs_in_an_environment_each_publish_their_partition(
    trident: Trident, settings: TridentSettings
) -> None:
    """Two runs of a partitioned asset in an environment (each an external group, as a Dagster run
    that publishes once) staged on the same environment version; the second to publish is
    re-based onto the first's, as in production, on the environment's branch: both partitions land
    there, identity unique, production untouched. A change to a member's own partition since it
    was staged is still a conflict that publishes nothing."""
    import uuid

    prod = trident
    prod.write(
        "envgrp/days",
        pa.concat_tables([day_rows(0, 0), day_rows(1, 1)]),
        partition=day_window(0, 3),
    )
    main_before = _refs(prod, "envgrp/days")["main"]
    with in_env(settings) as env:
        env.write("envgrp/days", day_rows(0, 100), partition=day_window(0))  # the environment has a head
        runs = [uuid.uuid4(), uuid.uuid4()]
        for run, (n, v) in zip(runs, ((1, 11), (2, 22)), strict=True):
            with env.transaction(group_id=run, external=True) as tx:
                tx.write("envgrp/days", day_rows(n, v), partition=day_window(n))
        env.publish_group(runs[0])
        env.publish_group(runs[1])  # staged on the version before runs[0] published: re-based
        got = env.read("envgrp/days")
        assert sorted(got.column("v").to_pylist()) == [11, 11, 22, 22, 100, 100]
        assert got.num_rows == len(set(got.column("__row_id").to_pylist())) == len(set(got.column("__row_index").to_pylist()))
        assert _refs(prod, "envgrp/days")[env_branch(ENV)] == env.describe("envgrp/days").snapshot_id
        # a run whose own partition another write changed since it was staged publishes nothing
        late = uuid.uuid4()
        with env.transaction(group_id=late, external=True) as tx:
            tx.write("envgrp/days", day_rows(1, 33), partition=day_window(1))
        env.write("envgrp/days", day_rows(1, 44), partition=day_window(1))
        before = env.describe("envgrp/days").snapshot_id
        with pytest.raises(StagedVersionConflictError):
            env.publish_group(late)
        assert env.describe("envgrp/days").snapshot_id == before
        assert sorted(env.read("envgrp/days").column("v").to_pylist()) == [22, 22, 44, 44, 100, 100]
    assert _refs(prod, "envgrp/days")["main"] == main_before
    assert sorted(prod.read("envgrp/days").column("v").to_pylist()) == [0, 0, 1, 1]
