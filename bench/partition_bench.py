#!/usr/bin/env python
"""Partition benchmark (not in CI): TPC-H ``lineitem`` partitioned daily by ``l_shipdate``.

  (a) a single-run backfill of every partition: ONE ``Trident.write(partition=<whole range>)``;
  (b) the same rows as an unpartitioned replace (the baseline): a/b is the cost of partitioning;
  (c) re-materializing one partition of (a)'s dataset: median time, data files added and deleted;
  (d) reading one partition vs the whole table: data files opened and time.

The engines' own floor, on the same rows, each partitioned write against the same engine's
unpartitioned one (every write in its own process, source read included, as in (a) and (b)):

  duckdb   ``COPY (SELECT * FROM read_parquet(...)) TO dir (FORMAT parquet, PARTITION_BY (l_shipdate),
           COMPRESSION zstd)`` vs the same COPY to one file;
  pyarrow  ``pyarrow.dataset.write_dataset`` partitioned by ``l_shipdate`` (one file per day), zstd,
           of the rows sorted by day in memory first (sort timed), vs the same call streaming the
           file unpartitioned (string views read as large strings: its ``take`` has no view kernel);
  iceberg  raw pyiceberg: ``pq.read_table`` then ``create_table`` + ``append`` into a table with an
           identity partition on ``l_shipdate`` (one partition per day, as the day transform gives:
           pyiceberg's day transform on Arrow needs the optional ``pyiceberg-core`` package, which
           Trident does not depend on) vs an unpartitioned table (SQL catalog in SQLite).

Each engine's partitioned/unpartitioned ratio is what partitioning costs that engine; (a) is also
divided by each engine's partitioned write. ``--engines ''`` skips them; ``--iceberg-sf`` runs the
pyiceberg pair on another scale factor (it holds the whole table in memory).

Each of (a) and (b) runs in its own process (peak RSS = the child's ``ru_maxrss`` from
``os.wait4``, interpreter and imports included; Postgres is a separate process). (c) and (d) run
in one more child against (a)'s dataset; a last child per workspace drops the run's datasets. Data: ``bench/write_bench.generate`` (tpchgen-cli).

    python bench/partition_bench.py --sf 0.1
    python bench/partition_bench.py --sf 1
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
from datetime import date, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.write_bench import DATA, generate, warm  # noqa: E402

KEY = "bench/lineitem_daily"
COLUMN = "l_shipdate"
TARGET_AB = 1.5
TARGET_RSS_MIB = 1024


def _trident(args: argparse.Namespace) -> Any:
    from trident_resources import Trident, TridentSettings

    return Trident(TridentSettings(home=Path(args.home), workspace=args.workspace))


def _one_day(path: str, day: date) -> Any:
    """The rows of one day (view columns made plain first: pyarrow cannot filter string_view)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(path, pre_buffer=False)
    plain = pa.schema([f.with_type(pa.large_string()) if pa.types.is_string_view(f.type) else f for f in pf.schema_arrow])
    parts = []
    for b in pf.iter_batches(batch_size=65_536):
        b = b.cast(plain)
        parts.append(b.filter(pc.equal(b.column(COLUMN), pa.scalar(day))))
    return pa.Table.from_batches(parts, schema=plain)


def _reader(path: str) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(path, pre_buffer=False)
    return pa.RecordBatchReader.from_batches(pf.schema_arrow, pf.iter_batches(batch_size=65_536))


def _span(path: str) -> tuple[date, date]:
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    col = pq.read_table(path, columns=[COLUMN]).column(COLUMN)
    mm = pc.min_max(col).as_py()
    return mm["min"], mm["max"] + timedelta(days=1)


def _cpu() -> float:
    """CPU seconds of this process, all threads: on a shared machine a steadier measure than wall
    time (which grows with everyone else's load)."""
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _scratch(args: argparse.Namespace) -> Path:
    """An empty folder for one raw-engine write (deleted after its files are counted)."""
    import shutil

    out = Path(args.home) / "raw_engines" / f"{args.child}-{args.workspace}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    return out


def _count_files(folder: Path) -> int:
    return sum(1 for p in folder.rglob("*.parquet") if p.is_file())


