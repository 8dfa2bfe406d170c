"""Opening a Trident chooses Arrow's allocator (``TRIDENT_ARROW_MEMORY_POOL``), unless told not to."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from tests.conftest import make_settings
from trident_resources import Trident


@pytest.fixture
def mimalloc_first(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Start from pyarrow's own Linux default and put back whatever pool the process had."""
    monkeypatch.delenv("ARROW_DEFAULT_MEMORY_POOL", raising=False)
    before = pa.default_memory_pool()
    pa.set_memory_pool(pa.mimalloc_memory_pool())
    yield
    pa.set_memory_pool(before)


def _open(home: Path, dsn: str, **overrides: object) -> str:
    with Trident(make_settings(home, dsn, **overrides)) as t:
        t.write("mem/probe", pa.table({"x": [1, 2, 3]}), mode="replace")
        assert t.read("mem/probe").num_rows == 3
    return pa.default_memory_pool().backend_name


@pytest.mark.usefixtures("mimalloc_first")
def test_a_trident_makes_jemalloc_arrows_pool_by_default(trident_home: Path, pg_dsn: str) -> None:
    # a pyarrow build without jemalloc (Windows wheels) keeps the pool it had
    expected = "jemalloc" if "jemalloc" in pa.supported_memory_backends() else "mimalloc"
    assert _open(trident_home, pg_dsn) == expected


@pytest.mark.usefixtures("mimalloc_first")
def test_the_pool_setting_names_the_allocator_or_leaves_pyarrows(trident_home: Path, pg_dsn: str) -> None:
    assert _open(trident_home, pg_dsn, arrow_memory_pool="system") == "system"
    pa.set_memory_pool(pa.mimalloc_memory_pool())
    assert _open(trident_home, pg_dsn, arrow_memory_pool="default") == "mimalloc"


@pytest.mark.usefixtures("mimalloc_first")
def test_arrows_own_environment_variable_wins(trident_home: Path, pg_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARROW_DEFAULT_MEMORY_POOL", "mimalloc")
    assert _open(trident_home, pg_dsn) == "mimalloc"
