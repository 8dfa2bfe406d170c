"""Benchmark (not in CI): the example pipeline at TPC-H SF1 through Trident vs the same SQL run by
DuckDB directly on the same Parquet files.

Each measurement runs in its own subprocess so that its peak RSS (``ru_maxrss``) is its own. Data
generation is done first and excluded. The DuckDB-direct side does the same graph of work: it
copies the three raw tables (Trident's ingest), runs each node's SQL (the model through the same
Python function over batches) and writes every result to Parquet. The run's environment (the
Dagster instance, a reachable control-plane server) is set up before the clock, as DuckDB's
connection is, and both times are printed. Target (issue 12): Trident at most 1.5x DuckDB-direct
wall time, peak RSS under 1 GiB.

    python bench/pipeline_bench.py [--scale 1] [--home /tmp/trident-bench] [--repeat 3]

A 2-core machine shared with other work drifts by +-15% within minutes, and a single pair says
more about that drift than about Trident: ``--repeat`` pairs run alternately (DuckDB, Trident,
DuckDB, ...) and every pair is printed, with the median pair's ratio as the verdict and the count
of pairs over the line.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _cpu_s() -> float:
    """This process's CPU seconds (all threads): on a machine shared with other work, wall time
    swings 2x between runs of the same code, CPU time much less. The embedded Postgres is another
    process and is not counted."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run_trident(home: str, scale: str) -> dict:
    os.environ.update({"TRIDENT_HOME": home, "TRIDENT_TPCH_SCALE": scale, "TRIDENT_WORKSPACE": f"bench_{int(time.time())}"})
    from dagster import DagsterEventType, DagsterInstance

    from trident_assets.definitions import defs
    from trident_cli.check import QUIET
    from trident_resources import Trident, TridentSettings
    from trident_resources.control.embedded_pg import ensure_embedded_postgres

    job = defs.resolve_job_def("tpch_pipeline")
    # The environment the run executes in, set up before the clock starts as DuckDB's connection
    # is: a deployment's Dagster instance and control-plane server are long-lived, not per run.
    # Both are timed and printed, so nothing is hidden.
    setup = time.perf_counter()
    instance = DagsterInstance.ephemeral()
    instance_s = time.perf_counter() - setup
    setup = time.perf_counter()
    settings = TridentSettings()
    if settings.pg_dsn is None:
        ensure_embedded_postgres(settings.home / "pg", idle_minutes=settings.embedded_pg_idle_minutes, announce=False)
    control_plane_s = time.perf_counter() - setup
    start, cpu = time.perf_counter(), _cpu_s()
    result = job.execute_in_process(run_config=QUIET, raise_on_error=False, instance=instance)
    wall, cpu, peak = time.perf_counter() - start, _cpu_s() - cpu, _peak_rss_mib()
    # the run publishes once at its end (one run, one publish): its materializations are reported
    # into the run's event log then, after the steps' own events the result holds
    published = instance.all_logs(result.run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION)
    rows = {
        m.asset_key.to_user_string(): m.metadata["dagster/row_count"].value
        for m in (e.dagster_event.step_materialization_data.materialization for e in published if e.dagster_event)
    }
    with Trident(settings) as t:  # each run's workspace is new: drop it, or the bench home grows ~0.6 GiB a run
        for key in rows:
            t.drop(key)
    return {
        "ok": result.success,
        "wall_s": wall,
        "cpu_s": cpu,
        "peak_rss_mib": peak,
        "rows": rows,
        "instance_s": instance_s,
        "control_plane_s": control_plane_s,
    }


def run_duckdb(home: str, scale: str) -> dict:
    import duckdb
    import pyarrow.parquet as pq
    import yaml

    from trident_assets.example import defs as example_defs
    from trident_assets.example.pipeline import Q3_SQL, late_risk
    from trident_resources import TridentSettings

    settings = TridentSettings(home=home)
    data = Path(home) / "tpch" / f"sf{scale}"
    out = Path(tempfile.mkdtemp(prefix="duckdb-direct-", dir=home))
    con = duckdb.connect(config={"memory_limit": settings.duckdb_memory_limit, "threads": settings.duckdb_threads})
    rows: dict[str, int] = {}
    start, cpu = time.perf_counter(), _cpu_s()

    def copy(name: str, sql: str) -> None:
        target = out / (name.replace("/", "__") + ".parquet")
        con.execute(f"COPY ({sql}) TO '{target}' (FORMAT parquet, COMPRESSION zstd)")
        rows[name] = pq.ParquetFile(target).metadata.num_rows

    for table in ("customer", "orders", "lineitem"):
        copy(f"tpch/{table}", f"SELECT * FROM '{data}/{table}.parquet'")
        con.execute(f"CREATE VIEW {table} AS SELECT * FROM '{data}/{table}.parquet'")
    con.execute(
        "CREATE VIEW building AS SELECT c_custkey, c_name, c_nationkey, c_acctbal, c_mktsegment FROM customer WHERE c_mktsegment = 'BUILDING'"
    )
    copy("sales/building_customers", "SELECT * FROM building")
    copy("sales/q3_revenue", Q3_SQL.replace("FROM customer", "FROM building customer"))
    copy("sales/urgent_orders", "SELECT * FROM orders WHERE (o_orderpriority IN ('1-URGENT', '2-HIGH')) IS TRUE")
    copy("sales/routine_orders", "SELECT * FROM orders WHERE (o_orderpriority IN ('1-URGENT', '2-HIGH')) IS NOT TRUE")
    revenue_yaml = Path(example_defs.__file__).parent / "lineitem_revenue" / "defs.yaml"  # a YAML-declared node
    revenue_sql = yaml.safe_load(revenue_yaml.read_text())["attributes"]["sql"]
    copy("sales/lineitem_revenue", revenue_sql.replace("FROM source", "FROM lineitem"))
    reader = con.sql("SELECT l_orderkey, l_linenumber, l_shipdate, l_receiptdate, l_discount FROM lineitem").to_arrow_reader(
        65_536
    )
    writer = None
    n = 0
    for batch in reader:
        scored = late_risk(batch)
        writer = writer or pq.ParquetWriter(out / "ml__lineitem_scores.parquet", scored.schema, compression="zstd")
        writer.write_batch(scored)
        n += scored.num_rows
    if writer:
        writer.close()
    rows["ml/lineitem_scores"] = n
    wall, cpu = time.perf_counter() - start, _cpu_s() - cpu
    shutil.rmtree(out, ignore_errors=True)
    return {"ok": True, "wall_s": wall, "cpu_s": cpu, "peak_rss_mib": _peak_rss_mib(), "rows": rows}


