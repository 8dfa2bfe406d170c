"""The example's Definitions, wired as a user's own project is: its assets and checks, its two
jobs and its rebuild schedule, merged with the platform's Definitions (``platform_definitions``:
resources, sensors, maintenance job and schedule)."""

from __future__ import annotations

import dagster as dg

from trident_resources import TridentSettings
from trident_resources.dagster import TridentResource

from ..platform import platform_definitions
from .pipeline import pipeline_definitions
from .schedules import daily_job, pipeline_job, rebuild_schedule


def example_definitions(settings: TridentSettings) -> dg.Definitions:
    """The example pipeline with its jobs, and its schedule on the cron ``settings`` name (the
    Definitions are built from the same settings as the resource their runs use). No resources:
    ``example_project`` adds the platform's."""
    pipeline = pipeline_job(settings)
    return dg.Definitions.merge(
        pipeline_definitions(),
        dg.Definitions(jobs=[pipeline, daily_job], schedules=[rebuild_schedule(settings, pipeline)]),
    )


def example_project(trident: TridentResource | None = None, executor: dg.ExecutorDefinition | None = None) -> dg.Definitions:
    """The whole example code location on ``trident`` (default: the ``TRIDENT_*`` variables):
    the example's own Definitions merged with the platform's, as a user's project merges its own."""
    trident = trident or TridentResource()
    return dg.Definitions.merge(example_definitions(trident.settings()), platform_definitions(trident, executor=executor))
