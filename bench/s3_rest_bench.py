#!/usr/bin/env python
"""S3 + REST benchmark (not in CI; issue 34 item 4): the production shape, write, read and SQL.

The test suite's loopback servers (``tests/support``: moto S3, lakana REST catalog in its cached
venv) are started once; every measured operation is its own subprocess (peak RSS is that
process's own VmHWM: moto lives in the parent, whose size ``ru_maxrss`` would report), modes
interleaved run by run, median of ``--runs``:

  write   (s) ``Trident.write(mode="replace")`` streamed from the file  vs
          (r) raw pyiceberg ``create_table`` + ``append`` of the same columns (identity stamped)
          -- exactly ``write_bench.py --s3``'s children, run from here;
  read    (t) ``Trident.read(key)`` (every column, identity included)  vs
          (p) pyiceberg ``load_table(...).scan().to_arrow()`` of the very same table (a
          ``RestCatalog`` on the same lakana + moto, so the same files and the same columns);
  sql     (q) ``t.sql`` of TPC-H Q1 in a fresh process (first call; then the best of 3 warm calls)  vs
          (d) DuckDB on the same Parquet files read through pyarrow: a ``pyarrow.dataset`` of the
          snapshot's data files on a ``pyarrow.fs.S3FileSystem`` (same endpoint, keys) handed to
          DuckDB as a replacement scan, which pushes Q1's projection and ``l_shipdate`` filter into
          the Arrow scanner. The file list comes from pyiceberg ``plan_files`` before the clock.

    python bench/s3_rest_bench.py --sf 0.1 [--runs 3] [--only write,read,sql] [--profile]

``--profile`` adds one cProfiled (t) read and (q) query (top functions printed; files under
``bench/data/``). Nothing here asserts: it is a report.
"""

from __future__ import annotations

import argparse
import json
import os
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

from bench import write_bench as wb  # noqa: E402  (generate, the S3 write children, the servers)

DATA = wb.DATA
KEY = wb.KEY
MIB = wb.MIB
Q1 = """SELECT l_returnflag, l_linestatus, sum(l_quantity) AS sum_qty, sum(l_extendedprice) AS sum_base_price,
  sum(l_extendedprice * (1 - l_discount)) AS sum_disc_price,
  sum(l_extendedprice * (1 - l_discount) * (1 + l_tax)) AS sum_charge, avg(l_quantity) AS avg_qty,
  avg(l_extendedprice) AS avg_price, avg(l_discount) AS avg_disc, count(*) AS count_order
FROM {src} WHERE l_shipdate <= DATE '1998-09-02' GROUP BY l_returnflag, l_linestatus ORDER BY 1, 2"""
LABELS = {
    "s": "(s) Trident.write replace",
    "r": "(r) pyiceberg create+append",
    "t": "(t) Trident.read, all columns",
    "p": "(p) pyiceberg scan().to_arrow()",
    "q": "(q) t.sql Q1, fresh process",
    "d": "(d) DuckDB Q1 on pyarrow dataset",
}
SECTIONS = {"write": ("s", "r"), "read": ("t", "p"), "sql": ("q", "d")}


def _wb_args(args: argparse.Namespace) -> argparse.Namespace:
    """The namespace ``write_bench``'s settings and children expect."""
    return argparse.Namespace(
        home=args.home, setting=[], batch_rows=65_536, threads=2, pre_buffer=False, timeline=False, profile_out=None
    )


