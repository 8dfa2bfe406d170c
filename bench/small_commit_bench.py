#!/usr/bin/env python
"""Small-commit benchmark (not in CI): 10-row appends, one commit each, measured in ONE run against
two baselines, each scenario in its own process (peak RSS is that process's ``ru_maxrss``).

  floor     raw Postgres: INSERT of the same 10 rows + COMMIT, psycopg 3, on the same server
  pyiceberg raw pyiceberg ``table.append`` of the 10 rows (SQL catalog in the same Postgres)
  iceberg   ``Trident.write(mode="append")`` with inlining off: one Iceberg snapshot per write
  inline    the same with ``TRIDENT_INLINE_MAX_ROWS=1000``: committed into the control plane
  inline8   8 processes, each appending to its OWN dataset (inlined), at the same time
  pg        the pg sink's 10-row appends (rows in Postgres, jsonb)

and two reads/flushes:

  read      ``Trident.read`` of N Iceberg rows plus a 10,000-row inlined tail, vs the same rows flushed
  flush     ``Trident.flush`` of 100,000 inlined rows (100 inlined commits of 1,000 rows)

Ratios are printed against the floor (commits/s) and against the flushed read. Nothing asserts:
it is a report. The machine this runs on may be shared: say so beside any number you quote.

    python bench/small_commit_bench.py                       # defaults: 1,000 inlined commits, 1M-row read
    python bench/small_commit_bench.py --commits 2000 --read-rows 6000000
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

BATCH = 10


def _batch(start: int, n: int = BATCH) -> Any:
    import pyarrow as pa

    return pa.table(
        {"id": pa.array(range(start, start + n), pa.int64()), "v": pa.array([f"row {i}" for i in range(start, start + n)])}
    )


def _settings(home: Path, workspace: str, **knobs: Any) -> Any:
    from trident_resources import TridentSettings

    return TridentSettings(home=home, workspace=workspace, **knobs)


def _latencies(op: Any, n: int) -> list[float]:
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        op(i)
        out.append(time.perf_counter() - t0)
    return out


def _summary(lat: list[float], wall: float) -> dict[str, Any]:
    q = statistics.quantiles(lat, n=100) if len(lat) > 1 else [lat[0]] * 99
    return {"commits": len(lat), "wall_s": wall, "per_s": len(lat) / wall, "p50_ms": q[49] * 1e3, "p99_ms": q[98] * 1e3}


def _timed(op: Any, n: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    lat = _latencies(op, n)
    return _summary(lat, time.perf_counter() - t0)


# -- scenarios (each runs in a child process) ----------------------------------------------------
def run_floor(home: Path, n: int) -> dict[str, Any]:
    import psycopg

    from trident_resources.control.embedded_pg import ensure_embedded_postgres

    dsn = ensure_embedded_postgres(home / "pg")
    table = f"bench_floor_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn) as conn:
        conn.execute(f"CREATE TABLE {table} (id bigint, v text)")
        conn.commit()
        sql = f"INSERT INTO {table} (id, v) VALUES " + ", ".join(["(%s, %s)"] * BATCH)

        def op(i: int) -> None:
            params: list[Any] = []
            for k in range(i * BATCH, (i + 1) * BATCH):
                params += [k, f"row {k}"]
            conn.execute(sql, params)
            conn.commit()

        out = _timed(op, n)
        conn.execute(f"DROP TABLE {table}")
        conn.commit()
    return out


def run_pyiceberg(home: Path, n: int) -> dict[str, Any]:
    from pyiceberg.catalog.sql import SqlCatalog

    from trident_resources.control.embedded_pg import ensure_embedded_postgres
    from trident_resources.sinks.iceberg.catalog import sqlalchemy_url

    dsn = ensure_embedded_postgres(home / "pg")
    warehouse = home / "raw_warehouse"
    warehouse.mkdir(parents=True, exist_ok=True)
    catalog = SqlCatalog("bench_raw", uri=sqlalchemy_url(dsn), warehouse=warehouse.as_uri())
    catalog.create_namespace_if_not_exists("bench")
    table = catalog.create_table(("bench", f"t{uuid.uuid4().hex[:8]}"), schema=_batch(0).schema)
    return _timed(lambda i: table.append(_batch(i * BATCH)), n)


def run_trident(home: Path, n: int, *, inline: int, pinned: str | None = None) -> dict[str, Any]:
    from trident_resources import Trident

    with Trident(_settings(home, f"b{uuid.uuid4().hex[:10]}", inline_max_rows=inline, inline_flush_rows=10**9)) as t:
        key = "bench/small"
        if pinned:
            t.router.set_pin(key, pinned)
        t.write(key, _batch(-BATCH), mode="replace")
        out = _timed(lambda i: t.write(key, _batch(i * BATCH), mode="append"), n)
        out["rows"] = t.describe(key, storage=False).row_count
    return out


def run_read(home: Path, rows: int, tail: int) -> dict[str, Any]:
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from trident_resources import Trident

    with Trident(_settings(home, f"b{uuid.uuid4().hex[:10]}", inline_max_rows=1000, inline_flush_rows=10**9)) as t:
        # two datasets of the same rows, one with its tail inlined and one flushed, read in turns:
        # reading one before the other would time the process's warm-up (allocator, page cache)
        # against the tail
        ids = pa.array(np.arange(rows, dtype=np.int64))
        big = pa.table({"id": ids, "v": pc.binary_join_element_wise("row ", pc.cast(pc.remainder(ids, 1000), pa.string()), "")})
        for key in ("bench/read_tail", "bench/read_flushed"):
            t.write(key, big, mode="replace")
            for start in range(rows, rows + tail, 1000):
                t.write(key, _batch(start, 1000), mode="append")
        t.flush("bench/read_flushed")
        assert t.describe("bench/read_tail", storage=False).inlined_rows == tail
        assert t.describe("bench/read_flushed", storage=False).inlined_rows == 0
        times: dict[str, list[float]] = {"bench/read_tail": [], "bench/read_flushed": []}
        for _ in range(5):
            for key, seen in times.items():
                t0 = time.perf_counter()
                got = t.read(key)
                seen.append(time.perf_counter() - t0)
                assert got.num_rows == rows + tail
        with_tail, flushed = min(times["bench/read_tail"]), min(times["bench/read_flushed"])
    return {"rows": rows, "tail": tail, "with_tail_s": with_tail, "flushed_s": flushed, "ratio": with_tail / flushed}


def run_flush(home: Path, rows: int) -> dict[str, Any]:
    from trident_resources import Trident

    with Trident(_settings(home, f"b{uuid.uuid4().hex[:10]}", inline_max_rows=1000, inline_flush_rows=10**9)) as t:
        key = "bench/flush"
        t.write(key, _batch(-BATCH), mode="replace")
        for start in range(0, rows, 1000):
            t.write(key, _batch(start, 1000), mode="append")
        t0 = time.perf_counter()
        entry = t.flush(key)
        wall = time.perf_counter() - t0
        assert entry is not None and t.describe(key, storage=False).inlined_rows == 0
    return {"rows": rows, "flush_s": wall}


def child(args: argparse.Namespace) -> None:
    home = Path(args.home)
    scenario = args.child
    if scenario == "floor":
        out = run_floor(home, args.commits)
    elif scenario == "pyiceberg":
        out = run_pyiceberg(home, args.iceberg_commits)
    elif scenario == "iceberg":
        out = run_trident(home, args.iceberg_commits, inline=0)
    elif scenario == "inline":
        out = run_trident(home, args.commits, inline=1000)
    elif scenario == "pg":
        out = run_trident(home, args.pg_commits, inline=1000, pinned="pg")
    elif scenario == "read":
        out = run_read(home, args.read_rows, 10_000)
    elif scenario == "flush":
        out = run_flush(home, 100_000)
    else:
        raise SystemExit(f"unknown scenario {scenario}")
    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(out))


def _spawn(args: argparse.Namespace, scenario: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, __file__, "--child", scenario, "--home", args.home, "--commits", str(args.commits)]
    cmd += [
        "--iceberg-commits",
        str(args.iceberg_commits),
        "--pg-commits",
        str(args.pg_commits),
        "--read-rows",
        str(args.read_rows),
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIDENT_")}
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)


def _result(p: subprocess.Popen[str], scenario: str) -> dict[str, Any]:
    out, _ = p.communicate()
    if p.returncode != 0:
        raise SystemExit(f"scenario {scenario} failed (exit {p.returncode})")
    return dict(json.loads(out.strip().splitlines()[-1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--home", default="/tmp/trident-small-commit-bench")
    ap.add_argument("--commits", type=int, default=1000, help="commits of the floor, inline and inline8 (each writer)")
    ap.add_argument("--iceberg-commits", type=int, default=100, help="commits of the Iceberg paths (slow)")
    ap.add_argument("--pg-commits", type=int, default=300)
    ap.add_argument("--read-rows", type=int, default=1_000_000)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    Path(args.home).mkdir(parents=True, exist_ok=True)
    from trident_resources.control.embedded_pg import ensure_embedded_postgres

    ensure_embedded_postgres(Path(args.home) / "pg")  # started once, before any timing
    results: dict[str, dict[str, Any]] = {}
    for scenario in ("floor", "inline", "iceberg", "pyiceberg", "pg"):
        results[scenario] = _result(_spawn(args, scenario), scenario)
    t0 = time.perf_counter()
    eight = [_spawn(args, "inline") for _ in range(8)]
    parts = [_result(p, "inline8") for p in eight]
    wall = time.perf_counter() - t0
    # each writer's own commits/s summed (start-up excluded), and the whole span's (start-up included)
    results["inline8"] = {
        "commits": sum(p["commits"] for p in parts),
        "per_s": sum(p["per_s"] for p in parts),
        "p50_ms": statistics.median(p["p50_ms"] for p in parts),
        "p99_ms": max(p["p99_ms"] for p in parts),
        "span_s": wall,
        "peak_rss_mib": max(p["peak_rss_mib"] for p in parts),
    }
    results["read"] = _result(_spawn(args, "read"), "read")
    results["flush"] = _result(_spawn(args, "flush"), "flush")

    floor = results["floor"]["per_s"]
    print(
        f"\n10-row appends, one commit each (cores: {os.cpu_count()}; the machine may be shared: load {os.getloadavg()[0]:.1f})"
    )
    print(f"{'scenario':<12}{'commits':>9}{'commits/s':>12}{'p50 ms':>9}{'p99 ms':>9}{'x floor':>9}{'peak RSS MiB':>14}")
    for name in ("floor", "inline", "inline8", "pg", "iceberg", "pyiceberg"):
        r = results[name]
        print(
            f"{name:<12}{r['commits']:>9}{r['per_s']:>12.0f}{r['p50_ms']:>9.2f}{r['p99_ms']:>9.2f}"
            f"{r['per_s'] / floor:>9.2f}{r['peak_rss_mib']:>14.0f}"
        )
    r = results["read"]
    print(
        f"\nread of {r['rows']:,} Iceberg rows + {r['tail']:,} inlined: {r['with_tail_s']:.3f} s; flushed: "
        f"{r['flushed_s']:.3f} s; ratio {r['ratio']:.2f}x (peak RSS {r['peak_rss_mib']:.0f} MiB)"
    )
    r = results["flush"]
    print(f"flush of {r['rows']:,} inlined rows into one snapshot: {r['flush_s']:.2f} s (peak RSS {r['peak_rss_mib']:.0f} MiB)")
    print(f"inline vs the Iceberg path: {results['inline']['per_s'] / results['iceberg']['per_s']:.1f}x commits/s")


if __name__ == "__main__":
    main()
