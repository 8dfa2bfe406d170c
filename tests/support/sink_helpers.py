"""Helpers for the sink/writer tests: a Trident in the same workspace from another settings object,
NaN-aware row comparison, and TPC-H tables from tpchgen-cli."""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

TPCH_TABLES = ("region", "nation", "supplier", "customer", "part", "partsupp", "orders", "lineitem")


def comparable(table: pa.Table, *, drop: tuple[str, ...] = (), order_by: str = "__row_index") -> list[dict[str, Any]]:
    """Rows sorted by ``order_by`` with NaN turned into a marker (NaN != NaN would fail equality)."""
    keep = [c for c in table.column_names if c not in drop]
    rows = table.select(keep).to_pylist()
    for r in rows:
        for k, v in r.items():
            if isinstance(v, float) and math.isnan(v):
                r[k] = "NaN"
    return sorted(rows, key=lambda r: (r[order_by] is None, r[order_by]))


def tpch(tmp: Path, scale: float = 0.01) -> dict[str, pa.Table]:
    exe = shutil.which("tpchgen-cli") or str(Path(sys.executable).with_name("tpchgen-cli"))
    subprocess.run([exe, "parquet", "-s", str(scale), f"--output-dir={tmp}"], check=True, capture_output=True)
    return {name: pq.read_table(tmp / f"{name}.parquet") for name in TPCH_TABLES}
