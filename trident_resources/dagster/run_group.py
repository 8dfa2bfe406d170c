"""One run, one publish: every Trident output of a Dagster run tagged ``trident/publish: run``
is staged into ONE transaction group, and the whole run publishes at once when its last step
ends with every step (and so every blocking check) successful. A run with a failed step, or a
cancelled one, publishes nothing: its group is discarded (or kept for audit, by a setting).

Why a group per run and not a publish per step: a reader must never see the run's first asset
new beside its last asset old, or the run's earlier assets published when its last one fails a
blocking check. The group is the engine's (``Trident.transaction(external=True)``): readers
resolve every dataset from the control plane, so the group's one publish flips them all.

How the steps agree without a coordinator: the group's id is derived from the run id, so every
step process joins the same group; each step's end (the resource's teardown, after Dagster has
logged the step's own success) reads the run's step events from the instance, and the step that
finds every step of the run's plan finished publishes (two finding it at once publish once: the
second finds the group published). The ``trident_reconciler`` sensor finishes groups of runs
that ended without such a step (a run worker killed, a run cancelled): ``finish_ended_runs``.

What Dagster shows: the run also carries ``dagster/defer_asset_events``, so a step records no
materialization for a staged output (readers do not see it yet; the step reports an observation
``trident/staged`` instead), and the publish reports each asset's materialization, with the
published snapshot, into the run's event log.

Downstream steps of the run read their upstreams' staged versions (``staged_sources``): they must
see what the run produced. A source staged in the same run is read in full: a delta node does a
full rebuild of it and records no watermark for it (its staged version has no commit instant yet).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import dagster as dg
from dagster._core.events import AssetObservationData, DagsterEvent, DagsterEventType, StepMaterializationData
from dagster._core.storage.dagster_run import DagsterRunStatus

from ..client import Trident
from ..control.groups import KEPT_META
from ..control.plane import LedgerEntry
from ..core.errors import StagedVersionConflictError, TransactionGroupError
from ..core.failpoints import failpoint
from ..core.results import GroupResult, WriteResult
from ..core.settings import PRODUCTION
from ..ops.group import TransactionGroup
from .gate import PARTITION_KEYS, RUN_ID
from .metadata import materialization_metadata, report

log = logging.getLogger(__name__)

RUN_PUBLISH_TAG = "trident/publish"  # run (or job) tag: "run" = the run publishes once, at its end
RUN_PUBLISH = "run"
DEFER_ASSET_EVENTS_TAG = "dagster/defer_asset_events"  # Dagster: steps record no materialization themselves
RUN_GROUP_NAMESPACE = uuid.UUID("5e0b7a34-8a4f-4c1e-9d55-7c2b1f0e6a31")  # run id -> group id (uuid5)

_DONE = {DagsterEventType.STEP_SUCCESS.value, DagsterEventType.STEP_SKIPPED.value}
_STEP_EVENTS = {
    DagsterEventType.STEP_START,
    DagsterEventType.STEP_SUCCESS,
    DagsterEventType.STEP_SKIPPED,
    DagsterEventType.STEP_FAILURE,
    DagsterEventType.STEP_UP_FOR_RETRY,
    DagsterEventType.STEP_RESTARTED,
}
_ENDED = {DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED, DagsterRunStatus.CANCELING}


def run_publish_tags(environment: str = PRODUCTION) -> dict[str, str]:
    """The tags that make a job's runs publish once, at their end: put them on a job
    (``define_asset_job(..., tags=run_publish_tags(settings.environment))``) or on one run (the
    launchpad). The same in an environment (``TRIDENT_ENVIRONMENT``): there the run's outputs
    are staged on the environment's versions and its publish moves every environment head at once,
    production untouched (``environment`` is kept for callers that name it)."""
    del environment  # a run publishes once in production and in every environment alike
    return {RUN_PUBLISH_TAG: RUN_PUBLISH, DEFER_ASSET_EVENTS_TAG: "true"}


def publishes_per_run(run: dg.DagsterRun | None) -> bool:
    """Is ``run`` a run that publishes once, at its end (tag ``trident/publish: run``)?"""
    return run is not None and run.tags.get(RUN_PUBLISH_TAG) == RUN_PUBLISH


def run_group_id(run_id: str) -> uuid.UUID:
    """The transaction group of run ``run_id``: the same in every step process of the run."""
    return uuid.uuid5(RUN_GROUP_NAMESPACE, f"dagster-run:{run_id}")


def join_run_group(t: Trident, run: dg.DagsterRun) -> TransactionGroup:
    """The run's group, joined (recorded on the first step's first write)."""
    return t.transaction(
        group_id=run_group_id(run.run_id),
        external=True,
        label=f"dagster run {run.run_id} ({run.job_name})",
        metadata={RUN_ID: run.run_id, "dagster_job": run.job_name},
    )


def members(t: Trident, run_id: str) -> list[tuple[str, LedgerEntry]]:
    """The staged versions of the run's group: (dataset key, ledger entry)."""
    group = run_group_id(run_id)
    return [(k, e) for k, e in t.staged() if e.group_id == group]


