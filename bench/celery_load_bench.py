#!/usr/bin/env python
"""Celery load benchmark (not in CI): the deployment of deploy/celery under load, on loopback.

The setup is the distributed test's (tests/distributed/test_celery_deployment.py): a Redis broker,
``--workers`` ``dagster-celery`` workers as separate processes (one slot each, each with its own
empty TRIDENT_HOME and DAGSTER_HOME), and all shared state in services: the control plane and
Dagster's instance on Postgres, tables in the loopback REST catalog (lakana), files in moto's S3
API server. The example's raw tables are loaded first (in-process, not timed).

  backfill   ``--partitions`` days of ``daily/lineitem`` (a delta node partitioned by ship day), one
             run per day (``dagster asset materialize --partition``, the run worker as the
             DefaultRunLauncher starts it), ``--launchers`` run workers at once;
  queued     ``--queued`` runs of the unpartitioned ``tpch_pipeline`` job started at once (their
             steps queue behind each other on the per-dataset pools);
  baseline   ``--baseline`` more days of ``daily/lineitem`` run one after another in this process
             (``execute_in_process``, no Celery): what one machine does, in the same run.

Printed: runs/s and commits/s per phase (and the backfill's ratio to the baseline), the slowest
partition (run wall, and its step), the Celery queue wait (a step's task submitted -> a worker
started it), the lock waits the writers logged (``trident lock wait`` lines: the writer lock, a
partition's range locks, the commit lock), whether anything was lost (every run succeeded, every
day's rows equal ``tpch/lineitem``'s rows of that day, one committed transaction per run and
dataset, no ledger row open), and peak RSS (each Celery worker's processes, the largest run
worker). Nothing asserts; it is a report.

    python bench/celery_load_bench.py                       # 4 workers, 60 days + 4 queued runs, SF 0.01
    python bench/celery_load_bench.py --workers 8 --partitions 120 --sf 0.1

The numbers depend on the machine being quiet: on a shared one, say so beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

DEPLOY = REPO / "deploy" / "celery"
BIN = Path(sys.executable).parent
KEY = "daily/lineitem"
STEP = "daily__lineitem"
MIB = 1024 * 1024
LOCK_WAIT = re.compile(r"trident lock wait: dataset '([^']+)' waited ([0-9.]+) s for (.+)$")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def bench_postgres(data_dir: Path, max_connections: int) -> str:
    """The bench's embedded Postgres, restarted once with ``max_connections`` raised when it is
    lower: a fleet of workers, run workers and their step processes needs more than the default 100
    (the deployment docs' connection budget), and a bench that fails on it measures nothing."""
    import psycopg

    from trident_resources.control.embedded_pg import ensure_embedded_postgres, stop_embedded_postgres

    dsn = ensure_embedded_postgres(data_dir)
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("show max_connections").fetchone()
        if row is not None and int(row[0]) >= max_connections:
            return dsn
        conn.execute(f"alter system set max_connections = {int(max_connections)}")
    stop_embedded_postgres(data_dir)
    return ensure_embedded_postgres(data_dir)


@contextmanager
def services(home: Path, work: Path, sf: str, max_connections: int) -> Iterator[Any]:
    """Postgres (embedded, under ``home``, kept between runs), moto S3, lakana REST catalog (in
    ``work``): the settings every process gets."""
    from tests.support.rest_catalog import rest_catalog_server
    from tests.support.s3_server import s3_server
    from trident_resources import TridentSettings

    dsn = bench_postgres(home / "pg", max_connections)
    with s3_server() as s3, rest_catalog_server(work / "lakana", s3=s3) as rest:
        yield TridentSettings(
            home=work / "unused-home",
            pg_dsn=dsn,
            workspace=f"bench_{uuid.uuid4().hex[:8]}",
            tpch_scale=sf,
            s3_endpoint=s3.endpoint,
            s3_bucket=s3.bucket,
            s3_access_key_id=s3.access_key_id,
            s3_secret_access_key=s3.secret_access_key,
            s3_region=s3.region,
            s3_prefix="bench",
            catalog_uri=rest.uri,
            catalog_warehouse=rest.warehouse,
            catalog_token=rest.token,
            catalog_properties={"prefix": rest.warehouse},
            namespace_root="bronze",
        )


class Fleet:
    """Redis on loopback, the Dagster instance database, Celery workers, run workers."""

    def __init__(self, root: Path, settings: Any) -> None:
        import yaml

        from tests.support.helpers import settings_env
        from trident_cli.ui import ensure_database
        from trident_resources.dagster.instance_storage import DRIVER

        self.root = root
        redis = shutil.which("redis-server")
        if redis is None:
            sys.exit("redis-server is not installed (apt-get install redis-server)")
        port = _free_port()
        self.redis = subprocess.Popen(
            [redis, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.pg_dsn = settings.pg_dsn.get_secret_value()
        self.dbname = f"dagster_bench_{os.getpid()}"
        url = ensure_database(self.pg_dsn, self.dbname).replace(DRIVER + "://", "postgresql://", 1)
        config = yaml.safe_load((DEPLOY / "celery.yaml").read_text())
        (root / "celery.yaml").write_text(yaml.safe_dump(config))
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("TRIDENT_", "DAGSTER_"))}
        self.env.update(
            settings_env(settings),
            TRIDENT_DAGSTER_PG_URL=url,
            TRIDENT_CELERY_BROKER_URL=f"redis://127.0.0.1:{port}/0",
            TRIDENT_CELERY_BACKEND_URL=f"redis://127.0.0.1:{port}/1",
            PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            PYTHONPATH=str(REPO),
        )
        self.env.pop("TRIDENT_HOME", None)
        self.workers: dict[str, subprocess.Popen[bytes]] = {}

    def home(self, name: str) -> dict[str, str]:
        base = self.root / name
        (base / "dagster").mkdir(parents=True, exist_ok=True)
        (base / "trident").mkdir(exist_ok=True)
        shutil.copy(DEPLOY / "dagster.yaml", base / "dagster" / "dagster.yaml")
        return {**self.env, "TRIDENT_HOME": str(base / "trident"), "DAGSTER_HOME": str(base / "dagster")}

    def instance(self) -> Any:
        import dagster as dg

        os.environ["TRIDENT_DAGSTER_PG_URL"] = self.env["TRIDENT_DAGSTER_PG_URL"]
        return dg.DagsterInstance.from_config(self.home("observer")["DAGSTER_HOME"])

    def start_worker(self, name: str) -> None:
        log = open(self.root / f"{name}.log", "wb")  # noqa: SIM115  (closed with the process)
        self.workers[name] = subprocess.Popen(
            [
                *(
                    str(BIN / "dagster-celery"),
                    "worker",
                    "start",
                    "-A",
                    "dagster_celery.app",
                    "-y",
                    str(self.root / "celery.yaml"),
                ),
                *("-n", name, "-l", "INFO", "--", "--concurrency=1", "--without-gossip", "--without-mingle"),
            ],
            env=self.home(name),
            cwd=self.root,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def launch(self, args: list[str], tag: str) -> subprocess.Popen[bytes]:
        log = open(self.root / f"run-{tag}.log", "wb")  # noqa: SIM115
        return subprocess.Popen(
            [*args, "-f", str(DEPLOY / "definitions.py")],
            env=self.home("runner"),
            cwd=self.root,
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def worker_peak_rss(self) -> dict[str, int]:
        """Each worker's processes' high-water RSS (VmHWM), summed per worker."""
        out = {}
        for name, w in self.workers.items():
            total = 0
            for proc in Path("/proc").iterdir():
                if not proc.name.isdigit():
                    continue
                try:
                    if os.getpgid(int(proc.name)) != w.pid:
                        continue
                    status = (proc / "status").read_text()
                except (OSError, ProcessLookupError):
                    continue
                hwm = re.search(r"VmHWM:\s+(\d+) kB", status)
                total += int(hwm.group(1)) * 1024 if hwm else 0
            out[name] = total
        return out

    def lock_waits(self) -> list[tuple[str, float, str]]:
        waits = []
        for name in self.workers:
            for line in (self.root / f"{name}.log").read_text(errors="replace").splitlines():
                m = LOCK_WAIT.search(line)
                if m:
                    waits.append((m.group(1), float(m.group(2)), m.group(3)))
        return waits

    def close(self) -> None:
        for w in self.workers.values():
            if w.poll() is None:
                os.killpg(w.pid, signal.SIGTERM)
        for w in self.workers.values():
            try:
                w.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(w.pid, signal.SIGKILL)
        self.redis.kill()
        self.redis.wait(30)
        import psycopg

        with psycopg.connect(self.pg_dsn, autocommit=True) as conn:
            conn.execute(f'drop database if exists "{self.dbname}" with (force)')


class ConnectionSampler:
    """The most connections each database had at once (``pg_stat_activity``, every 0.5 s)."""

    def __init__(self, dsn: str) -> None:
        import threading

        self.dsn, self.stop = dsn, threading.Event()
        self.peak: dict[str, int] = {}
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stop.wait(0.5):
                for db, n in conn.execute("SELECT datname, count(*) FROM pg_stat_activity WHERE datname IS NOT NULL GROUP BY 1"):
                    self.peak[db] = max(self.peak.get(db, 0), int(n))

    def close(self) -> dict[str, int]:
        self.stop.set()
        self.thread.join(5)
        return dict(self.peak)


@contextmanager
def catalog_calls(uri: str) -> Iterator[dict[str, int]]:
    """Count this process's HTTP requests to the REST catalog (pyiceberg's ``requests`` session),
    by method and kind: what one write costs the catalog."""
    import requests

    counts: dict[str, int] = {}
    send = requests.Session.send

    def counting(self: Any, request: Any, **kw: Any) -> Any:
        if str(request.url).startswith(uri):
            path = str(request.url)[len(uri) :].split("?")[0]
            kind = "config" if path.endswith("/config") else "commit/create" if request.method == "POST" else "load"
            counts[f"{request.method} {kind}"] = counts.get(f"{request.method} {kind}", 0) + 1
        return send(self, request, **kw)

    requests.Session.send = counting  # type: ignore[method-assign]
    try:
        yield counts
    finally:
        requests.Session.send = send  # type: ignore[method-assign]


def run_bounded(fleet: Fleet, commands: list[tuple[str, list[str]]], at_once: int) -> tuple[float, dict[str, int]]:
    """Start ``commands`` with at most ``at_once`` running; (wall seconds, tag -> exit code)."""
    pending = list(commands)
    running: dict[str, subprocess.Popen[bytes]] = {}
    codes: dict[str, int] = {}
    began = time.monotonic()
    while pending or running:
        while pending and len(running) < at_once:
            tag, args = pending.pop(0)
            running[tag] = fleet.launch(args, tag)
        for tag, proc in list(running.items()):
            if proc.poll() is not None:
                codes[tag] = proc.returncode
                del running[tag]
        time.sleep(0.1)
    return time.monotonic() - began, codes


def step_timings(instance: Any, run_id: str) -> dict[str, dict[str, float]]:
    """step key -> {queued: submit -> a worker started it, ran: STEP_START -> STEP_SUCCESS} (s)."""
    marks: dict[str, dict[str, float]] = {}
    for rec in instance.all_logs(run_id):
        ev = rec.dagster_event
        if ev is None or ev.step_key is None:
            continue
        m = marks.setdefault(str(ev.step_key), {})
        msg = ev.message or ""
        if ev.is_engine_event and msg.startswith("Submitting celery task"):
            m.setdefault("submitted", rec.timestamp)
        elif ev.is_engine_event and "in celery worker" in msg:
            m["picked"] = rec.timestamp  # the last one: a redelivered task counts from its last start
        elif ev.event_type_value == "STEP_START":
            m["start"] = rec.timestamp
        elif ev.event_type_value == "STEP_SUCCESS":
            m["end"] = rec.timestamp
    out = {}
    for step, m in marks.items():
        out[step] = {
            "queued": m["picked"] - m["submitted"] if "picked" in m and "submitted" in m else 0.0,
            "ran": m["end"] - m["start"] if "end" in m and "start" in m else float("nan"),
        }
    return out


def run_records(instance: Any, tag_key: str, tag_value: str | None = None) -> list[Any]:
    import dagster as dg

    tags = {tag_key: tag_value} if tag_value is not None else {}
    runs = instance.get_runs(dg.RunsFilter(tags=tags)) if tags else instance.get_runs()
    return [r for r in runs if tag_key in r.tags]


def commits_of(t: Any, run_ids: set[str]) -> dict[str, list[Any]]:
    """dataset key -> its ledger entries written by those runs."""
    from trident_resources.dagster import RUN_ID

    out: dict[str, list[Any]] = {}
    for d in t.datasets():
        entries = [e for e in t.history(d.key) if (e.metadata or {}).get(RUN_ID) in run_ids]
        if entries:
            out[d.key] = entries
    return out


def rows_per_day(t: Any, key: str, column: str, days: list[date]) -> dict[date, int]:
    sql = f"SELECT {column} AS d, count(*) AS n FROM \"{key}\" WHERE {column} BETWEEN '{days[0]}' AND '{days[-1]}' GROUP BY 1"
    return {r["d"]: r["n"] for r in t.sql(sql).to_pylist()}


def pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--partitions", type=int, default=60)
    ap.add_argument("--queued", type=int, default=4)
    ap.add_argument("--launchers", type=int, default=8, help="backfill run workers at once")
    ap.add_argument("--baseline", type=int, default=10, help="days run in-process, one after another")
    ap.add_argument("--sf", default="0.01")
    ap.add_argument("--first-day", default="1995-01-01")
    ap.add_argument("--home", default="/tmp/trident-celery-bench", help="where the embedded Postgres lives")
    ap.add_argument(
        "--max-connections", type=int, default=400, help="the bench Postgres's max_connections (raised with a restart)"
    )
    ap.add_argument("--keep", action="store_true", help="keep the work folder (logs of every process)")
    args = ap.parse_args()

    import dagster as dg

    from trident_assets.definitions import build_definitions
    from trident_resources.dagster import TridentResource

    work = Path(tempfile.mkdtemp(prefix="trident-celery-bench-"))
    first = date.fromisoformat(args.first_day)
    days = [first + timedelta(days=i) for i in range(args.partitions)]
    base_days = [first + timedelta(days=args.partitions + i) for i in range(args.baseline)]
    load_before = os.getloadavg()
    try:
        with services(Path(args.home), work, args.sf, args.max_connections) as settings:
            t0 = time.monotonic()
            defs = build_definitions(TridentResource.from_settings(settings))
            assert defs.resolve_job_def("tpch_pipeline").execute_in_process().success
            print(f"loaded the example at SF {args.sf} in-process in {time.monotonic() - t0:.0f} s (not timed)", flush=True)

            daily = defs.resolve_job_def("tpch_daily")
            base_began = time.monotonic()
            with catalog_calls(str(settings.catalog_uri)) as calls:
                for d in base_days:
                    r = daily.execute_in_process(partition_key=str(d), asset_selection=[dg.AssetKey(["daily", "lineitem"])])
                    assert r.success
            base_wall = time.monotonic() - base_began
            print(f"baseline: {len(base_days)} days in-process one after another in {base_wall:.1f} s", flush=True)

            fleet = Fleet(work, settings)
            instance = fleet.instance()  # creates Dagster's tables before any process shares them
            try:
                for i in range(args.workers):
                    fleet.start_worker(f"w{i + 1}")
                materialize = [str(BIN / "dagster"), "asset", "materialize", "--select", KEY]
                backfill = [(f"day-{d}", [*materialize, "--partition", str(d)]) for d in days]
                sampler = ConnectionSampler(settings.pg_dsn.get_secret_value())
                bf_wall, bf_codes = run_bounded(fleet, backfill, args.launchers)
                print(f"backfill: {len(days)} runs in {bf_wall:.1f} s", flush=True)
                pipeline = [str(BIN / "dagster"), "job", "execute", "-j", "tpch_pipeline"]
                queued = [
                    (f"queued-{i}", [*pipeline, "--tags", json.dumps({"bench/queued": str(i)})]) for i in range(args.queued)
                ]
                q_wall, q_codes = run_bounded(fleet, queued, len(queued))
                print(f"queued: {len(queued)} runs in {q_wall:.1f} s", flush=True)
                extra = {"connections": sampler.close(), "catalog_calls": calls, "dagster_db": fleet.dbname}
                report(
                    args, settings, instance, fleet, days, (bf_wall, bf_codes), (q_wall, q_codes), base_wall, load_before, extra
                )
            finally:
                instance.dispose()
                fleet.close()
    finally:
        if args.keep:
            print(f"work folder kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def report(
    args: argparse.Namespace,
    settings: Any,
    instance: Any,
    fleet: Fleet,
    days: list[date],
    backfill: tuple[float, dict[str, int]],
    queued: tuple[float, dict[str, int]],
    base_wall: float,
    load_before: tuple[float, float, float],
    extra: dict[str, Any],
) -> None:
    from trident_resources import Trident

    bf_wall, bf_codes = backfill
    q_wall, q_codes = queued
    day_runs = {r.tags.get("dagster/partition"): r for r in instance.get_runs() if r.tags.get("dagster/partition")}
    day_runs = {k: r for k, r in day_runs.items() if k in {str(d) for d in days}}
    q_runs = run_records(instance, "bench/queued")
    lines = []
    with Trident(settings) as t:
        bf_commits = commits_of(t, {r.run_id for r in day_runs.values()})
        q_commits = commits_of(t, {r.run_id for r in q_runs})
        open_rows = sum(1 for d in t.datasets() for e in t.history(d.key) if e.status == "open")
        expected = rows_per_day(t, "tpch/lineitem", "l_shipdate", days)
        got = rows_per_day(t, KEY, "l_shipdate", days)
    n_bf = sum(len([e for e in es if e.status == "committed"]) for es in bf_commits.values())
    n_q = sum(len([e for e in es if e.status == "committed"]) for es in q_commits.values())
    walls: dict[str, float] = {}
    steps: dict[str, float] = {}
    queue_waits: list[float] = []
    for day, r in day_runs.items():
        stats = instance.get_run_stats(r.run_id)
        walls[day] = (stats.end_time or 0) - (stats.start_time or 0)
        timing = step_timings(instance, r.run_id)
        steps[day] = timing.get(STEP, {}).get("ran", float("nan"))
        queue_waits.extend(v["queued"] for v in timing.values())
    q_queue = [v["queued"] for r in q_runs for v in step_timings(instance, r.run_id).values()]
    slow_day = max(walls, key=lambda d: walls[d]) if walls else None
    waits = fleet.lock_waits()
    per_run = {k: [e for e in es] for k, es in bf_commits.items()}
    doubled = [
        (k, r.tags.get("dagster/partition"))
        for k, es in per_run.items()
        for r in day_runs.values()
        if len([e for e in es if (e.metadata or {}).get("dagster_run_id") == r.run_id and e.status == "committed"]) > 1
    ]
    rss = fleet.worker_peak_rss()
    child_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    base_rate = args.baseline / base_wall if base_wall else 0
    bf_rate = len(days) / bf_wall
    lines += [
        "",
        f"Celery load bench: {args.workers} workers x 1 slot, Redis on loopback, Postgres + lakana REST + moto S3 on loopback; "
        f"TPC-H SF {args.sf}; {os.cpu_count()} CPUs",
        f"load average before {load_before[0]:.1f}, after {os.getloadavg()[0]:.1f} "
        "(a shared machine: other work competes for the CPUs; rerun on a quiet one, see below)",
        "",
        f"backfill   {len(days)} runs of {KEY} (one day each, {args.launchers} run workers at once): {bf_wall:6.1f} s  "
        f"{bf_rate:5.2f} runs/s  {n_bf / bf_wall:5.2f} commits/s  ({n_bf} commits; "
        f"{sum(1 for c in bf_codes.values() if c != 0)} runs failed)",
        f"baseline   {args.baseline} days in-process, one after another:              {base_wall:6.1f} s  "
        f"{base_rate:5.2f} runs/s  -> backfill/baseline {bf_rate / base_rate if base_rate else float('nan'):.2f}x runs/s",
        f"queued     {len(q_codes)} runs of tpch_pipeline started at once:                {q_wall:6.1f} s  "
        f"{len(q_codes) / q_wall:5.3f} runs/s  {n_q / q_wall:5.2f} commits/s  ({n_q} commits; "
        f"{sum(1 for c in q_codes.values() if c != 0)} runs failed)",
        "",
    ]
    if slow_day is not None:
        ran = [v for v in steps.values() if v == v]
        lines.append(
            f"slowest partition {slow_day}: run {walls[slow_day]:.1f} s (its {STEP} step {steps[slow_day]:.1f} s); "
            f"runs median {statistics.median(walls.values()):.1f} s, steps median {statistics.median(ran) if ran else 0:.1f} s"
        )
    lines.append(
        f"Celery queue wait (task submitted -> a worker started it): backfill p50 {pct(queue_waits, 0.5):.2f} s, "
        f"p95 {pct(queue_waits, 0.95):.2f} s, max {max(queue_waits, default=0):.2f} s, total {sum(queue_waits):.0f} s over "
        f"{len(queue_waits)} steps; queued runs p50 {pct(q_queue, 0.5):.2f} s, max {max(q_queue, default=0):.2f} s"
    )
    by_kind: dict[str, list[float]] = {}
    for key, waited, what in waits:
        by_kind.setdefault(f"{key}: {what}", []).append(waited)
    if by_kind:
        lines.append("lock waits the writers logged (count, total, max):")
        for kind, secs in sorted(by_kind.items(), key=lambda kv: -sum(kv[1])):
            lines.append(f"  {kind:<60} {len(secs):4d}  {sum(secs):7.2f} s  {max(secs):6.2f} s")
    else:
        lines.append("lock waits: no writer waited for a lock")
    missing = [d for d in days if got.get(d, 0) != expected.get(d, 0)]
    lines += [
        "",
        f"nothing lost: {len(day_runs)}/{len(days)} backfill runs recorded, every day's rows equal tpch/lineitem's: "
        f"{'yes' if not missing else f'NO ({len(missing)} days differ, e.g. {missing[:3]})'}; "
        f"a dataset committed twice by one run: {'none' if not doubled else doubled[:5]}; open ledger rows: {open_rows}",
        "catalog calls per partition run (baseline, in-process): "
        + ", ".join(f"{k} {v / max(args.baseline, 1):.1f}" for k, v in sorted(extra["catalog_calls"].items())),
        "most Postgres connections at once during the load: "
        + ", ".join(f"{'dagster' if db == extra['dagster_db'] else db} {n}" for db, n in sorted(extra["connections"].items()))
        + f" ({args.workers} Celery workers, up to {args.launchers} run workers)",
        "peak RSS: "
        + ", ".join(f"{n} {b / MIB:.0f} MiB" for n, b in rss.items())
        + f" (worker + its pool process); largest run worker {child_rss / MIB:.0f} MiB",
        "",
        "quiet rerun: python bench/celery_load_bench.py "
        f"--workers {args.workers} --partitions {args.partitions} --queued {args.queued} --launchers {args.launchers} "
        f"--baseline {args.baseline} --sf {args.sf}",
    ]
    text = "\n".join(lines)
    print(text, flush=True)
    out = REPO / "bench" / "data"
    out.mkdir(parents=True, exist_ok=True)
    (out / "results_celery_load.json").write_text(
        json.dumps(
            {"at": time.strftime("%Y-%m-%d %H:%M"), "report": text, "walls": walls, "lock_waits": waits}, indent=1, default=str
        )
    )


if __name__ == "__main__":
    main()
