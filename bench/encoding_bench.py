#!/usr/bin/env python
"""What ``__row_id``'s PLAIN encoding costs against DELTA_BYTE_ARRAY (issue 28 item 2), not in CI.

TPC-H ``lineitem`` is written twice through ``Trident.write`` in the same run: once as this tree
writes it (``__row_id`` PLAIN, the baseline's row: what every reader decodes) and once with the
encoding it had before (DELTA_BYTE_ARRAY: smaller, but polars' native reader, DuckDB 1.4 and Velox
cannot decode it on a 16-byte column), the two writes alternating ``--repeat`` times. Then both
tables are read the same ways, alternating: ``__row_id`` alone and every column through
``Trident.read``, ``__row_id`` through pyarrow's and DuckDB's Parquet readers over the data files,
and through polars' native Parquet reader (which fails on the old files: printed as such).
Reported: bytes on disk (all files, and ``__row_id``'s column chunks), best wall and CPU seconds
of each, the ratio PLAIN / DELTA_BYTE_ARRAY, and the process's peak RSS.

    python bench/encoding_bench.py --sf 1 [--repeat 3]
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
sys.path.insert(0, str(ROOT.parent))

from bench.read_bench import lineitem  # noqa: E402

OLD = "DELTA_BYTE_ARRAY"


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _timed(fn: Callable[[], Any]) -> tuple[float, float]:
    w, c = time.perf_counter(), _cpu()
    fn()
    return time.perf_counter() - w, _cpu() - c


def _alternating(
    ours: Callable[[], Any], base: Callable[[], Any], repeat: int
) -> tuple[tuple[float, float], tuple[float, float]]:
    """Best wall and best CPU of each side, the two run in turn ``repeat`` times."""
    a: list[tuple[float, float]] = []
    b: list[tuple[float, float]] = []
    for _ in range(repeat):
        a.append(_timed(ours))
        b.append(_timed(base))
    return (min(x[0] for x in a), min(x[1] for x in a)), (min(x[0] for x in b), min(x[1] for x in b))


def _line(label: str, ours: tuple[float, float], base: tuple[float, float]) -> str:
    return (
        f"{label:<36}{ours[0]:>8.3f}{ours[1]:>8.3f}{base[0]:>9.3f}{base[1]:>8.3f}"
        f"{ours[0] / base[0]:>8.2f}x{ours[1] / base[1]:>7.2f}x"
    )


def _column_bytes(paths: list[str], column: str) -> int:
    total = 0
    for p in paths:
        md = pq.read_metadata(p)
        j = md.schema.names.index(column)
        total += sum(md.row_group(i).column(j).total_compressed_size for i in range(md.num_row_groups))
    return total


def _encodings(paths: list[str], column: str) -> set[str]:
    md = pq.read_metadata(paths[0])
    return set(md.row_group(0).column(md.schema.names.index(column)).encodings)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sf", default="1")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    import duckdb
    import polars as pl

    from trident_resources import Trident, TridentSettings
    from trident_resources.control.embedded_pg import ensure_embedded_postgres
    from trident_resources.sinks.iceberg import files as data_files

    path = lineitem(args.sf)
    home = ROOT / "data" / "home"
    settings = TridentSettings(
        home=home, pg_dsn=ensure_embedded_postgres(home / "pg"), workspace=f"encbench_{uuid.uuid4().hex[:8]}"
    )
    plain = dict(data_files._IDENTITY_ENCODING)
    old = {**plain, "__row_id": OLD}

    def write(t: Trident, key: str, encodings: dict[str, str]) -> Callable[[], Any]:
        def run() -> None:
            data_files._IDENTITY_ENCODING = encodings
            try:
                f = pq.ParquetFile(path, pre_buffer=False)
                t.write(key, pa.RecordBatchReader.from_batches(f.schema_arrow, f.iter_batches(batch_size=131_072)))
            finally:
                data_files._IDENTITY_ENCODING = plain

        return run

    with Trident(settings) as t:
        rows = pq.read_metadata(path).num_rows
        w_ours, w_base = _alternating(write(t, "b/plain", plain), write(t, "b/delta", old), args.repeat)
        files = {k: [p.removeprefix("file://") for p in t.scan_plan(k).files] for k in ("b/plain", "b/delta")}
        assert _encodings(files["b/plain"], "__row_id") >= {"PLAIN"} and OLD not in _encodings(files["b/plain"], "__row_id")
        assert OLD in _encodings(files["b/delta"], "__row_id")
        size = {k: sum(Path(p).stat().st_size for p in v) for k, v in files.items()}
        ids = {k: _column_bytes(v, "__row_id") for k, v in files.items()}
        print(f"lineitem SF{args.sf}: {rows:,} rows; __row_id PLAIN (ours) vs {OLD} (before), same run, best of {args.repeat}")
        print(f"{'bytes':<36}{'ours':>16}{'before':>17}{'ratio':>9}")
        print(f"{'all data files':<36}{size['b/plain']:>16,}{size['b/delta']:>17,}{size['b/plain'] / size['b/delta']:>8.3f}x")
        print(f"{'__row_id column chunks':<36}{ids['b/plain']:>16,}{ids['b/delta']:>17,}{ids['b/plain'] / ids['b/delta']:>8.2f}x")
        print(f"{'  per row':<36}{ids['b/plain'] / rows:>16.2f}{ids['b/delta'] / rows:>17.2f}")
        print(f"{'seconds':<36}{'wall':>8}{'CPU':>8}{'wall':>9}{'CPU':>8}{'wall x':>9}{'CPU x':>7}")
        print(_line("Trident.write (whole table)", w_ours, w_base))
        r = args.repeat
        print(
            _line(
                "Trident.read __row_id",
                *_alternating(
                    lambda: t.read("b/plain", columns=["__row_id"]), lambda: t.read("b/delta", columns=["__row_id"]), r
                ),
            )
        )
        print(_line("Trident.read all columns", *_alternating(lambda: t.read("b/plain"), lambda: t.read("b/delta"), r)))
        print(
            _line(
                "pyarrow read_table __row_id",
                *_alternating(
                    lambda: pq.read_table(files["b/plain"], columns=["__row_id"]),
                    lambda: pq.read_table(files["b/delta"], columns=["__row_id"]),
                    r,
                ),
            )
        )
        con = duckdb.connect()

        def duck(key: str) -> Callable[[], Any]:
            return lambda: con.execute("SELECT max(__row_id), count(__row_id) FROM read_parquet(?)", [files[key]]).fetchall()

        print(_line("DuckDB read_parquet __row_id", *_alternating(duck("b/plain"), duck("b/delta"), r)))
        polars_ours = min(
            (_timed(lambda: pl.read_parquet(files["b/plain"], columns=["__row_id"])) for _ in range(r)), key=lambda x: x[0]
        )
        try:
            pl.read_parquet(files["b/delta"], columns=["__row_id"])
            polars_old = "reads it"
        except Exception as exc:  # the point of the change: polars cannot decode the old encoding
            polars_old = f"fails: {str(exc)[:90]}"
        print(f"{'polars read_parquet __row_id':<36}{polars_ours[0]:>8.3f}{polars_ours[1]:>8.3f}   before: {polars_old}")
        print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MiB (this process)")
        t.drop("b/plain")
        t.drop("b/delta")


if __name__ == "__main__":
    main()