# ---------------------------------------------------------------------------------------------
# children: one measured operation per process (read and SQL; the write children are write_bench's)
# ---------------------------------------------------------------------------------------------
def _prepare(args: argparse.Namespace) -> Any:
    """Everything before the clock (imports, clients); returns the timed operation."""
    from trident_resources.core.keys import iceberg_identifier

    ident = iceberg_identifier(wb.REST_ROOT, args.workspace, KEY)
    if args.child in ("t", "q"):
        from trident_resources import Trident

        t = Trident(wb._settings(_wb_args(args), args.workspace))
        if args.child == "t":
            return lambda: (t.read(KEY).num_rows, {})

        def sql() -> tuple[int, dict[str, Any]]:
            t0 = time.perf_counter()
            out = t.sql(Q1.format(src=f'"{KEY}"'))
            first = time.perf_counter() - t0
            warm = []
            for _ in range(3):
                t0 = time.perf_counter()
                t.sql(Q1.format(src=f'"{KEY}"'))
                warm.append(time.perf_counter() - t0)
            return out.num_rows, {"first_s": first, "warm_s": min(warm)}

        return sql
    catalog = wb._rest_catalog()
    if args.child == "p":
        return lambda: (catalog.load_table(ident).scan().to_arrow().num_rows, {})
    # (d): the same snapshot's files, listed before the clock, read by DuckDB through pyarrow
    import duckdb
    import pyarrow.dataset as pads
    from pyarrow import fs as pafs

    remote = wb._remote()
    assert remote is not None
    files = [task.file.file_path.removeprefix("s3://") for task in catalog.load_table(ident).scan().plan_files()]
    endpoint = remote["endpoint"]
    s3fs = pafs.S3FileSystem(
        access_key=remote["access_key_id"],
        secret_key=remote["secret_access_key"],
        region=remote["region"],
        endpoint_override=endpoint.split("://", 1)[-1],
        scheme=endpoint.split("://", 1)[0],
    )
    con = duckdb.connect(config={"threads": 2})

    def query() -> tuple[int, dict[str, Any]]:
        t0 = time.perf_counter()
        lineitem = pads.dataset(files, format="parquet", filesystem=s3fs)
        con.register("lineitem", lineitem)
        out = con.sql(Q1.format(src="lineitem")).to_arrow_table()
        first = time.perf_counter() - t0
        warm = []
        for _ in range(3):
            t0 = time.perf_counter()
            con.sql(Q1.format(src="lineitem")).to_arrow_table()
            warm.append(time.perf_counter() - t0)
        return out.num_rows, {"first_s": first, "warm_s": min(warm), "data_files": len(files)}

    return query


def child_main(args: argparse.Namespace) -> None:
    op = _prepare(args)
    profiler = None
    if args.profile_out:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    t0 = time.perf_counter()
    rows, extra = op()
    wall = time.perf_counter() - t0
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(args.profile_out)
    wall = extra.pop("first_s", wall)  # (q)/(d): the first query; the warm calls after it are in warm_s
    result = {"mode": args.child, "rows": rows, "wall_s": wall, "extra": extra, "own_peak_rss": wb.own_peak_rss()}
    Path(args.result).write_text(json.dumps(result))


