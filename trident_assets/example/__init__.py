"""The example: a TPC-H pipeline declared with ``trident_assets`` the way a user declares theirs.

``pipeline`` holds its nodes, ``tpch`` generates its source data, ``schedules`` its jobs and rebuild
schedule; ``example_definitions`` gathers them and ``example_project`` merges them with the platform's
Definitions, as a user's project does; the Definitions root (``trident_assets.definitions``) serves that.
"""

from .definitions import example_definitions, example_project

__all__ = ["example_definitions", "example_project"]
