"""Dagster partitions onto Trident partitions: a ``partitions_def`` plus
``metadata={"partition_expr": ...}`` becomes a ``PartitionFilter`` for the write (and for the read
of a partitioned input), the convention dagster-iceberg and dagster-duckdb use.

=============================  ===============================  ===================================
partitions_def                 Iceberg partition field          slice a run writes / reads
=============================  ===============================  ===================================
Hourly                         hour(column)                     [window start, window end)
Daily                          day(column)                      [window start, window end)
Weekly                         day(column): a 7-day range       [window start, window end)
Monthly                        month(column)                    [window start, window end)
Static, Dynamic                identity(column)                 column IN (the run's keys)
Multi (<= 1 time dimension)    one field per dimension          the dimensions ANDed
=============================  ===============================  ===================================

Weekly maps to ``day`` rather than identity: a week's rows then replace exactly its seven day
partitions whether the column is a date or a timestamp, and a later re-partitioning to daily runs
needs no rewrite. A multi-partition ``partition_expr`` is a mapping dimension name -> column.

Anything the trident cannot honour exactly raises ``PartitionError`` saying what to declare: a
partitioned asset without ``partition_expr`` would otherwise replace the whole dataset on every
partition run (the data loss this module exists to prevent).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import dagster as dg

from ..core.errors import PartitionError
from ..core.partitions import PartitionDim, PartitionFilter, TransformName

PARTITION_EXPR = "partition_expr"
_TRANSFORM_BY_SCHEDULE: dict[str, TransformName] = {"HOURLY": "hour", "DAILY": "day", "WEEKLY": "day", "MONTHLY": "month"}


def output_partition(context: dg.OutputContext) -> PartitionFilter | None:
    """The partition(s) this output writes, or None for an unpartitioned asset."""
    if not context.has_asset_partitions:
        return None
    meta = context.definition_metadata or {}
    return partition_filter(
        context.asset_partitions_def,
        meta.get(PARTITION_EXPR),
        list(context.asset_partition_keys),
        asset="/".join(context.asset_key.path),
    )


def input_partition(context: dg.InputContext) -> PartitionFilter | None:
    """The upstream partition(s) this input loads (partition mappings already applied by
    Dagster), or None to load everything (an unpartitioned downstream)."""
    if not context.has_asset_partitions:
        return None
    upstream = context.upstream_output
    meta = dict(upstream.definition_metadata or {}) if upstream is not None else {}
    expr = (context.definition_metadata or {}).get(PARTITION_EXPR) or meta.get(PARTITION_EXPR)
    return partition_filter(
        context.asset_partitions_def, expr, list(context.asset_partition_keys), asset="/".join(context.asset_key.path)
    )


def partition_filter(
    partitions_def: dg.PartitionsDefinition | None, partition_expr: Any, keys: Sequence[str], *, asset: str
) -> PartitionFilter:
    """``keys`` of ``partitions_def`` as a filter on the column(s) ``partition_expr`` names."""
    if partitions_def is None:
        raise PartitionError(f"asset {asset!r} runs with partition keys but has no partitions_def")
    if not keys:
        raise PartitionError(f"asset {asset!r}: a partitioned run without partition keys")
    if partition_expr is None:
        raise PartitionError(
            f"asset {asset!r} is partitioned ({type(partitions_def).__name__}) but declares no partition column, so "
            "Trident cannot tell which rows a run replaces. Declare it: metadata={'partition_expr': '<column>'} "
            "(for a MultiPartitionsDefinition a mapping {'<dimension>': '<column>', ...})"
        )
    if isinstance(partitions_def, dg.MultiPartitionsDefinition):
        return _multi(partitions_def, partition_expr, keys, asset)
    if not isinstance(partition_expr, str):
        raise PartitionError(f"asset {asset!r}: partition_expr must be a column name, got {partition_expr!r}")
    return PartitionFilter((_dimension(partitions_def, partition_expr, keys, asset),), declared_in="dagster")


def _dimension(pdef: dg.PartitionsDefinition, column: str, keys: Sequence[str], asset: str) -> PartitionDim:
    if isinstance(pdef, dg.TimeWindowPartitionsDefinition):
        start, end = _window(pdef, keys, asset)
        return PartitionDim(column, _transform(pdef, asset), start=start, end=end)
    if isinstance(pdef, (dg.StaticPartitionsDefinition, dg.DynamicPartitionsDefinition)):
        return PartitionDim(column, "identity", values=tuple(dict.fromkeys(keys)))
    raise PartitionError(
        f"asset {asset!r}: {type(pdef).__name__} is not supported; use time-window (hourly, daily, weekly, "
        "monthly), static, dynamic or multi-partitions with at most one time dimension"
    )


def _transform(pdef: dg.TimeWindowPartitionsDefinition, asset: str) -> TransformName:
    schedule = getattr(getattr(pdef, "schedule_type", None), "name", None)
    if schedule not in _TRANSFORM_BY_SCHEDULE:
        raise PartitionError(
            f"asset {asset!r}: time partitions on cron {pdef.cron_schedule!r} are not supported; use hourly, daily, "
            "weekly or monthly partitions"
        )
    return _TRANSFORM_BY_SCHEDULE[schedule]


def _window(pdef: dg.TimeWindowPartitionsDefinition, keys: Sequence[str], asset: str) -> tuple[datetime, datetime]:
    """The run's keys as one contiguous window (a single-run backfill of a range)."""
    windows = sorted((pdef.time_window_for_partition_key(k) for k in dict.fromkeys(keys)), key=lambda w: w.start)
    for a, b in itertools.pairwise(windows):
        if a.end != b.start:
            raise PartitionError(
                f"asset {asset!r}: the run's time partitions are not contiguous ({a.end} to {b.start} is missing); "
                "a single run writes one contiguous range"
            )
    return windows[0].start, windows[-1].end