# ---------------------------------------------------------------------------------------------
# parent
# ---------------------------------------------------------------------------------------------
def run_child(mode: str, args: argparse.Namespace, workspace: str, tag: str, profile_out: Path | None = None) -> dict[str, Any]:
    """One (t)/(p)/(q)/(d) run in its own process; its wall, rows and own peak RSS (VmHWM)."""
    logs = DATA / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    result = logs / f"{tag}.json"
    result.unlink(missing_ok=True)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", mode, "--workspace", workspace, "--result", str(result)]
    cmd += ["--home", str(args.home)] + (["--profile-out", str(profile_out)] if profile_out else [])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    with open(logs / f"{tag}.log", "wb") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        _, status, _ = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"run {tag} failed:\n{(logs / f'{tag}.log').read_text(errors='replace')[-4000:]}")
    res = json.loads(result.read_text())
    res["peak_rss"] = res["own_peak_rss"]  # VmHWM: this parent (hosting moto) is large, ru_maxrss would be its
    return res


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sf", type=float, default=0.1, help="TPC-H scale factor of lineitem (default 0.1: 600k rows)")
    p.add_argument("--runs", type=int, default=3, help="runs per mode, interleaved; medians reported")
    p.add_argument("--only", default="write,read,sql", help="sections: write,read,sql")
    p.add_argument("--home", type=Path, default=DATA / "home", help="TRIDENT_HOME for the runs (embedded PG)")
    p.add_argument("--profile", action="store_true", help="plus one cProfiled (t) read and (q) query")
    p.add_argument("--top", type=int, default=25, help="rows of profile output")
    p.add_argument("--child", choices=["t", "p", "q", "d"], help=argparse.SUPPRESS)
    p.add_argument("--workspace", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    p.add_argument("--profile-out", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.home = Path(args.home).resolve()
    if args.child:
        child_main(args)
        return
    from trident_resources.control.embedded_pg import leave_as_found

    with leave_as_found(args.home / "pg"):
        parent_main(args)


def parent_main(args: argparse.Namespace) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from trident_resources import Trident
    from trident_resources.core.keys import iceberg_identifier

    sections = [s for s in SECTIONS if s in args.only.split(",")]
    path = wb.generate(args.sf)
    wargs = _wb_args(args)
    wb.prepare_postgres(wargs)
    raw: dict[str, list[dict[str, Any]]] = {m: [] for s in sections for m in SECTIONS[s]}
    with wb.remote_servers() as remote:
        print(f"S3+REST, lineitem SF{args.sf:g} ({path.relative_to(REPO)}); moto {remote['endpoint']}, lakana {remote['uri']}")
        workspace = f"b{uuid.uuid4().hex[:12]}"
        keep: str | None = None
        if "read" in sections or "sql" in sections:  # the table (t)/(p)/(q)/(d) read: written once, not timed
            with Trident(wb._settings(wargs, workspace)) as t:
                f = pq.ParquetFile(path, pre_buffer=False)
                t.write(KEY, pa.RecordBatchReader.from_batches(f.schema_arrow, f.iter_batches(batch_size=65_536)))
            location = wb._rest_catalog().load_table(iceberg_identifier(wb.REST_ROOT, workspace, KEY)).location()
            keep = location.removeprefix(f"s3://{remote['bucket']}/")  # lakana places the table, not s3_prefix
        for i in range(args.runs):
            for s in sections:
                for m in SECTIONS[s]:
                    wb.warm(path)
                    if s == "write":
                        res = wb.run_child(m, wargs, path, f"s3rest_{m}_{i}")
                        wb._s3_cleanup(remote, keep=keep)  # not the table the reads use
                    else:
                        res = run_child(m, args, workspace, f"s3rest_{m}_{i}")
                    raw[m].append(res)
                    warm_s = res["extra"].get("warm_s")
                    print(
                        f"  run {i + 1} {LABELS[m]:<34} {res['wall_s']:7.3f} s"
                        + (f" (warm {warm_s:.3f} s)" if warm_s is not None else "")
                        + f"  peak RSS {res['peak_rss'] / MIB:5.0f} MiB",
                        flush=True,
                    )
        if args.profile:
            for m in ("t", "q"):
                prof = DATA / f"profile_s3rest_{m}.prof"
                res = run_child(m, args, workspace, f"s3rest_profile_{m}", profile_out=prof)
                print_profile(prof, m, res["wall_s"], args.top)
    text = report(args, path, raw)
    (DATA / "results_s3rest.json").write_text(
        json.dumps({"at": time.strftime("%Y-%m-%d %H:%M"), "raw": raw, "report": text}, indent=1, default=str)
    )
    print("\n" + text, flush=True)


def print_profile(prof: Path, mode: str, wall: float, top: int) -> None:
    import pstats

    print(f"\n--- cProfile of one {LABELS[mode]} run ({wall:.2f} s under the profiler), top {top} by cumulative ---")
    pstats.Stats(str(prof)).strip_dirs().sort_stats("cumulative").print_stats(top)


def report(args: argparse.Namespace, path: Path, raw: dict[str, list[dict[str, Any]]]) -> str:
    rows = next(iter(raw.values()))[0]["rows"] if raw else 0
    lines = [
        f"S3 + REST (lakana on loopback moto), TPC-H lineitem SF{args.sf:g}: {rows:,} rows; median of {args.runs} runs, "
        f"each its own process; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}",
        "",
        f"{'':<36}{'median s':>10}{'runs s':>24}{'warm s':>8}{'peak RSS MiB':>14}{'ratio':>8}{'RSS ratio':>11}",
    ]
    for ours, base in SECTIONS.values():
        if ours not in raw:
            continue
        med = {m: statistics.median(r["wall_s"] for r in raw[m]) for m in (ours, base)}
        rss = {m: max(r["peak_rss"] for r in raw[m]) / MIB for m in (ours, base)}
        for m in (ours, base):
            warm = [r["extra"]["warm_s"] for r in raw[m] if "warm_s" in r["extra"]]
            ratio = f"{med[ours] / med[base]:.2f}" if m == ours else ""
            rss_ratio = f"{rss[ours] / rss[base]:.2f}" if m == ours else ""
            runs_s = " ".join(f"{r['wall_s']:.2f}" for r in raw[m])
            lines.append(
                f"{LABELS[m]:<36}{med[m]:>10.3f}{runs_s:>24}"
                f"{(f'{min(warm):.3f}' if warm else ''):>8}{rss[m]:>14.0f}{ratio:>8}{rss_ratio:>11}"
            )
        if "warm_s" in raw[ours][0]["extra"]:
            w = {m: min(r["extra"]["warm_s"] for r in raw[m]) for m in (ours, base)}
            lines.append(f"{'  warm (best of 3 after the first) ratio':<36}{w[ours] / w[base]:>64.2f}")
    lines.append("  ratio = ours / baseline (median wall); peak RSS = the child's VmHWM, interpreter and imports included.")
    lines.append(
        "  (q)/(d) wall = the first query in a fresh process (catalog look-ups, dataset set-up); warm = best later call."
    )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
