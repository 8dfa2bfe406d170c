"""Environments (issue 30, docs/environments.md), on the real parts (embedded Postgres, the local
warehouse, the SQL catalog): an environment's writes go to zero-copy Iceberg branches production
never reads; its readers see its versions and production's for the rest; diff is exact; promote
is one group (all or none, rebased or refused); drop and maintenance delete no file anyone reads."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from tests.support.helpers import day_rows, day_window
from trident_resources import DatasetNotFoundError, Trident, TridentSettings
from trident_resources.core.errors import (
    EnvironmentConflictError,
    EnvironmentNotFoundError,
    EnvironmentUnsupportedError,
    InvalidEnvironmentNameError,
    InvalidSettingsError,
)
from trident_resources.core.partitions import PartitionFilter
from trident_resources.core.settings import settings_from_env
from trident_resources.sinks.iceberg.snapshots import ENV_BRANCH_PREFIX, env_branch

REPO = Path(__file__).resolve().parents[3]


@contextmanager
def in_env(settings: TridentSettings, name: str) -> Iterator[Trident]:
    t = Trident(settings.model_copy(update={"environment": name}))
    try:
        yield t
    finally:
        t.close()


def _tables(t: Trident) -> dict[str, object]:
    """Every table of the workspace (also of datasets production never committed)."""
    sink = t.engine.sink("iceberg_native")
    out = {}
    for ds in t.control.all_datasets(t.workspace):
        table = sink.tables.table(ds)  # type: ignore[attr-defined]
        if table is not None:
            out[ds.key] = table
    return out


def _files_on_disk(table: object) -> set[str]:
    loc = table.location().removeprefix("file://").rstrip("/") + "/data"  # type: ignore[attr-defined]
    return {f"file://{p}" for p in (str(x) for x in Path(loc).rglob("*.parquet"))}


def _read_every_ref(t: Trident) -> dict[tuple[str, str], int]:
    """Every ref of every table read in full from storage (a missing file raises): rows by
    (dataset, ref)."""
    rows = {}
    for key, table in _tables(t).items():
        for name, ref in table.metadata.refs.items():  # type: ignore[attr-defined]
            rows[(key, name)] = table.scan(snapshot_id=ref.snapshot_id).to_arrow().num_rows  # type: ignore[attr-defined]
    return rows


def _ids(t: Trident, key: str) -> list[int]:
    return sorted(t.read(key, columns=["id"]).column("id").to_pylist())


def test_env_writes_are_isolated_and_env_reads_fall_back_to_production(trident: Trident, settings: TridentSettings) -> None:
    prod = trident
    prod.write("env/a", pa.table({"id": [1, 2]}))
    prod.write("env/b", pa.table({"id": [10]}))
    with in_env(settings, "pr-1") as env:
        env.write("env/a", pa.table({"id": [3]}), mode="append")
        assert env.environment == "pr-1"
        assert _ids(env, "env/a") == [1, 2, 3]
        assert _ids(prod, "env/a") == [1, 2]  # production never sees the environment's rows
        # production keeps writing while the environment lives: the environment keeps its version
        # of a, and sees production's new version of b (which it never wrote)
        prod.write("env/a", pa.table({"id": [4]}), mode="append")
        prod.write("env/b", pa.table({"id": [11]}), mode="append")
        assert _ids(prod, "env/a") == [1, 2, 4]
        assert _ids(env, "env/a") == [1, 2, 3]
        assert _ids(env, "env/b") == [10, 11]
        assert env.sql('select count(*) as n from "env/a"').column("n").to_pylist() == [3]
        assert prod.sql('select count(*) as n from "env/a"').column("n").to_pylist() == [3]
        assert env.describe("env/a").row_count == 3 and prod.describe("env/a").row_count == 3
        assert env.read_many(["env/a", "env/b"], ["id"])["env/a"].num_rows == 3
        # the environment's ledger rows are tagged and production's history never lists them
        mine = [e for e in env.history("env/a") if e.metadata.get("trident.environment") == "pr-1"]
        assert len(mine) == 1
        assert all(e.metadata.get("trident.environment") is None for e in prod.history("env/a"))
        # a second environment sees production, not pr-1
        with in_env(settings, "pr-2") as other:
            assert _ids(other, "env/a") == [1, 2, 4]
        # main still is production's version, the branch the environment's
        table = _tables(prod)["env/a"]
        assert table.current_snapshot().snapshot_id == prod.describe("env/a").snapshot_id  # type: ignore[attr-defined]
        assert table.metadata.refs[env_branch("pr-1")].snapshot_id == env.describe("env/a").snapshot_id  # type: ignore[attr-defined]


@pytest.mark.usefixtures("iceberg_writes")  # counts data files: production's appends each their own file, no flush at the fork
def test_the_first_env_write_copies_no_data_file(trident: Trident, settings: TridentSettings) -> None:
    prod = trident
    for i in range(3):
        prod.write("env/big", pa.table({"id": list(range(i * 100, i * 100 + 100))}), mode="append")
    table = _tables(prod)["env/big"]
    before = _files_on_disk(table)
    prod_files = {f.file_path for f in prod.engine.sink("iceberg_native").tables.data_files(table)}  # type: ignore[attr-defined]
    with in_env(settings, "pr-zero") as env:
        env.write("env/big", pa.table({"id": [999]}), mode="append")
        table = _tables(prod)["env/big"]
        after = _files_on_disk(table)
        assert len(after - before) == 1  # the one appended row's file, nothing of production's copied
        head = table.metadata.refs[env_branch("pr-zero")].snapshot_id  # type: ignore[attr-defined]
        env_files = {f.file_path for f in prod.engine.sink("iceberg_native").tables.data_files(table, head)}  # type: ignore[attr-defined]
        assert prod_files <= env_files and len(env_files - prod_files) == 1
        assert env.describe("env/big").row_count == 301


def test_a_dataset_born_in_an_environment_exists_only_there(trident: Trident, settings: TridentSettings) -> None:
    prod = trident
    prod.write("env/old", pa.table({"id": [1]}))
    with in_env(settings, "pr-born") as env:
        env.write("env/new", pa.table({"id": [7, 8]}))
        assert _ids(env, "env/new") == [7, 8]
        assert "env/new" in {d.key for d in env.datasets()}
        assert "env/new" not in {d.key for d in prod.datasets()}
        assert not prod.exists("env/new")
        with pytest.raises(DatasetNotFoundError):
            prod.read("env/new")
        with in_env(settings, "pr-other") as other:
            assert not other.exists("env/new")
        [d] = env.environments.show("pr-born").datasets
        assert d.key == "env/new" and d.born_in_env


def test_diff_is_exact(trident: Trident, settings: TridentSettings) -> None:
    prod = trident
    prod.write("env/keyed", pa.table({"id": [1, 2, 3, 4], "v": ["a", "b", "c", "d"]}), keys="id")
    prod.write("env/plain", pa.table({"id": [1]}))
    prod.write("env/untouched", pa.table({"id": [1]}))
    with in_env(settings, "pr-diff") as env:
        env.write("env/keyed", pa.table({"id": [1, 2, 9], "v": ["A", "b", "z"]}), mode="upsert", keys="id")  # 1 changed, 9 new
        env.write("env/keyed", mode="delete", keys="id", data=pa.table({"id": [3]}))  # 3 removed
        env.write("env/plain", pa.table({"id": [2, 3], "extra": ["x", "y"]}), mode="append")  # +2 rows, +1 column
        env.write("env/born", pa.table({"id": [1, 2, 3]}))
    prod.write("env/plain", pa.table({"id": [5]}), mode="append")  # production moves after the fork
    diff = {d.key: d for d in prod.environments.diff("pr-diff").datasets}
    assert set(diff) == {"env/keyed", "env/plain", "env/born"}  # never-written datasets are not listed
    k = diff["env/keyed"]
    assert (k.rows_added, k.rows_removed, k.rows_changed) == (1, 1, 1)
    assert k.matched_by == ["id"] and not k.production_moved and k.columns_added == []
    p = diff["env/plain"]
    assert (p.rows_added, p.rows_removed, p.rows_changed) == (2, 0, 0)
    assert p.columns_added == ["extra"] and p.production_moved
    b = diff["env/born"]
    assert b.born_in_env and b.rows_added == 3 and b.columns_added == ["id"]


_READER = """
import json, sys, time
from pathlib import Path
from trident_resources import Trident

