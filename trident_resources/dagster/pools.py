"""Dagster concurrency pools for Trident datasets.

A dataset has one writer lock (the control plane's), and a second writer waits for it for
``TRIDENT_WRITER_WAIT_SECONDS`` and then fails. Two runs that both materialize a dataset (a
schedule overlapping a manual run, a backfill) would pile onto that lock. Naming one Dagster pool
per dataset moves the wait into Dagster: with one slot per pool (``concurrency: pools:
default_limit: 1`` in the instance's dagster.yaml, as ``trident ui`` writes it) the second step is
queued by Dagster until the first has finished, visibly in the UI, instead of timing out.

Partitioned assets get no pool: different partitions of one dataset are written concurrently by
design (per-partition locks), and a pool is per asset, not per partition.
"""

from __future__ import annotations

import dagster as dg

POOL_PREFIX = "trident/"


def dataset_pool(key: str, partitions_def: dg.PartitionsDefinition | None = None) -> str | None:
    """The pool of the step that writes dataset ``key`` (None for a partitioned asset)."""
    return None if partitions_def is not None else POOL_PREFIX + key
