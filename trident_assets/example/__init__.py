"""The example: a TPC-H pipeline declared with ``trident_assets`` the way a user declares theirs.

``pipeline`` holds its nodes, ``tpch`` generates its source data, ``schedules`` its jobs and rebuild
schedule; ``example_definitions`` gathers them for the Definitions root (``trident_assets.definitions``).
"""

from .definitions import example_definitions

__all__ = ["example_definitions"]
