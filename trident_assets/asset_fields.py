"""Dagster's own asset fields, passed through the node factories unchanged.

A Dagster engineer declares a Trident node with the fields they give any ``@dg.asset``: owners,
tags, code version, kinds, freshness policy, retry policy, concurrency pool. The factories take
them as keyword arguments of these names (``DagsterFields``) and hand them to Dagster as they are:
the per-asset ones to each ``AssetOut`` (a split's two outputs get the same), the per-op ones
(``retry_policy``, ``pool``) to the op. ``kinds`` stays an explicit factory argument, because each
factory has its own default (``iceberg`` and the engine that computes).

``pool``: without one, an op runs in its dataset's pool (``trident_resources.dagster.pools``), so
that Dagster queues writers of one dataset instead of letting the engine's writer lock make them
wait; a pool given here replaces it (the writer lock still serialises the writes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

import dagster as dg


class DagsterFields(TypedDict, total=False):
    """The Dagster fields a factory passes through (all optional, Dagster's meaning)."""

    owners: Sequence[str]
    tags: Mapping[str, str]
    code_version: str
    freshness_policy: dg.FreshnessPolicy
    retry_policy: dg.RetryPolicy
    pool: str


OUT_FIELDS = ("owners", "tags", "code_version", "freshness_policy")
OP_FIELDS = ("retry_policy", "pool")


def out_fields(fields: DagsterFields) -> dict[str, Any]:
    """The per-asset fields, as ``dg.AssetOut`` keyword arguments."""
    return {k: fields[k] for k in OUT_FIELDS if fields.get(k) is not None}  # type: ignore[literal-required]


def op_fields(fields: DagsterFields, default_pool: str | None) -> dict[str, Any]:
    """The per-op fields, as ``dg.multi_asset`` keyword arguments; the dataset's pool unless
    ``fields`` names one."""
    return {"retry_policy": fields.get("retry_policy"), "pool": fields.get("pool") or default_pool}


def check_fields(fields: Mapping[str, Any], where: str) -> DagsterFields:
    """``fields`` when every name is one of ``DagsterFields``; otherwise a ``TypeError`` that names
    the unknown field, as Python does for an unexpected keyword argument.

    Raises:
        TypeError: a name that is not a Dagster field the factories pass through.
    """
    unknown = sorted(set(fields) - set(OUT_FIELDS) - set(OP_FIELDS))
    if unknown:
        raise TypeError(
            f"{where}() got unexpected keyword argument(s) {unknown}; Dagster fields it passes through: "
            f"{[*OUT_FIELDS, *OP_FIELDS]}"
        )
    return DagsterFields(**fields)  # type: ignore[typeddict-item]
