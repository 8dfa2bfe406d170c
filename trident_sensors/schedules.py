"""The rebuild schedule of the example pipeline.

``TRIDENT_REBUILD_CRON`` sets when (default 03:00 every day); it starts STOPPED so that serving the
UI never rewrites data by surprise: turn it on in the UI or with ``dagster schedule start``.
"""

from __future__ import annotations

import os

import dagster as dg

from trident_assets.pipeline import GROUP, RAW_GROUP

DEFAULT_CRON = "0 3 * * *"

pipeline_job = dg.define_asset_job(
    "tpch_pipeline",
    selection=dg.AssetSelection.groups(RAW_GROUP, GROUP),
    description="Materialize the whole example pipeline: raw TPC-H tables, every node and their checks.",
)

rebuild_schedule = dg.ScheduleDefinition(
    name="tpch_pipeline_rebuild",
    job=pipeline_job,
    cron_schedule=os.environ.get("TRIDENT_REBUILD_CRON", DEFAULT_CRON),
    default_status=dg.DefaultScheduleStatus.STOPPED,
    description="Rebuild the example pipeline (TRIDENT_REBUILD_CRON, default daily at 03:00).",
)
