"""The ledger reconciler as a sensor: every few minutes, repair transactions left ``open`` by a
crashed writer (roll forward when the snapshot committed, else abort and remove its files).

Live writers hold their dataset's writer lock, so the reconciler never touches them. The work is a
few short control-plane queries, so it runs in the sensor tick itself and reports what it did.

It also settles the transaction groups of runs that publish once (``trident/publish: run``) and
ended without a last step to do it: a run worker killed, a run cancelled or failed before its
last step (``run_group.finish_ended_runs``): the run's staged versions are discarded, or
published when every step had succeeded.
"""

import dagster as dg

from trident_resources import Trident
from trident_resources.dagster import TridentResource, finish_ended_runs

RECONCILE_INTERVAL_SECONDS = 300


@dg.sensor(
    name="trident_reconciler",
    minimum_interval_seconds=RECONCILE_INTERVAL_SECONDS,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Repair ledger transactions left open by crashed writers (Trident.reconcile) and settle the "
    "transaction groups of ended runs that publish once.",
)
def trident_reconciler(context: dg.SensorEvaluationContext, trident: TridentResource) -> dg.SkipReason:
    with Trident(trident.settings()) as t:
        report = t.reconcile()
        runs = finish_ended_runs(t, context.instance)
    summary = (
        f"rolled forward {len(report.rolled_forward)}, aborted {len(report.aborted)}, "
        f"left {len(report.still_running)} running, cleaned up {len(report.cleaned_up)}, "
        f"{len(report.cleanup_pending)} cleanups pending, {report.aborted_uploads} incomplete uploads aborted, "
        f"{len(runs)} ended run(s) settled"
    )
    if report.rolled_forward or report.aborted or report.cleaned_up or report.aborted_uploads or runs:
        context.log.warning(f"reconciler: {summary}: {report}")
    return dg.SkipReason(f"reconciler: {summary}")