def _multi(pdef: dg.MultiPartitionsDefinition, expr: Any, keys: Sequence[str], asset: str) -> PartitionFilter:
    names = [d.name for d in pdef.partitions_defs]
    if not isinstance(expr, Mapping) or set(expr) != set(names):
        raise PartitionError(
            f"asset {asset!r} has multi-partitions {names}: declare partition_expr as a mapping of every dimension "
            f"to its column, e.g. {{{', '.join(repr(n) + ': ' + repr('<column>') for n in names)}}}"
        )
    times = [d for d in pdef.partitions_defs if isinstance(d.partitions_def, dg.TimeWindowPartitionsDefinition)]
    if len(times) > 1:
        raise PartitionError(f"asset {asset!r}: multi-partitions with more than one time dimension are not supported")
    by_dim: dict[str, list[str]] = {n: [] for n in names}
    combos = set()
    for k in keys:
        parts = (
            k.keys_by_dimension if isinstance(k, dg.MultiPartitionKey) else pdef.get_partition_key_from_str(k).keys_by_dimension
        )
        combos.add(tuple(parts[n] for n in names))
        for n in names:
            if parts[n] not in by_dim[n]:
                by_dim[n].append(parts[n])
    product = 1
    for n in names:
        product *= len(by_dim[n])
    if product != len(combos):
        raise PartitionError(
            f"asset {asset!r}: this run's {len(combos)} multi-partition keys are not a full cross product of their "
            "dimensions' keys, so no single filter replaces exactly them; run them in separate runs"
        )
    dims = [_dimension(d.partitions_def, str(expr[d.name]), by_dim[d.name], asset) for d in pdef.partitions_defs]
    return PartitionFilter(tuple(dims), declared_in="dagster")


def declared(metadata: Mapping[str, Any] | None, partitions_def: dg.PartitionsDefinition | None) -> dict[str, Any]:
    """Asset metadata for a factory: ``partition_expr`` is required when ``partitions_def`` is given
    (refused at definition time, before any run could replace the wrong rows)."""
    meta = dict(metadata or {})
    if partitions_def is not None and PARTITION_EXPR not in meta:
        raise PartitionError(
            "a partitioned node needs metadata={'partition_expr': '<column>'} naming the column its partitions "
            "are on (a mapping dimension -> column for multi-partitions)"
        )
    return meta


def partition_metadata(result: Any, partition: PartitionFilter | None) -> dict[str, Any]:
    """A partition run's materialization: ``dagster/row_count`` is the rows of the partition(s)
    written, ``trident/dataset_row_count`` the dataset's total after the write."""
    if partition is None:
        return {}
    return {
        "dagster/row_count": dg.MetadataValue.int(result.rows_written),
        "trident/dataset_row_count": dg.MetadataValue.int(result.row_count),
        "trident/partition": partition.describe(),
    }


def run_partition(context: dg.AssetExecutionContext, key: str) -> PartitionFilter | None:
    """The partition(s) a node factory's run computes for output ``key``: its sources are read
    only there (when they have the partition column) and the IO manager replaces exactly that."""
    asset_key = dg.AssetKey(key.split("/"))
    pdef = context.assets_def.partitions_def
    if pdef is None or (not context.has_partition_key_range and not context.has_partition_key):
        return None
    meta = context.assets_def.metadata_by_key.get(asset_key, {})
    return partition_filter(pdef, meta.get(PARTITION_EXPR), list(context.partition_keys), asset=key)
