"""The control-plane Postgres killed for real mid-write (issue 8, "make it stay fixed").

A separate embedded Postgres under its own TRIDENT_HOME (the suite's shared server is never
touched): its postmaster is SIGKILLed while a write is in flight, then restarted. Every scenario
ends the same way: the writer got a named TridentError (the cause chained), and after a
reconcile the dataset is the old or the new version whole, no ledger row is open, no cleanup is
pending, and no file (data or metadata) is left that the table's metadata does not reference. The SQL catalog lives in the same
Postgres, so its errors are control-plane errors too.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import psutil
import pyarrow as pa
import pytest

from tests.conftest import make_settings
from tests.trident_resources.sinks.iceberg.test_s3_faults import _referenced
from trident_resources import ControlPlaneUnavailableError, StorageUnavailableError, Trident, TridentSettings, WriterLockLostError
from trident_resources.control.embedded_pg import ensure_embedded_postgres, stop_embedded_postgres
from trident_resources.transaction import driver, inline

SCHEMA = pa.schema([("k", pa.int64())])
NAMED = (ControlPlaneUnavailableError, WriterLockLostError, StorageUnavailableError)
OUTCOMES: list[str] = []
PAUSED_IN: list[
    str
] = []  # which commit path the writer was paused in: "driver" (Iceberg) or "inline"  # one line per scenario, printed at the end (for the closing note)


@pytest.fixture(scope="module")
def own_pg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A Postgres of our own, so killing it harms nobody else's tests."""
    home = tmp_path_factory.mktemp("pg-kill-home")
    ensure_embedded_postgres(home / "pg")
    yield home
    stop_embedded_postgres(home / "pg")
    if OUTCOMES:
        print("\npostmaster-kill scenarios:\n  " + "\n  ".join(OUTCOMES))


def _kill_postmaster(home: Path) -> None:
    """SIGKILL the postmaster and wait until its backends are gone too (they exit when they see
    it died), so the restart finds the shared memory free."""
    pid = int((home / "pg" / "pgdata" / "postmaster.pid").read_text().splitlines()[0])
    proc = psutil.Process(pid)
    children = proc.children(recursive=True)
    os.kill(pid, signal.SIGKILL)
    psutil.wait_procs([proc, *children], timeout=30)


def _restart(home: Path, dsn: str) -> None:
    assert ensure_embedded_postgres(home / "pg") == dsn, "the restarted server must listen where it did"


def _slow(batches: int, delay: float, started: threading.Event) -> Iterator[pa.RecordBatch]:
    for i in range(batches):
        if i == 2:
            started.set()
        time.sleep(delay)
        yield pa.record_batch({"k": pa.array(range(i * 100, (i + 1) * 100), pa.int64())}, schema=SCHEMA)


def _unreferenced_files(t: Trident, key: str) -> list[str]:
    """Files under the dataset's table locations (data and metadata) that the table's metadata
    does not reference: what a failed write would have leaked."""
    ds = t.control.dataset(t.workspace, key)
    assert ds is not None
    locations = {e.location for e in t.history(key) if e.location}
    table = t.driver.sinks["iceberg_native"].tables.table(ds) if ds.sink == "iceberg_native" else None  # type: ignore[attr-defined]
    referenced: set[str] = set()
    if table is not None:
        locations.add(table.location())
        referenced = _referenced(table)
    found = {str(p).lstrip("/") for loc in locations for p in Path(urlsplit(loc).path).rglob("*") if p.is_file()}
    return sorted(found - referenced)


SCENARIOS = {
    # name: (sink, pause the writer at this failpoint and kill there (else mid-stream), restart at
    # once?, inlined?). The 600-row append is inlined (the default TRIDENT_INLINE_MAX_ROWS) unless
    # the scenario is about the Iceberg commit path; an inlined append's own kill points are its
    # INTENT step and its one COMMIT statement (transaction/inline.py).
    "mid-stream, restarted at once": ("iceberg_native", None, True, True),
    "mid-stream, down until the writer failed": ("iceberg_native", None, False, True),
    "mid-stream, Iceberg path, down until the writer failed": ("iceberg_native", None, False, False),
    "after INTENT, catalog unreachable": ("iceberg_native", "intent.after", False, False),
    "after INTENT, restarted at once": ("iceberg_native", "intent.after", True, False),
    "between snapshot and ledger COMMIT": ("iceberg_native", "commit.before_ledger", False, False),
    "inlined, before its COMMIT statement": ("iceberg_native", "commit.before_ledger", False, True),
    "inlined, before its COMMIT statement, restarted at once": ("iceberg_native", "commit.before_ledger", True, True),
    "pg sink mid-COPY": ("pg", None, False, False),
}


