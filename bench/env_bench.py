#!/usr/bin/env python
"""Environment benchmark (not in CI; docs/environments.md): N datasets seeded in production, then,
in one process (peak RSS: its ``ru_maxrss``), in ``--rounds`` rounds (the best of each is shown:
the machine's load only ever adds):

  (a) N production appends of one row each, one after the other: the raw baseline;
  (b) a new environment over the same N datasets, one row appended to each in it: N first writes,
      each making the dataset's branch (metadata only) with its one-row snapshot. b/a is what
      branching costs over a plain write; the data bytes copied are counted from storage (every
      data file that appeared, minus the ones the environment's own writes named: must be 0);
  (c) ``promote`` of the N changed datasets: ONE transaction group, metadata only (production did
      not move), its control-plane publish and the Iceberg ``main`` refs.

    python bench/env_bench.py --n 100
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

TARGET_ENV_WRITE_S = 5.0
TARGET_PROMOTE_S = 3.0

CHILD = r"""
import json, sys, time, uuid
from pathlib import Path
import pyarrow as pa
from trident_resources import Trident, TridentSettings

n, home, rows, rounds = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
keys = [f"bench/e{i:04d}" for i in range(n)]
ws = "envb_" + uuid.uuid4().hex[:8]
seed = pa.table({"k": pa.array(range(rows), pa.int64()), "v": pa.array([0] * rows, pa.int64())})
one = lambda v: pa.table({"k": pa.array([v], pa.int64()), "v": pa.array([v], pa.int64())})

def data_files(t):
    files = {}
    for ds in t.control.all_datasets(t.workspace):
        table = t.engine.sink("iceberg_native").tables.table(ds)
        root = Path(table.location().removeprefix("file://")) / "data"
        for p in root.rglob("*.parquet"):
            files[str(p)] = p.stat().st_size
    return files

runs = []
with Trident(TridentSettings(home=Path(home), workspace=ws)) as prod:
    for k in keys:
        prod.write(k, seed)
    for r in range(rounds):
        name = f"bench-{r}"
        t0 = time.perf_counter()
        for k in keys:
            prod.write(k, one(-1 - r), mode="append")
        direct_s = time.perf_counter() - t0
        before = data_files(prod)
        with Trident(TridentSettings(home=Path(home), workspace=ws, environment=name)) as env:
            t0 = time.perf_counter()
            txns = [str(env.write(k, one(r), mode="append").txn_id) for k in keys]
            env_s = time.perf_counter() - t0
            assert all(env.describe(k).row_count == rows + 2 * r + 2 for k in keys[:3])
        new = {p: size for p, size in data_files(prod).items() if p not in before}
        own = {p: s for p, s in new.items() if any(t in p for t in txns)}
        # production's own commits during the environment's writes: the flush of its inlined rows
        # at each fork (the fork must be one Iceberg snapshot), production's data, not a copy
        flushes = {str(e.txn_id) for k in keys for e in prod.history(k, limit=3) if e.txn_id is not None}
        flushed = {p: s for p, s in new.items() if p not in own and any(t in p for t in flushes)}
        copied = sum(s for p, s in new.items() if p not in own and p not in flushed)
        t0 = time.perf_counter()
        done = prod.environments.promote(name)
        promote_s = time.perf_counter() - t0
        assert len(done.promoted) == n and set(done.promoted.values()) == {"fast"}
        assert prod.read(keys[0]).num_rows == rows + 2 * (r + 1)
        prod.environments.drop(name)
        runs.append({"direct_s": direct_s, "env_s": env_s, "promote_s": promote_s, "copied_bytes": copied,
                     "env_files": len(own), "env_bytes": sum(own.values()), "flush_files": len(flushed)})
import resource
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
best = {k: min(run[k] for run in runs) for k in runs[0]}
best["flush_files"] = max(run["flush_files"] for run in runs)
best["copied_bytes"] = max(run["copied_bytes"] for run in runs)
ratio = min(run["env_s"] / run["direct_s"] for run in runs)
print(json.dumps(best | {"ratio": ratio, "rss_mib": rss}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", default="100", help="numbers of datasets, comma separated")
    parser.add_argument("--rows", type=int, default=10_000, help="rows per dataset in production")
    parser.add_argument("--rounds", type=int, default=2, help="rounds; the best of each is shown")
    parser.add_argument("--home", default=str(REPO / "bench" / "data" / "env-home"))
    args = parser.parse_args()
    from trident_resources.control.embedded_pg import leave_as_found

    home = Path(args.home)
    home.mkdir(parents=True, exist_ok=True)
    with leave_as_found(home / "pg"):
        print(
            f"{'n':>5} {'direct s':>9} {'env write s':>12} {'ratio':>6} {'promote s':>10} {'copied B':>9} "
            f"{'env files':>10} {'env B':>8} {'prod flush files':>17} {'peak RSS MiB':>13}"
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
            print(
                f"{n:>5} {r['direct_s']:>9.2f} {r['env_s']:>12.2f} {r['ratio']:>6.2f} {r['promote_s']:>10.2f} "
                f"{r['copied_bytes']:>9} {r['env_files']:>10} {r['env_bytes']:>8} {r['flush_files']:>17} {r['rss_mib']:>13.0f}"
            )
            print(
                f"      targets: env over {n} datasets <= {TARGET_ENV_WRITE_S:.0f} s "
                f"{'met' if r['env_s'] <= TARGET_ENV_WRITE_S else 'NOT MET'}, zero data bytes copied "
                f"{'met' if r['copied_bytes'] == 0 else 'NOT MET'}; promote <= {TARGET_PROMOTE_S:.0f} s "
                f"{'met' if r['promote_s'] <= TARGET_PROMOTE_S else 'NOT MET'}"
            )


if __name__ == "__main__":
    main()
