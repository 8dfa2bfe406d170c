"""The Dagster instance ``trident ui`` writes: it loads, it stores on the embedded Postgres (its own
``dagster`` database), a run's record survives closing and reopening the instance, its run queue
and per-dataset pools are what the yaml says, and the example assets name their pools.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import psycopg
import pytest

from trident_cli.ui import URL_VARIABLE, dagster_home, ensure_database, instance_storage_url, write_instance_config
from trident_resources import TridentSettings
from trident_resources.dagster.instance_storage import DRIVER


@pytest.fixture
def instance_dir(tmp_path: Path, pg_dsn: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh instance folder whose storage is a fresh database on the session's embedded server."""
    dbname = f"dagster_{tmp_path.name[-20:].lower().replace('-', '_')}"
    url = ensure_database(pg_dsn, dbname)
    monkeypatch.setenv(URL_VARIABLE, url)
    home = tmp_path / "dagster"
    write_instance_config(home)
    yield home
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'drop database if exists "{dbname}" with (force)')


@dg.op
def _hello() -> int:
    return 1


@dg.job
def _hello_job() -> None:
    _hello()


def test_the_written_instance_loads_on_postgres_and_a_run_survives_a_reopen(instance_dir: Path) -> None:
    from dagster_postgres import PostgresEventLogStorage, PostgresRunStorage, PostgresScheduleStorage

    with dg.DagsterInstance.from_config(str(instance_dir)) as instance:
        assert isinstance(instance.run_storage, PostgresRunStorage)
        assert isinstance(instance.event_log_storage, PostgresEventLogStorage)
        assert isinstance(instance.schedule_storage, PostgresScheduleStorage)
        result = _hello_job.execute_in_process(instance=instance)
        assert result.success
        run_id = result.run_id
    with dg.DagsterInstance.from_config(str(instance_dir)) as reopened:
        run = reopened.get_run_by_id(run_id)
        assert run is not None and run.status == dg.DagsterRunStatus.SUCCESS
        assert any(
            e.dagster_event and e.dagster_event.event_type == dg.DagsterEventType.RUN_SUCCESS for e in reopened.all_logs(run_id)
        )


def test_run_queue_and_one_slot_per_dataset_pool(instance_dir: Path) -> None:
    with dg.DagsterInstance.from_config(str(instance_dir)) as instance:
        assert type(instance.run_coordinator).__name__ == "QueuedRunCoordinator"
        config = instance.get_concurrency_config()
        assert config.run_queue_config is not None and config.run_queue_config.max_concurrent_runs == 4
        assert config.pool_config.default_pool_limit == 1
        assert str(config.pool_config.pool_granularity).lower().endswith("op")
        # a pool Dagster has never seen gets the default: one slot
        info = instance.event_log_storage.get_concurrency_info("trident/sales/q3_revenue")
        assert info.limit == 1 and info.using_default_limit


def test_every_example_asset_names_its_dataset_pool() -> None:
    from trident_assets.definitions import defs

    assets = [a for a in defs.assets or [] if isinstance(a, dg.AssetsDefinition)]
    pools = {a.node_def.name: a.op.pool for a in assets if a.partitions_def is None}
    assert pools["sales__q3_revenue"] == "trident/sales/q3_revenue"
    assert pools["tpch__orders"] == "trident/tpch/orders"
    assert pools["split_sales__urgent_orders"] == "trident/sales/urgent_orders"
    assert all(p and p.startswith("trident/") for p in pools.values()), pools
    # partitioned datasets have none: their partitions are written concurrently (per-partition locks)
    partitioned = {a.node_def.name: a.op.pool for a in assets if a.partitions_def is not None}
    assert partitioned == {"daily__lineitem": None, "daily__shipments": None}


def test_the_written_yaml_is_never_overwritten(tmp_path: Path) -> None:
    path = write_instance_config(tmp_path)
    path.write_text("telemetry:\n  enabled: false\n")
    assert write_instance_config(tmp_path).read_text() == "telemetry:\n  enabled: false\n"


def test_storage_url_defaults_to_a_dagster_database_on_the_control_plane_server(trident_home: Path, pg_dsn: str) -> None:
    settings = TridentSettings(home=trident_home, pg_dsn=pg_dsn)
    url, origin = instance_storage_url(settings, environ={})
    assert url.startswith(DRIVER + "://") and url.endswith("/dagster"), url
    assert "TRIDENT_PG_DSN" in origin
    with psycopg.connect(url.replace(DRIVER, "postgresql", 1)) as conn:
        assert conn.execute("select current_database()").fetchone() == ("dagster",)
    # the deployment's own URL wins, with the driver Dagster needs named
    url, origin = instance_storage_url(settings, environ={URL_VARIABLE: "postgresql://u:p@db:5432/dagster"})
    assert (url, origin) == (f"{DRIVER}://u:p@db:5432/dagster", URL_VARIABLE)
    assert dagster_home(settings) == (trident_home / "dagster").resolve()


def _first_claims_at_once(storage: Any, keys: list[str], racers: int) -> list[BaseException]:
    """``racers`` threads initialising each of ``keys`` at the same moment (a barrier per key), as
    runs started together claim a pool no run has claimed yet; the errors they raised."""
    errors: list[BaseException] = []
    for key in keys:
        barrier = threading.Barrier(racers)

        def claim(key: str = key, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            try:
                storage.initialize_concurrency_limit_to_default(key)
            except Exception as exc:
                errors.append(exc)

        threads = [threading.Thread(target=claim) for _ in range(racers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return errors


def test_runs_racing_for_a_new_pool_all_claim_it_and_it_keeps_one_slot(instance_dir: Path) -> None:
    """Runs started together whose steps claim a pool no run has claimed yet: every claim
    succeeds (dagster-io/dagster#33552 failed all but one with InFailedSqlTransaction on
    Postgres) and the pool has exactly its one slot."""
    from trident_resources.dagster.instance_storage import TridentPostgresEventLogStorage

    with dg.DagsterInstance.from_config(str(instance_dir)) as instance:
        storage = instance.event_log_storage
        assert isinstance(storage, TridentPostgresEventLogStorage)
        keys = [f"trident/race/d{i}" for i in range(12)]
        errors = _first_claims_at_once(storage, keys, racers=6)
        assert errors == []
        for key in keys:
            info = storage.get_concurrency_info(key)
            assert (info.limit, info.slot_count, info.using_default_limit) == (1, 1, True), key
