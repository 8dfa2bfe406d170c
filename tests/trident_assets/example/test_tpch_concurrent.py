"""``ensure_tpch`` from several processes at once, as the three raw TPC-H assets of a fresh home run
it when ``dagster dev`` launches them in parallel: every process gets whole files, none sees a file
vanish under it, and the data is generated once."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow.parquet as pq

from trident_assets.example.tpch import TABLES, ensure_tpch

SCALE = "0.01"

# Each child imports, says it is ready, and waits for the go file, so all of them enter
# ensure_tpch together. Then it opens every table over and over until every child has come back
# from ensure_tpch, so each reader overlaps every other's generation, and at the end checks that
# each file is still the one it first opened (same inode): a file another process removed or
# replaced under a reader is caught every time, not only when an open lands in the gap. Before
# the fix each process removed the folder and renamed its own in (FileNotFoundError when an open
# landed in the gap, "Directory not empty" when two renames crossed, a new inode always).
CHILD = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    import pyarrow.parquet as pq
    from trident_assets.example.tpch import TABLES, ensure_tpch

    home, flags, i, n = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[4]), int(sys.argv[5])
    (flags / f"ready-{i}").touch()
    while not (flags / "go").exists():
        time.sleep(0.001)
    folder = ensure_tpch(home, sys.argv[3])
    first = {t: (folder / f"{t}.parquet").stat().st_ino for t in TABLES}
    (flags / f"returned-{i}").touch()
    counts = {}
    while True:
        for t in TABLES:
            counts[t] = pq.read_metadata(folder / f"{t}.parquet").num_rows
        if len(list(flags.glob("returned-*"))) == n:
            break
    replaced = sorted(t for t in TABLES if (folder / f"{t}.parquet").stat().st_ino != first[t])
    print(json.dumps({"folder": str(folder), "counts": counts, "replaced": replaced}))
    """
)
N = 6


def test_parallel_processes_each_get_whole_files(tmp_path: Path) -> None:
    home, flags = tmp_path / "home", tmp_path / "flags"
    flags.mkdir()
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(home), str(flags), SCALE, str(i), str(N)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(N)
    ]
    while len(list(flags.glob("ready-*"))) < N and all(c.poll() is None for c in children):
        time.sleep(0.05)
    (flags / "go").touch()
    outputs = [c.communicate(timeout=300) for c in children]
    for child, (_out, err) in zip(children, outputs, strict=True):
        assert child.returncode == 0, err[-3000:]
    results = [json.loads(out) for out, _err in outputs]
    assert {r["folder"] for r in results} == {str(home / "tpch" / f"sf{SCALE}")}
    assert len({json.dumps(r["counts"], sort_keys=True) for r in results}) == 1
    assert all(n > 0 for n in results[0]["counts"].values())
    assert [r["replaced"] for r in results] == [[]] * N, "a file was replaced under a reader"
    # nothing half-done is left beside the data, and a later call finds it all there
    assert [p.name for p in (home / "tpch").iterdir() if p.is_dir()] == [f"sf{SCALE}"]
    before = {t: (home / "tpch" / f"sf{SCALE}" / f"{t}.parquet").stat().st_mtime_ns for t in TABLES}
    ensure_tpch(home, SCALE)
    assert before == {t: (home / "tpch" / f"sf{SCALE}" / f"{t}.parquet").stat().st_mtime_ns for t in TABLES}


def test_missing_table_is_generated_without_touching_the_others(tmp_path: Path) -> None:
    folder = ensure_tpch(tmp_path, SCALE, ("customer",))
    mtime = (folder / "customer.parquet").stat().st_mtime_ns
    assert ensure_tpch(tmp_path, SCALE) == folder
    assert (folder / "customer.parquet").stat().st_mtime_ns == mtime
    assert all(pq.read_metadata(folder / f"{t}.parquet").num_rows > 0 for t in TABLES)
