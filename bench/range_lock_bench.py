#!/usr/bin/env python
"""Range-lock benchmark (not in CI): what a partition writer's locks cost, by width of its range.

For a daily-partitioned dataset, in one run against one embedded Postgres:

  - baseline: take and release the whole-dataset writer lock (one advisory lock, what every
    unpartitioned write pays);
  - for ranges of 1, 7, 30, 90, 365 and 2,500 days: take and release the range locks
    (``ControlPlane.partition_lock`` with ``range_locks.claim``): lock count, median time, and
    the ratio to the baseline;
  - contended: while another session holds a 90-day range, a one-day range outside it is taken
    (median time, ratio to the baseline), and one inside it is refused at wait 0.

    python bench/range_lock_bench.py            # --rounds 200 by default
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import date, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

D0 = date(2024, 1, 1)
WIDTHS = (1, 7, 30, 90, 365, 2500)


def _median_us(rounds: int, fn: Callable[[], None]) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--home", default=None, help="TRIDENT_HOME (default: a fresh temporary folder)")
    args = ap.parse_args()

    import pyarrow as pa

    from trident_resources import ConcurrentWriteError, PartitionFilter, Trident, TridentSettings
    from trident_resources.control.range_locks import claim

    home = Path(args.home or tempfile.mkdtemp(prefix="range-lock-bench-"))
    with Trident(TridentSettings(home=home, workspace=f"b_{uuid.uuid4().hex[:8]}")) as t:
        t.write(
            "bench/locks", pa.table({"d": [D0], "v": [1]}), partition=PartitionFilter.time_window("d", D0, D0 + timedelta(days=1))
        )
        ds = t.dataset_record("bench/locks")
        schema = t.schema("bench/locks")
        cp = t.control

        def items(start: int, width: int) -> list[Any]:
            f = PartitionFilter.time_window("d", D0 + timedelta(days=start), D0 + timedelta(days=start + width))
            got = claim(f.bind(schema))
            assert got is not None
            return got

        def whole() -> None:
            with cp.writer_lock(ds, 5):
                pass

        def ranged(its: list[Any]) -> Callable[[], None]:
            def run() -> None:
                with cp.partition_lock(ds, its, 5):
                    pass

            return run

        base = _median_us(args.rounds, whole)
        rows: list[tuple[str, int, float]] = [("whole dataset (baseline)", 1, base)]
        for w in WIDTHS:
            its = items(0, w)
            rows.append((f"range of {w} day(s)", len(its) + 1, _median_us(args.rounds, ranged(its))))
        backfill = items(0, 90)
        with cp.partition_lock(ds, backfill, 5):
            outside = items(100, 1)
            rows.append(("1 day outside a held 90-day range", len(outside) + 1, _median_us(args.rounds, ranged(outside))))
            refused = 0
            for _ in range(10):
                try:
                    with cp.partition_lock(ds, items(45, 1), 0):
                        pass
                except ConcurrentWriteError:
                    refused += 1
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{'what':<36} {'locks':>6} {'median us':>10} {'x baseline':>11}")
    for what, n, us in rows:
        print(f"{what:<36} {n:>6} {us:>10.0f} {us / base:>11.2f}")
    print(f"1 day inside the held 90-day range, wait 0: refused {refused}/10")
    print(f"peak RSS of this process: {rss:.0f} MiB (Postgres not counted)")


if __name__ == "__main__":
    main()