keys = {keys!r}
stop = Path(sys.argv[1])
t = Trident.from_env()
query = "select " + " + ".join(f'(select count(*) from "{{k}}")' for k in keys) + " as n"
seen, reads = set(), 0
deadline = time.monotonic() + 600
while not stop.exists() and time.monotonic() < deadline:
    seen.add(int(t.sql(query).column("n")[0].as_py()))
    reads += 1
    if reads == 1:
        (stop.parent / "ready").touch()
    time.sleep(0.002)
print(json.dumps({{"reads": reads, "seen": sorted(seen)}}))
"""


def test_promote_lands_everything_at_once_for_a_reader_in_another_process(
    trident: Trident, settings: TridentSettings, tmp_path: Path
) -> None:
    import json

    prod = trident
    keys = [f"env/p{i}" for i in range(12)]
    for k in keys:
        prod.write(k, pa.table({"id": [0]}))
    with in_env(settings, "pr-all") as env:
        for k in keys:
            env.write(k, pa.table({"id": [1]}), mode="append")
    prod.write(keys[0], pa.table({"id": [2]}), mode="append")  # production moved one: it is rebased
    stop = tmp_path / "stop"
    penv = {k: v for k, v in os.environ.items() if not k.startswith("TRIDENT_")}
    penv |= {
        "TRIDENT_HOME": str(settings.home),
        "TRIDENT_PG_DSN": settings.pg_dsn.get_secret_value() if settings.pg_dsn else "",
        "TRIDENT_WORKSPACE": settings.workspace,
        "PYTHONPATH": str(REPO),
    }
    reader = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_READER.format(keys=keys)), str(stop)],
        env=penv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        import time

        deadline = time.monotonic() + 180
        while not (tmp_path / "ready").exists() and time.monotonic() < deadline and reader.poll() is None:
            time.sleep(0.1)  # the reader is polling before the promotion starts
        done = prod.environments.promote("pr-all")
        time.sleep(1)
    finally:
        stop.touch()
        out, err = reader.communicate(timeout=120)
    assert reader.returncode == 0, err
    report = json.loads(out.strip().splitlines()[-1])
    before, after = 12 + 1, 12 + 1 + 12
    assert report["reads"] > 1
    assert set(report["seen"]) <= {before, after}, report  # never a half-promoted state
    assert after in report["seen"]
    assert done.promoted[keys[0]] == "append" and all(done.promoted[k] == "fast" for k in keys[1:])
    assert _ids(prod, keys[0]) == [0, 1, 2] and all(_ids(prod, k) == [0, 1] for k in keys[1:])
    # one group: every promoted dataset committed at the same instant
    assert len({prod.describe(k).committed_at for k in keys}) == 1


def test_both_sides_upserting_the_same_key_refuses_promotion_and_changes_nothing(
    trident: Trident, settings: TridentSettings
) -> None:
    prod = trident
    prod.write("env/ck", pa.table({"id": [1, 2], "v": ["a", "b"]}), keys="id")
    prod.write("env/cfine", pa.table({"id": [1]}))
    with in_env(settings, "pr-conflict") as env:
        env.write("env/ck", pa.table({"id": [1], "v": ["env"]}), mode="upsert", keys="id")
        env.write("env/cfine", pa.table({"id": [2]}), mode="append")
        prod.write("env/ck", pa.table({"id": [1], "v": ["prod"]}), mode="upsert", keys="id")
        before = {k: prod.describe(k).last_txn_id for k in ("env/ck", "env/cfine")}
        with pytest.raises(EnvironmentConflictError) as caught:
            prod.environments.promote("pr-conflict")
        text = str(caught.value)
        assert "env/ck" in text and "same 1 key" in text and "env/cfine" not in text and "nothing was promoted" in text
        assert {k: prod.describe(k).last_txn_id for k in before} == before  # nothing changed in production
        assert prod.read("env/ck").sort_by("id").column("v").to_pylist() == ["prod", "b"]
        assert _ids(prod, "env/cfine") == [1]
        assert env.read("env/ck").sort_by("id").column("v").to_pylist() == ["env", "b"]  # nor in the environment
        assert prod.staged() == []
        assert {d.key for d in prod.environments.show("pr-conflict").datasets} == {"env/ck", "env/cfine"}


def test_a_replace_on_either_side_is_a_conflict(trident: Trident, settings: TridentSettings) -> None:
    prod = trident
    prod.write("env/r", pa.table({"id": [1]}))
    with in_env(settings, "pr-replace") as env:
        env.write("env/r", pa.table({"id": [2]}), mode="append")
    prod.write("env/r", pa.table({"id": [3]}))  # production replaced it
    with pytest.raises(EnvironmentConflictError, match="production replaced it"):
        prod.environments.promote("pr-replace")


def test_disjoint_changes_on_both_sides_are_rebased(trident: Trident, settings: TridentSettings) -> None:
    prod = trident
    prod.write("env/app", pa.table({"id": [1, 2]}))
    prod.write("env/dk", pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}), keys="id")
    with in_env(settings, "pr-disjoint") as env:
        env.write("env/app", pa.table({"id": [10, 11]}), mode="append")
        env.write("env/dk", pa.table({"id": [1, 7], "v": ["A", "g"]}), mode="upsert", keys="id")
    prod.write("env/app", pa.table({"id": [20]}), mode="append")
    prod.write("env/dk", pa.table({"id": [2, 8], "v": ["B", "h"]}), mode="upsert", keys="id")
    done = prod.environments.promote("pr-disjoint")
    assert done.promoted == {"env/app": "append", "env/dk": "upsert"}
    rows = prod.read("env/app")
    assert sorted(rows.column("id").to_pylist()) == [1, 2, 10, 11, 20]  # both sides' rows
    assert len(set(rows.column("__row_id").to_pylist())) == rows.num_rows  # identity unique
    assert len(set(rows.column("__row_index").to_pylist())) == rows.num_rows
    dk = prod.read("env/dk").sort_by("id")
    assert dict(zip(dk.column("id").to_pylist(), dk.column("v").to_pylist(), strict=True)) == {
        1: "A",
        2: "B",
        3: "c",
        7: "g",
        8: "h",
    }


def test_drop_leaves_no_file_of_its_own_and_removes_none_another_ref_reads(trident: Trident, settings: TridentSettings) -> None:
    prod = trident
    prod.write("env/d1", pa.table({"id": [1, 2]}))
    prod.write("env/d2", pa.table({"id": [1]}))
    with in_env(settings, "pr-keep") as keep, in_env(settings, "pr-gone") as gone:
        keep.write("env/d1", pa.table({"id": [3]}), mode="append")
        gone_txns = [
            gone.write("env/d1", pa.table({"id": [4]}), mode="append").txn_id,
            gone.write("env/d1", pa.table({"id": [5]}), mode="upsert", keys="id").txn_id,
            gone.write("env/d2", pa.table({"id": [6]})).txn_id,
            gone.write("env/born", pa.table({"id": [9]})).txn_id,
        ]
        prod.write("env/d2", pa.table({"id": [2]}), mode="append")
        rows_before = _read_every_ref(prod)
        done = prod.environments.drop("pr-gone")
        assert done.datasets == 3 and done.dropped_tables == ["env/born"]
        with pytest.raises(EnvironmentNotFoundError):
            prod.environments.show("pr-gone")
        # every ref left is readable in full (no file production or pr-keep reads was deleted)
        rows_after = _read_every_ref(prod)
        assert rows_after == {k: v for k, v in rows_before.items() if k[1] != env_branch("pr-gone")}
        tables = _tables(prod)
        assert "env/born" not in tables and not prod.control.dataset(prod.workspace, "env/born")
        for table in tables.values():
            assert env_branch("pr-gone") not in table.metadata.refs  # type: ignore[attr-defined]
            names = " ".join(_files_on_disk(table))
            assert not any(str(txn) in names for txn in gone_txns)  # no file of its own left behind
        assert _ids(keep, "env/d1") == [1, 2, 3] and _ids(prod, "env/d2") == [1, 2]


def test_maintenance_with_live_environments_and_staged_versions_deletes_nothing_anyone_reads(
    trident: Trident, settings: TridentSettings
) -> None:
    """A chaos run: random writes in production and three environments, staged versions, promotes,
    drops and maintenance with nothing retained by age; after each maintenance every ref of every
    table is read in full and every reader sees what it expects."""
    from datetime import timedelta

    prod = trident
    rng = random.Random(30)
    keys = [f"env/c{i}" for i in range(4)]
    for k in keys:
        prod.write(k, pa.table({"id": [0]}))
    names = ["ca", "cb", "cc"]
    opened = {n: Trident(settings.model_copy(update={"environment": n})) for n in names}
    expected: dict[str, dict[str, list[int]]] = {"main": {k: [0] for k in keys}} | {n: {} for n in names}
    staged: dict[str, tuple[object, list[int]]] = {}
    counter = 100
    done: Counter[str] = Counter()
    try:
        for step in range(40):
            action = rng.choice(["prod", "env", "env", "stage", "maintain", "promote", "drop"])
            counter += 1
            key = rng.choice(keys)
            if action == "prod" and key not in staged:
                prod.write(key, pa.table({"id": [counter]}), mode="append")
                expected["main"][key] = expected["main"][key] + [counter]
                done["prod"] += 1
            elif action == "env":
                n = rng.choice(names)
                opened[n].write(key, pa.table({"id": [counter]}), mode="append")
                base = expected[n].get(key, expected["main"][key])
                expected[n][key] = [*base, counter]
                done["env"] += 1
            elif action == "stage" and key not in staged:
                r = prod.write(key, pa.table({"id": [counter]}), mode="append", stage=True)
                staged[key] = (r.txn_id, expected["main"][key] + [counter])
                done["stage"] += 1
            elif action == "promote":
                n = rng.choice(names)
                if not expected[n] or any(k in staged for k in expected[n]):
                    continue
                try:
                    prod.environments.promote(n)
                except EnvironmentConflictError:
                    done["conflict"] += 1
                    continue
                done["promote"] += 1
                for k, ids in expected[n].items():
                    env_added = [i for i in ids if i not in expected["main"][k]]
                    expected["main"][k] = sorted(set(expected["main"][k]) | set(env_added) | set(ids))
                expected[n] = {}
            elif action == "drop":
                n = rng.choice(names)
                if expected[n]:
                    prod.environments.drop(n)
                    expected[n] = {}
                    done["drop"] += 1
            for k, (txn, _) in list(staged.items()):
                if rng.random() < 0.2:
                    prod.publish(k, txn)  # type: ignore[arg-type]
                    expected["main"][k] = staged.pop(k)[1]
                    done["publish"] += 1
            if action == "maintain" or step % 7 == 6:
                for k in keys:
                    prod.maintain(k, older_than=timedelta(0), retain_last=1)
                _read_every_ref(prod)  # raises if a file any ref reads was deleted
                done["maintain"] += 1
            for k in keys:
                assert _ids(prod, k) == sorted(expected["main"][k]), (step, k)
                for n in names:
                    want = expected[n].get(k, expected["main"][k])
                    assert _ids(opened[n], k) == sorted(want), (step, n, k)
            for k, (txn, ids) in staged.items():
                assert sorted(prod.read(k, staged=txn).column("id").to_pylist()) == sorted(ids)  # type: ignore[arg-type]
        for k in keys:
            prod.maintain(k, older_than=timedelta(0), retain_last=1)
        rows = _read_every_ref(prod)
        assert any(name.startswith(ENV_BRANCH_PREFIX) for _, name in rows) or not any(expected[n] for n in names)
        assert all(done[a] >= 1 for a in ("prod", "env", "stage", "promote", "drop", "publish", "maintain")), done
    finally:
        for t in opened.values():
            t.close()


def test_env_writes_that_cannot_be_isolated_are_refused_up_front(trident: Trident, settings: TridentSettings) -> None:
    prod = trident
    prod.write("env/ice", pa.table({"id": [1]}))
    with in_env(settings, "pr-pg") as env:
        pg_key = "env/pgnew"
        env.router.set_pin(pg_key, "pg")
        with pytest.raises(EnvironmentUnsupportedError, match="pg"):
            env.write(pg_key, pa.table({"id": [1]}))
        assert env.control.dataset(env.workspace, pg_key) is None  # refused before a record was made
        with pytest.raises(EnvironmentUnsupportedError, match="from production"):
            env.environments.promote("pr-pg")
    assert _ids(prod, "env/ice") == [1]


def test_partition_writes_in_an_environment_change_its_branch_only(trident: Trident, settings: TridentSettings) -> None:
    """A partitioned asset's run in a pull request's environment replaces its partitions in the
    environment's branch: production's partitions and record (its next row index too) stay
    as they were, the environment reads its partition and production's others, and promotion
    lands it. A write that would partition a table anew is refused: the spec is the table's."""
    prod = trident

    def part(region: str, ids: list[int]) -> pa.Table:
        return pa.table({"region": [region] * len(ids), "id": ids})

    for region, ids in (("eu", [1, 2]), ("us", [3]), ("ap", [4, 5])):
        prod.write("env/parts", part(region, ids), mode="replace", partition=PartitionFilter.of_values("region", region))
    prod.write("env/flat", part("eu", [1]))
    before = prod.control.dataset(prod.workspace, "env/parts")
    assert before is not None
    with in_env(settings, "pr-part") as env:
        eu = PartitionFilter.of_values("region", "eu")
        r = env.write("env/parts", part("eu", [10, 11, 12]), mode="replace", partition=eu)
        assert r.row_count == 6
        env.write("env/parts", part("us", [13]), mode="append", partition=PartitionFilter.of_values("region", "us"))
        got = env.read("env/parts")
        assert sorted(got.column("id").to_pylist()) == [3, 4, 5, 10, 11, 12, 13]
        assert len(set(got.column("__row_index").to_pylist())) == got.num_rows
        assert _ids(prod, "env/parts") == [1, 2, 3, 4, 5]
        after = prod.control.dataset(prod.workspace, "env/parts")
        assert after is not None and (after.next_row_index, after.last_txn_id) == (before.next_row_index, before.last_txn_id)
        with pytest.raises(EnvironmentUnsupportedError, match="in production"):
            env.write("env/flat", part("eu", [2]), mode="replace", partition=eu)
        ap = PartitionFilter.of_values("region", "ap")  # staged, audited, published: in the branch
        staged = env.write("env/parts", part("ap", [14]), mode="replace", partition=ap, stage=True)
        assert sorted(env.read("env/parts", staged=staged.txn_id).column("id").to_pylist()) == [3, 10, 11, 12, 13, 14]
        env.publish("env/parts", staged.txn_id)
        env.write("env/bornparts", part("eu", [7]), mode="replace", partition=eu)  # born in the environment
        assert _ids(env, "env/bornparts") == [7] and prod.control.dataset(prod.workspace, "env/bornparts") is not None
        with pytest.raises(DatasetNotFoundError):
            prod.read("env/bornparts")
        diff = {d.key: d for d in prod.environments.diff("pr-part").datasets}
        d = diff["env/parts"]
        assert (d.rows_added, d.rows_removed, d.production_moved) == (5, 4, False)
        prod.environments.promote("pr-part")
        assert _ids(prod, "env/parts") == [3, 10, 11, 12, 13, 14]
        assert _ids(prod, "env/bornparts") == [7]
        assert _ids(prod, "env/flat") == [1]
        _read_every_ref(prod)


