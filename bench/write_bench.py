#!/usr/bin/env python
"""Write benchmark (not in CI): TPC-H ``lineitem`` written three ways, each run in its own process.

  (a) ``Trident.write(mode="replace")`` streaming from the Parquet file (``ParquetFile.iter_batches``
      -> ``RecordBatchReader``), a fresh workspace per run;
  (b) raw pyiceberg: ``pq.read_table`` the file, then ``table.append`` it to a fresh table in a
      pyiceberg ``SqlCatalog`` (kept in the same embedded Postgres) with a local warehouse;
  (c) the legacy store: COPY the same rows as jsonb into a Postgres rows table
      ``(row_index bigint, data jsonb)`` with psycopg 3 ``cursor.copy``; DuckDB renders each batch as
      COPY text lines (``row_index<TAB>json``) so the client side is as fast as it honestly gets.

Wall time is measured in the child around the operation only (imports, Postgres start-up and
catalog/pool construction excluded; table creation included for (a) and (b)). Peak RSS is the
child's whole-life ``ru_maxrss`` from ``os.wait4`` (so it includes the interpreter and imports;
the Postgres server is a separate process and is not counted). Nothing here asserts: it's a report.

    python bench/write_bench.py                 # SF1, 3 runs each of (a), (b), (c)
    python bench/write_bench.py --sf 1,3        # also SF3: checks (a)'s peak RSS does not grow
    python bench/write_bench.py --sf 3 --only a # just (a) at SF3 (compares with a saved SF1 result)
    python bench/write_bench.py --profile       # plus one cProfiled run of (a), top functions printed
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

DATA = REPO / "bench" / "data"
KEY = "bench/lineitem"
RAW_DB = "bench_raw"
MIB = 1024 * 1024
LABELS = {
    "a": "(a) Trident.write replace, streamed",
    "b": "(b) pyiceberg read_table + append",
    "c": "(c) COPY jsonb rows (legacy pg)",
}
# Targets from issue 2.
TARGET_AB = 1.3
TARGET_RSS_MIB = 600
TARGET_CA = 10.0
RSS_GROWTH_TOLERANCE = 0.05  # "no higher at SF3": allow 5% allocator noise


# ---------------------------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------------------------
def _sf_name(sf: float) -> str:
    return f"sf{sf:g}".replace(".", "_")


def generate(sf: float) -> Path:
    """``bench/data/sf<N>/lineitem.parquet``, generated once by tpchgen-cli and cached."""
    out = DATA / _sf_name(sf)
    path = out / "lineitem.parquet"
    if path.exists():
        return path
    exe = shutil.which("tpchgen-cli") or str(Path(sys.executable).parent / "tpchgen-cli")
    tmp = DATA / f"{_sf_name(sf)}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    print(f"generating TPC-H lineitem SF{sf:g} with {exe} ...", flush=True)
    t0 = time.perf_counter()
    subprocess.run([exe, "parquet", "-s", f"{sf:g}", "-T", "lineitem", "-o", str(tmp), "--no-progress", "-q"], check=True)
    out.mkdir(parents=True, exist_ok=True)
    os.replace(tmp / "lineitem.parquet", path)
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"  done in {time.perf_counter() - t0:.1f} s", flush=True)
    return path


def own_peak_rss() -> int:
    """This process's own peak RSS in bytes: VmHWM, which exec resets. ``ru_maxrss`` (and so
    ``os.wait4``'s) keeps the high-water mark of the process before exec, i.e. of the parent
    that forked it: a child of a large parent (the S3 benches' parent hosts moto's in-memory
    objects) would report the parent's size. Falls back to ``ru_maxrss`` off Linux."""
    import resource

    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def warm(path: Path) -> None:
    """Read the whole file once so every run starts from the page cache, not the disk."""
    with open(path, "rb") as f:
        while f.read(16 * MIB):
            pass


# ---------------------------------------------------------------------------------------------
# children: one measured operation per process
# ---------------------------------------------------------------------------------------------
def _raw_dsn(dsn: str) -> str:
    return dsn.rsplit("/", 1)[0] + "/" + RAW_DB


def _settings(args: argparse.Namespace, workspace: str) -> Any:
    from trident_resources import TridentSettings

    knobs: dict[str, Any] = {}
    for item in args.setting or []:
        name, _, value = item.partition("=")
        knobs[name] = value
    remote = _remote()
    if remote is not None:
        knobs = {
            "s3_endpoint": remote["endpoint"],
            "s3_bucket": remote["bucket"],
            "s3_access_key_id": remote["access_key_id"],
            "s3_secret_access_key": remote["secret_access_key"],
            "s3_region": remote["region"],
            "s3_prefix": f"wh-{workspace}",
            "catalog_uri": remote["uri"],
            "catalog_warehouse": remote["warehouse"],
            "catalog_token": remote["token"],
            "catalog_properties": {"prefix": remote["warehouse"]},
            "namespace_root": REST_ROOT,
        } | knobs
    return TridentSettings(home=Path(args.home), workspace=workspace, **knobs)