def _plain_schema(schema: Any) -> Any:
    """``schema`` with string/binary views as large types (pyarrow's filter and take, which
    pyiceberg's partitioned append uses, have no view kernels; Trident's clustering casts the same)."""
    import pyarrow as pa

    def plain(t: Any) -> Any:
        if pa.types.is_string_view(t):
            return pa.large_string()
        if pa.types.is_binary_view(t):
            return pa.large_binary()
        return t

    return pa.schema([f.with_type(plain(f.type)) for f in schema])


def engine_child(args: argparse.Namespace) -> dict[str, Any]:
    """One raw-engine write of the whole file, partitioned by day or not (``<engine>_part`` /
    ``<engine>_one``): wall and CPU seconds around the write, files written."""
    import shutil

    engine, kind = args.child.split("_")
    part = kind == "part"
    out = _scratch(args)
    extra: dict[str, Any] = {}
    if engine == "duckdb":
        import duckdb

        con = duckdb.connect()
        src = str(args.file).replace("'", "''")
        target = str(out) if part else str(out / "one.parquet")
        options = f"FORMAT parquet, PARTITION_BY ({COLUMN}), COMPRESSION zstd" if part else "FORMAT parquet, COMPRESSION zstd"
        t0, c0 = time.perf_counter(), _cpu()
        con.execute(f"COPY (SELECT * FROM read_parquet('{src}')) TO '{target}' ({options})")
        wall, cpu = time.perf_counter() - t0, _cpu() - c0
        con.close()
    elif engine == "pyarrow":
        import pyarrow as pa
        import pyarrow.dataset as pds

        t0, c0 = time.perf_counter(), _cpu()
        source: Any = pds.dataset(str(args.file), format="parquet")
        source = pds.dataset(str(args.file), format="parquet", schema=_plain_schema(source.schema))  # read as large strings
        fmt = pds.ParquetFileFormat()
        kwargs: dict[str, Any] = {"file_options": fmt.make_write_options(compression="zstd")}
        if part:
            # sorted first, in memory: streamed unsorted, every batch holds rows of ~all days and
            # the dataset writer appends a tiny row group to each day's file per batch (at SF1
            # more than 8 minutes, 8 GB RSS, before it was stopped)
            source = source.to_table().sort_by(COLUMN)
            partitioning = pds.partitioning(pa.schema([source.schema.field(COLUMN)]), flavor="hive")
            kwargs |= {"partitioning": partitioning, "max_partitions": 1 << 16}
        pds.write_dataset(source, str(out), format=fmt, existing_data_behavior="overwrite_or_ignore", **kwargs)
        wall, cpu = time.perf_counter() - t0, _cpu() - c0
    elif engine == "iceberg":
        import pyarrow.parquet as pq
        from pyiceberg.catalog.sql import SqlCatalog

        catalog = SqlCatalog("raw", uri=f"sqlite:///{out}/catalog.db", warehouse=(out / "warehouse").as_uri())
        catalog.create_namespace("bench")
        t0, c0 = time.perf_counter(), _cpu()
        data = pq.read_table(args.file)
        data = data.cast(_plain_schema(data.schema))
        table = catalog.create_table(("bench", "lineitem"), schema=data.schema)
        if part:
            with table.update_spec() as spec:
                spec.add_identity(COLUMN)
        table.append(data)
        wall, cpu = time.perf_counter() - t0, _cpu() - c0
        extra["rows"] = data.num_rows
        del data
    else:
        raise SystemExit(f"unknown engine child {args.child!r}")
    files = _count_files(out)
    shutil.rmtree(out, ignore_errors=True)
    return {"wall_s": wall, "cpu_s": cpu, "files": files, **extra}


