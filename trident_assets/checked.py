"""``checked_asset``: a Trident asset whose expectations run in its own step (issue 13).

Why: with one ``@asset_check`` per expectation, every check is a step of its own, and Dagster's
default (multiprocess) executor starts a process per step. The example graph has 20 checks on 9
assets, so most of a UI run was process start-ups. Here the checks are ``check_specs`` of the
asset: the step writes the output (the IO manager runs when the ``Output`` is yielded, before this
generator resumes), then evaluates each selected check against what was just written, in the same
process. A failing blocking check fails the step after its result is recorded, so downstream
assets do not run, as before.

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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any

import dagster as dg

from trident_resources.dagster import TridentOutput, TridentResource, dataset_pool
from trident_resources.dagster.gate import GATE_META, checks_failed, gate_checks, supersede
from trident_resources.dagster.io_manager import AuditedVersion, asset_key_to_key, write_output
from trident_resources.keys import validate_key

from .expectations import Expectation, check_key, check_result, check_specs

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
    selected = context.selected_asset_check_keys
    if not any(check_key(key, e) in selected for e in expectations):
        return
    t = trident.get_client()
    for e in expectations:
        if check_key(key, e) in selected:
            yield check_result(t, key, e, staged=staged)


def _gates(context: dg.AssetExecutionContext, trident: TridentResource, key: str, expectations: Sequence[Expectation]) -> bool:
    """Write-audit-publish applies: a selected blocking check, a sink that can hold a staged
    version, and no partition run (writers of other partitions move the published version, and
    a staged version is only published onto the version it was staged on)."""
    blocking = any(e.blocking and check_key(key, e) in context.selected_asset_check_keys for e in expectations)
    if not blocking or context.has_partition_key or context.has_partition_key_range:
        return False
    return trident.get_client().resolve_sink(key) == "iceberg_native"


def _staged_write(
    context: dg.AssetExecutionContext, trident: TridentResource, akey: dg.AssetKey, out: Any
) -> tuple[uuid.UUID, AuditedVersion]:
    """Write ``out`` as a staged version, as the IO manager would have written it, recording the
    blocking checks of *other* steps that must pass too before anything publishes it (gate.py)."""
    t = trident.get_client()
    spec = context.assets_def.specs_by_key[akey]
    gate = gate_checks(context.get_step_execution_context(), akey)
    if gate:
        supersede(t, asset_key_to_key(akey), context.run.run_id)
    staged = uuid.uuid4()
    out = replace(out, stage_txn=staged) if isinstance(out, TridentOutput) else TridentOutput(out, stage_txn=staged)
    result, provenance = write_output(
        t,
        asset_key_to_key(akey),
        out,
        run_id=context.run.run_id,
        definition_metadata=spec.metadata or {},
        upstream=[asset_key_to_key(d.asset_key) for d in spec.deps],
        gate=gate,
    )
    return staged, AuditedVersion(result, provenance, out.metadata)


def _publish_or_refuse(
    context: dg.AssetExecutionContext,
    trident: TridentResource,
    key: str,
    expectations: Sequence[Expectation],
    results: Sequence[dg.AssetCheckResult],
    audited: AuditedVersion,
    name: str,
) -> Iterator[Any]:
    """The audited version's fate: published (and materialized in Dagster) only if every
    blocking check passed, unless blocking checks of other steps still gate it (then it is
    reported staged and gate.py publishes it); otherwise no materialization, an observation
    naming the staged txn, and the step fails naming the checks and the txn."""
    staged = audited.result.txn_id
    blocking = {e.name for e in expectations if e.blocking}
    failed = [r.check_name for r in results if not r.passed and r.check_name in blocking]
    warned = [r.check_name for r in results if not r.passed and r.check_name not in blocking]
    if failed:
        yield from results
        yield dg.AssetObservation(
            asset_key=dg.AssetKey(key.split("/")),
            description=f"staged transaction {staged} was not published",
            metadata={
                "trident/status": "rejected: still staged, not published",
                "trident/staged_txn": str(staged),
                "trident/failed_checks": failed,
                "trident/staged_row_count": audited.result.row_count,
            },
        )
        raise checks_failed(key, staged, failed)
    if warned:
        context.log.warning(f"{key}: non-blocking check(s) {warned} failed; publishing {staged} anyway")
    t = trident.get_client()
    entry = next((e for _, e in t.staged(key) if e.txn_id == staged), None)
    if entry is not None and not (entry.metadata or {}).get(GATE_META):
        audited = replace(audited, result=t.publish(key, staged))  # the exact audited snapshot
    yield dg.Output(audited, output_name=name)
    yield from results


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
) -> Callable[[ComputeFn], dg.AssetsDefinition]:
    """Decorate ``fn(context, trident) -> output`` (what a factory's asset returns) into the asset
    ``key`` with its expectations in-step; the keyword arguments are ``@dg.asset``'s."""
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
                )
            },
            deps=list(deps),
            check_specs=check_specs(key, expectations),
            can_subset=True,
            partitions_def=partitions_def,
            backfill_policy=backfill_policy,
            pool=dataset_pool(key, partitions_def),
        )
        def _asset(context: dg.AssetExecutionContext, trident: TridentResource) -> Iterator[Any]:
            if akey in context.selected_asset_keys:
                out = fn(context, trident)
                if _gates(context, trident, key, expectations):  # write-audit-publish: stage, check, publish
                    staged, audited = _staged_write(context, trident, akey, out)
                    results = list(checked_results(context, trident, key, expectations, staged=staged))
                    yield from _publish_or_refuse(context, trident, key, expectations, results, audited, name)
                    return
                yield dg.Output(out, output_name=name)  # written by the IO manager here
            yield from checked_results(context, trident, key, expectations)

        return _asset

    return wrap
