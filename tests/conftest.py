"""Shared fixtures: one real embedded Postgres per test session, one workspace per test.

Workspaces isolate datasets, so tests share the Postgres and the local warehouse without seeing
each other's data, and nothing here mocks a part of the trident.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from trident_resources import Trident, TridentSettings
from trident_resources.embedded_pg import ensure_embedded_postgres, stop_embedded_postgres


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
