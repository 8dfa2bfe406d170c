"""The library a user declares Trident assets with: node factories, output strategies,
expectations (checks), in-step write-audit-publish (``checked``) and the DuckDB compute a node runs
(``compute``), the same nodes as Dagster Components (``components``: a ``defs.yaml`` declares one)
and ``platform_definitions`` (resources, sensors, maintenance: merge it with your own Definitions).
``example/`` is a TPC-H pipeline declared with it; ``definitions`` only assembles the example
project into the code location ``dagster dev`` and ``dg dev`` serve."""

from trident_resources.dagster import merge_provenance

from .expectations import Expectation, accepted_values, custom_sql, not_null, row_count_between, unique
from .factories import Node, join_asset, model_asset, split_asset, transform_asset
from .platform import iceberg_kinds, platform_definitions
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
    "iceberg_kinds",
    "join_asset",
    "merge_provenance",
    "model_asset",
    "not_null",
    "platform_definitions",
    "replace",
    "row_count_between",
    "snapshot_replace",
    "split_asset",
    "transform_asset",
    "unique",
    "upsert",
]
