"""Trident nodes in Dagster: factories, output strategies, provenance, expectations, the example."""

from .expectations import Expectation, accepted_values, custom_sql, not_null, row_count_between, unique
from .factories import Node, join_asset, model_asset, split_asset, transform_asset
from .provenance import merge_provenance
from .strategies import Strategy, append_always, append_new, delta, replace, snapshot_replace, upsert

__all__ = [
    "Expectation",
    "Node",
    "Strategy",
    "accepted_values",
    "append_always",
    "append_new",
    "custom_sql",
    "delta",
    "join_asset",
    "merge_provenance",
    "model_asset",
    "not_null",
    "replace",
    "row_count_between",
    "snapshot_replace",
    "split_asset",
    "transform_asset",
    "unique",
    "upsert",
]