def test_production_partition_writes_beside_an_environments_leave_each_its_own(
    trident: Trident, settings: TridentSettings
) -> None:
    """Production keeps writing partitions while an environment writes its own: neither sees the
    other's, and a promotion over a production that moved refuses (a partition replace on either
    side is a replace: docs/environments.md)."""
    prod = trident
    eu, us = PartitionFilter.of_values("region", "eu"), PartitionFilter.of_values("region", "us")
    prod.write("env/pside", pa.table({"region": ["eu"], "id": [1]}), mode="replace", partition=eu)
    with in_env(settings, "pr-pside") as env:
        env.write("env/pside", pa.table({"region": ["eu"], "id": [10]}), mode="replace", partition=eu)
        prod.write("env/pside", pa.table({"region": ["us"], "id": [2]}), mode="replace", partition=us)
        env.write("env/pside", pa.table({"region": ["us"], "id": [11]}), mode="append", partition=us)
        prod.write("env/pside", pa.table({"region": ["us"], "id": [3]}), mode="append", partition=us)
        assert _ids(env, "env/pside") == [10, 11] and _ids(prod, "env/pside") == [1, 2, 3]
        [d] = prod.environments.diff("pr-pside").datasets
        assert d.production_moved
        with pytest.raises(EnvironmentConflictError, match="env/pside"):
            prod.environments.promote("pr-pside")
        assert _ids(env, "env/pside") == [10, 11] and _ids(prod, "env/pside") == [1, 2, 3]
        _read_every_ref(prod)


