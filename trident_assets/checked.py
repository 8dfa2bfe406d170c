"""``checked_asset``: a Trident asset whose expectations run in its own step (issue 13).

Why: with one ``@asset_check`` per expectation, every check is a step of its own, and Dagster's
default (multiprocess) executor starts a process per step. The example graph has 20 checks on 9
assets, so most of a UI run was process start-ups. Here the checks are ``check_specs`` of the
asset: the step writes the output (the IO manager runs when the ``Output`` is yielded, before this
generator resumes), then evaluates each selected check against what was just written, in the same
process. A failing blocking check fails the step after its result is recorded, so downstream
assets do not run, as before. Write-audit-publish evaluates the same specs against the staged
version before publishing.

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

from trident_resources import ChecksFailedError
from trident_resources.dagster import TridentOutput, TridentResource, dataset_pool
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


def _publish_or_refuse(
    context: dg.AssetExecutionContext,
    trident: TridentResource,
    key: str,
    expectations: Sequence[Expectation],
    results: Sequence[dg.AssetCheckResult],
    staged: uuid.UUID,
) -> None:
    """Publish the audited version only if every blocking check passed; otherwise the previous
    version stays current and the step fails naming the checks and the staged txn."""
    blocking = {e.name for e in expectations if e.blocking}
    failed = [r.check_name for r in results if not r.passed and r.check_name in blocking]
    warned = [r.check_name for r in results if not r.passed and r.check_name not in blocking]
    if failed:
        raise ChecksFailedError(
            f"{key}: blocking check(s) {failed} failed on staged transaction {staged}; it was not published "
            f"(readers still see the previous version). Inspect it with `trident sql --staged` or "
            f"Trident.read({key!r}, staged=...), then `trident publish {key} {staged}` or `trident discard {key} {staged}`"
        )
    if warned:
        context.log.warning(f"{key}: non-blocking check(s) {warned} failed; publishing {staged} anyway")
    trident.get_client().publish(key, staged)


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
            staged: uuid.UUID | None = None
            if akey in context.selected_asset_keys:
                out = fn(context, trident)
                if _gates(context, trident, key, expectations):  # write-audit-publish: stage, check, publish
                    staged = uuid.uuid4()
                    out = (
                        replace(out, stage_txn=staged) if isinstance(out, TridentOutput) else TridentOutput(out, stage_txn=staged)
                    )
                yield dg.Output(out, output_name=name)  # written by the IO manager here
            results = list(checked_results(context, trident, key, expectations, staged=staged))
            yield from results
            if staged is not None:
                _publish_or_refuse(context, trident, key, expectations, results, staged)

        return _asset

    return wrap
