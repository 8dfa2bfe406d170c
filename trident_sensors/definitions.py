"""The Definitions root moved to ``trident_assets.definitions`` (where ``workspace.yaml`` and
``[tool.dagster]`` point). This alias keeps older entry points that name this module working
(``trident check``'s default ``--module``, bench/pipeline_bench.py); point new ones there."""

from trident_assets.definitions import build_definitions, defs, resources

__all__ = ["build_definitions", "defs", "resources"]
