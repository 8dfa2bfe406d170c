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

The config is ``storage: postgres:``'s (``postgres_url`` or ``postgres_db``)."""

from __future__ import annotations

from typing import Any

from dagster._config.config_schema import UserConfigSchema
from dagster._core.storage.config import pg_config
from dagster._serdes import ConfigurableClassData
from dagster_postgres import DagsterPostgresStorage
from dagster_postgres.utils import get_token_provider_from_config, pg_url_from_config

DRIVER = "postgresql+psycopg2"


def with_driver(url: str) -> str:
    """``url`` with the driver Dagster needs named (see the module docstring); a URL that names
    one already is returned as it is."""
    for plain in ("postgresql://", "postgres://"):
        if url.startswith(plain):
            return DRIVER + "://" + url[len(plain) :]
    return url


class TridentPostgresStorage(DagsterPostgresStorage):
    """``DagsterPostgresStorage`` on ``with_driver(url)``: runs, event logs and schedules in the
    deployment's Postgres, whatever form of URL the operator gave."""

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
