"""Everything Dagster serves (``dagster dev -w workspace.yaml``): the example pipeline's assets and
checks, the rebuild schedule, the reconciler sensor, table maintenance and canary jobs, and the trident resources configured from
``TRIDENT_*`` variables."""

from __future__ import annotations

import dagster as dg

from trident_assets.pipeline import pipeline_definitions
from trident_resources.dagster import TridentIOManager, TridentResource

from .maintenance import JOBS as MAINTENANCE_JOBS
from .maintenance import SCHEDULES as MAINTENANCE_SCHEDULES
from .reconciler import trident_reconciler
from .schedules import pipeline_job, rebuild_schedule


def resources(trident: TridentResource | None = None) -> dict[str, object]:
    trident = trident or TridentResource()
    return {"trident": trident, "io_manager": TridentIOManager(trident=trident)}


def build_definitions(trident: TridentResource | None = None) -> dg.Definitions:
    """The Definitions, optionally on a given resource (tests and the CLI point it elsewhere)."""
    trident = trident or TridentResource()
    return dg.Definitions.merge(
        pipeline_definitions(),
        dg.Definitions(
            jobs=[pipeline_job, *MAINTENANCE_JOBS], schedules=[rebuild_schedule(trident.settings()), *MAINTENANCE_SCHEDULES],
            sensors=[trident_reconciler], resources=resources(trident),
        ),
    )


defs = build_definitions()