def child(args: argparse.Namespace) -> dict[str, Any]:
    from trident_resources import PartitionFilter

    if args.child.endswith(("_part", "_one")):
        return engine_child(args)
    if args.child == "drop":  # the run's datasets: ~0.5 GB of files a run would otherwise leave behind
        t = _trident(args)
        t.drop(KEY)
        t.close()
        return {}

    t = _trident(args)
    lo, hi = _span(args.file)
    out: dict[str, Any] = {}
    if args.child == "a":
        t0, c0 = time.perf_counter(), _cpu()
        r = t.write(KEY, _reader(args.file), partition=PartitionFilter.time_window(COLUMN, lo, hi, "day"))
        out |= {"wall_s": time.perf_counter() - t0, "cpu_s": _cpu() - c0}
        out |= {"rows": r.row_count, "partitions": len(t.describe(KEY).partitions)}
        sink = t.driver.sinks["iceberg_native"]
        out["files"] = len(sink.tables.data_files(sink.tables.table(t.dataset_record(KEY))))
    elif args.child == "b":
        t0, c0 = time.perf_counter(), _cpu()
        r = t.write(KEY, _reader(args.file), mode="replace")
        out |= {"wall_s": time.perf_counter() - t0, "cpu_s": _cpu() - c0, "rows": r.row_count}
        sink = t.driver.sinks["iceberg_native"]
        out["files"] = len(sink.tables.data_files(sink.tables.table(t.dataset_record(KEY))))
    else:  # c and d on (a)'s dataset
        day = lo + (hi - lo) // 2
        rows = _one_day(args.file, day)
        part = PartitionFilter.time_window(COLUMN, day, day + timedelta(days=1), "day")
        sink = t.driver.sinks["iceberg_native"]
        times, added, deleted = [], [], []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            r = t.write(KEY, rows, partition=part)
            times.append(time.perf_counter() - t0)
            snap = sink.tables.table(t.dataset_record(KEY)).current_snapshot()
            added.append(int(snap.summary["added-data-files"] if "added-data-files" in snap.summary.additional_properties else 0))
            deleted.append(
                int(snap.summary["deleted-data-files"] if "deleted-data-files" in snap.summary.additional_properties else 0)
            )
        out |= {"c_median_s": statistics.median(times), "c_added": added, "c_deleted": deleted, "c_rows": r.rows_written}
        table = sink.tables.table(t.dataset_record(KEY))
        row_filter = part.bind(t.schema(KEY)).to_row_filter()
        one_files = len(list(table.scan(row_filter=row_filter).plan_files()))
        all_files = len(list(table.scan().plan_files()))
        reads_one, reads_all = [], []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            n_one = t.read(KEY, partition=part).num_rows
            reads_one.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            n_all = sum(b.num_rows for b in t.stream(KEY))
            reads_all.append(time.perf_counter() - t0)
        out |= {
            "d_one_files": one_files,
            "d_all_files": all_files,
            "d_one_s": statistics.median(reads_one),
            "d_all_s": statistics.median(reads_all),
            "d_one_rows": n_one,
            "d_all_rows": n_all,
            "day": day.isoformat(),
        }
    t.close()
    return out


def run(args: argparse.Namespace, mode: str, workspace: str, path: Path) -> dict[str, Any]:
    logs = DATA / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    result = logs / f"partition-{mode}-{workspace}.json"
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        mode,
        "--file",
        str(path),
        "--workspace",
        workspace,
        "--home",
        str(args.home),
        "--result",
        str(result),
        "--repeat",
        str(args.repeat),
    ]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    with open(logs / f"partition-{mode}.log", "wb") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError((logs / f"partition-{mode}.log").read_text(errors="replace")[-4000:])
    res = json.loads(result.read_text())
    res["peak_rss_mib"] = usage.ru_maxrss / 1024
    return res


ENGINES = ("duckdb", "pyarrow", "iceberg")


