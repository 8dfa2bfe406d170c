"""The write side of environments (docs/environments.md, ``ops/environments.py``): what an
environment write is refused, the version it builds on (the environment's head, or production's
version it forks) and the ledger metadata that routes its COMMIT to the environment's head."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ..control.plane import ENV_FORK_META, ENV_LEDGER_META, DatasetRecord
from ..core.errors import EnvironmentUnsupportedError
from ..core.partitions import PartitionFilter
from ..engine import Engine
from ..transaction import inline
from .flush import flushed_first

KEYS_META = "trident.keys"  # an environment write's key columns (what diff and promote match rows by)


def refuse_repartition(engine: Engine, ds: DatasetRecord, partition: PartitionFilter) -> None:
    """Refuse an environment's partition write that would change the table's partitioning: a
    partition spec is the table's, shared by production and every branch.

    Raises:
        EnvironmentUnsupportedError: the dataset exists and is not partitioned as ``partition`` says.
    """
    if not ds.exists:
        return
    have = engine.sink(ds.sink).partitioning(ds)
    if have is None or set(have) != set(partition.spec):
        raise EnvironmentUnsupportedError(
            f"a partition write of {ds.key!r} by {partition.describe()} in environment {engine.environment!r} would "
            f"partition the table anew ({'partitioned by ' + ', '.join(f'{t}({c})' for c, t in have) if have else 'unpartitioned'} "
            "now), and a table's partitioning is shared by production and every environment: make that first "
            "partitioned write in production"
        )


def refuse_sink(engine: Engine, key: str, sink: str) -> None:
    """Refuse an environment write to a dataset whose sink has no branches (``pg``).

    Raises:
        EnvironmentUnsupportedError: ``sink`` is not ``iceberg_native``.
    """
    if sink != inline.INLINE_SINK:
        raise EnvironmentUnsupportedError(
            f"dataset {key!r} lives in the {sink!r} sink, which has no zero-copy branches: a write in environment "
            f"{engine.environment!r} would change production's rows. Write it in production, or move it to the "
            f"trident first (`trident canary {key}`); see docs/environments.md#pg-datasets"
        )


def fork_point(engine: Engine, ds: DatasetRecord) -> tuple[DatasetRecord, dict[str, Any] | None]:
    """The record an environment write of ``ds`` (production's record; the caller holds its writer
    lock) builds on, and the fork its COMMIT records when this is the environment's first write of
    it (``None`` when the environment already has a head: that head is the base). Production's
    inlined tail is flushed first, so the fork is one Iceberg snapshot.

    Raises:
        ControlPlaneUnavailableError: the control-plane Postgres went away.
        (and whatever the flush of production's inlined tail raises)
    """
    env = engine.environment
    head = engine.control.env_heads(engine.workspace, env, [ds.dataset_id]).get(ds.dataset_id)
    if head is not None:
        return head.over(ds), None
    if ds.exists:
        ds = flushed_first(engine, ds)
    fork = {
        "born": not ds.exists,
        "txn_id": str(ds.last_txn_id) if ds.exists else None,
        "snapshot_id": ds.snapshot_id if ds.exists else None,
        "row_count": ds.row_count if ds.exists else None,
        "next_row_index": ds.next_row_index if ds.exists else None,
        "schema": ds.schema if ds.exists else None,
        "schema_version": ds.schema_version if ds.exists else 0,
    }
    if not ds.exists:
        ds = replace(ds, row_count=0, next_row_index=0, schema=None, schema_version=0, snapshot_id=None, last_txn_id=None)
    return replace(ds, environment=env), fork


def write_meta(engine: Engine, fork: dict[str, Any] | None, keys: Sequence[str]) -> dict[str, Any]:
    """The ledger metadata of an environment write: the environment (what hides it from
    production's history and routes its COMMIT to the head), the fork, the key columns.

    Raises:
        Nothing: it builds a dict.
    """
    meta: dict[str, Any] = {ENV_LEDGER_META: engine.environment, KEYS_META: list(keys)}
    if fork is not None:
        meta[ENV_FORK_META] = fork
    return meta
