"""The example pipeline's jobs (the whole pipeline; its daily partitions) and its rebuild schedule.

``TRIDENT_REBUILD_CRON`` (``TridentSettings.rebuild_cron``, default 03:00 every day) sets when; it
starts STOPPED so that serving the UI never rewrites data by surprise: turn it on in the UI or with
``dagster schedule start``.
"""

from __future__ import annotations

import dagster as dg

from trident_resources import TridentSettings
from trident_resources.dagster import run_publish_tags

from .pipeline import DAILY_GROUP, GROUP, RAW_GROUP

PIPELINE_JOB = "tpch_pipeline"


def pipeline_job(settings: TridentSettings) -> dg.UnresolvedAssetJobDefinition:
    """The whole example pipeline. In production its runs publish once, at their end (tags
    ``trident/publish: run``); in an environment each output publishes into the environment as
    it is written, since the environment itself is what reaches production at once
    (``trident env promote``)."""
    return dg.define_asset_job(
        PIPELINE_JOB,
        selection=dg.AssetSelection.groups(RAW_GROUP, GROUP),
        description="Materialize the whole example pipeline: raw TPC-H tables, every node and their checks. In "
        "production the run publishes once, at its end (trident/publish: run): readers see the previous run's nine "
        "datasets until every step succeeded, then the new nine at once; a failed step or blocking check publishes "
        "none of them.",
        tags=run_publish_tags(settings.environment),
    )


daily_job = dg.define_asset_job(
    "tpch_daily",
    selection=dg.AssetSelection.groups(DAILY_GROUP),  # partitioned by SHIP_DAYS, inferred from the assets
    description="The partitioned part of the example (line items by ship day): run it for a day or backfill a range "
    "after tpch_pipeline has loaded tpch/lineitem.",
)


def rebuild_schedule(settings: TridentSettings, job: dg.UnresolvedAssetJobDefinition) -> dg.ScheduleDefinition:
    """The schedule of ``job`` on the cron the settings name (the Definitions are built from the
    same settings as the resource their runs use)."""
    return dg.ScheduleDefinition(
        name="tpch_pipeline_rebuild",
        job=job,
        cron_schedule=settings.rebuild_cron,
        default_status=dg.DefaultScheduleStatus.STOPPED,
        description=f"Rebuild the example pipeline (TRIDENT_REBUILD_CRON, now {settings.rebuild_cron!r}).",
    )
