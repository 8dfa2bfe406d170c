"""Write-audit-publish for plain ``@asset``s whose blocking ``@asset_check``s are separate steps.

Why a gate here and not in the asset: Dagster runs each ``@asset_check`` in a step of its own,
after the asset's step has stored its output, and offers no callback when a check finishes. So
the IO manager stages the output when blocking checks of the asset are about to run in the same
run (the ledger row of the staged version records them, ``trident.gate``, and the run), the
checks' ``load_input`` reads that staged version, and *settling* decides from what Dagster
recorded in the run's event log: every gate check passed -> publish; one failed (ERROR severity)
-> leave it staged for an operator and record why; otherwise wait.

Settling is idempotent and happens wherever the run touches Trident after a check could have
finished: at the start of every step (the resource's setup, each step's own process under the
multiprocess executor) and its end (teardown: the last check step publishes), before an input is
loaded and before a client is handed out in an in-process run. Downstream steps of the asset wait
for its blocking check steps, so they always see the published version; two settlers racing
publish once (the writer lock serialises them and the loser finds the version committed).

A run that does not execute any blocking check of the asset (checks not selected, a re-execution
of the asset step alone) writes directly: nothing would ever settle a staged version.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import dagster as dg
from dagster._core.errors import DagsterInvariantViolationError
from dagster._core.events import AssetObservationData, DagsterEvent, DagsterEventType

from ..client import Trident
from ..control.plane import LedgerEntry
from ..core.errors import ChecksFailedError, DatasetNotFoundError, InvalidReadError, StagedVersionConflictError
from ..core.failpoints import failpoint

RUN_ID = "dagster_run_id"  # ledger metadata key: the commit came from this Dagster run
PARTITION_KEYS = "dagster_partition_keys"  # ledger metadata key: the Dagster partitions that run wrote
GATE_META = "trident.gate"  # ledger metadata of a gated staged write: the blocking checks that must pass
GATE_STEPS_META = "trident.gate_steps"  # ... and the step running each (a step that fails without a result rejects)

log = logging.getLogger(__name__)

_pending_lock = threading.Lock()
_pending_runs: set[str] = set()  # runs of this process with a gated version not settled yet


def step_of(context: dg.OutputContext | dg.InputContext) -> Any | None:
    """The step executing ``context``, or None for a context built outside a run (unit tests of
    an IO manager): nothing is gated there."""
    try:
        return context.step_context
    except DagsterInvariantViolationError:
        return None


def gate_checks(step_context: Any, asset_key: dg.AssetKey) -> dict[str, str]:
    """The blocking checks of ``asset_key`` that this run executes in *other* steps than the one
    writing it (checks of the asset's own step are audited there, see checked_asset): check name
    -> the step that runs it."""
    if step_context is None:
        return {}
    layer = step_context.job_def.asset_layer
    own = layer.get_assets_def_for_node(step_context.node_handle)
    own_checks = set(own.check_keys) if own is not None else set()
    # the run's steps, not this process's plan (under the multiprocess executor a step's process
    # plans only itself); None: every step of the (already subset) job
    run_steps = step_context.dagster_run.step_keys_to_execute
    to_run = set(run_steps) if run_steps is not None else None
    gate = {}
    for ck in layer.asset_graph.asset_check_keys:
        if ck.asset_key != asset_key or ck in own_checks or not layer.asset_graph.get(ck).blocking:
            continue
        step = str(layer.get_op_output_handle(ck).node_handle)
        if to_run is None or step in to_run:
            gate[ck.name] = step
    return dict(sorted(gate.items()))


def audits(step_context: Any, asset_key: dg.AssetKey) -> bool:
    """The step is a check step of ``asset_key``: it audits that asset's staged version."""
    if step_context is None:
        return False
    own = step_context.job_def.asset_layer.get_assets_def_for_node(step_context.node_handle)
    return own is not None and any(ck.asset_key == asset_key for ck in own.check_keys) and asset_key not in own.keys


def staged_in_run(t: Trident, key: str, run_id: str) -> uuid.UUID | None:
    """The version of ``key`` this run staged and has not settled yet (the newest one)."""
    mine = [e for e in staged_of(t, key) if (e.metadata or {}).get(RUN_ID) == run_id]
    mine.sort(key=lambda e: e.staged_at or e.started_at)
    return mine[-1].txn_id if mine else None


def staged_of(t: Trident, key: str) -> list[LedgerEntry]:
    """The staged versions of ``key``; none for a key that names no dataset yet (a run's first
    write), where ``Trident.staged`` refuses the key as a probable misspelling."""
    try:
        return [e for _, e in t.staged(key)]
    except DatasetNotFoundError:
        return []


def supersede(t: Trident, key: str, run_id: str) -> None:
    """Discard the gated versions of ``key`` this run staged before (a retried step stages again):
    only the newest may ever be published by the run's checks."""
    for e in staged_of(t, key):
        if (e.metadata or {}).get(RUN_ID) == run_id and (e.metadata or {}).get(GATE_META):
            t.discard(key, e.txn_id, reason="superseded: the run's step staged a newer version")


def note_pending(run_id: str) -> None:
    with _pending_lock:
        _pending_runs.add(run_id)


def is_pending(run_id: str) -> bool:
    with _pending_lock:
        return run_id in _pending_runs


@dataclass(frozen=True)
class Decision:
    key: str
    txn_id: uuid.UUID
    outcome: str  # published | rejected | conflict | waiting
    failed: tuple[str, ...] = ()


_GATE_EVENTS = {DagsterEventType.ASSET_CHECK_EVALUATION, DagsterEventType.ASSET_OBSERVATION, DagsterEventType.STEP_FAILURE}


def settle(t: Trident, instance: dg.DagsterInstance, run_id: str) -> list[Decision]:
    """Publish or reject every gated version this run staged whose gate is decided (see module)."""
    pending = [(k, e) for k, e in t.staged() if (e.metadata or {}).get(RUN_ID) == run_id and (e.metadata or {}).get(GATE_META)]
    if not pending:
        with _pending_lock:
            _pending_runs.discard(run_id)
        return []
    decisions = []
    for key, entry in pending:
        # the run's events are read under the staged version's decision lock: another step
        # process of the run may be settling it too, and must find this one's report
        def decide(key: str = key, entry: LedgerEntry = entry) -> Decision:
            records = instance.all_logs(run_id, of_type=_GATE_EVENTS)
            return _settle_one(t, instance, run_id, key, entry, records)

        decisions.append(t.decide_staged(entry.txn_id, decide))
    if all(d.outcome != "waiting" for d in decisions):
        with _pending_lock:
            _pending_runs.discard(run_id)
    return decisions


def _settle_one(t: Trident, instance: dg.DagsterInstance, run_id: str, key: str, entry: Any, records: Sequence[Any]) -> Decision:
    asset_key = dg.AssetKey(key.split("/"))
    gate = list(entry.metadata[GATE_META])
    steps = dict(entry.metadata.get(GATE_STEPS_META) or {})
    latest: dict[str, Any] = {}
    crashed: set[str] = set()  # steps that failed: a check among them without a result never passes
    reported = False
    # Every event of the run counts, with no clock comparison (Postgres's and the workers' clocks
    # may differ): the checks of an asset run after its step succeeded, which happens once per run,
    # and a version staged by an earlier attempt of that step was superseded (discarded).
    for rec in records:  # in event order: the last evaluation of a check wins
        ev = rec.dagster_event
        if ev is None:
            continue
        if ev.event_type == DagsterEventType.STEP_FAILURE:
            crashed.add(str(ev.step_key))
        elif ev.event_type == DagsterEventType.ASSET_CHECK_EVALUATION:
            evaluation = ev.event_specific_data
            if evaluation.asset_key == asset_key:
                latest[evaluation.check_name] = evaluation
        elif ev.event_type == DagsterEventType.ASSET_OBSERVATION:
            obs = ev.event_specific_data.asset_observation
            decided = "trident/gate" in obs.metadata  # the gate's own report (not a check's input load)
            reported = reported or (decided and _meta_text(obs.metadata.get("trident/staged_txn")) == str(entry.txn_id))
    failed = tuple(
        n
        for n in gate
        if (n in latest and not latest[n].passed and latest[n].severity == dg.AssetCheckSeverity.ERROR)
        or (n not in latest and steps.get(n) in crashed)
    )
    if failed:
        if not reported:
            meta = {"trident/status": "rejected: still staged, not published", "trident/failed_checks": list(failed)}
            _report(
                instance,
                run_id,
                asset_key,
                rejection_message(key, entry.txn_id, failed),
                {**meta, "trident/staged_txn": str(entry.txn_id)},
                gate,
            )
        return Decision(key, entry.txn_id, "rejected", failed)
    if not all(n in latest for n in gate):
        return Decision(key, entry.txn_id, "waiting")
    warned = sorted(n for n, e in latest.items() if not e.passed)
    try:
        result = t.publish(key, entry.txn_id)
    except InvalidReadError:  # settled meanwhile by another step of the run (or by an operator)
        return Decision(key, entry.txn_id, "published")
    except StagedVersionConflictError as exc:
        if not reported:
            meta = {"trident/status": "not published: the dataset changed since staging", "trident/staged_txn": str(entry.txn_id)}
            _report(instance, run_id, asset_key, f"{key}: {exc}", meta, gate)
        return Decision(key, entry.txn_id, "conflict")
    note = f"; non-blocking check(s) {warned} failed" if warned else ""
    log.info("trident gate: published %s %s%s", key, entry.txn_id, note)
    _report(
        instance,
        run_id,
        asset_key,
        f"{key}: blocking check(s) {gate} passed; published staged transaction {entry.txn_id}{note}",
        {
            "trident/status": "published",
            "trident/txn_id": str(result.txn_id),
            "trident/staged_txn": str(entry.txn_id),
            "dagster/row_count": result.row_count,
        },
        gate,
        level=logging.WARNING if warned else logging.INFO,
    )
    return Decision(key, entry.txn_id, "published")


def rejection_message(key: str, txn_id: uuid.UUID, failed: Sequence[str]) -> str:
    """What a rejected gate says, wherever it is reported (one text for the step error and the log)."""
    return (
        f"{key}: blocking check(s) {list(failed)} failed on staged transaction {txn_id}; it was not published "
        f"(readers still see the previous version). Inspect it with `trident sql --staged {key}={txn_id}` or "
        f"Trident.read({key!r}, staged=...), then `trident publish {key} {txn_id}` or `trident discard {key} {txn_id}`"
    )


def checks_failed(staged: Mapping[str, tuple[uuid.UUID, Sequence[str]]], *, run_group: bool = False) -> ChecksFailedError:
    """The step error of rejected staged versions: key -> (staged txn, its failed blocking checks).
    ``run_group``: they were staged into a run that publishes once, which now publishes nothing."""
    if run_group:
        failed = {k: list(f) for k, (_, f) in staged.items() if f}
        return ChecksFailedError(
            f"blocking check(s) {failed} failed; this run publishes none of its outputs (it publishes them all at "
            f"once or none: readers keep the previous versions) and its staged versions are discarded when it ends. "
            f"To audit a failing version, run the asset in a run without the trident/publish tag: it stays staged there"
        )
    return ChecksFailedError("; ".join(_step_rejection(k, txn, failed) for k, (txn, failed) in staged.items()))


def _step_rejection(key: str, txn_id: uuid.UUID, failed: Sequence[str]) -> str:
    if failed:
        return rejection_message(key, txn_id, failed)
    return (  # another output of the same step failed: the outputs of one step go live together or not at all
        f"{key}: staged transaction {txn_id} was not published either (the step's other output failed); "
        f"`trident publish {key} {txn_id}` or `trident discard {key} {txn_id}`"
    )


def _meta_text(value: Any) -> str | None:
    return None if value is None else str(getattr(value, "value", value))


def _report(
    instance: dg.DagsterInstance,
    run_id: str,
    asset_key: dg.AssetKey,
    message: str,
    metadata: Mapping[str, Any],
    gate: Sequence[str],
    *,
    level: int = logging.ERROR,
) -> None:
    """Record the gate's decision in the run's event log as an observation of the asset (what a
    check step cannot say: the staged txn, and whether readers now see it)."""
    failpoint("gate.before_report")
    metadata = {**metadata, "trident/gate": list(gate)}
    run = instance.get_run_by_id(run_id)
    event = DagsterEvent(
        event_type_value=DagsterEventType.ASSET_OBSERVATION.value,
        job_name=run.job_name if run is not None else "",
        message=message,
        event_specific_data=AssetObservationData(
            dg.AssetObservation(asset_key=asset_key, metadata=dict(metadata), description=message)
        ),
    )
    instance.report_dagster_event(event, run_id=run_id, log_level=level)