def measure(kind: str, home: str, scale: str) -> dict:
    done = subprocess.run(
        [sys.executable, __file__, "--measure", kind, "--home", home, "--scale", scale],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    if done.returncode != 0:
        raise SystemExit(f"{kind} measurement failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def warm(folder: Path) -> None:
    """Read the source files once, untimed, so that every run starts from the page cache: the first
    DuckDB-direct run after other disk work once read them cold (21.7 s wall for 12.6 CPU s against
    5.3 s for 9.1 s in the next pairs), a ratio that said nothing about Trident."""
    for path in sorted(folder.glob("*.parquet")):
        with path.open("rb") as f:
            while f.read(8 << 20):
                pass


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", default="1")
    p.add_argument("--home", default="/tmp/trident-bench")
    p.add_argument(
        "--repeat", type=int, default=3, help="DuckDB/Trident pairs, alternating (the verdict is the median pair's ratio)"
    )
    p.add_argument("--measure", choices=["trident", "duckdb"], help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.repeat < 1:
        p.error("--repeat must be at least 1")
    if args.measure:
        fn = run_trident if args.measure == "trident" else run_duckdb
        print(json.dumps(fn(args.home, args.scale)))
        return

    from trident_assets.example.tpch import ensure_tpch
    from trident_resources.control.embedded_pg import leave_as_found

    t0 = time.perf_counter()
    sources = ensure_tpch(Path(args.home), args.scale)
    print(f"TPC-H sf{args.scale} ready in {args.home} ({time.perf_counter() - t0:.1f}s, excluded)")
    pairs: list[tuple[dict, dict]] = []
    for _ in range(args.repeat):  # alternating: a drift of the machine's speed hits both sides
        warm(sources)
        duck = measure("duckdb", args.home, args.scale)
        warm(sources)
        with leave_as_found(Path(args.home).resolve() / "pg"):  # the measured child starts the embedded Postgres
            trident = measure("trident", args.home, args.scale)
        if not trident["ok"]:
            raise SystemExit("the Trident run failed; run `trident demo` to see why")
        mismatched = {k: (trident["rows"].get(k), v) for k, v in duck["rows"].items() if trident["rows"].get(k) != v}
        if mismatched:
            raise SystemExit(f"row counts differ between Trident and DuckDB-direct: {mismatched}")
        pairs.append((duck, trident))
    print(
        f"\n{'pair':>4}{'DuckDB wall s':>15}{'CPU s':>8}{'RSS MiB':>9}{'Trident wall s':>16}{'CPU s':>8}{'RSS MiB':>9}"
        f"{'ratio wall':>12}{'ratio CPU':>11}{'with setup':>12}"
    )
    for i, (duck, trident) in enumerate(pairs, 1):
        setup = trident["instance_s"] + trident["control_plane_s"]
        print(
            f"{i:>4}{duck['wall_s']:>15.2f}{duck['cpu_s']:>8.2f}{duck['peak_rss_mib']:>9.0f}"
            f"{trident['wall_s']:>16.2f}{trident['cpu_s']:>8.2f}{trident['peak_rss_mib']:>9.0f}"
            f"{trident['wall_s'] / duck['wall_s']:>11.2f}x{trident['cpu_s'] / duck['cpu_s']:>10.2f}x"
            f"{(trident['wall_s'] + setup) / duck['wall_s']:>11.2f}x"
        )
    last = pairs[-1][1]
    print(
        f"set up before the clock (not in the run's wall; 'with setup' counts it): Dagster instance "
        f"{last['instance_s']:.2f} s, control-plane server reached/started {last['control_plane_s']:.2f} s (last pair)"
    )
    walls = [t["wall_s"] / d["wall_s"] for d, t in pairs]
    cpus = [t["cpu_s"] / d["cpu_s"] for d, t in pairs]
    ratio = statistics.median(walls)
    over = sum(r > 1.5 for r in walls)
    peak = max(t["peak_rss_mib"] for _, t in pairs)
    print(
        f"ratio CPU Trident / DuckDB-direct: median {statistics.median(cpus):.2f}x (load-independent-ish; Postgres not counted)"
    )
    print(
        f"\nratio wall Trident / DuckDB-direct: median {ratio:.2f}x of {len(pairs)} pair(s), {min(walls):.2f}-{max(walls):.2f}x, "
        f"{over} over 1.5x (target <= 1.5x, issue 12): {'OK' if ratio <= 1.5 else 'OVER'}"
    )
    print(f"Trident peak RSS {peak:.0f} MiB at most (target < 1024): {'OK' if peak < 1024 else 'OVER'}")
    print(f"row counts identical across {len(pairs[0][0]['rows'])} datasets in every pair")


if __name__ == "__main__":
    main()
