"""Process environment variables set for the length of one block (a command's Dagster instance,
one request of the warm sql server), then put back as they were (unset ones unset again)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping


@contextlib.contextmanager
def temporarily(values: Mapping[str, str | None]) -> Iterator[None]:
    """Set each variable of ``values`` (``None``: unset it) inside the block."""
    saved = {k: os.environ.get(k) for k in values}
    try:
        _apply(values)
        yield
    finally:
        _apply(saved)


def _apply(values: Mapping[str, str | None]) -> None:
    for k, v in values.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
