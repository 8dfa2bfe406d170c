"""Fixtures of the pg sink's tests."""

from __future__ import annotations

import pytest

from trident_resources.sinks.pg import blocks


@pytest.fixture
def every_write_blocked(monkeypatch: pytest.MonkeyPatch) -> None:
    """A block for every plain write, however small (``MIN_BLOCK_ROWS`` 1): the tests' writes are small."""
    monkeypatch.setattr(blocks, "MIN_BLOCK_ROWS", 1)
