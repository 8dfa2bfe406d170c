"""Consistent reads across datasets: readers in other processes, polling ``t.sql`` and
``t.read_many`` over the five datasets of a group during 200 group commits, never see a mixed
state (each commit writes its number into all five)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

from trident_resources import DatasetNotFoundError, Trident
from trident_resources.core.failpoints import armed

REPO = Path(__file__).resolve().parents[3]
KEYS = [f"cons/d{i}" for i in range(5)]
COMMITS = 200

_READER = """
import json, sys, time
from pathlib import Path
from trident_resources import DatasetNotFoundError, Trident

keys = {keys!r}
stop = Path(sys.argv[1])
t = Trident.from_env()
query = "select " + ", ".join(
    f'(select min(v) from "{{k}}") as lo{{i}}, (select max(v) from "{{k}}") as hi{{i}}' for i, k in enumerate(keys)
)
n, seen, mixed = 0, set(), []
deadline = time.monotonic() + 900
while not stop.exists() and time.monotonic() < deadline:
    if n % 2 == 0:
        values = set(t.sql(query).to_pylist()[0].values())
    else:
        values = {{v for table in t.read_many(keys, ["v"]).values() for v in table.column("v").to_pylist()}}
    n += 1
    seen |= values
    if len(values) != 1:
        mixed.append(sorted(values))
    time.sleep(0.005)  # leave the writer some of the machine
print(json.dumps({{"reads": n, "generations": len(seen), "mixed": mixed[:5], "mixed_count": len(mixed)}}))
"""


def test_readers_in_other_processes_never_see_half_a_group(trident: Trident, tmp_path: Path) -> None:
    t = trident
    for k in KEYS:
        t.write(k, pa.table({"v": [0, 0]}))
    stop = tmp_path / "stop"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIDENT_")}
    env |= {
        "TRIDENT_HOME": str(t.settings.home),
        "TRIDENT_PG_DSN": t.settings.pg_dsn.get_secret_value() if t.settings.pg_dsn else "",
        "TRIDENT_WORKSPACE": t.settings.workspace,
        "PYTHONPATH": str(REPO),
    }
    code = textwrap.dedent(_READER.format(keys=KEYS))
    readers = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(stop)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    try:
        # the refs move table by table on the SQL catalog: a pause after each widens the moment a
        # reader following the tables' main refs would see the group half landed
        with armed("group.ref_moved", "sleep:0.003"):
            for gen in range(1, COMMITS + 1):
                with t.transaction() as tx:
                    for k in KEYS:
                        tx.write(k, pa.table({"v": [gen, gen]}))
    finally:
        stop.touch()
        outs = [r.communicate(timeout=300) for r in readers]
    reports = []
    for (out, err), reader in zip(outs, readers, strict=True):
        assert reader.returncode == 0, err[-3000:]
        reports.append(json.loads(out.strip().splitlines()[-1]))
    for report in reports:
        assert report["mixed_count"] == 0, report
        # the reader really overlapped the commits: it saw many generations, not one
        assert report["reads"] > 20 and report["generations"] > 5, report
    assert [set(t.read(k).column("v").to_pylist()) for k in KEYS] == [{COMMITS}] * len(KEYS)


def test_read_many_names_a_missing_dataset_and_reads_the_published_versions(trident: Trident) -> None:
    t = trident
    t.write("cons/a", pa.table({"v": [1]}))
    t.write("cons/b", pa.table({"v": [2, 3]}))
    tx = t.transaction().open()
    tx.write("cons/a", pa.table({"v": [9]}))
    got = t.read_many(["cons/a", "cons/b"], ["v"])
    assert {k: v.column("v").to_pylist() for k, v in got.items()} == {"cons/a": [1], "cons/b": [2, 3]}
    tx.publish()
    assert t.read_many(["cons/a"])["cons/a"].column("v").to_pylist() == [9]
    with pytest.raises(DatasetNotFoundError, match="cons/none"):
        t.read_many(["cons/a", "cons/none"])
