"""Small assertions shared by the core tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
from pydantic import SecretStr
from pyiceberg.table import Table

from trident_resources import PartitionFilter, Trident, TridentSettings

ROOT = Path(__file__).resolve().parents[2]


def rows_by(t: Trident, key: str, col: str) -> dict[Any, dict[str, Any]]:
    """The dataset's rows keyed by one column, for identity comparisons."""
    return {r[col]: r for r in t.read(key).to_pylist()}


def user_rows(t: Trident, key: str, order_by: str) -> list[dict[str, Any]]:
    """Rows without the identity columns, sorted: what the producer sees of its data."""
    table = t.read(key)
    table = table.select([c for c in table.column_names if not c.startswith("__")])
    return sorted(table.to_pylist(), key=lambda r: r[order_by])


def iceberg_table(t: Trident, key: str) -> Table:
    """The Iceberg table of dataset ``key`` (of the ``iceberg_native`` sink), as the sink loads it."""
    from trident_resources.sinks.iceberg.sink import IcebergSink

    sink = t.driver.sink("iceberg_native")
    assert isinstance(sink, IcebergSink)
    return sink.tables.existing_table(t.dataset_record(key))


def table(**cols: list[Any]) -> pa.Table:
    return pa.table(cols)


def counted_table_loads(t: Trident, monkeypatch: Any) -> list[Any]:
    """The identifiers the Iceberg catalog loads a table for from now on (the real loads still
    happen): a test of a cache asserts the list stays empty."""
    catalog = t.driver.sinks["iceberg_native"].catalog  # type: ignore[attr-defined]
    loads: list[Any] = []
    real = catalog.load_table

    def counting(identifier: Any) -> Any:
        loads.append(identifier)
        return real(identifier)

    monkeypatch.setattr(catalog, "load_table", counting)
    return loads


def cli_env(settings: TridentSettings) -> dict[str, str]:
    """The TRIDENT_* variables that point a CLI invocation at a test's workspace."""
    assert settings.pg_dsn is not None
    return {
        "TRIDENT_HOME": str(settings.home),
        "TRIDENT_PG_DSN": settings.pg_dsn.get_secret_value(),
        "TRIDENT_WORKSPACE": settings.workspace,
    }


def fresh_python(code: str, env: dict[str, str] | None = None) -> str:
    """Run ``code`` in a new interpreter with this checkout first on the path (what a process
    imports at start-up cannot be observed in the test's own, long-warmed one); its last line of
    output. ``env`` replaces the inherited environment (PYTHONPATH is always set)."""
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**(os.environ if env is None else env), "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""


def settings_env(settings: TridentSettings) -> dict[str, str]:
    """Every TRIDENT_* variable that gives another process exactly these settings."""
    env = {}
    for name in TridentSettings.model_fields:
        value = getattr(settings, name)
        if value is None:
            continue
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        env[f"TRIDENT_{name.upper()}"] = json.dumps(value) if isinstance(value, (dict, list, bool)) else str(value)
    return env


def append_waits_for_held_lock(a: Trident, b: Trident, key: str, data: pa.Table) -> None:
    """``b`` holds ``key``'s writer lock while ``a`` appends ``data``: ``a``'s one call answers
    'busy', and the write waits at the normal door until the lock is released."""
    ds = b.control.dataset(b.workspace, key)
    assert ds is not None
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with b.driver.locked(ds):
            held.set()
            release.wait(10)

    th = threading.Thread(target=hold)
    th.start()
    assert held.wait(10)
    done: list[float] = []

    def append() -> None:
        a.write(key, data, mode="append")
        done.append(time.monotonic())

    writer = threading.Thread(target=append)
    writer.start()
    time.sleep(0.5)
    assert not done  # the one call answered 'busy': the write waits at the normal door
    released = time.monotonic()
    release.set()
    th.join()
    writer.join(20)
    assert done and done[0] >= released


def writers_take_turns(a: Trident, b: Trident, key: str, first: int, turns: int = 20, n: int = 5) -> int:
    """``a`` and ``b`` append ``n`` rows each in turn to ``key`` (holding ``first`` rows), so each
    one's remembered record is stale at every write: each commit's count and snapshot are the
    dataset's. Returns the rows the dataset then holds."""
    total = first
    for i in range(turns):
        w = a if i % 2 else b
        ids = range(total, total + n)
        r = w.write(key, pa.table({"id": pa.array(ids, pa.int64()), "v": [f"r{i}" for i in ids]}), mode="append")
        total += n
        assert r.row_count == total and r.snapshot_id == a.describe(key, storage=False).snapshot_id
    return total


DAY0 = date(2024, 1, 1)  # the first day of the daily-partition tests' datasets


def day_rows(n: int, v: int) -> pa.Table:
    """Two rows of day ``DAY0 + n``, both ``v``: one daily partition's content."""
    return pa.table({"d": [DAY0 + timedelta(days=n)] * 2, "v": [v, v]})


def day_window(n: int, days: int = 1) -> PartitionFilter:
    """The daily partitions ``DAY0 + n`` (and the ``days - 1`` after it) of column ``d``."""
    return PartitionFilter.time_window("d", DAY0 + timedelta(days=n), DAY0 + timedelta(days=n + days), "day")
