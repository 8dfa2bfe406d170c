"""The Dagster adapter of the trident: ``TridentResource`` (resource.py) and ``TridentIOManager``
(io_manager.py). The engine (everything else in ``trident_resources``) never imports Dagster; only
this package does, the way dagster-iceberg sits on pyiceberg.

Besides the resource and the IO manager, it exports what a library of asset factories builds on
(``trident_assets`` uses nothing else of the adapter): writing an output as the IO manager would
(``write_output``, ``AuditedVersion``), the write-audit-publish gate (``gate_checks``,
``staged_in_run``, ``supersede``, ``checks_failed``, ``GATE_META``), the ledger's ``RUN_ID``
metadata key, a run's partition (``run_partition``, ``declared``), asset key to dataset key
(``asset_key_to_key``; ``validate_asset_keys`` checks a Definitions' keys when it loads),
provenance merging (``merge_provenance``, ``lineage_entry``, the ``COLUMN_LINEAGE`` field), how a
materialization's metadata is shown (``report``, metadata.py) and the transaction id every attempt
of a step writes an output under (``step_txn_id``, ``output_txn_id``, ``asset_step_txn_id``), and
runs that publish once (``run_publish_tags``, ``staged_sources``, ``settle_run``, run_group.py)."""

from .asset_keys import InvalidAssetKeysError, validate_asset_keys
from .gate import GATE_META, PARTITION_KEYS, RUN_ID, checks_failed, gate_checks, staged_in_run, supersede
from .io_manager import (
    AssetReturnedNoneError,
    AuditedVersion,
    TridentIOManager,
    TridentOutput,
    WriteMode,
    asset_key_to_key,
    write_output,
)
from .metadata import COLUMN_LINEAGE, report
from .partition_mapping import declared, run_partition
from .pools import dataset_pool
from .provenance import lineage_entry, merge_provenance
from .resource import TridentResource
from .run_group import (
    RUN_PUBLISH_TAG,
    finish_ended_runs,
    join_run_group,
    publishes_per_run,
    run_group_id,
    run_publish_tags,
    settle_run,
    staged_sources,
)
from .step_txn import asset_step_txn_id, output_txn_id, step_txn_id

__all__ = [
    "COLUMN_LINEAGE",
    "GATE_META",
    "PARTITION_KEYS",
    "RUN_ID",
    "RUN_PUBLISH_TAG",
    "AssetReturnedNoneError",
    "AuditedVersion",
    "InvalidAssetKeysError",
    "TridentIOManager",
    "TridentOutput",
    "TridentResource",
    "WriteMode",
    "asset_key_to_key",
    "asset_step_txn_id",
    "checks_failed",
    "dataset_pool",
    "declared",
    "finish_ended_runs",
    "gate_checks",
    "join_run_group",
    "lineage_entry",
    "merge_provenance",
    "output_txn_id",
    "publishes_per_run",
    "report",
    "run_group_id",
    "run_partition",
    "run_publish_tags",
    "settle_run",
    "staged_in_run",
    "staged_sources",
    "step_txn_id",
    "supersede",
    "validate_asset_keys",
    "write_output",
]
