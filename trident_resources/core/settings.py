"""One settings object for the whole trident, read from ``TRIDENT_*`` variables.

With nothing set, every part is embedded (Postgres under ``$TRIDENT_HOME/pg``, the Iceberg SQL catalog
in that Postgres, the warehouse under ``$TRIDENT_HOME/warehouse``) so ``pip install`` is the only setup
step; an unset ``TRIDENT_HOME`` is the project's ``.trident``, found from the current folder up, else
the per-user data folder (``core/home.py``).
Secrets are ``SecretStr`` so they never leak through reprs, logs or error messages.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict, SettingsError

from .errors import InvalidSettingsError
from .home import default_home
from .keys import validate_name

CredentialMode = Literal["static", "vended", "remote-signing"]
"""How Trident gets access to table bytes in object storage (``TRIDENT_S3_CREDENTIALS``):

- ``static``: its own long-lived ``TRIDENT_S3_ACCESS_KEY_ID``/``_SECRET_ACCESS_KEY``; the catalog is
  asked for nothing (no ``X-Iceberg-Access-Delegation`` header is sent).
- ``vended``: the REST catalog's short-lived per-table credentials, reloaded before they expire.
- ``remote-signing``: the REST catalog signs every S3 request; Trident holds no storage secret.
"""

ChecksumMode = Literal["when_required", "when_supported"]

_CRON_FIELD = r"[0-9A-Za-z*/,?#-]+"
_CRON_FIELDS = re.compile(rf"{_CRON_FIELD}(\s+{_CRON_FIELD}){{4}}")
_CRON_ALIAS = re.compile(r"@(yearly|annually|monthly|weekly|daily|midnight|hourly)")


class TridentSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TRIDENT_", extra="ignore", frozen=True)

    home: Path = Field(
        default_factory=default_home,
        description="Local state: embedded Postgres, warehouse, spill files, the Dagster instance; unset: found from the "
        "current folder up (core/home.py), else the per-user data folder.",
    )
    workspace: str = Field("default", description="Datasets are isolated per workspace; one word of [a-z0-9_].")
    environment: str = Field(
        default_factory=lambda: default_environment(),
        description="The environment this process reads and writes: `main` is production; any other name (lowercase "
        "letters, digits, '-', '_') writes zero-copy Iceberg branches of every dataset it touches (docs/environments.md). "
        "Unset in a Dagster+ branch deployment: its DAGSTER_CLOUD_DEPLOYMENT_NAME, sanitised.",
    )
    environment_max_age_days: float = Field(
        30, ge=0, description="`trident maintain` reports environments untouched this long (dropped only with --drop-stale)."
    )
    namespace_root: str = Field(
        "trident", description="Top Iceberg namespace (one word of [a-z0-9_]); some catalogs only allow a fixed set."
    )

    # Postgres control plane
    pg_dsn: SecretStr | None = Field(None, description="libpq DSN; unset starts the embedded Postgres.")
    pg_pool_max: int = Field(8, ge=2)
    embedded_pg_idle_minutes: float = Field(
        30.0,
        ge=0,
        description="The embedded Postgres stops itself after this many minutes without a client (fractions allowed); "
        "0 stops it when the process that started it ends. The next use starts it again. Never applies to pg_dsn.",
    )

    # Iceberg catalog
    catalog_uri: str | None = Field(
        None, description="Iceberg REST catalog URI (Lakekeeper); unset = SQL catalog in the control plane."
    )
    catalog_warehouse: str | None = Field(None, description="REST catalog warehouse name or location.")
    catalog_token: SecretStr | None = None
    catalog_credential: SecretStr | None = Field(None, description="OAuth2 client_id:client_secret.")
    catalog_scope: str | None = Field(None, description="OAuth2 scope requested with the client credential.")
    catalog_oauth2_server_uri: str | None = Field(
        None, description="OAuth2 token endpoint of the identity provider (Lakekeeper serves none itself)."
    )
    catalog_audience: str | None = Field(
        None, description="OAuth2 audience of the requested token (e.g. Lakekeeper's client id)."
    )
    catalog_resource: str | None = Field(None, description="OAuth2 resource indicator (RFC 8707) of the requested token.")
    catalog_nested_namespaces: bool | None = Field(
        None, description="Use one namespace level per key folder; default: yes for REST, no for the SQL catalog."
    )
    catalog_properties: dict[str, str] = Field(default_factory=dict, description="Extra pyiceberg catalog properties (JSON).")

    # S3-API object storage (Cloudflare R2: an endpoint plus region 'auto')
    s3_endpoint: str | None = None
    s3_bucket: str | None = None
    s3_prefix: str = "trident"
    s3_access_key_id: SecretStr | None = None
    s3_secret_access_key: SecretStr | None = None
    s3_region: str | None = None
    s3_path_style: bool = Field(True, description="Path-style addressing; what MinIO and moto need, fine for R2.")
    s3_credentials: CredentialMode = Field(
        "static", description="static (own keys) | vended (catalog's temporary keys) | remote-signing (catalog signs)."
    )
    s3_credential_refresh_seconds: float = Field(
        300.0, ge=0, description="Vended credentials are reloaded from the catalog this long before they expire."
    )
    s3_checksum: ChecksumMode = Field(
        "when_required",
        description="AWS SDK request checksums / response validation: when_required sends plain signed PUTs "
        "(safe for R2 and other S3-compatible stores); when_supported adds aws-chunked CRC trailers.",
    )

    # Behaviour
    writer_wait_seconds: float = Field(30.0, ge=0, description="How long a writer waits for another writer of the same dataset.")
    staged_max_age_days: float = Field(
        7, ge=0, description="`trident maintain` discards staged (write-audit-publish) versions older than this."
    )
    failed_run_staged: Literal["discard", "keep"] = Field(
        "discard",
        description="What becomes of the staged versions of a failed or cancelled Dagster run that publishes once "
        "(trident/publish: run): discard them, or keep the run's group for audit (`trident staged`, then "
        "`trident publish GROUP` or `trident discard GROUP`).",
    )
    commit_retries: int = Field(5, ge=0, description="Retries of an Iceberg commit that conflicts with a concurrent one.")
    inline_max_rows: int = Field(
        1_000,
        ge=0,
        le=65_536,  # one inlined commit is one Arrow row block (sinks/pg/blocks.py)
        description="An append of at most this many rows to an iceberg_native dataset is inlined into the control plane "
        "(committed with its ledger row, no Iceberg snapshot) until a flush; 0 turns inlining off.",
    )
    inline_flush_rows: int = Field(
        100_000,
        ge=1,
        description="An inlined write that leaves at least this many inlined rows flushes them into one Iceberg snapshot.",
    )
    inline_flush_seconds: float = Field(
        0,
        ge=0,
        description="An inlined write flushes the inlined rows when the oldest was inlined at least this long ago; "
        "0: no flush by age (maintain and the row threshold still flush).",
    )
    target_file_bytes: int = Field(512 * 1024 * 1024, ge=1024, description="Uncompressed Arrow bytes per data file.")
    row_group_bytes: int = Field(
        16 * 1024 * 1024, ge=1024, description="Uncompressed Arrow bytes buffered per Parquet row group."
    )
    write_parallelism: int = Field(
        2, ge=1, description="Parquet files encoded at once by one write (one row group each in flight)."
    )
    pg_row_blocks: bool = Field(
        True,
        description="pg sink: replace/append writes also store their rows as Arrow row blocks (a read cache next to "
        "the jsonb rows, which stay the truth) and reads use them; off = write none and read jsonb only.",
    )
    duckdb_memory_limit: str = Field("1GB", description="DuckDB memory cap for merges and SQL; it spills past it.")
    duckdb_threads: int = Field(2, ge=1)
    arrow_memory_pool: Literal["jemalloc", "mimalloc", "system", "default"] = Field(
        "jemalloc",
        description="Arrow's allocator for this process, set when a Trident opens (see arrow_memory.py); "
        "'default' keeps pyarrow's, as does an ARROW_DEFAULT_MEMORY_POOL in the environment.",
    )
    flag_refresh_seconds: float = Field(5.0, ge=0, description="Router flag cache lifetime (flags apply within 2x this).")
    sql_timeout_seconds: float = Field(
        300.0, gt=0, description="Trident.sql / `trident sql`: a statement running longer is interrupted."
    )
    sql_max_rows: int | None = Field(
        10_000_000, ge=1, description="Trident.sql result row cap (the result is held in memory); unset = none."
    )
    sql_max_bytes: int | None = Field(
        1024 * 1024 * 1024, ge=1, description="Trident.sql result byte cap (Arrow bytes); unset = none."
    )

    @field_validator("workspace", "namespace_root")
    @classmethod
    def _one_word(cls, v: str, info: ValidationInfo) -> str:
        """Full-match validation (``re.fullmatch``), the same rule as dataset keys' segments: a
        pattern anchored with ``$`` would let a trailing newline through on a Python regex engine."""
        return validate_name(v, (info.field_name or "name").replace("_", " "))

    # The Dagster layer and its example pipeline (read here so that nothing else reads the environment)
    join_max_rows: int = Field(
        1_000_000_000, ge=1, description="Join guard bound for join nodes that do not set max_rows= (estimated rows)."
    )
    tpch_scale: str = Field("0.01", pattern=r"^[0-9]+(\.[0-9]+)?$", description="TPC-H scale factor of the example pipeline.")
    rebuild_cron: str = Field("0 3 * * *", description="Cron schedule of the example pipeline's rebuild (it starts stopped).")

    @model_validator(mode="after")
    def _credential_mode_needs_a_rest_catalog(self) -> TridentSettings:
        """Vending and signing are REST-catalog protocols: with the SQL catalog they cannot work, and
        a silent fallback to static keys (or to unsigned requests) is exactly what must not happen."""
        if self.s3_credentials != "static" and not self.catalog_uri:
            raise ValueError(
                f"TRIDENT_S3_CREDENTIALS={self.s3_credentials} needs a REST catalog (TRIDENT_CATALOG_URI); "
                "with the embedded SQL catalog use static"
            )
        return self

    @field_validator("environment")
    @classmethod
    def _environment_name(cls, v: str) -> str:
        return check_environment_name(v, ValueError)

    @field_validator("home")
    @classmethod
    def _absolute_home(cls, v: Path) -> Path:
        return v.expanduser().resolve()

    @field_validator("rebuild_cron")
    @classmethod
    def _cron(cls, v: str) -> str:
        """The shape Dagster accepts (five fields, or an @alias), checked here without importing
        Dagster: "garbage" surfaced as DagsterInvalidDefinitionError when the Definitions loaded, so
        ``trident check`` / ``trident ui`` died with a traceback instead of naming the variable."""
        if _CRON_ALIAS.fullmatch(v.strip()) or _CRON_FIELDS.fullmatch(v.strip()):
            return v
        raise ValueError(f"{v!r} is not a cron schedule: five fields such as '0 3 * * *', or @daily / @hourly ...")

    @field_validator("duckdb_memory_limit")
    @classmethod
    def _duckdb_memory(cls, v: str) -> str:
        """Checked by DuckDB's own parser (an in-memory database, no file): a value it refuses
        ("lots", "0") surfaced at the first merge or query as a raw ``duckdb.ParserException``."""
        refused = _duckdb_refuses(v)
        if refused is not None:
            raise ValueError(f"DuckDB refuses it ({refused}); use e.g. 1GB, 512MiB or 80%")
        return v

    @property
    def warehouse(self) -> str:
        """Where table bytes live: the S3 bucket/prefix when configured, else a local folder."""
        if self.s3_bucket:
            prefix = self.s3_prefix.strip("/")
            return f"s3://{self.s3_bucket}/{prefix}" if prefix else f"s3://{self.s3_bucket}"
        return (self.home / "warehouse").as_uri()

    def s3_properties(self) -> dict[str, str]:
        """pyiceberg FileIO properties for S3-API storage (empty when storage is local).

        Static keys are passed only in ``static`` mode: in the other modes the catalog must provide
        access, and keys configured "just in case" would silently hide that it does not."""
        props: dict[str, str] = {}
        if self.s3_endpoint:
            props["s3.endpoint"] = self.s3_endpoint
        if self.s3_credentials == "static" and self.s3_access_key_id:
            props["s3.access-key-id"] = self.s3_access_key_id.get_secret_value()
        if self.s3_credentials == "static" and self.s3_secret_access_key:
            props["s3.secret-access-key"] = self.s3_secret_access_key.get_secret_value()
        if self.s3_region:
            props["s3.region"] = self.s3_region
        if self.s3_endpoint and self.s3_path_style:
            props["s3.force-virtual-addressing"] = "false"
        return props

    def redacted(self) -> dict[str, Any]:
        """What is safe to print: every field, secrets masked."""
        return {k: ("***" if isinstance(v, SecretStr) else v) for k, v in self.__dict__.items()}


PRODUCTION = "main"  # the environment name of production
_ENV_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")


def check_environment_name(name: str, error: type[Exception] = InvalidSettingsError) -> str:
    """``name`` when it names an environment: 1-63 of lowercase letters, digits, '-' and '_',
    starting with a letter or digit (it becomes part of an Iceberg branch name,
    ``trident_env_<name>``, and of CI job names); else ``error`` saying so."""
    if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
        raise error(
            f"{name!r} is not an environment name: use 1-63 lowercase letters, digits, '-' or '_', "
            "starting with a letter or digit (e.g. pr-42); `main` is production"
        )
    return name


def sanitise_environment(raw: str) -> str:
    """A valid environment name made of ``raw`` (a Dagster+ deployment name such as ``PR-42/feature``):
    lowercased, every other character '-', trimmed to 63; empty becomes production."""
    name = re.sub(r"[^a-z0-9_-]+", "-", raw.strip().lower()).strip("-_")[:63].strip("-_")
    return name or PRODUCTION


def default_environment() -> str:
    """The environment when ``TRIDENT_ENVIRONMENT`` is unset: a Dagster+ branch deployment's name
    (``DAGSTER_CLOUD_IS_BRANCH_DEPLOYMENT`` set), else production. Read here so that nothing else
    reads the process environment."""
    import os

    if os.environ.get("DAGSTER_CLOUD_IS_BRANCH_DEPLOYMENT", "").strip().lower() in ("1", "true", "yes"):
        return sanitise_environment(os.environ.get("DAGSTER_CLOUD_DEPLOYMENT_NAME", ""))
    return PRODUCTION


def settings_from_env(**values: Any) -> TridentSettings:
    """The settings from ``TRIDENT_*`` variables, or an InvalidSettingsError naming each bad
    variable on one line. pydantic's own report is a multi-line block with a documentation URL
    per field, and reached a CLI user as a traceback. Values are not repeated (one may be a
    secret); a validator's message says what it needs. ``values`` are fields set explicitly (the
    Dagster resource's), the environment supplies the rest."""
    try:
        return TridentSettings(**values)
    except SettingsError as exc:  # a structured value (catalog properties) that is not JSON
        field_name = re.search(r'field "(\w+)"', str(exc))
        name = f"TRIDENT_{field_name.group(1).upper()}" if field_name else "a TRIDENT_* variable"
        raise InvalidSettingsError(
            f'invalid settings: {name}: not valid JSON; it takes a JSON object such as \'{{"key": "value"}}\''
        ) from exc
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            name = "_".join(str(part) for part in err["loc"][:1]).upper()
            problems.append(f"TRIDENT_{name}: {err['msg']}" if name else str(err["msg"]))
        raise InvalidSettingsError("invalid settings: " + "; ".join(problems)) from exc


def usable_home(home: Path) -> None:
    """Create ``TRIDENT_HOME`` (embedded Postgres, local warehouse, spill files all live there) or
    say in one line why it cannot be: a path under a file or a read-only place reached the
    caller as a raw ``FileNotFoundError``/``PermissionError`` from deep inside the first use."""
    try:
        home.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InvalidSettingsError(
            f"invalid settings: TRIDENT_HOME: cannot create or use {str(home)!r} ({exc.strerror or exc}); "
            "point it at a writable folder"
        ) from exc


@functools.lru_cache(maxsize=64)
def _duckdb_refuses(memory_limit: str) -> str | None:
    """Why DuckDB refuses ``memory_limit``, or None. Remembered: its parser's answer for a value
    never changes, and opening a database to ask costs ~15-20 ms of every settings read (each run
    of a Dagster job reads them)."""
    import duckdb

    try:
        duckdb.connect(config={"memory_limit": memory_limit}).close()
    except duckdb.Error as exc:
        return str(exc).splitlines()[0]
    return None
