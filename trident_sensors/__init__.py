"""What runs on its own: schedules, sensors (ledger reconciler, commits made outside Dagster), and
the maintenance and canary jobs. The Definitions root is ``trident_assets.definitions``."""