def test_environment_names_are_validated(settings: TridentSettings, monkeypatch: pytest.MonkeyPatch) -> None:
    for bad in ("PR-1", "pr 1", "-x", "", "a" * 64, "pr/1"):
        monkeypatch.setenv("TRIDENT_ENVIRONMENT", bad)
        with pytest.raises(InvalidSettingsError, match="TRIDENT_ENVIRONMENT"):
            settings_from_env()
    monkeypatch.setenv("TRIDENT_ENVIRONMENT", "pr-42_x")
    assert settings_from_env().environment == "pr-42_x"
    monkeypatch.delenv("TRIDENT_ENVIRONMENT")
    assert settings_from_env().environment == "main"
    monkeypatch.setenv("DAGSTER_CLOUD_IS_BRANCH_DEPLOYMENT", "1")
    monkeypatch.setenv("DAGSTER_CLOUD_DEPLOYMENT_NAME", "PR-17/My Feature")
    assert settings_from_env().environment == "pr-17-my-feature"
    monkeypatch.setenv("TRIDENT_ENVIRONMENT", "explicit")  # the setting wins over the deployment's name
    assert settings_from_env().environment == "explicit"
    t = Trident(settings)
    try:
        with pytest.raises(InvalidEnvironmentNameError):
            t.environments.diff("Not A Name")
        with pytest.raises(EnvironmentNotFoundError):
            t.environments.drop("never-made")
        with pytest.raises(EnvironmentUnsupportedError):
            t.environments.promote("main")
    finally:
        t.close()


