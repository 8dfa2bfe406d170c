"""``checked_asset``: a Trident asset whose expectations run in its own step.

Why: with one ``@asset_check`` per expectation, every check is a step of its own, and Dagster's
default (multiprocess) executor starts a process per step. The example graph has 20 checks on 9
assets, so most of a UI run would be process start-ups. Here the checks are ``check_specs`` of the
asset: the step writes the output (the IO manager runs when the ``Output`` is yielded, before this
generator resumes), then evaluates each selected check against what was just written, in the same
process. A failing blocking check fails the step after its result is recorded, so downstream
assets do not run.

Write-audit-publish: with a selected blocking check, the step writes the output as a staged
version itself (``write_output``, what the IO manager would do), evaluates the checks against it,
and only then yields the ``Output``: published when every blocking check passed, so Dagster's
materialization is the version readers see; when one failed, no materialization at all (nothing
new is current), the check results, an observation naming the staged txn, and ChecksFailedError.

The asset is a subsettable one-output ``multi_asset``, because Dagster cannot run the checks of a
plain ``@asset`` without materializing it: ``trident check`` (and "Execute checks" in the UI)
select only the checks, and then nothing is written and only those checks run.

Each asset also names its dataset's concurrency pool (``trident_resources.dagster.pools``).
"""

import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

import dagster as dg

from trident_resources import validate_key
from trident_resources.dagster import (
    GATE_META,
    AuditedVersion,
    TridentOutput,
    TridentResource,
    asset_key_to_key,
    asset_step_txn_id,
    checks_failed,
    dataset_pool,
    gate_checks,
    join_run_group,
    publishes_per_run,
    run_partition,
    supersede,
    write_output,
)

from .asset_fields import DagsterFields, op_fields, out_fields
from .expectations import Expectation, check_key, check_results, check_specs

ComputeFn = Callable[[dg.AssetExecutionContext, TridentResource], Any]


def checked_results(
    context: dg.AssetExecutionContext,
    trident: TridentResource,
    key: str,
    expectations: Sequence[Expectation],
    staged: uuid.UUID | None = None,
) -> Iterator[dg.AssetCheckResult]:
    """Results of the expectations on ``key`` that this run selected (all of them in a normal run),
    against the published version or, with ``staged``, the staged one."""
    selected = [e for e in expectations if check_key(key, e) in context.selected_asset_check_keys]
    if not selected:
        return
    # together: one look-up of the version and one query per round for all of them (evaluate_all)
    yield from check_results(trident.get_client(), key, selected, staged=staged)


def gates(context: dg.AssetExecutionContext, trident: TridentResource, expectations: Mapping[str, Sequence[Expectation]]) -> bool:
    """Write-audit-publish applies to this step's outputs: a selected blocking check on one of
    them and sinks that can hold a staged version. Partition runs are gated too: a staged
    partition is published by re-basing its change onto whatever other partitions committed
    meanwhile (refused only when its own partition changed; docs/python-api.md "Write-audit-publish")."""
    selected = context.selected_asset_check_keys
    blocking = any(e.blocking and check_key(k, e) in selected for k, exps in expectations.items() for e in exps)
    if not blocking:
        return False
    t = trident.get_client()
    sinks = {k: t.resolve_sink(k) for k in expectations}
    if any(s != "iceberg_native" for s in sinks.values()):
        why = f"sinks {sinks}: only the trident (iceberg_native) holds staged versions"
        context.log.warning(f"{list(expectations)}: blocking checks do not gate this write ({why}); it is published directly")
        return False
    return True


def staged_write(context: dg.AssetExecutionContext, trident: TridentResource, key: str, out: Any) -> AuditedVersion:
    """Write ``out`` as a staged version of ``key``, as the IO manager would have written it,
    recording the blocking checks of *other* steps that must pass too before anything publishes
    it (gate.py)."""
    t = trident.get_client()
    akey = dg.AssetKey(key.split("/"))
    spec = context.assets_def.specs_by_key[akey]
    group = join_run_group(t, context.run) if publishes_per_run(context.run) else None  # staged into the run's group
    gate = gate_checks(context.get_step_execution_context(), akey) if group is None else {}
    if gate:
        supersede(t, key, context.run.run_id)
    # the step's own id for this output: a second attempt of the step (a redelivered Celery task, a
    # retry) replaces a version the first staged, and finds one it published already committed
    txn = asset_step_txn_id(context, akey.to_python_identifier())
    out = replace(out, stage_txn=txn) if isinstance(out, TridentOutput) else TridentOutput(out, stage_txn=txn)
    result, provenance = write_output(
        t,
        key,
        out,
        run_id=context.run.run_id,
        definition_metadata=spec.metadata or {},
        upstream=[asset_key_to_key(d.asset_key) for d in spec.deps],
        partition=run_partition(context, key),  # a partition run stages exactly its partition(s)
        gate=gate,
        partition_keys=list(context.partition_keys) if context.has_partition_key or context.has_partition_key_range else None,
        group=group,
    )
    return AuditedVersion(result, provenance, out.metadata)


