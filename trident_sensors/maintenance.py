"""Jobs that keep the trident healthy: table maintenance on a schedule, and the canary that moves a
dataset from the ``pg`` sink to ``iceberg_native`` (the same ``Trident.migrate`` as ``trident canary``).

Both go through the client (the only door to tables and rows) and report what they did as Dagster
metadata, so their history is visible in the UI next to the assets they touch.
"""

from datetime import timedelta
from typing import Any

import dagster as dg

from trident_resources.dagster import TridentResource


class MaintenanceConfig(dg.Config):
    older_than_days: float = 7.0
    retain_last: int = 5
    keys: list[str] = []  # empty: every dataset of the workspace


@dg.op(
    description="Compact small files, expire old snapshots and delete the data files only they used (pg datasets: "
    "rebuild dropped row blocks), dataset by "
    "dataset; a dataset with a write open is skipped (and said so), not failed."
)
def maintain_tables(context: dg.OpExecutionContext, config: MaintenanceConfig, trident: TridentResource) -> dg.Output[int]:
    t = trident.get_client()
    keys = config.keys or sorted({d.key for d in t.datasets()} | set(t.pending_cleanup_keys()))
    expired = deleted = compacted = repaired = rebuilt = 0
    skipped: dict[str, str] = {}
    for key in keys:
        report = t.maintain(key, older_than=timedelta(days=config.older_than_days), retain_last=config.retain_last)
        if report.skipped:
            skipped[key] = report.skipped
            context.log.warning(f"{key}: skipped, {report.skipped}")
            continue
        expired += report.expired_snapshots
        deleted += report.deleted_files
        compacted += report.compacted_files
        repaired += report.repaired_files
        rebuilt += report.rebuilt_blocks
        context.log.info(
            f"{key}: compacted {report.compacted_files} small files, repaired {report.repaired_files} files' bounds, expired {report.expired_snapshots} snapshots, "
            f"deleted {report.deleted_files} files, rebuilt {report.rebuilt_blocks} pg row blocks"
        )
    return dg.Output(
        len(keys) - len(skipped),
        metadata={
            "datasets": len(keys),
            "expired_snapshots": expired,
            "deleted_files": deleted,
            "compacted_files": compacted,
            "repaired_files": repaired,
            "rebuilt_pg_row_blocks": rebuilt,
            "skipped": len(skipped),
            "skipped_datasets": dg.MetadataValue.json(skipped),
        },
    )


@dg.job(description="Table maintenance of every dataset (Trident.maintain).", tags={"kind": "maintenance"})
def table_maintenance_job() -> None:
    maintain_tables()


table_maintenance_schedule = dg.ScheduleDefinition(
    job=table_maintenance_job,
    cron_schedule="0 3 * * *",
    default_status=dg.DefaultScheduleStatus.STOPPED,
    description="Nightly table maintenance; start it in the UI.",
)


class CanaryConfig(dg.Config):
    key: str
    to_sink: str = "iceberg_native"


@dg.op(description="Copy the dataset with identity, compare checksums of both copies, flip only on parity.")
def canary(context: dg.OpExecutionContext, config: CanaryConfig, trident: TridentResource) -> dg.Output[bool]:
    report = trident.get_client().migrate(config.key, config.to_sink)
    context.log.info(report.message)
    metadata: dict[str, Any] = {
        "key": report.key,
        "from_sink": report.from_sink,
        "to_sink": report.to_sink,
        "txn_id": str(report.txn_id),
        "source_rows": report.source_rows,
        "target_rows": report.target_rows,
        "parity": report.parity,
        "flipped": report.flipped,
        "source_checksum": report.source_checksum,
        "target_checksum": report.target_checksum,
    }
    if not report.flipped:
        raise dg.Failure(description=f"canary of {config.key} reverted: {report.message}", metadata=metadata)
    return dg.Output(True, metadata=metadata)


@dg.job(description="Move one dataset from pg to iceberg_native, keeping the flip only on checksum parity.")
def canary_job() -> None:
    canary()


JOBS = [table_maintenance_job, canary_job]
SCHEDULES = [table_maintenance_schedule]