def test_after_a_promotion_the_environment_reads_production_and_forks_it_again(
    trident: Trident, settings: TridentSettings
) -> None:
    prod = trident
    prod.write("env/again", pa.table({"id": [1]}))
    with in_env(settings, "pr-again") as env:
        env.write("env/again", pa.table({"id": [2]}), mode="append")
        assert prod.environments.promote("pr-again").promoted == {"env/again": "fast"}
        assert prod.environments.show("pr-again").datasets == []  # nothing of its own left to promote
        prod.write("env/again", pa.table({"id": [3]}), mode="append")
        assert _ids(env, "env/again") == [1, 2, 3]  # production's version again, with the promoted row
        env.write("env/again", pa.table({"id": [4]}), mode="append")  # a new fork, on production's version
        assert _ids(env, "env/again") == [1, 2, 3, 4] and _ids(prod, "env/again") == [1, 2, 3]
        [d] = prod.environments.diff("pr-again").datasets
        assert (d.rows_added, d.rows_removed, d.production_moved) == (1, 0, False)
        assert prod.environments.promote("pr-again").promoted == {"env/again": "fast"}
        assert _ids(prod, "env/again") == [1, 2, 3, 4]
        prod.environments.drop("pr-again")
        assert env_branch("pr-again") not in _tables(prod)["env/again"].metadata.refs  # type: ignore[attr-defined]
        _read_every_ref(prod)


