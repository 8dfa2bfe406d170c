#!/usr/bin/env python
"""Write-audit-publish benchmark (not in CI): TPC-H ``lineitem`` written two ways in one run.

  (a) a direct ``Trident.write(mode="replace")``;
  (b) a staged write (``stage=True``) followed by ``Trident.publish``: b/a is the cost of the gate;
  (c) the publish step alone (metadata only: it must not grow with the row count).

Each measurement runs in its own process (peak RSS: the child's own ``ru_maxrss``); runs are interleaved and
the median of ``--runs`` is reported. Data: ``bench/write_bench.generate`` (tpchgen-cli).

    python bench/wap_bench.py --sf 0.1,1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.write_bench import DATA, generate, warm  # noqa: E402

TARGET_RATIO = 1.10
TARGET_PUBLISH_S = 0.100

CHILD = r"""
import json, sys, time, uuid
from pathlib import Path
import pyarrow as pa, pyarrow.parquet as pq
from trident_resources import Trident, TridentSettings

path, home, mode = sys.argv[1], sys.argv[2], sys.argv[3]
pf = pq.ParquetFile(path, pre_buffer=False)
reader = pa.RecordBatchReader.from_batches(pf.schema_arrow, pf.iter_batches(batch_size=131_072))
with Trident(TridentSettings(home=Path(home), workspace="wap_" + uuid.uuid4().hex[:8])) as t:
    t0 = time.perf_counter()
    r = t.write("bench/lineitem", reader, stage=(mode == "staged"))
    write_s = time.perf_counter() - t0
    publish_s = 0.0
    if mode == "staged":
        t1 = time.perf_counter()
        t.publish("bench/lineitem", r.txn_id)
        publish_s = time.perf_counter() - t1
    rows = t.describe("bench/lineitem").row_count
import resource
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"write_s": write_s, "publish_s": publish_s, "total_s": write_s + publish_s, "rows": rows, "rss_mib": rss}))
"""


def _run(path: Path, home: Path, mode: str) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", CHILD, str(path), str(home), mode], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"child {mode} failed ({done.returncode}): {done.stderr[-2000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sf", default="0.1", help="scale factor(s), comma separated")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--home", default=str(DATA / "wap-home"))
    args = parser.parse_args()
    from trident_resources.control.embedded_pg import leave_as_found

    home = Path(args.home)
    with leave_as_found(home / "pg"):
        print(
            f"{'sf':>5} {'rows':>10} {'direct s':>9} {'staged+publish s':>17} {'ratio':>6} {'publish s':>10} {'peak RSS MiB (direct/staged)':>30}"
        )
        for sf in (float(x) for x in args.sf.split(",")):
            path = generate(sf)
            warm(path)
            direct, staged = [], []
            for _ in range(args.runs):
                direct.append(_run(path, home, "direct"))
                staged.append(_run(path, home, "staged"))
            d = statistics.median(r["total_s"] for r in direct)
            s = statistics.median(r["total_s"] for r in staged)
            p = statistics.median(r["publish_s"] for r in staged)
            print(
                f"{sf:>5} {int(direct[0]['rows']):>10,} {d:>9.2f} {s:>17.2f} {s / d:>6.2f} {p:>10.3f} "
                f"{max(r['rss_mib'] for r in direct):>14.0f} / {max(r['rss_mib'] for r in staged):<.0f}"
            )
            print(
                f"      targets: ratio <= {TARGET_RATIO} {'met' if s / d <= TARGET_RATIO else 'NOT MET'}; "
                f"publish <= {TARGET_PUBLISH_S * 1000:.0f} ms {'met' if p <= TARGET_PUBLISH_S else 'NOT MET'}"
            )


if __name__ == "__main__":
    main()
