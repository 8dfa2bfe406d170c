"""The writer registry and the router: which sink a write goes to, and why.

sink = per-dataset pin > per-writer flag > the writer's default, then clamped to the writer's
``max_mode`` (its capability ceiling), so no flag can push a writer into a sink it cannot use.
Flags and pins live in Postgres; each process caches them for ``flag_refresh_seconds``.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from ..core.errors import FlagNotFoundError, InvalidWriteError, PinNotFoundError
from ..core.keys import validate_key
from . import queries as q
from .plane import ControlPlane, DatasetRecord

DATASET_SINK = "dataset"  # tier-3 default: wherever the dataset already lives


@dataclass(frozen=True)
class WriterSpec:
    name: str
    tier: int
    default_mode: str
    max_mode: str


WRITERS: dict[str, WriterSpec] = {
    w.name: w
    for w in (
        WriterSpec("sync.full", 1, "iceberg_native", "iceberg_native"),
        WriterSpec("sync.incremental", 1, "iceberg_native", "iceberg_native"),
        WriterSpec("sync.append", 1, "iceberg_native", "iceberg_native"),
        WriterSpec("cdc.append", 1, "iceberg_native", "iceberg_native"),
        WriterSpec("ingest.api", 1, "iceberg_native", "iceberg_native"),
        WriterSpec("manual.table", 2, "iceberg_native", "iceberg_native"),
        WriterSpec("pipeline.output", 2, "iceberg_native", "iceberg_native"),
        WriterSpec("ingest.stream", 3, DATASET_SINK, "iceberg_native"),
        WriterSpec("row.edit", 3, DATASET_SINK, "iceberg_native"),
        WriterSpec("dataset.manifest", 4, "pg", "pg"),
    )
}


@dataclass(frozen=True)
class RouteDecision:
    sink: str
    requested: str
    clamped: bool
    reason: str  # pin | flag | default | dataset

    def describe(self) -> str:
        clamp = f", clamped from {self.requested}" if self.clamped else ""
        return f"{self.sink} (by {self.reason}{clamp})"


# The one registry of sinks, ordered by capability: a clamp moves left (the CLI offers these names).
SINK_NAMES: tuple[str, ...] = ("pg", "iceberg_native")


def writer_spec(writer: str) -> WriterSpec:
    try:
        return WRITERS[writer]
    except KeyError:
        raise InvalidWriteError(f"unknown writer {writer!r}; known writers: {sorted(WRITERS)}") from None


def clamp(requested: str, max_mode: str) -> tuple[str, bool]:
    if SINK_NAMES.index(requested) > SINK_NAMES.index(max_mode):
        return max_mode, True
    return requested, False


class Router:
    def __init__(self, control: ControlPlane, workspace: str, refresh_seconds: float) -> None:
        self._control = control
        self._workspace = workspace
        self._refresh = refresh_seconds
        self._lock = threading.Lock()
        self._loaded_at = float("-inf")
        self._flags: dict[str, str] = {}
        self._pins: dict[str, str] = {}

    def _state(self) -> tuple[dict[str, str], dict[str, str]]:
        with self._lock:
            if time.monotonic() - self._loaded_at >= self._refresh:
                self._flags = {r["writer"]: r["sink"] for r in self._control.execute(q.LIST_FLAGS, (self._workspace,))}
                self._pins = {r["key"]: r["sink"] for r in self._control.execute(q.LIST_PINS, (self._workspace,))}
                self._loaded_at = time.monotonic()
            return self._flags, self._pins

    def invalidate(self) -> None:
        with self._lock:
            self._loaded_at = float("-inf")

    def resolve(self, writer: str, key: str, existing: DatasetRecord | None) -> RouteDecision:
        spec = writer_spec(writer)
        flags, pins = self._state()
        if key in pins:
            requested, reason = pins[key], "pin"
        elif writer in flags:
            requested, reason = flags[writer], "flag"
        elif spec.default_mode == DATASET_SINK:
            requested, reason = (existing.sink if existing and existing.exists else spec.max_mode), "dataset"
        else:
            requested, reason = spec.default_mode, "default"
        sink, clamped = clamp(requested, spec.max_mode)
        return RouteDecision(sink=sink, requested=requested, clamped=clamped, reason=reason)

    # -- administration (CLI: trident flag / trident pin) -------------------------------------
    def set_flag(self, writer: str, sink: str) -> RouteDecision:
        spec = writer_spec(writer)
        _check_sink(sink)
        self._control.execute(q.UPSERT_FLAG, (self._workspace, writer, sink))
        self.invalidate()
        effective, clamped = clamp(sink, spec.max_mode)
        return RouteDecision(effective, sink, clamped, "flag")

    def clear_flag(self, writer: str) -> None:
        """Remove ``writer``'s flag; FlagNotFoundError when it has none (nothing to clear)."""
        writer_spec(writer)
        removed = self._control.execute(q.DELETE_FLAG, (self._workspace, writer))
        self.invalidate()
        if not removed:
            flags = sorted(self.flags())
            raise FlagNotFoundError(
                f"writer {writer!r} has no flag in workspace {self._workspace!r}, so nothing was cleared "
                f"(flagged writers: {flags or 'none'}); `trident pins` lists them"
            )

    def set_pin(self, key: str, sink: str) -> None:
        validate_key(key)  # a pin on a key no dataset can have would silently never apply
        _check_sink(sink)
        self._control.execute(q.UPSERT_PIN, (self._workspace, key, sink))
        self.invalidate()

    def clear_pin(self, key: str) -> None:
        """Remove ``key``'s pin; PinNotFoundError when it has none: reporting a typo'd key as
        cleared would leave the real pin in force unnoticed."""
        validate_key(key)
        removed = self._control.execute(q.DELETE_PIN, (self._workspace, key))
        self.invalidate()
        if not removed:
            pinned = sorted(self.pins())
            raise PinNotFoundError(
                f"dataset {key!r} has no pin in workspace {self._workspace!r}, so nothing was cleared "
                f"(pinned keys: {pinned or 'none'}); `trident pins` lists them"
            )

    def flags(self) -> dict[str, str]:
        return dict(self._state()[0])

    def pins(self) -> dict[str, str]:
        return dict(self._state()[1])


def _check_sink(sink: str) -> None:
    if sink not in SINK_NAMES:
        raise InvalidWriteError(f"unknown sink {sink!r}; sinks are {list(SINK_NAMES)}")
