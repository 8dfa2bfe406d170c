"""The library a user declares Trident assets with: node factories, output strategies,
expectations (checks), in-step write-audit-publish (``checked``) and the DuckDB compute a node runs
(``compute``). ``example/`` is a TPC-H pipeline declared with it; ``definitions`` only assembles
the example, ``trident_sensors``' automation and the resources into the code location ``dagster dev``
serves."""

from trident_resources.dagster import merge_provenance

from .expectations import Expectation, accepted_values, custom_sql, not_null, row_count_between, unique
from .factories import Node, join_asset, model_asset, split_asset, transform_asset
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
