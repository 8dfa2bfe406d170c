"""The production deployments under deploy/ load: each one's Definitions (the example on that
executor) and its Dagster instance config (storage on Postgres, its run launcher, the run queue and
the per-dataset pools), on the real embedded Postgres. Each needs its optional extra
(``pip install '.[k8s]'``, ``'.[celery]'``, ``'.[docker]'``); without it the test is skipped with
that reason. Nothing here reaches a cluster, a broker or a Docker daemon: that is the deployment's.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import psycopg
import pytest
import yaml

from trident_cli.ui import URL_VARIABLE, ensure_database
from trident_resources.dagster.instance_storage import DRIVER

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
CASES = {  # deployment -> (library of its extra, executor name, run launcher class)
    "k8s": ("dagster_k8s", "k8s", "K8sRunLauncher"),
    "celery": ("dagster_celery", "celery", "DefaultRunLauncher"),
    "docker": ("dagster_docker", "docker", "DockerRunLauncher"),
}
KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: none, user: {token: none}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
"""


def _extra(name: str) -> None:
    library = CASES[name][0]
    if importlib.util.find_spec(library) is None:
        pytest.skip(f"the [{name}] extra is not installed ({library} missing): pip install -e '.[{name}]'")


def _load(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"deploy_{path.parent.name}_definitions", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def storage_url(tmp_path: Path, pg_dsn: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    dbname = f"dagster_deploy_{abs(hash(tmp_path)) % 10**8}"
    url = ensure_database(pg_dsn, dbname)
    monkeypatch.setenv(URL_VARIABLE, url)
    yield url
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'drop database if exists "{dbname}" with (force)')


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_definitions_run_on_the_deployments_executor(name: str) -> None:
    _extra(name)
    defs = _load(DEPLOY / name / "definitions.py").defs
    dg.Definitions.validate_loadable(defs)
    job = defs.resolve_job_def("tpch_pipeline")
    assert job.executor_def.name == CASES[name][1]
    assert {k.to_user_string() for k in job.asset_layer.executable_asset_keys} >= {"tpch/orders", "sales/q3_revenue"}


@dg.op
def _noop() -> int:
    return 1


@dg.job
def _tiny() -> None:
    _noop()


@pytest.mark.parametrize("plain", [False, True], ids=["driver-named", "plain-url"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_the_deployments_instance_config_loads(
    name: str, plain: bool, tmp_path: Path, storage_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the URL as an operator writes it (``postgresql://``) too: dagster-postgres then got
    psycopg 3 from SQLAlchemy 2.1 and failed on its first event (``NOTIFY run_events, $1``)."""
    _extra(name)
    if plain:
        monkeypatch.setenv(URL_VARIABLE, storage_url.replace(DRIVER + "://", "postgresql://", 1))
    config = yaml.safe_load((DEPLOY / name / "dagster.yaml").read_text())
    if name == "k8s":  # outside a cluster: the same launcher on a kubeconfig that points nowhere
        (tmp_path / "kubeconfig").write_text(KUBECONFIG)
        config["run_launcher"]["config"].update(load_incluster_config=False, kubeconfig_file=str(tmp_path / "kubeconfig"))
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(yaml.safe_dump(config))
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        assert type(instance.run_launcher).__name__ == CASES[name][2]
        assert type(instance.run_coordinator).__name__ == "QueuedRunCoordinator"
        concurrency = instance.get_concurrency_config()
        assert concurrency.pool_config.default_pool_limit == 1
        assert concurrency.run_queue_config is not None and concurrency.run_queue_config.max_concurrent_runs == 10
        assert instance.run_monitoring_enabled and instance.run_monitoring_max_runtime_seconds == 14400
        result = _tiny.execute_in_process(instance=instance)  # runs, events (NOTIFY) and their reads
        assert result.success
        record = instance.get_run_record_by_id(result.run_id)
        assert record is not None and record.dagster_run.is_success
        assert instance.all_logs(result.run_id)


def test_the_helm_values_name_the_pieces_the_docs_promise() -> None:
    values = yaml.safe_load((DEPLOY / "k8s" / "values.yaml").read_text())
    assert values["runLauncher"]["type"] == "K8sRunLauncher"
    assert values["postgresql"]["enabled"] is False and values["postgresql"]["postgresqlDatabase"] == "dagster"
    assert values["postgresql"]["postgresqlScheme"] == "postgresql+psycopg2"
    assert values["dagsterDaemon"]["runCoordinator"]["type"] == "QueuedRunCoordinator"
    assert values["concurrency"]["pools"]["defaultLimit"] == 1
    [deployment] = values["dagster-user-deployments"]["deployments"]
    assert deployment["dagsterApiGrpcArgs"] == ["-f", "deploy/k8s/definitions.py"]


def test_the_celery_workers_and_the_executor_share_one_redelivery_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """A lost step is redelivered only if the workers acknowledge late and hand back the task of a
    dead process; the workers read celery.yaml, the executor definitions.py: they must agree."""
    _extra("celery")
    module = _load(DEPLOY / "celery" / "definitions.py")
    worker = yaml.safe_load((DEPLOY / "celery" / "celery.yaml").read_text())["execution"]["config"]
    assert worker["config_source"] == module.CELERY_CONFIG
    assert module.CELERY_CONFIG["task_acks_late"] is True and module.CELERY_CONFIG["task_reject_on_worker_lost"] is True
    assert module.CELERY_CONFIG["broker_transport_options"]["visibility_timeout"] > 0
    executor = module.defs.resolve_job_def("tpch_pipeline").executor_def
    assert executor.name == "celery"
    from dagster_celery.cli import get_validated_config

    monkeypatch.setenv("TRIDENT_CELERY_BROKER_URL", "redis://127.0.0.1:1/0")
    monkeypatch.setenv("TRIDENT_CELERY_BACKEND_URL", "redis://127.0.0.1:1/1")
    assert get_validated_config(str(DEPLOY / "celery" / "celery.yaml"))["config_source"]["task_acks_late"] is True
