"""The automation's Definitions: the sensors (ledger reconciler; commits made outside Dagster), the
table-maintenance and canary jobs and the maintenance schedule. It works on any Trident workspace,
whatever assets a code location declares."""

from __future__ import annotations

import dagster as dg

from .commits import trident_commits
from .maintenance import JOBS, SCHEDULES
from .reconciler import trident_reconciler


def automation_definitions() -> dg.Definitions:
    """Every job, schedule and sensor of ``trident_sensors``; no resources (the Definitions root
    binds ``trident``)."""
    return dg.Definitions(jobs=JOBS, schedules=SCHEDULES, sensors=[trident_reconciler, trident_commits])
