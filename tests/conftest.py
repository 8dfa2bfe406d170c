"""Shared fixtures: one real embedded Postgres per test session, one workspace per test.

Workspaces isolate datasets, so tests share the Postgres and the local warehouse without seeing
each other's data, and nothing here mocks a part of the trident.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from trident_resources import Trident, TridentSettings

if TYPE_CHECKING:
    from tests.support.rest_catalog import RestCatalogServer
    from tests.support.s3_server import S3Server
from trident_resources.control.embedded_pg import ensure_embedded_postgres, stop_embedded_postgres


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--long",
        action="store_true",
        default=False,
        help="long randomized runs: thousands of model-based operations instead of a few hundred",
    )


@pytest.fixture(scope="session", autouse=True)
def _clean_environment() -> Iterator[None]:
    """Tests describe their own settings; a developer's TRIDENT_* variables must not leak in."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("TRIDENT_")}
    for k in saved:
        del os.environ[k]
    yield
    os.environ.update(saved)


@pytest.fixture(scope="session")
def trident_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("trident-home")
    yield home
    stop_embedded_postgres(home / "pg")


@pytest.fixture(scope="session")
def pg_dsn(trident_home: Path) -> str:
    return ensure_embedded_postgres(trident_home / "pg")


@pytest.fixture
def iceberg_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Small appends take the Iceberg commit path (TRIDENT_INLINE_MAX_ROWS=0), for tests whose
    subject IS that path: the snapshots, data files and metadata a commit leaves (snapshot
    operations, compaction, expiry, bounds repair, storage credentials, faults injected at Iceberg
    commit steps). Set in the environment, so every way a test builds settings takes it: the
    fixtures here, ``TridentSettings()`` in Dagster resources and CLI subprocesses. Request it
    before the fixtures that build settings (``pytestmark = pytest.mark.usefixtures(...)``); a
    child process started without the TRIDENT_* environment is passed ``settings.inline_max_rows``."""
    monkeypatch.setenv("TRIDENT_INLINE_MAX_ROWS", "0")


def make_settings(home: Path, dsn: str, **overrides: object) -> TridentSettings:
    values: dict[str, object] = {
        "home": home,
        "pg_dsn": dsn,
        "workspace": f"t_{uuid.uuid4().hex[:12]}",
        "writer_wait_seconds": 5,
        "duckdb_memory_limit": "512MB",
    }
    values.update(overrides)
    return TridentSettings(**values)  # type: ignore[arg-type]


@pytest.fixture
def settings(trident_home: Path, pg_dsn: str) -> TridentSettings:
    return make_settings(trident_home, pg_dsn)


@pytest.fixture
def trident(settings: TridentSettings) -> Iterator[Trident]:
    t = Trident(settings)
    yield t
    t.close()


@pytest.fixture
def jsonb_only(settings: TridentSettings) -> Iterator[Trident]:
    """The same control plane, its pg datasets read without the row-block cache (jsonb only):
    the truth a read through the cache must equal."""
    t = Trident(settings.model_copy(update={"pg_row_blocks": False}))
    yield t
    t.close()


# -- storage backends: the same suite runs on each --------------------------------------------
BACKENDS = ("local", "s3", "rest")


@pytest.fixture(scope="session")
def s3() -> Iterator[S3Server]:
    from tests.support.s3_server import s3_server

    with s3_server() as server:
        yield server


@pytest.fixture(scope="session")
def rest_catalog(tmp_path_factory: pytest.TempPathFactory, s3: S3Server) -> Iterator[RestCatalogServer]:
    from tests.support.rest_catalog import rest_catalog_server

    with rest_catalog_server(tmp_path_factory.mktemp("lakana"), s3=s3) as server:
        yield server


def backend_settings(request: pytest.FixtureRequest, kind: str, home: Path, dsn: str, **overrides: object) -> TridentSettings:
    """Settings for one backend: local folder + SQL catalog, S3 (moto) + SQL catalog, or a REST
    catalog (lakana, which only accepts tables under bronze/silver/gold) on S3."""
    if kind == "local":
        return make_settings(home, dsn, **overrides)
    server = request.getfixturevalue("s3")
    s3_values: dict[str, object] = {
        "s3_endpoint": server.endpoint,
        "s3_bucket": server.bucket,
        "s3_access_key_id": server.access_key_id,
        "s3_secret_access_key": server.secret_access_key,
        "s3_region": server.region,
        "s3_prefix": f"wh-{uuid.uuid4().hex[:8]}",
    }
    if kind == "s3":
        return make_settings(home, dsn, **s3_values, **overrides)
    rest = request.getfixturevalue("rest_catalog")
    return make_settings(
        home,
        dsn,
        **s3_values,
        catalog_uri=rest.uri,
        catalog_warehouse=rest.warehouse,
        catalog_token=rest.token,
        catalog_properties={"prefix": rest.warehouse},
        namespace_root="bronze",
        **overrides,
    )


@pytest.fixture(params=BACKENDS)
def any_trident(request: pytest.FixtureRequest, trident_home: Path, pg_dsn: str) -> Iterator[Trident]:
    """A Trident on each storage backend in turn."""
    t = Trident(backend_settings(request, request.param, trident_home, pg_dsn))
    yield t
    t.close()