# ---------------------------------------------------------------------------------------------
# the S3 + REST variant (issue 14 item 7): (s) Trident.write vs (r) raw pyiceberg append of the
# same columns, both through the REST catalog the tests run (lakana) on the loopback moto S3 server
# ---------------------------------------------------------------------------------------------
REMOTE_ENV = "TRIDENT_BENCH_REMOTE"
REST_ROOT = "bronze"  # lakana accepts tables only under bronze/silver/gold


def _remote() -> dict[str, Any] | None:
    """Where the parent's S3 and REST catalog servers are (children inherit it in the environment)."""
    raw = os.environ.get(REMOTE_ENV)
    return json.loads(raw) if raw else None


def _rest_catalog() -> Any:
    from pyiceberg.catalog import load_catalog

    remote = _remote()
    assert remote is not None
    return load_catalog("bench_rest", **remote["properties"])


def _data_file_stats(table: Any) -> dict[str, Any]:
    """Bytes stored, files and row groups of the table's current data files (not timed)."""
    import pyarrow.parquet as pq

    files = list(table.scan().plan_files())
    row_groups = 0
    for task in files:
        with table.io.new_input(task.file.file_path).open() as f:
            row_groups += pq.ParquetFile(f).metadata.num_row_groups
    return {
        "stored_bytes": sum(task.file.file_size_in_bytes for task in files),
        "data_files": len(files),
        "row_groups": row_groups,
    }


def _prepare_s(args: argparse.Namespace) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from trident_resources import Trident
    from trident_resources.core.keys import iceberg_identifier

    t = Trident(_settings(args, args.workspace))

    def op() -> tuple[int, dict[str, Any]]:
        pf = pq.ParquetFile(args.file, pre_buffer=args.pre_buffer)
        reader = pa.RecordBatchReader.from_batches(pf.schema_arrow, pf.iter_batches(batch_size=args.batch_rows))
        r = t.write(KEY, reader, mode="replace", writer="ingest.api")
        return r.rows_written, {"snapshot_id": r.snapshot_id, "row_count": r.row_count}

    def measure() -> dict[str, Any]:
        return _data_file_stats(_rest_catalog().load_table(iceberg_identifier(REST_ROOT, args.workspace, KEY)))

    op.measure = measure  # type: ignore[attr-defined]
    return op


def _prepare_r(args: argparse.Namespace) -> Any:
    import uuid as uuid_mod
    from datetime import UTC, datetime

    import pyarrow as pa
    import pyarrow.parquet as pq

    from trident_resources.core.identity import IDENTITY_FIELDS, stamp
    from trident_resources.sinks.iceberg.credentials import apply_checksum_policy

    # The same wire protocol as Trident's (plain signed PUTs), so only the writers differ.
    apply_checksum_policy(_settings(args, args.workspace))
    catalog = _rest_catalog()
    namespace = (REST_ROOT, "rawbench")
    for depth in range(1, len(namespace) + 1):
        catalog.create_namespace_if_not_exists(namespace[:depth])
    ident = (*namespace, args.workspace)

    def op() -> tuple[int, dict[str, Any]]:
        # The same Arrow table Trident stores: the input plus __row_index, __row_id, __created_at
        # stamped by the engine's own (vectorised) stamp; reading and stamping are timed, as
        # Trident's are.
        data = pq.read_table(args.file)
        schema = pa.schema([*IDENTITY_FIELDS, *data.schema])
        txn, now, seq = uuid_mod.uuid4(), datetime.now(UTC), 0
        batches = []
        for batch in data.to_batches(max_chunksize=args.batch_rows):
            batches.append(stamp(batch, txn, seq, seq, now))
            seq += batch.num_rows
        del data
        table_data = pa.Table.from_batches(batches, schema=schema)
        table = catalog.create_table(ident, schema=table_data.schema)
        table.append(table_data)
        return table_data.num_rows, {"identifier": ".".join(ident)}

    def measure() -> dict[str, Any]:
        return _data_file_stats(catalog.load_table(ident))

    op.measure = measure  # type: ignore[attr-defined]
    return op


