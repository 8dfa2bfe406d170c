"""Peak memory of writes and reads must not grow with the row count.

Each measurement runs in a fresh child process (peak RSS is per process) and compares a small
and a 10x larger stream: the difference must stay far below the data's size. A memory bound, not
a timing; the margins are wide so the test only fails on real unbounded growth.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from trident_resources import TridentSettings

REPO = Path(__file__).resolve().parents[3]

CHILD = textwrap.dedent(
    """
    import json, resource, sys
    import numpy as np, pyarrow as pa
    from trident_resources import Trident

    rows, mode = int(sys.argv[1]), sys.argv[2]
    BATCH = 50_000

    def batches(start, count, salt):
        for lo in range(start, start + count, BATCH):
            n = min(BATCH, start + count - lo)
            k = np.arange(lo, lo + n, dtype=np.int64)
            yield pa.record_batch({
                "k": k,
                "a": (k * 7 + salt) % 1000,
                "f": k.astype(np.float64) / 3.0,
                "s": pa.array(np.char.add("name-", (k % 100_000).astype(str)).astype(object)),
            })

    def reader(start, count, salt=0):
        first = next(batches(0, 1, 0))
        return pa.RecordBatchReader.from_batches(first.schema, batches(start, count, salt))

    t = Trident.from_env()
    key = f"mem/{mode}_{rows}"
    t.write(key, reader(0, rows))
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if mode == "stream":
        n = sum(b.num_rows for b in t.stream(key))
        assert n == rows, n
    elif mode == "backfill":  # 1,000 daily partitions, every batch holding rows of all of them
        from datetime import date
        from trident_resources import PartitionFilter

        def dated(salt):
            for b in batches(0, rows, salt):
                days = (b.column("k").to_numpy() * 7919) % 1000
                d = pa.array(np.datetime64("2000-01-01") + days.astype("timedelta64[D]"), pa.date32())
                yield b.append_column("d", d)

        first = next(dated(0))
        part = PartitionFilter.time_window("d", date(2000, 1, 1), date(2002, 9, 27), "day")
        r = t.write(key + "_daily", pa.RecordBatchReader.from_batches(first.schema, dated(0)), partition=part)
        assert r.row_count == rows, r
    elif mode == "upsert":
        r = t.write(key, reader(rows // 2, rows), mode="upsert", keys=["k"])
        assert r.row_count == rows + rows // 2, r
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"base_mib": base / 1024, "peak_mib": peak / 1024}))
    """
)


def _peak(settings: TridentSettings, rows: int, mode: str) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIDENT_")}
    env |= {
        "TRIDENT_HOME": str(settings.home),
        "TRIDENT_PG_DSN": settings.pg_dsn.get_secret_value() if settings.pg_dsn else "",
        "TRIDENT_WORKSPACE": settings.workspace,
        "TRIDENT_DUCKDB_MEMORY_LIMIT": "64MB",  # reached at both sizes: growth below it is what counts
        "TRIDENT_ROW_GROUP_BYTES": str(8 * 1024 * 1024),  # row groups of ~200k rows: both sizes hold several
        "PYTHONPATH": str(REPO),
    }
    out = subprocess.run([sys.executable, "-c", CHILD, str(rows), mode], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


# Unbounded growth would cost at least one copy of the 2.4M-row input (~100 MiB of Arrow data), and
# a keyed write two (input + existing keys, ~250 MiB); the allowances sit well below that and well
# above what bounded runs show (replace/stream ~20 MiB; upsert 40-75 MiB: DuckDB and allocator noise).
ALLOWED_GROWTH_MIB = {"replace": 64, "stream": 64, "upsert": 128, "backfill": 64}


@pytest.mark.parametrize("mode", ["replace", "stream", "upsert", "backfill"])
def test_peak_memory_does_not_grow_with_rows(settings: TridentSettings, mode: str) -> None:
    small, large = 400_000, 2_400_000  # the large stream holds ~100 MiB of Arrow data per copy
    s = _peak(settings, small, mode)
    big = _peak(settings, large, mode)
    growth = big["peak_mib"] - s["peak_mib"]
    print(f"{mode}: peak {s['peak_mib']:.0f} MiB at {small} rows, {big['peak_mib']:.0f} MiB at {large} rows")
    assert growth < ALLOWED_GROWTH_MIB[mode], (
        f"{mode}: peak RSS grew {growth:.0f} MiB from {small} to {large} rows ({s} -> {big})"
    )


def test_keyed_merge_plans_millions_of_keys_under_a_small_memory_limit(tmp_path: Path) -> None:
    """The merge's survivor step (one identity per existing key) must spill, not run out of memory.

    It was an ``arg_min(__row_id, __row_index)`` per key: a string state per group, which DuckDB
    cannot spill, and it failed at this limit (and intermittently at the 64 MB the test above uses).
    """
    import uuid
    from collections.abc import Iterator
    from datetime import UTC, datetime

    import numpy as np
    import pyarrow as pa

    from trident_resources.planning.merge import KeyedMerge

    n, batch = 3_000_000, 100_000

    def existing() -> pa.RecordBatchReader:
        def batches() -> Iterator[pa.RecordBatch]:
            for lo in range(0, n, batch):
                k = np.arange(lo, lo + batch, dtype=np.int64)
                yield pa.record_batch({"k": k, "__row_index": k, "__row_id": pa.array([str(uuid.uuid4()) for _ in range(batch)])})

        first = next(batches())
        return pa.RecordBatchReader.from_batches(first.schema, batches())

    staged = pa.table({"k": np.arange(n - 10, n + 10, dtype=np.int64), "v": np.arange(20, dtype=np.int64)})
    with KeyedMerge(tmp_path / "spill", memory_limit="32MB", threads=2) as merge:
        merge.stage(staged.to_reader(), ("k",))
        merge.load_existing(existing())
        plan = merge.plan("upsert", first_index=n, txn_id=uuid.uuid4(), tau=datetime.now(UTC))
    assert (plan.matched, plan.fresh, plan.removed) == (10, 10, 10)
