"""Generic automation for a Trident workspace: sensors (ledger reconciler, commits made outside
Dagster), the table-maintenance and canary jobs and the maintenance schedule. It knows no asset of
its own (the example's schedule lives with the example, ``trident_assets.example``); the
Definitions root ``trident_assets.definitions`` adds ``automation_definitions()`` to a code location."""

from .definitions import automation_definitions

__all__ = ["automation_definitions"]
