"""The Dagster instance's storage for every Trident deployment: ``dagster-postgres``'s, with the
database driver always named in its URL.

dagster-postgres is written for psycopg2, but SQLAlchemy 2.1 maps a bare ``postgresql://`` URL to
psycopg 3, on which Dagster's ``NOTIFY run_events, :id`` is a syntax error. An operator's URL
(``TRIDENT_DAGSTER_PG_URL``) is usually plain, and every Dagster process (webserver, daemon, run
worker, Celery worker) builds the instance from ``dagster.yaml`` itself, before any Trident code
runs; so the fix has to be in the class ``dagster.yaml`` names, which is this one::

    storage:
      custom:
        module: trident_resources.dagster.instance_storage
        class: TridentPostgresStorage
        config:
          postgres_url: {env: TRIDENT_DAGSTER_PG_URL}

The config is ``storage: postgres:``'s (``postgres_url`` or ``postgres_db``).

Its event log also makes a pool's first claim safe when runs race for it
(``TridentPostgresEventLogStorage``)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as db
from dagster._config.config_schema import UserConfigSchema
from dagster._core.storage.config import pg_config
from dagster._core.storage.event_log.schema import ConcurrencyLimitsTable
from dagster._serdes import ConfigurableClassData
from dagster_postgres import DagsterPostgresStorage, PostgresEventLogStorage, PostgresRunStorage, PostgresScheduleStorage
from dagster_postgres.utils import get_token_provider_from_config, pg_url_from_config
from sqlalchemy.dialects.postgresql import insert

DRIVER = "postgresql+psycopg2"


def with_driver(url: str) -> str:
    """``url`` with the driver Dagster needs named (see the module docstring); a URL that names
    one already is returned as it is."""
    for plain in ("postgresql://", "postgres://"):
        if url.startswith(plain):
            return DRIVER + "://" + url[len(plain) :]
    return url


class TridentPostgresEventLogStorage(PostgresEventLogStorage):
    """``PostgresEventLogStorage`` whose first claim of a pool is safe when runs race for it.

    Dagster gives a pool it has not seen the default limit (``concurrency: pools: default_limit``,
    one slot per ``trident/<key>`` pool here) at the first step that claims it, with an INSERT that
    falls back to an UPDATE on a duplicate key. On Postgres the duplicate key aborts the
    transaction, so when two runs claim a new pool at once the loser's run fails with
    ``InFailedSqlTransaction`` (dagster-io/dagster#33552, open). Here the initialisation holds a
    transaction advisory lock on the pool's name and upserts the limit: racing claims wait for each
    other, and the slots are allocated once (two unserialised allocations could both see no slot
    and make two: two writers of one dataset)."""

    def initialize_concurrency_limit_to_default(self, concurrency_key: str) -> bool:
        if not self.has_concurrency_limits_table or not self.has_default_pool_limit_col:
            return super().initialize_concurrency_limit_to_default(concurrency_key)
        self._reconcile_concurrency_limits_from_slots()
        if not self.has_instance:
            return False
        default_limit = self._instance.global_op_concurrency_default_limit
        with self.index_transaction() as conn:
            conn.execute(db.select(db.func.pg_advisory_xact_lock(db.func.hashtextextended(concurrency_key, 33552))))
            if default_limit is None:
                conn.execute(ConcurrencyLimitsTable.delete().where(ConcurrencyLimitsTable.c.concurrency_key == concurrency_key))
                self._allocate_concurrency_slots(conn, concurrency_key, 0)
                return True
            upsert = insert(ConcurrencyLimitsTable).values(
                concurrency_key=concurrency_key, limit=default_limit, using_default_limit=True
            )
            conn.execute(
                upsert.on_conflict_do_update(
                    index_elements=[ConcurrencyLimitsTable.c.concurrency_key],
                    set_={"limit": default_limit},
                    where=ConcurrencyLimitsTable.c.limit != default_limit,
                )
            )
            self._allocate_concurrency_slots(conn, concurrency_key, default_limit)
        return True


class TridentPostgresStorage(DagsterPostgresStorage):
    """``DagsterPostgresStorage`` on ``with_driver(url)``: runs, event logs and schedules in the
    deployment's Postgres, whatever form of URL the operator gave, and the event log
    ``TridentPostgresEventLogStorage``."""

    def __init__(
        self,
        postgres_url: str,
        should_autocreate_tables: bool = True,
        inst_data: ConfigurableClassData | None = None,
        token_provider: Any = None,
    ) -> None:
        # DagsterPostgresStorage.__init__ builds the stock event log (an engine, a schema check):
        # its parts are built here instead, with this event log
        self.postgres_url = postgres_url
        self.should_autocreate_tables = should_autocreate_tables
        self._inst_data = inst_data
        self._run_storage = PostgresRunStorage(postgres_url, should_autocreate_tables, token_provider=token_provider)
        self._event_log_storage = TridentPostgresEventLogStorage(
            postgres_url, should_autocreate_tables, token_provider=token_provider
        )
        self._schedule_storage = PostgresScheduleStorage(postgres_url, should_autocreate_tables, token_provider=token_provider)
        super(DagsterPostgresStorage, self).__init__()

    @classmethod
    def config_type(cls) -> UserConfigSchema:
        return pg_config()

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData | None, config_value: Any) -> TridentPostgresStorage:
        return cls(
            inst_data=inst_data,
            postgres_url=with_driver(pg_url_from_config(config_value)),
            should_autocreate_tables=config_value.get("should_autocreate_tables", True),
            token_provider=get_token_provider_from_config(config_value),
        )
