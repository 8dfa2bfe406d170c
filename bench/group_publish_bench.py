#!/usr/bin/env python
"""Transaction-group benchmark (not in CI): N small datasets, seeded once, then rewritten two ways in
one run, in one process per N (peak RSS: that process's ``ru_maxrss``), in ``--rounds`` interleaved
rounds (the best of each is shown: the machine's load only ever adds):

  (a) N direct ``Trident.write(mode="replace")`` calls, one after the other: the baseline;
  (b) the same N writes in ONE ``t.transaction()``: N staged writes, then the group's publish.
      b/a is what a group costs over writing each dataset on its own;
  (c) the group's publish alone, split into the control-plane publish (the moment readers see the
      whole group: locks, one Postgres transaction) and the Iceberg refs that follow (one catalog
      commit per table on the SQL catalog).

    python bench/group_publish_bench.py --n 100,500
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

TARGET_PUBLISH_S = {100: 1.0, 500: 3.0}
TARGET_RATIO = 1.10

CHILD = r"""
import json, sys, time, uuid
from pathlib import Path
import pyarrow as pa
from trident_resources import Trident, TridentSettings

n, home, rows, rounds = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
keys = [f"bench/g{i:04d}" for i in range(n)]
data = lambda gen: pa.table({"k": pa.array(range(rows), pa.int64()), "gen": pa.array([gen] * rows, pa.int64())})
with Trident(TridentSettings(home=Path(home), workspace="grp_" + uuid.uuid4().hex[:8])) as t:
    for k in keys:
        t.write(k, data(0))
    refs = {"s": 0.0}
    real = t.driver.move_refs
    def timed(*a, **kw):
        t1 = time.perf_counter()
        try:
            return real(*a, **kw)
        finally:
            refs["s"] += time.perf_counter() - t1
    t.driver.move_refs = timed
    runs = []
    for r in range(rounds):  # interleaved: the machine's drift hits both alike
        t0 = time.perf_counter()
        for k in keys:
            t.write(k, data(2 * r + 1))
        direct_s = time.perf_counter() - t0
        refs["s"] = 0.0
        t0 = time.perf_counter()
        tx = t.transaction().open()
        for k in keys:
            tx.write(k, data(2 * r + 2))
        t1 = time.perf_counter()
        done = tx.publish()
        publish_s = time.perf_counter() - t1
        group_s = time.perf_counter() - t0
        assert done.refs_moved and len(done.results) == n
        assert {g for tb in t.read_many(keys, ["gen"]).values() for g in tb.column("gen").to_pylist()} == {2 * r + 2}
        runs.append({"direct_s": direct_s, "publish_s": publish_s, "refs_s": refs["s"], "control_s": publish_s - refs["s"],
                     "group_s": group_s})
import resource
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
best = {k: min(run[k] for run in runs) for k in runs[0]}
ratio = min(run["group_s"] / run["direct_s"] for run in runs)
print(json.dumps(best | {"ratio": ratio, "rss_mib": rss}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", default="100,500", help="group sizes, comma separated")
    parser.add_argument("--rows", type=int, default=1000, help="rows per dataset")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved direct/group rounds; the best of each is shown")
    parser.add_argument("--home", default=str(REPO / "bench" / "data" / "group-home"))
    args = parser.parse_args()
    from trident_resources.control.embedded_pg import leave_as_found

    home = Path(args.home)
    home.mkdir(parents=True, exist_ok=True)
    with leave_as_found(home / "pg"):
        print(
            f"{'n':>5} {'direct s':>9} {'group s':>8} {'ratio':>6} {'publish s':>10} {'control plane s':>16} "
            f"{'refs s':>7} {'peak RSS MiB':>13}"
        )
        for n in (int(x) for x in args.n.split(",")):
            env = {**os.environ, "PYTHONPATH": str(REPO)}
            done = subprocess.run(
                [sys.executable, "-c", CHILD, str(n), str(home), str(args.rows), str(args.rounds)],
                env=env,
                capture_output=True,
                text=True,
            )
            if done.returncode != 0:
                raise SystemExit(f"child n={n} failed ({done.returncode}): {done.stderr[-3000:]}")
            r = json.loads(done.stdout.strip().splitlines()[-1])
            control = r["control_s"]
            ratio = r["ratio"]
            print(
                f"{n:>5} {r['direct_s']:>9.2f} {r['group_s']:>8.2f} {ratio:>6.2f} {r['publish_s']:>10.2f} "
                f"{control:>16.2f} {r['refs_s']:>7.2f} {r['rss_mib']:>13.0f}"
            )
            target = TARGET_PUBLISH_S.get(n)
            if target is not None:
                print(
                    f"      targets: publish <= {target:.0f} s: control plane {'met' if control <= target else 'NOT MET'}, "
                    f"with the refs {'met' if r['publish_s'] <= target else 'NOT MET'}; "
                    f"group write <= {TARGET_RATIO}x direct {'met' if ratio <= TARGET_RATIO else 'NOT MET'}"
                )


if __name__ == "__main__":
    main()
