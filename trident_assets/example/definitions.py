"""The example's Definitions: its assets and checks, its two jobs and its rebuild schedule."""

from __future__ import annotations

import dagster as dg

from trident_resources import TridentSettings

from .pipeline import pipeline_definitions
from .schedules import daily_job, pipeline_job, rebuild_schedule


def example_definitions(settings: TridentSettings) -> dg.Definitions:
    """The example pipeline with its jobs, and its schedule on the cron ``settings`` name (the
    Definitions are built from the same settings as the resource their runs use). No resources:
    the Definitions root binds them."""
    return dg.Definitions.merge(
        pipeline_definitions(),
        dg.Definitions(jobs=[pipeline_job, daily_job], schedules=[rebuild_schedule(settings)]),
    )
