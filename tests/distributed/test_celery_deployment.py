"""The Celery deployment of deploy/celery run for real: a Redis broker on loopback, two
``dagster-celery`` workers as separate processes, each with its own empty TRIDENT_HOME and
DAGSTER_HOME, and all shared state in services (the control plane and Dagster's instance on
Postgres, tables in the loopback REST catalog, files in the S3 API server). The run worker is
``dagster job execute`` on deploy/celery/definitions.py, as the DefaultRunLauncher starts it.

First a normal run: every step ran in a worker, and the datasets equal an in-process run's. Then a
run during which one worker is SIGKILLed (its whole process group) while it executes a step: the
step comes back to the broker (task_acks_late; Redis hands it on after the visibility timeout,
shortened here) and the run ends, on the other worker, with the data whole, no dataset written
twice and no ledger row open. Last a run whose worker is SIGKILLed right after a step committed
and before the step reported it: the step runs again on a new worker, in the same run, and its
second write is a no-op (one transaction per dataset in the run, the killed attempt's).

Needs ``redis-server`` (``.ci/run`` installs Debian's); without it the test is skipped, except in
CI where that is a failure."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import backend_settings
from tests.support.helpers import settings_env
from trident_assets.definitions import build_definitions
from trident_cli.ui import ensure_database
from trident_resources import Trident, TridentSettings
from trident_resources.dagster import RUN_ID, TridentResource
from trident_resources.dagster.instance_storage import DRIVER

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "celery"
BIN = Path(sys.executable).parent
VISIBILITY_TIMEOUT = 10  # seconds; the shipped 1800 would make the kill case wait half an hour
RUN_BOUND = 420  # seconds a run may take here before the test calls it hung


def _redis() -> str:
    found = shutil.which("redis-server")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("redis-server is missing in CI: .ci/run installs it (apt-get install redis-server)")
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Deployment:
    """The deployment's processes on loopback; the broker is a Redis of its own unless ``broker``
    gives (broker URL, result backend URL) of another."""

    def __init__(self, root: Path, settings: TridentSettings, pg_dsn: str, broker: tuple[str, str] | None = None) -> None:
        self.root, self.settings = root, settings
        self.redis: subprocess.Popen[bytes] | None = None
        if broker is None:
            port = _free_port()
            self.redis = subprocess.Popen(
                [_redis(), "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            broker = (f"redis://127.0.0.1:{port}/0", f"redis://127.0.0.1:{port}/1")
        dbname = f"dagster_celery_{os.getpid()}"
        with __import__("psycopg").connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f'drop database if exists "{dbname}" with (force)')
        url = ensure_database(pg_dsn, dbname).replace(DRIVER + "://", "postgresql://", 1)  # as an operator writes it
        self.dbname, self.pg_dsn = dbname, pg_dsn
        config = yaml.safe_load((DEPLOY / "celery.yaml").read_text())
        config["execution"]["config"]["config_source"]["broker_transport_options"]["visibility_timeout"] = VISIBILITY_TIMEOUT
        (root / "celery.yaml").write_text(yaml.safe_dump(config))
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("TRIDENT_", "DAGSTER_"))}
        self.env.update(
            settings_env(settings),
            TRIDENT_DAGSTER_PG_URL=url,
            TRIDENT_CELERY_BROKER_URL=broker[0],
            TRIDENT_CELERY_BACKEND_URL=broker[1],
            PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            PYTHONPATH=str(ROOT),
        )
        self.env.pop("TRIDENT_HOME", None)
        self.workers: dict[str, subprocess.Popen[bytes]] = {}

    def home(self, name: str) -> dict[str, str]:
        """Its own empty TRIDENT_HOME and a DAGSTER_HOME holding the deployment's dagster.yaml."""
        base = self.root / name
        (base / "dagster").mkdir(parents=True, exist_ok=True)
        (base / "trident").mkdir(exist_ok=True)
        shutil.copy(DEPLOY / "dagster.yaml", base / "dagster" / "dagster.yaml")
        return {**self.env, "TRIDENT_HOME": str(base / "trident"), "DAGSTER_HOME": str(base / "dagster")}

    def start_worker(self, name: str, **env: str) -> None:
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
            env={**self.home(name), **env},
            cwd=self.root,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: SIGKILL takes the worker and its pool
        )

    def kill_worker(self, name: str) -> None:
        os.killpg(self.workers[name].pid, signal.SIGKILL)
        self.workers[name].wait(30)

    def launch(self, tag: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [
                *(str(BIN / "dagster"), "job", "execute", "-f", str(DEPLOY / "definitions.py"), "-j", "tpch_pipeline"),
                *("--tags", json.dumps({"test/run": tag})),
            ],
            env=self.home(f"runner-{tag}"),
            cwd=self.root,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def materialize(self, selection: str) -> subprocess.Popen[str]:
        """``dagster asset materialize`` of ``selection`` (a run of the implicit asset job)."""
        return subprocess.Popen(
            [str(BIN / "dagster"), "asset", "materialize", "-f", str(DEPLOY / "definitions.py"), "--select", selection],
            env=self.home("runner-assets"),
            cwd=self.root,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def instance(self) -> Any:
        import dagster as dg

        os.environ["TRIDENT_DAGSTER_PG_URL"] = self.env["TRIDENT_DAGSTER_PG_URL"]
        return dg.DagsterInstance.from_config(self.home("observer")["DAGSTER_HOME"])

    def close(self) -> None:
        for w in self.workers.values():
            if w.poll() is None:
                os.killpg(w.pid, signal.SIGKILL)
                w.wait(30)
        if self.redis is not None:
            self.redis.kill()
            self.redis.wait(30)
        os.environ.pop("TRIDENT_DAGSTER_PG_URL", None)
        with __import__("psycopg").connect(self.pg_dsn, autocommit=True) as conn:
            conn.execute(f'drop database if exists "{self.dbname}" with (force)')


@pytest.fixture
def deployment(request: pytest.FixtureRequest, tmp_path: Path, pg_dsn: str) -> Iterator[Deployment]:
    _redis()
    settings = backend_settings(request, "rest", tmp_path / "unused-home", pg_dsn, tpch_scale="0.01")
    d = Deployment(tmp_path, settings, pg_dsn)
    try:
        yield d
    finally:
        d.close()


def _contents(t: Trident) -> dict[str, Any]:
    """Every dataset's rows without Trident's own columns, in a canonical order."""
    out = {}
    for record in t.datasets():
        table = t.read(record.key)
        cols = sorted(c for c in table.column_names if not c.startswith("__"))
        table = table.select(cols)
        out[record.key] = table.sort_by([(c, "ascending") for c in cols]).to_pylist() if cols else table.num_rows
    return out


def _steps_on_workers(instance: Any, run_id: str) -> dict[str, str]:
    """step key -> the Celery worker that executed it (dagster-celery's engine event)."""
    where = {}
    for record in instance.all_logs(run_id):
        event = record.dagster_event
        if event is None or not event.is_engine_event or "Executing steps" not in (event.message or ""):
            continue
        worker = event.engine_event_data.metadata.get("Celery worker")
        where[str(event.step_key)] = str(getattr(worker, "value", worker))
    return where


def _run_entries(t: Trident, key: str, run_id: str) -> list[Any]:
    return [e for e in t.history(key) if (e.metadata or {}).get(RUN_ID) == run_id]


def _committed_in_run(t: Trident, keys: Any, run_id: str) -> dict[str, Any]:
    """dataset key -> txn id of each dataset the run has written so far: committed, or staged in
    the run's group (``tpch_pipeline`` publishes once, at its end)."""
    out = {}
    for key in keys:
        entries = [e for e in _run_entries(t, key, run_id) if e.status in ("committed", "staged")]
        if entries:
            out[key] = entries[0].txn_id
    return out


def _wait(proc: subprocess.Popen[str], bound: float) -> str:
    try:
        out, _ = proc.communicate(timeout=bound)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"the run did not end within {bound} s:\n{out[-3000:]}")
    return out


def test_the_example_runs_on_two_workers_and_survives_a_killed_one(deployment: Deployment) -> None:
    import dagster as dg

    # the reference: the same job in process, in another workspace of the same services
    reference = deployment.settings.model_copy(update={"workspace": deployment.settings.workspace + "_ref"})
    result = build_definitions(TridentResource.from_settings(reference)).resolve_job_def("tpch_pipeline").execute_in_process()
    assert result.success
    with Trident(reference) as t:
        expected = _contents(t)
    assert "tpch/lineitem" in expected and len(expected) > 5

    # The instance's tables are created once, before any process shares them: dagster-postgres
    # creates them on first use, and processes racing to do so on an empty database fail (the
    # deployment's runbook runs `dagster instance migrate` once for the same reason).
    instance = deployment.instance()
    deployment.start_worker("w1")
    deployment.start_worker("w2")
    first = deployment.launch("first")
    out = _wait(first, RUN_BOUND)
    assert first.returncode == 0, out[-4000:]
    [run] = instance.get_runs(dg.RunsFilter(tags={"test/run": "first"}))
    assert run.status == dg.DagsterRunStatus.SUCCESS
    plan_steps = set(instance.get_execution_plan_snapshot(run.execution_plan_snapshot_id).step_keys_to_execute)
    where = _steps_on_workers(instance, run.run_id)
    assert set(where) == plan_steps, "a step did not run in a Celery worker"
    assert {w.split("@")[0] for w in where.values()} <= {"w1", "w2"}
    t = Trident(deployment.settings)
    try:
        assert _contents(t) == expected
        versions = {key: len(t.history(key)) for key in expected}

        # a run during which w1 dies in the middle of a step
        second = deployment.launch("second")
        deadline = time.monotonic() + RUN_BOUND
        victim = None
        while victim is None and time.monotonic() < deadline and second.poll() is None:
            runs = instance.get_runs(dg.RunsFilter(tags={"test/run": "second"}))
            if runs:
                on_w1 = [s for s, w in _steps_on_workers(instance, runs[0].run_id).items() if w.startswith("w1@")]
                victim = on_w1[0] if on_w1 else None
            time.sleep(0.2)
        assert victim is not None, "w1 never got a step of the second run"
        killed_at = time.monotonic()
        deployment.kill_worker("w1")
        out = _wait(second, RUN_BOUND)
        ended = time.monotonic() - killed_at
        [run2] = instance.get_runs(dg.RunsFilter(tags={"test/run": "second"}))
        print(f"killed w1 in step {victim}; the run ended {run2.status.value} {ended:.0f} s later")
        assert second.returncode == 0 and run2.status == dg.DagsterRunStatus.SUCCESS, out[-4000:]
        assert _steps_on_workers(instance, run2.run_id)[victim].startswith("w2@"), "the lost step was not redelivered"

        t.reconcile()
        assert _contents(t) == expected  # whole, and nothing appended twice
        for key in expected:
            history = t.history(key)
            assert [e for e in history if e.status == "open"] == [], key
            committed = [e for e in history[: len(history) - versions[key]] if e.status == "committed"]
            assert len(committed) == 1, f"{key}: {len(committed)} commits in one run"

        # a run whose only worker is SIGKILLed right after a step committed, before the step
        # reported it (the failpoint stalls the worker there); the step is redelivered to a new
        # worker and runs again in the same run: its write is a no-op returning the first commit
        deployment.kill_worker("w2")
        deployment.start_worker("w3", TRIDENT_FAILPOINTS="io_manager.after_write=sleep:900")
        third = deployment.launch("third")
        deadline = time.monotonic() + RUN_BOUND
        done: dict[str, Any] = {}
        while not done and time.monotonic() < deadline and third.poll() is None:
            runs = instance.get_runs(dg.RunsFilter(tags={"test/run": "third"}))
            done = _committed_in_run(t, expected, runs[0].run_id) if runs else {}
            time.sleep(0.2)
        assert len(done) == 1, f"w3 should have committed exactly one step before stalling: {done}"
        [(killed_key, killed_txn)] = done.items()
        deployment.kill_worker("w3")
        deployment.start_worker("w4")
        out = _wait(third, RUN_BOUND)
        [run3] = instance.get_runs(dg.RunsFilter(tags={"test/run": "third"}))
        assert third.returncode == 0 and run3.status == dg.DagsterRunStatus.SUCCESS, out[-4000:]
        steps3 = _steps_on_workers(instance, run3.run_id)
        assert any(w.startswith("w4@") for w in steps3.values()), "the rest of the run did not go to w4"
        t.reconcile()
        assert _contents(t) == expected
        commits = {key: _run_entries(t, key, run3.run_id) for key in expected}
        for key, entries in commits.items():
            assert [e.status for e in entries] == ["committed"], f"{key}: {entries}"  # one transaction per dataset
        assert commits[killed_key][0].txn_id == killed_txn  # the killed attempt's commit is the one that counts
        print(f"w3 killed after committing {killed_key}; the step ran again on w4 and wrote nothing more")
    finally:
        t.close()
        instance.dispose()


# -- the same deployment on a RabbitMQ broker --------------------------------------------------------


def _rabbitmq() -> str:
    found = shutil.which("rabbitmq-server") or next((p for p in ["/usr/sbin/rabbitmq-server"] if Path(p).exists()), None)
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("rabbitmq-server is missing in CI: .ci/run installs it (apt-get install rabbitmq-server)")
        pytest.skip("rabbitmq-server is not installed (apt-get install rabbitmq-server)")
    return found


@pytest.fixture
def rabbitmq() -> Iterator[str]:
    """A RabbitMQ node of its own on loopback (its own name, ports and folders); its AMQP URL.
    Its folders are outside pytest's (those are private to this user, and Debian's script runs the
    server as user ``rabbitmq`` when started as root)."""
    server = _rabbitmq()
    base = Path(tempfile.mkdtemp(prefix="trident-rabbitmq-"))
    (base / "mnesia").mkdir(parents=True)
    (base / "log").mkdir()
    (base / "plugins").write_text("[].")
    if os.geteuid() == 0:  # Debian's script runs the server as user rabbitmq
        shutil.chown(base, "rabbitmq", "rabbitmq")
        for sub in base.iterdir():
            shutil.chown(sub, "rabbitmq", "rabbitmq")
    port, node = _free_port(), f"trident_{os.getpid()}@localhost"
    env = {
        **os.environ,
        "RABBITMQ_NODENAME": node,
        "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
        "RABBITMQ_NODE_PORT": str(port),
        "RABBITMQ_DIST_PORT": str(_free_port()),
        "RABBITMQ_MNESIA_BASE": str(base / "mnesia"),
        "RABBITMQ_LOG_BASE": str(base / "log"),
        "RABBITMQ_ENABLED_PLUGINS_FILE": str(base / "plugins"),
        "RABBITMQ_FEATURE_FLAGS_FILE": str(base / "feature_flags"),
    }
    out = open(base / "server.out", "wb")  # noqa: SIM115  (closed with the process)
    proc = subprocess.Popen([server], env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    logs = "".join(
                        p.read_text(errors="replace")[-2000:] for p in [base / "server.out", *(base / "log").glob("*.log")]
                    )
                    pytest.fail(f"rabbitmq-server did not start: {logs}")
                time.sleep(0.5)
        yield f"amqp://guest:guest@127.0.0.1:{port}//"
    finally:
        subprocess.run(
            [str(Path(server).with_name("rabbitmqctl")), "-n", node, "stop"], env=env, capture_output=True, timeout=120
        )
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        out.close()
        shutil.rmtree(base, ignore_errors=True)


def test_on_rabbitmq_a_worker_killed_after_its_commit_is_redelivered_at_once_and_writes_once(
    request: pytest.FixtureRequest, tmp_path: Path, pg_dsn: str, rabbitmq: str
) -> None:
    """deploy/celery's settings on RabbitMQ (``amqp://``, results over ``rpc://``): the example's
    raw-table job runs on a worker that is SIGKILLed right after its first step committed (the
    failpoint stalls it there). RabbitMQ hands the unacknowledged task to the other worker as soon
    as the dead one's connection drops (no visibility timeout), the step runs again in the same
    run and its write is a no-op: one transaction of the run per dataset, the killed attempt's."""
    import dagster as dg

    settings = backend_settings(request, "rest", tmp_path / "unused-home", pg_dsn, tpch_scale="0.01")
    deployment = Deployment(tmp_path, settings, pg_dsn, broker=(rabbitmq, "rpc://"))
    instance = deployment.instance()
    t = Trident(settings)
    try:
        deployment.start_worker("r1", TRIDENT_FAILPOINTS="io_manager.after_write=sleep:900")
        keys = ["tpch/customer", "tpch/orders"]
        run = deployment.materialize(",".join(keys))
        deadline = time.monotonic() + RUN_BOUND
        done: dict[str, Any] = {}
        while not done and time.monotonic() < deadline and run.poll() is None:
            runs = instance.get_runs()  # the instance's only run
            done = _committed_in_run(t, [k for k in keys if t.exists(k)], runs[0].run_id) if runs else {}
            time.sleep(0.2)
        ended = "" if run.poll() is None else (run.stdout.read() if run.stdout else "")[-4000:]
        assert len(done) == 1, f"r1 should have committed exactly one step before stalling: {done} {ended}"
        [(killed_key, killed_txn)] = done.items()
        killed_at = time.monotonic()
        deployment.kill_worker("r1")
        deployment.start_worker("r2")
        out = _wait(run, RUN_BOUND)
        [record] = instance.get_runs()
        print(
            f"r1 killed after committing {killed_key}; the run ended {record.status.value} {time.monotonic() - killed_at:.0f} s later"
        )
        assert run.returncode == 0 and record.status == dg.DagsterRunStatus.SUCCESS, out[-4000:]
        where = _steps_on_workers(instance, record.run_id)
        assert all(w.startswith("r2@") for w in where.values() if not w.startswith("r1@")) and any(
            w.startswith("r2@") for w in where.values()
        )
        for key in keys:
            entries = _run_entries(t, key, record.run_id)
            assert [e.status for e in entries] == ["committed"], f"{key}: {entries}"
        assert _run_entries(t, killed_key, record.run_id)[0].txn_id == killed_txn
        assert t.read(killed_key).num_rows == t.describe(killed_key).row_count
    finally:
        t.close()
        instance.dispose()
        deployment.close()