def test_an_environment_keeps_its_own_watermarks(trident: Trident, settings: TridentSettings) -> None:
    prod = trident
    s1 = prod.write("env/src", pa.table({"id": [1]}))
    prod.write("env/out", pa.table({"n": [1]}), watermarks={"env/src": (s1.committed_at, s1.txn_id)})
    with in_env(settings, "pr-marks") as env:
        assert env.watermarks("env/out") == {"env/src": s1.committed_at}  # production's, before it writes out
        s2 = env.write("env/src", pa.table({"id": [2]}), mode="append")
        assert env.describe("env/src").committed_at == s2.committed_at  # a delta window sees the env's source
        env.write("env/out", pa.table({"n": [2]}), watermarks={"env/src": (s2.committed_at, s2.txn_id)})
        assert env.watermarks("env/out") == {"env/src": s2.committed_at}
        assert prod.watermarks("env/out") == {"env/src": s1.committed_at}  # production's untouched


def test_a_column_added_in_an_environment_never_reaches_production(trident: Trident, settings: TridentSettings) -> None:
    """A table's current schema is shared by its branches: production's next writes build on
    main's schema, not on the environment's added column."""
    prod = trident
    prod.write("env/sch", pa.table({"id": [1, 2]}))
    with in_env(settings, "pr-schema") as env:
        env.write("env/sch", pa.table({"id": [3], "extra": ["e"]}), mode="append")
        prod.write("env/sch", pa.table({"id": [4]}), mode="append")
        prod.write("env/sch", pa.table({"id": [5]}), mode="upsert", keys="id")
        assert "extra" not in prod.read("env/sch").column_names
        assert "extra" not in [c["name"] for c in prod.describe("env/sch").schema]
        assert env.read("env/sch").sort_by("id").column("extra").to_pylist() == [None, None, "e"]
        env.write("env/sch", pa.table({"id": [6], "extra": ["f"]}), mode="append")
        assert env.read("env/sch").sort_by("id").column("extra").to_pylist() == [None, None, "e", "f"]