def engine_lines(args: argparse.Namespace, a: dict[str, Any], path: Path) -> list[str]:
    """The raw engines' partitioned and unpartitioned writes (each in its own process, in turn),
    their own ratios, and (a) against each partitioned write."""
    engines = [e for e in args.engines.split(",") if e]
    unknown = set(engines) - set(ENGINES)
    if unknown:
        raise SystemExit(f"unknown engines {sorted(unknown)}; choose from {ENGINES}")
    if not engines:
        return []
    lines = [
        "the engines' own floor: partitioned by day vs one unpartitioned write of the same rows",
        f"  {'engine':8s} {'sf':>4s} {'part wall':>9s} {'cpu':>6s} {'RSS':>6s} {'files':>6s} | {'one wall':>8s} {'cpu':>6s}"
        f" {'RSS':>6s} {'files':>5s} | {'part/one':>8s} {'cpu':>5s} | {'(a)/part':>8s} {'cpu':>5s}",
    ]
    for engine in engines:
        sf = args.iceberg_sf if engine == "iceberg" and args.iceberg_sf else args.sf
        src = path if sf == args.sf else generate(sf)
        warm(src)
        ws = f"pb{uuid.uuid4().hex[:10]}"
        part = run(args, f"{engine}_part", ws, src)
        one = run(args, f"{engine}_one", ws, src)
        vs_a = (
            f"{a['wall_s'] / part['wall_s']:8.2f} {a['cpu_s'] / part['cpu_s']:5.2f}" if sf == args.sf else f"{'(other sf)':>14s}"
        )
        lines.append(
            f"  {engine:8s} {sf:4g} {part['wall_s']:9.2f} {part['cpu_s']:6.1f} {part['peak_rss_mib']:6.0f} {part['files']:6d} |"
            f" {one['wall_s']:8.2f} {one['cpu_s']:6.1f} {one['peak_rss_mib']:6.0f} {one['files']:5d} |"
            f" {part['wall_s'] / one['wall_s']:8.2f} {part['cpu_s'] / one['cpu_s']:5.2f} | {vs_a}"
        )
    lines.append("  (wall and cpu in s, RSS = the child's peak in MiB; trident's own a/b is the same ratio for (a) vs (b))")
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sf", type=float, default=1.0)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--home", default=str(DATA / "home"))
    p.add_argument("--engines", default=",".join(ENGINES), help="raw-engine baselines to run ('' for none)")
    p.add_argument("--iceberg-sf", type=float, default=None, help="scale factor of the raw pyiceberg pair (default --sf)")
    p.add_argument("--child")
    p.add_argument("--file")
    p.add_argument("--workspace")
    p.add_argument("--result")
    args = p.parse_args()
    if args.child:
        Path(args.result).write_text(json.dumps(child(args), default=str))
        return
    path = generate(args.sf)
    warm(path)
    ws = f"pb{uuid.uuid4().hex[:10]}"
    a = run(args, "a", ws, path)
    ws_b = f"pb{uuid.uuid4().hex[:10]}"
    b = run(args, "b", ws_b, path)
    cd = run(args, "cd", ws, path)
    ratio = a["wall_s"] / b["wall_s"]
    lines = [
        f"TPC-H lineitem SF{args.sf:g}: {a['rows']:,} rows, {a['partitions']} daily partitions on {COLUMN}",
        f"(a) single-run backfill, one snapshot : {a['wall_s']:7.2f} s  cpu {a['cpu_s']:6.1f} s"
        f"  peak RSS {a['peak_rss_mib']:6.0f} MiB  {a['files']} data files",
        f"(b) unpartitioned replace             : {b['wall_s']:7.2f} s  cpu {b['cpu_s']:6.1f} s"
        f"  peak RSS {b['peak_rss_mib']:6.0f} MiB  {b['files']} data files",
        f"    a/b = {ratio:.2f} (target <= {TARGET_AB}) {'OK' if ratio <= TARGET_AB else 'MISSED'};"
        f" cpu a/b = {a['cpu_s'] / b['cpu_s']:.2f};"
        f" peak RSS of (a) {'<' if a['peak_rss_mib'] < TARGET_RSS_MIB else '>='} 1 GiB",
        f"(c) re-materialize one partition ({cd['day']}, {cd['c_rows']} rows): median {cd['c_median_s']:.3f} s over {args.repeat};"
        f" data files added {cd['c_added']} deleted {cd['c_deleted']} per run",
        f"(d) read one partition: {cd['d_one_files']} file(s) opened, {cd['d_one_rows']:,} rows, median {cd['d_one_s']:.3f} s",
        f"    read whole table  : {cd['d_all_files']} file(s) opened, {cd['d_all_rows']:,} rows, median {cd['d_all_s']:.3f} s",
    ]
    lines += engine_lines(args, a, path)
    for workspace in (ws, ws_b):
        run(args, "drop", workspace, path)
    lines.append(f"    (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
