"""Named failure points, so tests can break a write at an exact step with a real fault.

A point does nothing unless armed, either in-process (``armed(...)``) or for a child process via
``TRIDENT_FAILPOINTS="name=raise,other=exit"`` (``exit`` kills the process without cleanup, as a
crash would; ``kill`` sends it SIGKILL; ``sleep:<seconds>`` stalls there, to make a race deterministic). Production code pays one dict lookup per point.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import cast

_armed: dict[str, str] = {}


class InjectedFault(RuntimeError):
    """The failure a ``raise`` failpoint throws."""


def _from_env() -> dict[str, str]:
    spec = os.environ.get("TRIDENT_FAILPOINTS", "")
    return dict(
        cast("tuple[str, str]", tuple(part.split("=", 1))) if "=" in part else (part, "raise") for part in spec.split(",") if part
    )


def failpoint(name: str) -> None:
    action = _armed.get(name) or (_from_env().get(name) if "TRIDENT_FAILPOINTS" in os.environ else None)
    if action is None:
        return
    if action == "exit":
        os._exit(137)
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if action.startswith("sleep:"):
        time.sleep(float(action.split(":", 1)[1]))
        return
    raise InjectedFault(f"injected fault at {name}")


@contextmanager
def armed(name: str, action: str = "raise") -> Iterator[None]:
    _armed[name] = action
    try:
        yield
    finally:
        _armed.pop(name, None)


def armed_action(name: str) -> str | None:
    """The action armed at ``name`` without performing it, for faults that are not an exception
    (e.g. the canary's ``canary.drop_row``, which corrupts its copy to prove a mismatch reverts)."""
    return _armed.get(name) or (_from_env().get(name) if "TRIDENT_FAILPOINTS" in os.environ else None)