def test_write_audit_publish_inside_an_environment(trident: Trident, settings: TridentSettings) -> None:
    """A staged write in an environment stages on the environment's version; its publish moves the
    environment's branch (never main), its discard leaves the environment as it was."""
    prod = trident
    prod.write("env/wap", pa.table({"id": [1]}))
    with in_env(settings, "pr-wap") as env:
        first = env.write("env/wap", pa.table({"id": [2]}), mode="append", stage=True)
        assert sorted(env.read("env/wap", staged=first.txn_id).column("id").to_pylist()) == [1, 2]
        assert _ids(env, "env/wap") == [1] and _ids(prod, "env/wap") == [1]  # staged: nobody sees it yet
        env.publish("env/wap", first.txn_id)
        assert _ids(env, "env/wap") == [1, 2] and _ids(prod, "env/wap") == [1]
        table = _tables(prod)["env/wap"]
        assert table.current_snapshot().snapshot_id == prod.describe("env/wap").snapshot_id  # type: ignore[attr-defined]
        second = env.write("env/wap", pa.table({"id": [3]}), mode="append", stage=True)
        assert sorted(env.read("env/wap", staged=second.txn_id).column("id").to_pylist()) == [1, 2, 3]
        env.discard("env/wap", second.txn_id)
        assert _ids(env, "env/wap") == [1, 2]
        born = env.write("env/wapnew", pa.table({"id": [5]}), stage=True)
        assert not env.exists("env/wapnew")
        env.publish("env/wapnew", born.txn_id)
        assert _ids(env, "env/wapnew") == [5] and not prod.exists("env/wapnew")
        assert prod.environments.promote("pr-wap").promoted == {"env/wap": "fast", "env/wapnew": "fast"}
        assert _ids(prod, "env/wap") == [1, 2] and _ids(prod, "env/wapnew") == [5]


def test_production_sees_nothing_of_an_environments_staged_versions(trident: Trident, settings: TridentSettings) -> None:
    """An environment's staged versions are its own: production's ``staged()`` (all, and of one
    key: what ``trident staged`` and ``trident check --fail-on-staged`` list) never lists them,
    nor reads, publishes or discards them by id; the environment's ``staged()`` lists its own only."""
    from trident_resources.core.errors import InvalidReadError

    prod = trident
    prod.write("env/st", pa.table({"id": [1]}))
    mine = prod.write("env/st", pa.table({"id": [9]}), mode="append", stage=True)
    with in_env(settings, "pr-st") as env, in_env(settings, "pr-other") as other:
        theirs = env.write("env/st", pa.table({"id": [2]}), mode="append", stage=True)
        born = env.write("env/stnew", pa.table({"id": [5]}), stage=True)
        assert [e.txn_id for _, e in prod.staged()] == [mine.txn_id]
        assert [e.txn_id for _, e in prod.staged("env/st")] == [mine.txn_id]
        assert sorted(str(e.txn_id) for _, e in env.staged()) == sorted([str(theirs.txn_id), str(born.txn_id)])
        assert [e.txn_id for _, e in env.staged("env/st")] == [theirs.txn_id]
        assert other.staged() == []
        with pytest.raises(InvalidReadError):
            prod.read("env/st", staged=theirs.txn_id)
        with pytest.raises(InvalidReadError):
            other.read("env/st", staged=theirs.txn_id)
        with pytest.raises(InvalidReadError):
            prod.publish("env/st", theirs.txn_id)
        with pytest.raises(InvalidReadError):
            prod.read("env/st", as_of=theirs.txn_id)
        assert "env/stnew" not in [d.key for d in prod.datasets()]
        assert all(e.metadata.get("trident.environment") is None for e in prod.history("env/st"))
        assert _ids(prod, "env/st") == [1] and _ids(env, "env/st") == [1]
        env.publish("env/st", theirs.txn_id)
        assert _ids(env, "env/st") == [1, 2] and _ids(prod, "env/st") == [1]
        assert [e.txn_id for _, e in prod.staged()] == [mine.txn_id]


@pytest.mark.usefixtures("iceberg_writes")
def test_as_of_an_instant_in_an_environment_is_what_the_environment_saw_then(trident: Trident, settings: TridentSettings) -> None:
    _as_of_story(trident, settings)


def test_as_of_in_an_environment_with_production_appends_inlined(trident: Trident, settings: TridentSettings) -> None:
    _as_of_story(trident, settings)


def _as_of_story(trident: Trident, settings: TridentSettings) -> None:
    """``as_of=T`` in an environment: its own version at T where it had written the dataset by
    then (never a production commit made after its fork), production's as of T before its first
    write, for datasets it never wrote, and again once its head was promoted."""
    import time
    from datetime import UTC, datetime

    def now() -> datetime:
        time.sleep(0.01)
        stamp = datetime.now(UTC)
        time.sleep(0.01)
        return stamp

    prod = trident
    prod.write("env/at", pa.table({"id": [1]}))
    prod.write("env/untouched", pa.table({"id": [100]}))
    before_fork = now()
    with in_env(settings, "pr-at") as env:
        env.write("env/at", pa.table({"id": [2]}), mode="append")
        after_fork = now()
        prod.write("env/at", pa.table({"id": [3]}), mode="append")
        prod.write("env/untouched", pa.table({"id": [101]}), mode="append")
        after_prod = now()
        env.write("env/at", pa.table({"id": [4]}), mode="append")
        after_second = now()

        def at(key: str, when: datetime) -> list[int]:
            return sorted(env.read(key, as_of=when).column("id").to_pylist())

        assert at("env/at", before_fork) == [1]
        assert at("env/at", after_fork) == [1, 2]
        assert at("env/at", after_prod) == [1, 2]  # production's [3] came after the fork
        assert at("env/at", after_second) == [1, 2, 4]
        assert at("env/untouched", after_fork) == [100] and at("env/untouched", after_prod) == [100, 101]
        assert sorted(prod.read("env/at", as_of=after_prod).column("id").to_pylist()) == [1, 3]
        assert prod.environments.promote("pr-at").promoted == {"env/at": "append"}
        after_promote = now()
        assert at("env/at", after_promote) == sorted(_ids(prod, "env/at")) == [1, 2, 3, 4]
        assert at("env/at", after_second) == [1, 2, 4]
        env.write("env/at", pa.table({"id": [5]}), mode="append")  # never promoted: dropped below
        assert at("env/at", now()) == [1, 2, 3, 4, 5]
    prod.environments.drop("pr-at")
    with in_env(settings, "pr-at") as again:  # a new environment of the same name: the old one's writes are not its past
        again.write("env/untouched", pa.table({"id": [102]}), mode="append")
        assert sorted(again.read("env/at", as_of=now()).column("id").to_pylist()) == [1, 2, 3, 4]