def _pause_at(monkeypatch: pytest.MonkeyPatch, name: str) -> tuple[threading.Event, threading.Event]:
    """Hold the writer at failpoint ``name`` until released, to kill Postgres exactly there."""
    reached, resume = threading.Event(), threading.Event()
    real = driver.failpoint

    def hook(where: str) -> Callable[[str], None]:
        def at(point: str) -> None:
            if point == name:
                PAUSED_IN.append(where)
                reached.set()
                assert resume.wait(60)
            real(point)

        return at

    PAUSED_IN.clear()
    monkeypatch.setattr(driver, "failpoint", hook("driver"))
    monkeypatch.setattr(inline, "failpoint", hook("inline"))  # an inlined write's own steps
    return reached, resume


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_postmaster_killed_mid_write(own_pg: Path, monkeypatch: pytest.MonkeyPatch, scenario: str) -> None:
    sink, pause, restart_at_once, inlined = SCENARIOS[scenario]
    dsn = ensure_embedded_postgres(own_pg / "pg")
    settings: TridentSettings = make_settings(own_pg, dsn, writer_wait_seconds=2, inline_max_rows=1000 if inlined else 0)
    key = f"pgkill/s{list(SCENARIOS).index(scenario)}"
    with Trident(settings) as t:
        if sink == "pg":
            t.router.set_pin(key, "pg")
        t.write(key, pa.table({"k": pa.array([-2, -1], pa.int64())}))
        old = sorted(t.read(key).column("k").to_pylist())
        new = sorted(old + list(range(600)))
        started = threading.Event()
        reached, resume = _pause_at(monkeypatch, pause) if pause else (started, threading.Event())
        caught: list[BaseException] = []

        def run() -> None:
            try:
                batches = _slow(6, 0 if pause else 0.25, started)
                t.write(key, pa.RecordBatchReader.from_batches(SCHEMA, batches), mode="append")
            except BaseException as exc:
                caught.append(exc)

        th = threading.Thread(target=run)
        th.start()
        assert reached.wait(30), "the writer never reached the point of the kill"
        if pause:
            paused_in = list(PAUSED_IN)
            assert paused_in == ["inline" if inlined else "driver"], paused_in
        _kill_postmaster(own_pg)
        if restart_at_once:
            _restart(own_pg, dsn)
        resume.set()
        th.join(120)
        assert not th.is_alive()
        if not restart_at_once:
            _restart(own_pg, dsn)

    assert caught, "the write met a dead control plane and still reported success"
    err = caught[0]
    assert isinstance(err, NAMED), f"raw error escaped: {type(err).__module__}.{type(err).__name__}: {err}"
    assert err.__cause__ is not None, "the original error must be chained"

    with Trident(settings) as t:  # a fresh process's view: new connections to the restarted server
        report = t.reconcile()
        history = t.history(key)
        assert [e.status for e in history if e.status == "open"] == []
        assert not any(e.cleanup_pending for e in history)
        rows = sorted(t.read(key).column("k").to_pylist())
        assert rows in (old, new), "torn: neither the old nor the new version"
        if rows == new:  # the writer must not have been told that its write did not happen
            assert "nothing was committed" not in str(err) and "reconcile" in str(err), str(err)
        assert t.describe(key).row_count == len(rows)
        assert _unreferenced_files(t, key) == []
        OUTCOMES.append(
            f"{scenario}: writer got {type(err).__name__}; reconcile rolled forward {len(report.rolled_forward)}, "
            f"aborted {len(report.aborted)}; dataset = {'new' if rows == new else 'old'} version, whole"
        )