def audit_and_publish(
    context: dg.AssetExecutionContext,
    trident: TridentResource,
    staged: Mapping[str, tuple[str, AuditedVersion]],
    expectations: Mapping[str, Sequence[Expectation]],
) -> Iterator[Any]:
    """Evaluate the selected checks against the staged versions (``staged``: key -> (output name,
    version), one staged txn per output), then decide for all of them together: published and
    yielded as outputs (the exact audited snapshots) only when every blocking check of every
    output passed, so the outputs of one step (a split's halves) never go live apart; otherwise
    no materialization, an observation per output naming its staged txn, the check results, and
    ChecksFailedError naming the failed checks and the staged txns. A version that blocking
    checks of other steps still gate is reported staged and published by gate.py."""
    results: list[dg.AssetCheckResult] = []
    for k, exps in expectations.items():
        # an earlier attempt of this step that published already: its version is the current one
        txn = staged[k][1].result.txn_id if k in staged and staged[k][1].result.staged else None
        results.extend(checked_results(context, trident, k, exps, staged=txn))
    blocking = {check_key(k, e) for k, exps in expectations.items() for e in exps if e.blocking}
    failed = [r for r in results if not r.passed and _result_key(r) in blocking]
    warned = [r for r in results if not r.passed and _result_key(r) not in blocking]
    if failed:
        yield from results
        failed_by_key = {
            k: [_result_key(r).name for r in failed if asset_key_to_key(_result_key(r).asset_key) == k] for k in staged
        }
        for k, (_, audited) in staged.items():
            yield dg.AssetObservation(
                asset_key=dg.AssetKey(k.split("/")),
                description=f"staged transaction {audited.result.txn_id} was not published",
                metadata={
                    "trident/status": "rejected: still staged, not published",
                    "trident/staged_txn": str(audited.result.txn_id),
                    "trident/failed_checks": [_result_key(r).to_user_string() for r in failed],
                    "trident/staged_row_count": audited.result.row_count,
                },
            )
        in_group = publishes_per_run(context.run)
        raise checks_failed(
            {k: (audited.result.txn_id, failed_by_key[k]) for k, (_, audited) in staged.items()}, run_group=in_group
        )
    if warned:
        context.log.warning(
            f"non-blocking check(s) {[_result_key(r).to_user_string() for r in warned]} failed; publishing anyway"
        )
    t = trident.get_client()
    for k, (name, audited) in staged.items():
        entry = next((e for _, e in t.staged(k) if e.txn_id == audited.result.txn_id), None)
        # a gated version is published by gate.py, a member of the run's group with the whole run
        if entry is not None and not (entry.metadata or {}).get(GATE_META) and entry.group_id is None:
            audited = replace(audited, result=t.publish(k, audited.result.txn_id))  # the exact audited snapshot
        yield dg.Output(audited, output_name=name)
    yield from results


def _result_key(r: dg.AssetCheckResult) -> dg.AssetCheckKey:
    return dg.AssetCheckKey(r.asset_key or dg.AssetKey([]), r.check_name or "")


def checked_asset(
    key: str,
    expectations: Sequence[Expectation],
    *,
    deps: Sequence[dg.AssetKey],
    group_name: str | None = None,
    kinds: set[str] | None = None,
    description: str | None = None,
    metadata: dict[str, Any] | None = None,
    automation_condition: dg.AutomationCondition | None = None,
    partitions_def: dg.PartitionsDefinition | None = None,
    backfill_policy: dg.BackfillPolicy | None = None,
    fields: DagsterFields | None = None,
) -> Callable[[ComputeFn], dg.AssetsDefinition]:
    """Decorate ``fn(context, trident) -> output`` (what a factory's asset returns) into the asset
    ``key`` with its expectations in-step; the keyword arguments are ``@dg.asset``'s, ``fields``
    Dagster's own fields passed through (``asset_fields``)."""
    akey = dg.AssetKey(validate_key(key).split("/"))
    name = akey.to_python_identifier()

    def wrap(fn: ComputeFn) -> dg.AssetsDefinition:
        @dg.multi_asset(
            name=name,
            outs={
                name: dg.AssetOut(
                    key=akey,
                    group_name=group_name,
                    kinds=kinds,
                    description=description,
                    metadata=metadata,
                    automation_condition=automation_condition,
                    io_manager_key="io_manager",
                    is_required=False,  # a checks-only run (trident check) yields no output
                    **out_fields(fields or {}),
                )
            },
            deps=list(deps),
            check_specs=check_specs(key, expectations),
            can_subset=True,
            partitions_def=partitions_def,
            backfill_policy=backfill_policy,
            **op_fields(fields or {}, dataset_pool(key, partitions_def)),
        )
        def _asset(context: dg.AssetExecutionContext, trident: TridentResource) -> Iterator[Any]:
            if akey in context.selected_asset_keys:
                out = fn(context, trident)
                if gates(context, trident, {key: expectations}):  # write-audit-publish: stage, check, publish
                    audited = staged_write(context, trident, key, out)
                    yield from audit_and_publish(context, trident, {key: (name, audited)}, {key: expectations})
                    return
                yield dg.Output(out, output_name=name)  # written by the IO manager here
            yield from checked_results(context, trident, key, expectations)

        return _asset

    return wrap