def _prepare_a(args: argparse.Namespace) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from trident_resources import Trident

    t = Trident(_settings(args, args.workspace))

    def op() -> tuple[int, dict[str, Any]]:
        # pre_buffer=False: pyarrow's default (True) makes iter_batches keep every row group's
        # compressed bytes until the reader is gone, i.e. the whole file (~240 MiB at SF1).
        pf = pq.ParquetFile(args.file, pre_buffer=args.pre_buffer)
        reader = pa.RecordBatchReader.from_batches(pf.schema_arrow, pf.iter_batches(batch_size=args.batch_rows))
        r = t.write(KEY, reader, mode="replace", writer="ingest.api")
        return r.rows_written, {"snapshot_id": r.snapshot_id, "row_count": r.row_count}

    return op


def _prepare_b(args: argparse.Namespace) -> Any:
    import pyarrow.parquet as pq
    from pyiceberg.catalog.sql import SqlCatalog

    from trident_resources.control.embedded_pg import ensure_embedded_postgres
    from trident_resources.sinks.iceberg.catalog import sqlalchemy_url

    dsn = _raw_dsn(ensure_embedded_postgres(Path(args.home) / "pg"))
    warehouse = Path(args.home) / "raw_warehouse" / args.workspace
    catalog = SqlCatalog("bench_raw", uri=sqlalchemy_url(dsn), warehouse=warehouse.as_uri())
    catalog.create_namespace_if_not_exists("bench")

    def op() -> tuple[int, dict[str, Any]]:
        data = pq.read_table(args.file)
        table = catalog.create_table(("bench", args.workspace), schema=data.schema)
        table.append(data)
        return data.num_rows, {"data_files": len(table.inspect.files())}

    return op


def _copy_text(arr: Any) -> memoryview:
    """The bytes of a string array's values, back to back (zero-copy when already contiguous)."""
    import numpy as np
    import pyarrow as pa

    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
        arr = arr.cast(pa.large_string())
    width = np.int32 if pa.types.is_string(arr.type) else np.int64
    _, offsets, data = arr.buffers()
    off = np.frombuffer(offsets, dtype=width)[arr.offset : arr.offset + len(arr) + 1]
    return memoryview(data)[int(off[0]) : int(off[-1])]


def _prepare_c(args: argparse.Namespace) -> Any:
    import queue
    import threading

    import duckdb
    import psycopg
    import pyarrow.parquet as pq

    from trident_resources.control.embedded_pg import ensure_embedded_postgres

    dsn = ensure_embedded_postgres(Path(args.home) / "pg")
    table = f"bench_rows_{args.workspace}"
    names = pq.ParquetFile(args.file).schema_arrow.names
    fields = ", ".join(f'"{n}" := "{n}"' for n in names)
    # COPY text format: row_index TAB json NEWLINE. to_json never emits raw tabs/newlines; the only
    # character text COPY would misread is the backslash of JSON escapes, so double it.
    query = (
        "SELECT CAST(file_row_number AS VARCHAR) || chr(9) || "
        f"replace(CAST(to_json(struct_pack({fields})) AS VARCHAR), '\\', '\\\\') || chr(10) AS line "
        "FROM read_parquet(?, file_row_number = true)"  # ? = the file path, quoted below
    )
    duck = duckdb.connect()
    duck.execute(f"SET threads = {args.threads}")
    query = query.replace("?", "'" + str(args.file).replace("'", "''") + "'")
    conn = psycopg.connect(dsn)
    conn.execute(f"CREATE TABLE {table} (row_index bigint, data jsonb)")  # the store exists before a write
    conn.commit()

    def produce(out: queue.Queue[Any]) -> None:
        # DuckDB renders the next batches while Postgres parses the previous ones.
        try:
            for batch in duck.sql(query).to_arrow_reader(args.batch_rows):
                out.put((batch.num_rows, _copy_text(batch.column(0)), batch))
            out.put(None)
        except BaseException as exc:  # surface it in the consumer
            out.put(exc)

    def op() -> tuple[int, dict[str, Any]]:
        rows = 0
        sent = 0
        pending: queue.Queue[Any] = queue.Queue(maxsize=4)
        producer = threading.Thread(target=produce, args=(pending,), daemon=True)
        producer.start()
        with conn.cursor() as cur:
            with cur.copy(f"COPY {table} (row_index, data) FROM STDIN") as copy:
                while (item := pending.get()) is not None:
                    if isinstance(item, BaseException):
                        raise item
                    n, buf, _keepalive = item
                    copy.write(buf)
                    rows += n
                    sent += len(buf)
            copied = cur.rowcount  # what Postgres says it stored
        producer.join()
        conn.commit()
        if copied != rows:
            raise RuntimeError(f"COPY stored {copied} rows, sent {rows}")
        return rows, {"copy_mib": round(sent / MIB, 1)}

    return op