def staged_sources(t: Trident, run: dg.DagsterRun | None) -> dict[str, uuid.UUID]:
    """What a step of ``run`` reads for each dataset the run staged: that staged version (key ->
    txn); empty for a run that does not publish once."""
    if not publishes_per_run(run):
        return {}
    assert run is not None
    return {k: e.txn_id for k, e in members(t, run.run_id)}


def settle_run(t: Trident, instance: dg.DagsterInstance, run_id: str) -> str:
    """Decide the run's group if the run is decided: ``published`` (every step of its plan
    succeeded or was skipped, none failed), ``discarded`` (a step failed for good, or the run
    ended without finishing; ``kept`` instead with ``TRIDENT_FAILED_RUN_STAGED=keep``, and for
    a group kept before), else ``waiting``; ``none`` when the run has no open group.

    Raises:
        ConcurrentWriteError: a member's dataset stayed locked by another writer (the group
            stays open: the next step's end, or the reconciler sensor, tries again).
        ControlPlaneUnavailableError: the control-plane Postgres went away.
    """
    run = instance.get_run_by_id(run_id)
    if run is None or not publishes_per_run(run):
        return "none"
    failpoint("run_group.settle")
    staged = members(t, run_id)
    if not staged:
        return "none"
    if KEPT_META in t.transaction_group(run_group_id(run_id)).metadata:
        return "kept"  # kept for audit: a person decides it
    failed, unfinished = _steps(instance, run)
    if failed or (unfinished and run.status in _ENDED):
        why = f"step {failed[0]} failed" if failed else f"the run ended {run.status.value.lower()} before its steps finished"
        return _discard(t, instance, run, staged, f"run {run_id}: {why}; the run publishes all of its outputs or none")
    if unfinished:
        return "waiting"
    return _publish(t, instance, run, staged)


def finish_ended_runs(t: Trident, instance: dg.DagsterInstance) -> list[tuple[str, str]]:
    """The reconciler sensor's part: settle the groups of runs that ended (a run worker killed
    after its last step, a run cancelled or failed); (run id, outcome) of each group touched.
    Groups of runs this instance does not know are left to the instance that launched them.

    Raises:
        ControlPlaneUnavailableError: the control-plane Postgres went away.
    """
    runs = {
        str((e.metadata or {}).get(RUN_ID)) for _, e in t.staged() if e.group_id is not None and (e.metadata or {}).get(RUN_ID)
    }
    done: list[tuple[str, str]] = []
    for run_id in sorted(runs):
        run = instance.get_run_by_id(run_id)
        if run is None or not publishes_per_run(run) or not run.is_finished:
            continue
        if KEPT_META in t.transaction_group(run_group_id(run_id)).metadata:
            continue  # kept for audit: a person decides it
        try:
            outcome = settle_run(t, instance, run_id)
        except TransactionGroupError as exc:  # decided meanwhile by the run's own step
            log.info("trident run group of %s: %s", run_id, exc)
            continue
        if outcome != "none":
            done.append((run_id, outcome))
    return done


def _steps(instance: dg.DagsterInstance, run: dg.DagsterRun) -> tuple[list[str], list[str]]:
    """The run's failed steps and its steps not finished yet (success or skip), from the events
    Dagster logged; a step retried keeps only its last attempt's outcome."""
    last: dict[str, str] = {}
    for record in instance.all_logs(run.run_id, of_type=_STEP_EVENTS):
        ev = record.dagster_event
        if ev is not None and ev.step_key:
            last[ev.step_key] = ev.event_type_value
    planned = _planned_steps(instance, run) or list(last)
    failed = [s for s in planned if last.get(s) == DagsterEventType.STEP_FAILURE.value]
    unfinished = [s for s in planned if last.get(s) not in _DONE]
    return failed, unfinished


def _planned_steps(instance: dg.DagsterInstance, run: dg.DagsterRun) -> list[str]:
    if run.step_keys_to_execute:
        return list(run.step_keys_to_execute)
    if run.execution_plan_snapshot_id is None:
        return []
    plan = instance.get_execution_plan_snapshot(run.execution_plan_snapshot_id)
    return list(plan.step_keys_to_execute)