def test_maintain_in_an_environment_compacts_its_own_files_on_its_branch_only(
    trident: Trident, settings: TridentSettings
) -> None:
    """``maintain`` in an environment rewrites the environment's own small files into one on its
    branch (the same rows, its head moves there): ``main`` does not move, no file production
    reads is an input, and every ref reads in full afterwards, also after production's maintenance."""
    prod = trident
    for i in range(6):  # production's small files: never the environment's to rewrite
        prod.write("env/cmp", pa.table({"id": [i]}), mode="append")
    prod.flush("env/cmp")
    prod.write("env/cmp_prod_only", pa.table({"id": [1]}))
    main_before = prod.describe("env/cmp").snapshot_id
    table = _tables(prod)["env/cmp"]
    prod_files = {f.file_path for f in prod.engine.sink("iceberg_native").tables.data_files(table)}  # type: ignore[attr-defined]
    with in_env(settings, "pr-cmp") as env:
        for i in range(10, 16):
            env.write("env/cmp", pa.table({"id": [i]}), mode="append")
        expected = _ids(env, "env/cmp")
        done = env.maintain("env/cmp")
        assert done.skipped is None and done.compacted_files == 6 and done.compaction_files_written == 1, done
        table = _tables(prod)["env/cmp"]
        branch = table.metadata.refs[env_branch("pr-cmp")].snapshot_id  # type: ignore[attr-defined]
        files = {f.file_path for f in env.engine.sink("iceberg_native").tables.data_files(table, branch)}  # type: ignore[attr-defined]
        assert prod_files <= files and len(files - prod_files) == 1  # production's files kept as they were, its own in one
        assert env.describe("env/cmp").snapshot_id == branch
        assert _ids(env, "env/cmp") == expected and _ids(prod, "env/cmp") == list(range(6))
        assert prod.describe("env/cmp").snapshot_id == main_before == table.current_snapshot().snapshot_id  # type: ignore[attr-defined]
        assert env.maintain("env/cmp").compacted_files == 0  # nothing of its own left small enough to gain
        assert env.maintain("env/cmp_prod_only").skipped is not None  # production's: not the environment's to maintain
        env.write("env/cmp", pa.table({"id": [99]}), mode="append")  # builds on the compacted version
        assert _ids(env, "env/cmp") == [*expected, 99]
        with in_env(settings, "pr-cmp2") as other:  # production's maintenance compacts every environment's own files
            for i in range(20, 26):
                other.write("env/cmp", pa.table({"id": [i]}), mode="append")
            done = prod.maintain("env/cmp", older_than=timedelta(0), retain_last=1)
            assert done.environment_compacted_files == {"pr-cmp2": 6}, done
            assert _ids(other, "env/cmp") == [*range(6), *range(20, 26)]
            refs = _tables(prod)["env/cmp"].metadata.refs  # type: ignore[attr-defined]
            assert other.describe("env/cmp").snapshot_id == refs[env_branch("pr-cmp2")].snapshot_id
        assert _read_every_ref(prod)[("env/cmp", env_branch("pr-cmp"))] == len(expected) + 1
        assert _ids(env, "env/cmp") == [*expected, 99]
        assert prod.environments.promote("pr-cmp").promoted == {"env/cmp": "fast"}
        assert _ids(prod, "env/cmp") == [*expected, 99]


def test_an_environment_replaces_a_partition_it_already_replaced(trident: Trident, settings: TridentSettings) -> None:
    """The second replace of one partition in an environment replaces the environment's files of
    it (its version's), not production's: those are not on the environment's branch any more."""
    prod = trident
    prod.write(
        "env/parts2",
        pa.concat_tables([day_rows(0, 0), day_rows(1, 1)]),
        partition=day_window(0, 2),
    )
    with in_env(settings, "pr-parts2") as env:
        for v in (10, 20, 30):
            env.write("env/parts2", day_rows(1, v), partition=day_window(1))
            assert sorted(env.read("env/parts2").column("v").to_pylist()) == [0, 0, v, v]
        staged = env.write("env/parts2", day_rows(1, 40), partition=day_window(1), stage=True)
        assert sorted(env.read("env/parts2", staged=staged.txn_id).column("v").to_pylist()) == [0, 0, 40, 40]
    assert sorted(prod.read("env/parts2").column("v").to_pylist()) == [0, 0, 1, 1]