def child_main(args: argparse.Namespace) -> None:
    import resource
    import threading

    import psutil
    import pyarrow as pa

    op = {"a": _prepare_a, "b": _prepare_b, "c": _prepare_c, "s": _prepare_s, "r": _prepare_r}[args.child](args)
    proc = psutil.Process()
    baseline = proc.memory_info().rss
    # A sampler to see *when* memory peaks: RSS and Arrow's pool, every 50 ms.
    samples: list[tuple[float, int, int]] = []
    stop = threading.Event()
    pool = pa.default_memory_pool()
    t0 = time.perf_counter()

    def sample() -> None:
        while not stop.wait(0.05):
            samples.append((time.perf_counter() - t0, proc.memory_info().rss, pool.bytes_allocated()))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
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
    stop.set()
    sampler.join()
    measure = getattr(op, "measure", None)
    if measure is not None:  # what the write stored (S3 variant), after the clock stopped
        extra |= measure()
    peak_at = max(samples, key=lambda s: s[1]) if samples else (0.0, 0, 0)
    result = {
        "mode": args.child,
        "rows": rows,
        "wall_s": wall,
        "baseline_rss": baseline,
        "self_maxrss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "own_peak_rss": own_peak_rss(),
        "arrow_pool_peak": pool.max_memory(),
        "arrow_backend": pool.backend_name,
        "rss_peak_at_s": round(peak_at[0], 2),
        "extra": extra,
    }
    if args.timeline:
        result["timeline"] = [(round(t, 2), round(r / MIB), round(p / MIB)) for t, r, p in samples[:: max(1, len(samples) // 60)]]
    Path(args.result).write_text(json.dumps(result))


# ---------------------------------------------------------------------------------------------
# parent: orchestration, cleanup, report
# ---------------------------------------------------------------------------------------------
def _passthrough(args: argparse.Namespace) -> list[str]:
    out = ["--home", str(args.home), "--batch-rows", str(args.batch_rows), "--threads", str(args.threads)]
    if args.pre_buffer:
        out.append("--pre-buffer")
    for item in args.setting or []:
        out += ["--setting", item]
    return out


def run_child(mode: str, args: argparse.Namespace, path: Path, tag: str, profile_out: Path | None = None) -> dict[str, Any]:
    workspace = f"b{uuid.uuid4().hex[:12]}"
    logs = DATA / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    result_file = logs / f"{tag}.json"
    result_file.unlink(missing_ok=True)
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        mode,
        "--file",
        str(path),
        "--workspace",
        workspace,
        "--result",
        str(result_file),
        *_passthrough(args),
    ]
    if profile_out is not None:
        cmd += ["--profile-out", str(profile_out)]
    if args.timeline:
        cmd += ["--timeline"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    load = os.getloadavg()[0]
    with open(logs / f"{tag}.log", "wb") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        _, status, usage = os.wait4(proc.pid, 0)  # the rusage of exactly this child
        proc.returncode = os.waitstatus_to_exitcode(status)
    try:
        if proc.returncode != 0:
            tail = (logs / f"{tag}.log").read_text(errors="replace")[-4000:]
            raise RuntimeError(f"run {tag} failed (exit {proc.returncode}):\n{tail}")
        res = json.loads(result_file.read_text())
        # The child's own high-water mark (VmHWM; ru_maxrss would report a large parent's).
        res["peak_rss"] = res.get("own_peak_rss") or usage.ru_maxrss * 1024  # Linux reports KiB
        res["child_cpu_s"] = usage.ru_utime + usage.ru_stime  # whole child, incl. start-up
        res["load"] = (load + os.getloadavg()[0]) / 2
        return res
    finally:
        cleanup(mode, args, workspace)


def cleanup(mode: str, args: argparse.Namespace, workspace: str) -> None:
    """Drop what a run wrote so the disk does not fill up (not timed)."""
    try:
        if mode == "a":
            from trident_resources import Trident

            with Trident(_settings(args, workspace)) as t:
                if t.exists(KEY):
                    t.drop(KEY)
        elif mode == "b":
            import psycopg

            from trident_resources.control.embedded_pg import ensure_embedded_postgres

            shutil.rmtree(Path(args.home) / "raw_warehouse" / workspace, ignore_errors=True)
            with psycopg.connect(_raw_dsn(ensure_embedded_postgres(Path(args.home) / "pg")), autocommit=True) as c:
                c.execute("DELETE FROM iceberg_tables WHERE catalog_name = 'bench_raw' AND table_name = %s", (workspace,))
        elif mode == "c":
            import psycopg

            from trident_resources.control.embedded_pg import ensure_embedded_postgres

            with psycopg.connect(ensure_embedded_postgres(Path(args.home) / "pg"), autocommit=True) as c:
                c.execute(f"DROP TABLE IF EXISTS bench_rows_{workspace}")
                c.execute("CHECKPOINT")  # flush (c)'s WAL now, not during the next run
    except Exception as exc:  # cleanup must not hide the measurement
        print(f"  (cleanup of {mode}/{workspace} failed: {exc})", file=sys.stderr)
    os.sync()  # write back this run's dirty pages before the next run starts


def prepare_postgres(args: argparse.Namespace) -> None:
    """Start the embedded Postgres once (not timed) and create (b)'s catalog database."""
    import psycopg

    from trident_resources.control.embedded_pg import ensure_embedded_postgres

    dsn = ensure_embedded_postgres(Path(args.home) / "pg")
    with psycopg.connect(dsn, autocommit=True) as c:
        if c.execute("SELECT 1 FROM pg_database WHERE datname = %s", (RAW_DB,)).fetchone() is None:
            c.execute(f"CREATE DATABASE {RAW_DB}")
    # make sure the Trident control-plane migrations ran before any timed write
    from trident_resources import Trident

    with Trident(_settings(args, "bench_warmup")):
        pass


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    walls = [r["wall_s"] for r in runs]
    rows = runs[0]["rows"]
    median = statistics.median(walls)
    return {
        "rows": rows,
        "walls": walls,
        "median_s": median,
        "rows_per_s": rows / median,
        "peak_rss_mib": max(r["peak_rss"] for r in runs) / MIB,
        "baseline_mib": statistics.median(r["baseline_rss"] for r in runs) / MIB,
        "arrow_peak_mib": max(r["arrow_pool_peak"] for r in runs) / MIB,
        "cpu_s": statistics.median(r["child_cpu_s"] for r in runs),
        "load": [round(r["load"], 1) for r in runs],
        "rss_peak_at_s": [r["rss_peak_at_s"] for r in runs],
        "extra": runs[-1]["extra"],
    }


def _mark(ok: bool | None) -> str:
    return "n/a" if ok is None else ("met" if ok else "NOT MET")


def report(
    sf: float, path: Path, results: dict[str, dict[str, Any]], args: argparse.Namespace, sf1_rss: tuple[float, str] | None
) -> str:
    size = path.stat().st_size / MIB
    n = next(iter(results.values()))["rows"] if results else 0
    lines = [
        f"TPC-H lineitem SF{sf:g}: {n:,} rows, {size:.0f} MiB Parquet ({path.relative_to(REPO)}); "
        f"{args.runs} runs each; {os.cpu_count()} CPUs; batch {args.batch_rows:,} rows; pre_buffer={args.pre_buffer}"
        + (f"; settings {' '.join(args.setting)}" if args.setting else ""),
        "",
        f"{'run':<38}{'rows':>11}{'rows/s':>12}{'median s':>10}{'runs s':>22}{'peak RSS MiB':>14}{'base MiB':>10}{'arrow MiB':>11}{'cpu s':>8}{'load':>16}",
    ]
    for mode in "abc":
        if mode not in results:
            continue
        r = results[mode]
        runs_s = " ".join(f"{w:.1f}" for w in r["walls"])
        lines.append(
            f"{LABELS[mode]:<38}{r['rows']:>11,}{r['rows_per_s']:>12,.0f}{r['median_s']:>10.2f}{runs_s:>22}"
            f"{r['peak_rss_mib']:>14.0f}{r['baseline_mib']:>10.0f}{r['arrow_peak_mib']:>11.0f}{r['cpu_s']:>8.1f}"
            f"{' '.join(f'{x:.1f}' for x in r['load']):>16}"
        )
    lines.append("  peak RSS = max over runs of the child's ru_maxrss (whole process, incl. ~base MiB of interpreter+imports);")
    lines.append(
        "  base = RSS just before the timed operation; arrow = Arrow memory pool high-water mark; PG server RSS not counted."
    )
    lines.append("  cpu s = median user+sys CPU of the whole child (incl. ~3 s start-up; not the PG server's); load = 1-min load")
    lines.append("  average during each run (other processes on the machine slow every mode; compare within one report).")
    a, b, c = (results.get(m) for m in "abc")
    ab = a["median_s"] / b["median_s"] if a and b else None
    ca = c["median_s"] / a["median_s"] if a and c else None
    lines.append("")
    lines.append(f"ratio a/b (wall) = {ab:.2f}" if ab is not None else "ratio a/b (wall) = n/a")
    lines.append(f"ratio c/a (wall) = {ca:.1f}" if ca is not None else "ratio c/a (wall) = n/a")
    lines.append("")
    lines.append("targets (issue 2):")
    lines.append(
        f"  a/b <= {TARGET_AB} (wall, medians)               "
        + (f"{ab:.2f}  {_mark(ab <= TARGET_AB)}" if ab is not None else "n/a")
    )
    if a and sf == 1:
        lines.append(
            f"  (a) peak RSS < {TARGET_RSS_MIB} MiB at SF1              "
            f"{a['peak_rss_mib']:.0f} MiB  {_mark(a['peak_rss_mib'] < TARGET_RSS_MIB)}"
        )
    if a and sf != 1:
        if sf1_rss is None:
            lines.append(
                f"  (a) peak RSS at SF{sf:g} no higher than SF1      {a['peak_rss_mib']:.0f} MiB  n/a (no SF1 result; run --sf 1,{sf:g})"
            )
        else:
            base, where = sf1_rss
            growth = a["peak_rss_mib"] / base - 1
            lines.append(
                f"  (a) peak RSS at SF{sf:g} no higher than SF1      {a['peak_rss_mib']:.0f} vs {base:.0f} MiB ({growth:+.1%}, {where}; "
                f"tolerance +{RSS_GROWTH_TOLERANCE:.0%})  {_mark(growth <= RSS_GROWTH_TOLERANCE)}"
            )
    lines.append(
        f"  (a) >= {TARGET_CA:g}x faster than (c)                "
        + (f"{ca:.1f}x  {_mark(ca >= TARGET_CA)}" if ca is not None else "n/a")
    )
    return "\n".join(lines)


def print_profile(prof: Path, top: int) -> None:
    import pstats

    for key in ("tottime", "cumulative"):
        print(f"\n--- cProfile of one (a) run, top {top} by {key} ({prof.relative_to(REPO)}) ---")
        stats = pstats.Stats(str(prof))
        stats.strip_dirs().sort_stats(key).print_stats(top)


def parent_main(args: argparse.Namespace) -> None:
    DATA.mkdir(parents=True, exist_ok=True)
    scale_factors = [float(s) for s in str(args.sf).split(",")]
    modes = [m for m in "abc" if m in args.only]
    prepare_postgres(args)
    saved_sf1 = DATA / "results_sf1.json"
    sf1_rss: tuple[float, str] | None = None
    if saved_sf1.exists():
        saved = json.loads(saved_sf1.read_text())
        if "a" in saved.get("results", {}):
            sf1_rss = (saved["results"]["a"]["peak_rss_mib"], f"SF1 saved {saved['at']}")
    reports = []
    for sf in scale_factors:
        path = generate(sf)
        warm(path)
        print(
            f"\nSF{sf:g}: {args.runs} x {''.join(modes)}, each in a subprocess (logs: {(DATA / 'logs').relative_to(REPO)})",
            flush=True,
        )
        raw: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
        for i in range(args.runs):
            for m in modes:  # interleaved, so drift (page cache, PG checkpoints) hits every mode alike
                warm(path)
                res = run_child(m, args, path, f"{_sf_name(sf)}_{m}_{i}")
                raw[m].append(res)
                print(
                    f"  run {i + 1} {LABELS[m]:<38} {res['wall_s']:7.2f} s  peak RSS {res['peak_rss'] / MIB:6.0f} MiB"
                    f"  (peak at {res['rss_peak_at_s']:.1f} s)",
                    flush=True,
                )
        results = {m: summarise(rs) for m, rs in raw.items()}
        if sf == 1 and "a" in results:
            sf1_rss = (results["a"]["peak_rss_mib"], "this run")
        text = report(sf, path, results, args, sf1_rss)
        reports.append(text)
        out = DATA / f"results_{_sf_name(sf)}.json"
        out.write_text(
            json.dumps(
                {
                    "at": time.strftime("%Y-%m-%d %H:%M"),
                    "args": vars(args) | {"home": str(args.home)},
                    "results": results,
                    "raw": raw,
                    "report": text,
                },
                indent=1,
                default=str,
            )
        )
        print("\n" + text, flush=True)
    if args.profile:
        path = generate(scale_factors[0])
        warm(path)
        prof = DATA / "profile_a.prof"
        res = run_child("a", args, path, "profile_a", profile_out=prof)
        print(f"\nprofiled (a) run: {res['wall_s']:.2f} s under cProfile (overhead inflates Python-heavy frames)")
        print_profile(prof, args.top)
    if len(reports) > 1:
        print("\n==== summary ====\n" + "\n\n".join(reports))


S3_LABELS = {
    "s": "(s) Trident.write replace, S3+REST",
    "r": "(r) pyiceberg append, same columns",
}
TARGET_SR = 1.3  # issue 14: wall within 1.3x raw pyiceberg with the same columns
TARGET_SIZE = 1.1  # and bytes stored within 1.1x


def first_rows(sf: float, rows: int) -> Path:
    """``bench/data/sf<N>_<rows>/lineitem.parquet``: the first ``rows`` rows of SF<N>, cached."""
    import pyarrow.parquet as pq

    out = DATA / f"{_sf_name(sf)}_{rows}" / "lineitem.parquet"
    if out.exists():
        return out
    src = pq.ParquetFile(generate(sf), pre_buffer=False)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    left = rows
    with pq.ParquetWriter(tmp, src.schema_arrow) as w:
        for batch in src.iter_batches(batch_size=min(left, 131_072)):
            w.write_batch(batch.slice(0, left))
            left -= min(left, batch.num_rows)
            if left == 0:
                break
    os.replace(tmp, out)
    return out


def _s3_cleanup(remote: dict[str, Any], keep: str | None = None) -> None:
    """Delete every data file the run stored (moto keeps them in the parent's memory), except
    those under the key prefix ``keep`` (a table another bench still reads)."""
    import boto3

    s3 = boto3.client(
        "s3",
        endpoint_url=remote["endpoint"],
        aws_access_key_id=remote["access_key_id"],
        aws_secret_access_key=remote["secret_access_key"],
        region_name=remote["region"],
    )
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=remote["bucket"]):
        keys = [
            {"Key": o["Key"]}
            for o in page.get("Contents", [])
            if "/data/" in o["Key"] and not (keep and o["Key"].startswith(keep))
        ]
        if keys:
            s3.delete_objects(Bucket=remote["bucket"], Delete={"Objects": keys})


@contextmanager
def remote_servers() -> Iterator[dict[str, Any]]:
    """The test suite's loopback moto S3 server and lakana REST catalog (``tests/support``), for
    the S3 + REST benches: yields where they are (the dict ``_remote`` reads) and exports it in
    ``TRIDENT_BENCH_REMOTE`` so every child process finds them; stops both on exit."""
    import tempfile

    from tests.support.rest_catalog import rest_catalog_server
    from tests.support.s3_server import s3_server

    with s3_server() as s3, tempfile.TemporaryDirectory(prefix="trident-bench-rest-") as work:
        with rest_catalog_server(Path(work), s3=s3) as rest:
            remote = {
                "endpoint": s3.endpoint,
                "bucket": s3.bucket,
                "access_key_id": s3.access_key_id,
                "secret_access_key": s3.secret_access_key,
                "region": s3.region,
                "uri": rest.uri,
                "warehouse": rest.warehouse,
                "token": rest.token,
                "properties": rest.properties,
            }
            os.environ[REMOTE_ENV] = json.dumps(remote)
            try:
                yield remote
            finally:
                os.environ.pop(REMOTE_ENV, None)


def s3_main(args: argparse.Namespace) -> None:
    """Issue 14 item 7: the same write to object storage through a REST catalog, Trident vs raw
    pyiceberg with the same columns; wall, bytes stored, files/row groups, peak RSS."""
    DATA.mkdir(parents=True, exist_ok=True)
    path = first_rows(float(str(args.sf).split(",")[0]), args.rows)
    prepare_postgres(args)
    modes = [m for m in "sr" if m in args.only] or ["s", "r"]
    with remote_servers() as remote:
        print(
            f"\nS3+REST: {args.runs} x {''.join(modes)} on {path.relative_to(REPO)}; "
            f"moto {remote['endpoint']}, lakana {remote['uri']}"
        )
        raw: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
        for i in range(args.runs):
            for m in modes:
                warm(path)
                res = run_child(m, args, path, f"s3_{m}_{i}")
                _s3_cleanup(remote)
                raw[m].append(res)
                x = res["extra"]
                print(
                    f"  run {i + 1} {S3_LABELS[m]:<38} {res['wall_s']:7.2f} s  {x['stored_bytes'] / MIB:6.1f} MiB "
                    f"in {x['data_files']} files / {x['row_groups']} row groups  peak RSS {res['peak_rss'] / MIB:6.0f} MiB",
                    flush=True,
                )
    results = {m: summarise(rs) for m, rs in raw.items()}
    text = s3_report(path, results, raw, args)
    (DATA / "results_s3.json").write_text(
        json.dumps({"at": time.strftime("%Y-%m-%d %H:%M"), "results": results, "raw": raw, "report": text}, indent=1, default=str)
    )
    print("\n" + text, flush=True)


def s3_report(
    path: Path, results: dict[str, dict[str, Any]], raw: dict[str, list[dict[str, Any]]], args: argparse.Namespace
) -> str:
    n = next(iter(results.values()))["rows"]
    lines = [
        f"S3 + REST (lakana on loopback moto): lineitem {n:,} rows ({path.relative_to(REPO)}); {args.runs} runs each; "
        f"{os.cpu_count()} CPUs" + (f"; settings {' '.join(args.setting)}" if args.setting else ""),
        "",
        f"{'run':<38}{'median s':>10}{'runs s':>22}{'stored MiB':>12}{'files':>7}{'row groups':>12}{'peak RSS MiB':>14}{'load':>16}",
    ]
    stored: dict[str, float] = {}
    for m in "sr":
        if m not in results:
            continue
        r = results[m]
        x = raw[m][-1]["extra"]
        stored[m] = statistics.median(run["extra"]["stored_bytes"] for run in raw[m]) / MIB
        lines.append(
            f"{S3_LABELS[m]:<38}{r['median_s']:>10.2f}{' '.join(f'{w:.1f}' for w in r['walls']):>22}{stored[m]:>12.1f}"
            f"{x['data_files']:>7}{x['row_groups']:>12}{r['peak_rss_mib']:>14.0f}{' '.join(f'{v:.1f}' for v in r['load']):>16}"
        )
    s, r_ = results.get("s"), results.get("r")
    lines.append("")
    if s and r_:
        wall = s["median_s"] / r_["median_s"]
        size = stored["s"] / stored["r"]
        lines.append(f"ratio s/r wall   = {wall:.2f}   target <= {TARGET_SR}  {_mark(wall <= TARGET_SR)}")
        lines.append(f"ratio s/r stored = {size:.2f}   target <= {TARGET_SIZE}  {_mark(size <= TARGET_SIZE)}")
    lines.append("  (r) times reading the file, stamping the identity columns with the engine's stamp, create_table + append;")
    lines.append("  (s) times create + stream + stamp + commit + ledger. Both send plain signed PUTs (checksum when_required).")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sf", default="1", help="scale factor(s), comma separated (default 1; SF1 = 6M rows)")
    p.add_argument("--runs", type=int, default=3, help="runs per mode; the median wall time is reported")
    p.add_argument("--only", default="abc", help="which of a, b, c to run (default abc)")
    p.add_argument("--batch-rows", type=int, default=65_536, help="rows per batch read from the file (a, c)")
    p.add_argument(
        "--pre-buffer",
        action="store_true",
        help="(a): open the file with pyarrow's default pre_buffer=True (holds the whole compressed file)",
    )
    p.add_argument("--threads", type=int, default=2, help="DuckDB threads for (c)'s JSON rendering")
    p.add_argument(
        "--setting",
        action="append",
        metavar="NAME=VALUE",
        help="TridentSettings override for (a), e.g. row_group_bytes=33554432 (repeatable)",
    )
    p.add_argument("--home", type=Path, default=DATA / "home", help="TRIDENT_HOME for the runs (embedded PG, warehouse)")
    p.add_argument("--profile", action="store_true", help="after the runs, cProfile one (a) run and print the top functions")
    p.add_argument("--top", type=int, default=30, help="rows of profile output")
    p.add_argument(
        "--s3",
        action="store_true",
        help="the S3 + REST variant: (s) Trident.write vs (r) raw pyiceberg append with the identity columns, "
        "through a REST catalog (lakana) on a loopback moto S3 server; --rows rows of lineitem",
    )
    p.add_argument("--rows", type=int, default=2_000_000, help="rows of lineitem for --s3 (default 2M)")
    p.add_argument("--timeline", action="store_true", help="keep an RSS/Arrow-pool timeline in the result JSON")
    # internal: one measured operation in a child process
    p.add_argument("--child", choices=["a", "b", "c", "s", "r"], help=argparse.SUPPRESS)
    p.add_argument("--file", help=argparse.SUPPRESS)
    p.add_argument("--workspace", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    p.add_argument("--profile-out", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.home = Path(args.home).resolve()
    if args.child:
        child_main(args)
    elif args.s3:
        from trident_resources.control.embedded_pg import leave_as_found

        with leave_as_found(args.home / "pg"):
            s3_main(args)
    else:
        from trident_resources.control.embedded_pg import leave_as_found

        with leave_as_found(args.home / "pg"):  # stop the embedded Postgres if this run started it
            parent_main(args)


if __name__ == "__main__":
    main()
