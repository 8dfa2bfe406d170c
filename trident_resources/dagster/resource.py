"""``TridentResource``: a configured ``Trident`` for assets, ops, sensors and checks.

Its fields are the ``TridentSettings`` fields, typed and documented, so the Dagster UI shows what
can be configured and deployments set them with ``dg.EnvVar``::

    TridentResource(pg_dsn=dg.EnvVar("TRIDENT_PG_DSN"), catalog_credential=dg.EnvVar("LAKEKEEPER_CREDENTIAL"))

A field left unset (``None``) is not passed on, so ``TridentSettings`` reads it from its
``TRIDENT_*`` variable or takes its default: ``TridentResource()`` with nothing set is the
embedded default, exactly like ``Trident.from_env()``. ``TridentSettings`` stays the only reader of
the environment; this class only forwards what the Dagster configuration says.

Secrets (``pg_dsn``, ``catalog_token``, ``catalog_credential``, ``s3_access_key_id``,
``s3_secret_access_key``) are plain ``str`` fields here because Dagster masks a value that comes
from ``dg.EnvVar`` in the UI; they become ``SecretStr`` in the settings they build.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dagster as dg
from dagster._config.field_utils import IntEnvVar  # the type of dg.EnvVar.int(...), not exported by name
from pydantic import Field, PrivateAttr, SecretStr

from ..client import Trident
from ..core.settings import PRODUCTION, TridentSettings, settings_from_env
from .gate import is_pending, settle
from .run_group import settle_run

ENVIRONMENT_TAG = "trident/environment"  # the run tag of a run in an environment


class TridentResource(dg.ConfigurableResource):
    """A ``Trident`` client; every field mirrors a ``TRIDENT_*`` setting and is optional."""

    # where and whose
    home: str | None = Field(default=None, description="TRIDENT_HOME: local state (embedded Postgres, warehouse, spill files).")
    workspace: str | None = Field(default=None, description="TRIDENT_WORKSPACE: datasets are isolated per workspace.")
    namespace_root: str | None = Field(default=None, description="TRIDENT_NAMESPACE_ROOT: top Iceberg namespace.")
    environment: str | None = Field(
        default=None,
        description="TRIDENT_ENVIRONMENT: the environment runs read and write (main: production; unset in a Dagster+ "
        "branch deployment: its deployment name). Runs are tagged trident/environment.",
    )

    # Postgres control plane
    pg_dsn: str | None = Field(
        default=None, description="TRIDENT_PG_DSN (secret): control-plane Postgres; unset starts the embedded one."
    )
    pg_pool_max: int | None = Field(default=None, description="TRIDENT_PG_POOL_MAX: control-plane connection pool size.")

    # Iceberg catalog
    catalog_uri: str | None = Field(
        default=None, description="TRIDENT_CATALOG_URI: Iceberg REST catalog (Lakekeeper); unset = SQL catalog."
    )
    catalog_warehouse: str | None = Field(default=None, description="TRIDENT_CATALOG_WAREHOUSE: REST catalog warehouse.")
    catalog_token: str | None = Field(default=None, description="TRIDENT_CATALOG_TOKEN (secret): REST catalog bearer token.")
    catalog_credential: str | None = Field(
        default=None, description="TRIDENT_CATALOG_CREDENTIAL (secret): OAuth2 client_id:client_secret."
    )
    catalog_scope: str | None = Field(default=None, description="TRIDENT_CATALOG_SCOPE: OAuth2 scope.")
    catalog_oauth2_server_uri: str | None = Field(
        default=None, description="TRIDENT_CATALOG_OAUTH2_SERVER_URI: OAuth2 token endpoint of the identity provider."
    )
    catalog_audience: str | None = Field(default=None, description="TRIDENT_CATALOG_AUDIENCE: OAuth2 audience of the token.")
    catalog_resource: str | None = Field(
        default=None, description="TRIDENT_CATALOG_RESOURCE: OAuth2 resource indicator (RFC 8707)."
    )
    s3_credentials: str | None = Field(
        default=None, description="TRIDENT_S3_CREDENTIALS: static | vended | remote-signing (who signs object-storage requests)."
    )
    s3_credential_refresh_seconds: float | None = Field(
        default=None, description="TRIDENT_S3_CREDENTIAL_REFRESH_SECONDS: reload vended credentials this long before expiry."
    )
    s3_checksum: str | None = Field(
        default=None, description="TRIDENT_S3_CHECKSUM: when_required (plain signed PUTs, safe for R2) | when_supported."
    )
    catalog_nested_namespaces: bool | None = Field(
        default=None, description="TRIDENT_CATALOG_NESTED_NAMESPACES: one namespace level per key folder."
    )
    catalog_properties: dict[str, str] | None = Field(
        default=None, description="TRIDENT_CATALOG_PROPERTIES: extra pyiceberg catalog properties."
    )

    # S3-API object storage
    s3_endpoint: str | None = Field(default=None, description="TRIDENT_S3_ENDPOINT: S3 API endpoint (R2, MinIO); unset = AWS.")
    s3_bucket: str | None = Field(default=None, description="TRIDENT_S3_BUCKET: bucket of the warehouse; unset = local folder.")
    s3_prefix: str | None = Field(default=None, description="TRIDENT_S3_PREFIX: key prefix of the warehouse in the bucket.")
    s3_access_key_id: str | None = Field(default=None, description="TRIDENT_S3_ACCESS_KEY_ID (secret).")
    s3_secret_access_key: str | None = Field(default=None, description="TRIDENT_S3_SECRET_ACCESS_KEY (secret).")
    s3_region: str | None = Field(default=None, description="TRIDENT_S3_REGION: 'auto' for Cloudflare R2.")
    s3_path_style: bool | None = Field(default=None, description="TRIDENT_S3_PATH_STYLE: path-style addressing.")

    # behaviour
    writer_wait_seconds: float | None = Field(
        default=None, description="TRIDENT_WRITER_WAIT_SECONDS: wait for another writer of a dataset."
    )
    commit_retries: int | None = Field(
        default=None, description="TRIDENT_COMMIT_RETRIES: retries of a conflicting Iceberg commit."
    )
    inline_max_rows: int | None = Field(
        default=None, description="TRIDENT_INLINE_MAX_ROWS: appends of at most this many rows are inlined (default 1000; 0: off)."
    )
    inline_flush_rows: int | None = Field(
        default=None, description="TRIDENT_INLINE_FLUSH_ROWS: inlined rows that trigger a flush into one Iceberg snapshot."
    )
    inline_flush_seconds: float | None = Field(
        default=None,
        description="TRIDENT_INLINE_FLUSH_SECONDS: inlined rows this old are flushed by the next inlined write (0: never by age).",
    )
    environment_max_age_days: float | None = Field(
        default=None, description="TRIDENT_ENVIRONMENT_MAX_AGE_DAYS: `trident maintain` reports environments idle this long."
    )
    staged_max_age_days: float | None = Field(
        default=None, description="TRIDENT_STAGED_MAX_AGE_DAYS: `trident maintain` discards staged versions older than this."
    )
    failed_run_staged: str | None = Field(
        default=None,
        description="TRIDENT_FAILED_RUN_STAGED: discard (default) | keep a failed run's staged versions for audit.",
    )
    sql_timeout_seconds: float | None = Field(
        default=None, description="TRIDENT_SQL_TIMEOUT_SECONDS: read-only SQL longer than this is interrupted."
    )
    sql_max_rows: int | None = Field(default=None, description="TRIDENT_SQL_MAX_ROWS: result row cap of Trident.sql.")
    sql_max_bytes: int | None = Field(default=None, description="TRIDENT_SQL_MAX_BYTES: result byte cap of Trident.sql.")
    embedded_pg_idle_minutes: float | None = Field(
        default=None, description="TRIDENT_EMBEDDED_PG_IDLE_MINUTES: the embedded Postgres stops after this long without clients."
    )
    target_file_bytes: int | None = Field(
        default=None, description="TRIDENT_TARGET_FILE_BYTES: uncompressed bytes per data file."
    )
    row_group_bytes: int | None = Field(default=None, description="TRIDENT_ROW_GROUP_BYTES: uncompressed bytes per row group.")
    write_parallelism: int | None = Field(default=None, description="TRIDENT_WRITE_PARALLELISM: Parquet files encoded at once.")
    pg_row_blocks: bool | None = Field(
        default=None, description="TRIDENT_PG_ROW_BLOCKS: pg sink writes and reads Arrow row blocks (a read cache)."
    )
    duckdb_memory_limit: str | None = Field(
        default=None, description="TRIDENT_DUCKDB_MEMORY_LIMIT: DuckDB memory cap (it spills past it)."
    )
    duckdb_threads: int | None = Field(default=None, description="TRIDENT_DUCKDB_THREADS: DuckDB threads.")
    arrow_memory_pool: str | None = Field(
        default=None, description="TRIDENT_ARROW_MEMORY_POOL: Arrow's allocator for the process ('default': pyarrow's)."
    )
    flag_refresh_seconds: float | None = Field(
        default=None, description="TRIDENT_FLAG_REFRESH_SECONDS: router flag cache lifetime."
    )

    # the Dagster layer and the example pipeline
    join_max_rows: int | None = Field(
        default=None, description="TRIDENT_JOIN_MAX_ROWS: join guard bound of nodes without max_rows=."
    )
    tpch_scale: str | None = Field(default=None, description="TRIDENT_TPCH_SCALE: TPC-H scale factor of the example pipeline.")
    rebuild_cron: str | None = Field(
        default=None, description="TRIDENT_REBUILD_CRON: when the example pipeline's rebuild schedule fires."
    )

    _client: Trident | None = PrivateAttr(default=None)
    _run_id: str | None = PrivateAttr(default=None)
    _instance: dg.DagsterInstance | None = PrivateAttr(default=None)
    _shared: tuple[str, str] | None = PrivateAttr(default=None)  # the key of the run's shared client (_SHARED)

    @classmethod
    def from_settings(cls, settings: TridentSettings) -> TridentResource:
        """A resource that reproduces ``settings`` exactly, whatever the environment says (tests,
        the CLI): every field is set, so nothing falls back to ``TRIDENT_*``.

        Raises:
            Nothing: every value comes from a validated ``TridentSettings``.
        """
        values: dict[str, Any] = {}
        for name in TridentSettings.model_fields:
            value = getattr(settings, name)
            if isinstance(value, SecretStr):
                value = value.get_secret_value()
            elif isinstance(value, Path):
                value = str(value)
            values[name] = value
        return cls(**values)

    def settings(self) -> TridentSettings:
        """The settings this resource stands for: its set fields, the environment for the rest.

        Inside a run Dagster has already resolved ``dg.EnvVar`` fields; outside one (building the
        Definitions, a script) they are resolved here, and an unset variable counts as unset.

        Raises:
            InvalidSettingsError: a field or ``TRIDENT_*`` variable holds an unusable value (named).
        """
        values: dict[str, Any] = {}
        for name in TridentSettings.model_fields:
            value = getattr(self, name, None)
            if isinstance(value, (dg.EnvVar, IntEnvVar)):
                value = value.get_value()
            if value is not None:
                values[name] = value
        return settings_from_env(**values)  # a refused value is InvalidSettingsError naming it, not pydantic's block

    def get_client(self) -> Trident:
        """The run's ``Trident`` (opened on first use: a nested resource may skip setup).

        In a run that staged a gated version in this process (write-audit-publish of a plain
        asset, gate.py), its gate is settled first, so that a step running after the asset's
        blocking checks reads the published version.

        Raises:
            InvalidSettingsError: a setting is unusable.
            ControlPlaneUnavailableError: the control-plane Postgres cannot be reached.
            StorageUnavailableError: the Iceberg catalog cannot be reached.
            and whatever ``Trident.publish`` raises while the gate is settled.
        """
        if self._client is None:
            self._client = Trident(self.settings())
        if self._run_id is not None and is_pending(self._run_id):
            self._settle()
        return self._client

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        """Dagster's hook: open (or share, within a run) the client and settle the gates earlier
        steps decided.

        Raises:
            whatever ``get_client`` raises.
        """
        self._run_id, self._instance = (context.run.run_id if context.run else None), context.instance
        if self._client is None and self._run_id is not None:
            # the key holds a digest of the fields, not the fields: some are secrets
            self._shared = (self._run_id, hashlib.sha256(self.model_dump_json().encode()).hexdigest())
            self._client = _SHARED.acquire(self._shared, self.settings)
        client = self.get_client()
        if self._run_id is not None and context.instance is not None and client.environment != PRODUCTION:
            # the run shows which environment it wrote (docs/environments.md): a tag on the run
            context.instance.add_run_tags(self._run_id, {ENVIRONMENT_TAG: client.environment})
        self._settle()  # a step of its own process (multiprocess executor): what earlier steps decided

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        """Dagster's hook: settle the gates this step decided (the last check step of a gated
        asset publishes it) and, in a run that publishes once, the run when this was its last step
        (run_group.py), then release the client.

        Raises:
            whatever ``Trident.publish`` raises while the gate is settled (the client is released).
        """
        if self._client is not None:
            try:
                self._settle()  # the last check step of a gated asset publishes it here
                if self._run_id is not None and self._instance is not None:
                    settle_run(self._client, self._instance, self._run_id)  # the run's last step publishes the run
            finally:
                if self._shared is not None:
                    _SHARED.release(self._shared)
                else:
                    self._client.close()
                self._client = None
        self._run_id = self._instance = self._shared = None

    def _settle(self) -> None:
        if self._client is not None and self._run_id is not None and self._instance is not None:
            settle(self._client, self._instance, self._run_id)


class _SharedClients:
    """One ``Trident`` per (run, configuration) in a process, shared by the resource copies that
    Dagster initialises for that run.

    Why: ``TridentIOManager(trident=resource)`` nests the same resource that assets get under
    ``trident``, and Dagster initialises a nested resource as a copy of its own, so every run (and,
    under the multiprocess executor, every step process) opened two clients: two settings reads,
    two connection pools, two catalogs, two sets of read caches (~0.1 s of each run's
    start). Copies with the same field values stand for the same settings, so they share one
    client, counted: the last teardown closes it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clients: dict[tuple[str, str], tuple[Trident, int]] = {}

    def acquire(self, key: tuple[str, str], settings: Callable[[], TridentSettings]) -> Trident:
        with self._lock:
            held = self._clients.get(key)
            if held is not None:
                self._clients[key] = (held[0], held[1] + 1)
                return held[0]
        client = Trident(settings())  # opened outside the lock: it may start the embedded Postgres
        with self._lock:
            held = self._clients.get(key)
            if held is None:
                self._clients[key] = (client, 1)
                return client
            self._clients[key] = (held[0], held[1] + 1)
        client.close()  # another copy opened one meanwhile: use that
        return held[0]

    def release(self, key: tuple[str, str]) -> None:
        with self._lock:
            held = self._clients.get(key)
            if held is None:
                return
            if held[1] > 1:
                self._clients[key] = (held[0], held[1] - 1)
                return
            del self._clients[key]
        held[0].close()


_SHARED = _SharedClients()