def _publish(t: Trident, instance: dg.DagsterInstance, run: dg.DagsterRun, staged: Sequence[tuple[str, LedgerEntry]]) -> str:
    group = run_group_id(run.run_id)
    try:
        done = t.publish_group(group)
    except StagedVersionConflictError as exc:
        _discard(t, instance, run, staged, f"run {run.run_id} could not publish: {exc}")
        raise
    except TransactionGroupError:
        return "published"  # another step of the run published it first (and reported it)
    _report_published(t, instance, run, done, dict(staged))
    log.info("trident: run %s published %d dataset(s) at once (group %s)", run.run_id, len(done.results), group)
    return "published"


def _discard(
    t: Trident, instance: dg.DagsterInstance, run: dg.DagsterRun, staged: Sequence[tuple[str, LedgerEntry]], why: str
) -> str:
    """Discard the run's group, or keep it for audit (``TRIDENT_FAILED_RUN_STAGED=keep``); either
    way readers never see it, and each asset gets an observation saying so."""
    group = run_group_id(run.run_id)
    keep = t.settings.failed_run_staged == "keep"
    try:
        if keep:
            t.keep_group(group, reason=why)
        else:
            t.discard_group(group, reason=why)
    except TransactionGroupError:
        return "published"  # published (or discarded) meanwhile by another step: nothing left to decide
    if keep:
        status, outcome = "kept for audit: the run published nothing", "kept"
        next_step = (
            f"; kept for audit: `trident sql --staged KEY=TXN ...`, then `trident publish {str(group)[:8]}` "
            f"or `trident discard {str(group)[:8]}`"
        )
    else:
        status, outcome, next_step = "discarded: the run published nothing", "discarded", ""
    for key, entry in staged:
        _event(
            instance,
            run,
            DagsterEventType.ASSET_OBSERVATION,
            dg.AssetObservation(
                asset_key=dg.AssetKey(key.split("/")),
                description=f"{key}: staged transaction {entry.txn_id} was {outcome}, never published ({why}){next_step}",
                metadata={"trident/status": status, "trident/staged_txn": str(entry.txn_id)},
            ),
            logging.WARNING,
        )
    log.warning("trident: %s; %s its %d staged version(s)%s", why, outcome, len(staged), next_step)
    return outcome


def _report_published(
    t: Trident, instance: dg.DagsterInstance, run: dg.DagsterRun, done: GroupResult, staged: Mapping[str, LedgerEntry]
) -> None:
    """Each published asset's materialization (one per partition the run wrote), with the same
    metadata a step's own materialization has: the version readers now see."""
    for key, result in sorted(done.results.items()):
        entry = staged.get(key)
        partitions = list((entry.metadata or {}).get(PARTITION_KEYS) or []) if entry is not None else []
        meta = report(
            {
                **materialization_metadata(result, t.describe(key, storage=False)),
                "trident/group_id": str(done.group_id),  # folded into trident/write
            }
        )
        for partition in partitions or [None]:
            _event(
                instance,
                run,
                DagsterEventType.ASSET_MATERIALIZATION,
                dg.AssetMaterialization(
                    asset_key=dg.AssetKey(key.split("/")),
                    partition=partition,
                    description=f"published with run {run.run_id} (transaction group {done.group_id})",
                    metadata=meta,
                ),
                logging.INFO,
            )


def _event(instance: dg.DagsterInstance, run: dg.DagsterRun, kind: DagsterEventType, event: Any, level: int) -> None:
    data: Any = StepMaterializationData(event) if kind == DagsterEventType.ASSET_MATERIALIZATION else AssetObservationData(event)
    instance.report_dagster_event(
        DagsterEvent(event_type_value=kind.value, job_name=run.job_name, message=event.description, event_specific_data=data),
        run_id=run.run_id,
        log_level=level,
    )


def staged_observation(asset_key: dg.AssetKey, key: str, result: WriteResult, partition: Any) -> dg.AssetObservation:
    """What a step reports of an output staged into its run's group (no materialization: readers
    do not see it until the run publishes), with the one-line way to look at it."""
    where = f" ({partition.describe()})" if partition is not None else ""
    return dg.AssetObservation(
        asset_key=asset_key,
        description=(
            f"{key}{where}: staged transaction {result.txn_id}, {result.row_count} rows; published with the whole run "
            f"when its last step succeeds. Inspect it meanwhile with `trident sql --staged {key}={result.txn_id} ...`"
        ),
        metadata={
            "trident/staged": dg.MetadataValue.int(result.row_count),
            "trident/staged_txn": str(result.txn_id),
            "trident/status": "staged: published with the whole run",
        },
    )
