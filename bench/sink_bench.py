#!/usr/bin/env python
"""Sink benchmark (not in CI): TPC-H ``lineitem`` written and fully read in each sink, and the
canary that moves the pg copy to iceberg_native, all in ONE run so the ratios compare like with like.

  iceberg write   Trident.write(mode="replace") into iceberg_native, streamed from the Parquet file
  iceberg read    Trident.stream() of every row and column (batches consumed, nothing kept)
  pg write        the same write pinned to the pg sink (jsonb rows via COPY)
  pg read         Trident.stream() of the pg dataset (server-side cursor, jsonb cast back to Arrow)
  canary          Trident.migrate(): copy pg -> iceberg with identity + checksum both copies + flip

Wall time around each operation only (Postgres start-up and imports excluded). Nothing asserts:
it prints a table. The data comes from ``tpchgen-cli`` (generated once under bench/data/sf<N>).

    python bench/sink_bench.py               # SF1
    python bench/sink_bench.py --sf 0.1      # quicker
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent))

from trident_resources import Trident, TridentSettings  # noqa: E402
from trident_resources.control.embedded_pg import ensure_embedded_postgres, leave_as_found  # noqa: E402


def lineitem(sf: str) -> Path:
    folder = ROOT / "data" / f"sf{sf.replace('.', '_')}"
    path = folder / "lineitem.parquet"
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        exe = shutil.which("tpchgen-cli") or str(Path(sys.executable).with_name("tpchgen-cli"))
        subprocess.run([exe, "parquet", "-s", sf, "--tables=lineitem", f"--output-dir={folder}"], check=True)
    return path


def source(path: Path) -> pa.RecordBatchReader:
    f = pq.ParquetFile(path)
    return pa.RecordBatchReader.from_batches(f.schema_arrow, f.iter_batches(batch_size=131_072))


def timed(label: str, fn: object) -> tuple[float, object]:
    print(f"  {label} ...", flush=True)
    t0 = time.perf_counter()
    out = fn()  # type: ignore[operator]
    s = time.perf_counter() - t0
    print(f"  {label}: {s:.1f}s", flush=True)
    return s, out


def drain(reader: pa.RecordBatchReader) -> int:
    return sum(b.num_rows for b in reader)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sf", default="1", help="TPC-H scale factor (default 1)")
    args = ap.parse_args()
    path = lineitem(args.sf)
    rows = pq.ParquetFile(path).metadata.num_rows
    home = ROOT / "data" / "home"
    with leave_as_found(home / "pg"):  # stop the embedded Postgres if this run started it
        run(args.sf, path, rows, home)


def run(sf: str, path: Path, rows: int, home: Path) -> None:
    settings = TridentSettings(
        home=home, pg_dsn=ensure_embedded_postgres(home / "pg"), workspace=f"sinkbench_{uuid.uuid4().hex[:8]}"
    )
    print(f"lineitem SF{sf}: {rows:,} rows, workspace {settings.workspace}")
    with Trident(settings) as t:
        t.router.set_pin("bench/lineitem_ice", "iceberg_native")
        t.router.set_pin("bench/lineitem_pg", "pg")
        res: dict[str, float] = {}
        res["iceberg write"], _ = timed("iceberg write", lambda: t.write("bench/lineitem_ice", source(path)))
        res["iceberg read"], n_ice = timed("iceberg read", lambda: drain(t.stream("bench/lineitem_ice")))
        res["pg write"], _ = timed("pg write", lambda: t.write("bench/lineitem_pg", source(path)))
        res["pg read"], n_pg = timed("pg read", lambda: drain(t.stream("bench/lineitem_pg")))
        res["canary"], report = timed("canary pg -> iceberg", lambda: t.migrate("bench/lineitem_pg"))
        assert n_ice == n_pg == rows and report.parity, (n_ice, n_pg, report)  # type: ignore[attr-defined]
        for key in ("bench/lineitem_ice", "bench/lineitem_pg"):
            t.drop(key)
    print(f"\nSF{sf} lineitem, {rows:,} rows (one run)\n")
    print(f"{'operation':<16}{'seconds':>10}{'k rows/s':>12}")
    for k, s in res.items():
        print(f"{k:<16}{s:>10.1f}{rows / s / 1000:>12.0f}")
    print("\nratios")
    print(f"  pg write / iceberg write   {res['pg write'] / res['iceberg write']:6.1f}x")
    print(f"  pg read  / iceberg read    {res['pg read'] / res['iceberg read']:6.1f}x")
    print(f"  canary   / pg write        {res['canary'] / res['pg write']:6.1f}x")
    print(f"  canary   / iceberg write   {res['canary'] / res['iceberg write']:6.1f}x")
    print(f"  canary: copy {report.copy_seconds:.1f}s + verify {report.verify_seconds:.1f}s, {report.message[:60]}...")  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
