#!/usr/bin/env python
"""What ``__row_id``'s storage costs (issue 12, item 2), wall AND CPU seconds (not in CI).

Writes TPC-H ``lineitem`` once through ``Trident.write`` and then reads it: ``read()`` of every
column, of ``__row_id`` alone and of ``__row_index`` alone, and ``stream()`` of everything, each
against pyiceberg's ``scan().to_arrow()`` of the same table in the same run (its own reader
returns the stored type: 16-byte uuids on a uuid table, strings on a string one). CPU seconds are
the process's (all threads): on a machine shared with other work they swing far less than wall.
Run it from two checkouts (the tree it imports is the one measured: ``PYTHONPATH``), alternating,
to compare one storage with the other.

    PYTHONPATH=$PWD python bench/rowid_bench.py --sf 1 [--repeat 3]
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def measure(fn: Callable[[], Any], repeat: int) -> tuple[float, float, Any]:
    """Best wall and best CPU seconds of ``repeat`` runs (each minimum on its own)."""
    walls, cpus, out = [], [], None
    for _ in range(repeat):
        w, c = time.perf_counter(), _cpu()
        out = fn()
        walls.append(time.perf_counter() - w)
        cpus.append(_cpu() - c)
    return min(walls), min(cpus), out


def line(label: str, ours: tuple[float, float], base: tuple[float, float] | None = None) -> str:
    text = f"{label:<34}{ours[0]:>8.3f}{ours[1]:>8.3f}"
    if base is not None:
        text += f"{base[0]:>9.3f}{base[1]:>8.3f}{ours[0] / base[0]:>8.2f}x{ours[1] / base[1]:>7.2f}x"
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sf", default="1")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    from trident_resources import Trident, TridentSettings
    from trident_resources.control.embedded_pg import ensure_embedded_postgres

    path = ROOT / "data" / f"sf{args.sf.replace('.', '_')}" / "lineitem.parquet"
    if not path.exists():
        sys.exit(f"{path} is missing: run bench/read_bench.py --sf {args.sf} once (it generates it)")
    home = ROOT / "data" / "home"
    settings = TridentSettings(
        home=home, pg_dsn=ensure_embedded_postgres(home / "pg"), workspace=f"rowidbench_{uuid.uuid4().hex[:8]}"
    )
    with Trident(settings) as t:
        f = pq.ParquetFile(path)
        w, c = time.perf_counter(), _cpu()
        t.write("b/li", pa.RecordBatchReader.from_batches(f.schema_arrow, f.iter_batches(batch_size=131_072)))
        write = (time.perf_counter() - w, _cpu() - c)
        table = t.driver.sink("iceberg_native").tables.table(t.dataset_record("b/li"))  # type: ignore[attr-defined]
        stored = table.schema().find_field("__row_id").field_type
        files = t.scan_plan("b/li").files
        size = sum(Path(p).stat().st_size for p in files)
        print(f"lineitem SF{args.sf}: {f.metadata.num_rows:,} rows, __row_id stored as {stored}, {size / 2**20:.0f} MiB")
        print(f"{'what':<34}{'wall':>8}{'CPU':>8}{'pyice wall':>11}{'CPU':>6}{'wall x':>9}{'CPU x':>8}")
        print(line("write (Trident.write)", write))
        r = args.repeat
        base_all = measure(lambda: table.scan().to_arrow(), r)
        ours_all = measure(lambda: t.read("b/li"), r)
        print(line("read() all columns", ours_all[:2], base_all[:2]))
        base_id = measure(lambda: table.scan(selected_fields=("__row_id",)).to_arrow(), r)
        ours_id = measure(lambda: t.read("b/li", columns=["__row_id"]), r)
        print(line("read() __row_id only", ours_id[:2], base_id[:2]))
        assert ours_id[2].schema.field("__row_id").type == pa.large_string()
        ours_idx = measure(lambda: t.read("b/li", columns=["__row_index"]), r)
        print(line("read() __row_index only", ours_idx[:2]))
        ours_stream = measure(lambda: sum(b.num_rows for b in t.stream("b/li")), r)
        print(line("stream() all columns", ours_stream[:2], base_all[:2]))
        t.drop("b/li")


if __name__ == "__main__":
    main()
