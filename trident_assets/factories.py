"""Node factories: declare a dataset computed from others, get a Dagster asset (or multi-asset)
plus its asset checks. Every node reads its sources through the client, computes in DuckDB over
Arrow, streams its result into ``Trident.write`` (via ``TridentIOManager``), merges its sources'
provenance into its output's and records watermarks in the same COMMIT.

* ``transform_asset``: SQL over one source, named ``source`` in the SQL;
* ``join_asset``: SQL over several sources, each under the name you give it; refuses before writing
  anything when the sources' row counts and the distinct counts of its join keys say a join step
  could exceed ``max_rows`` (see ``join_guard`` for what that estimate can and cannot promise);
* ``split_asset``: one predicate, two outputs (matched / unmatched; a NULL predicate is unmatched),
  a subsettable multi-asset whose outputs must resolve to the same sink;
* ``model_asset``: a Python function over Arrow batches; output rows carry ``__source_row_index__``.

Every factory takes Dagster's own fields by their Dagster names (``owners``, ``tags``,
``code_version``, ``freshness_policy``, ``retry_policy``, ``pool``: ``asset_fields``) besides
``kinds``, and the SQL nodes keep their column lineage, derived from their SQL
(``column_lineage``), in their output's provenance. Every factory takes ``automation_condition=``
(passed to Dagster as is; for a split, to both outputs): ``dg.AutomationCondition.eager()`` runs the node after any of its sources changes,
including commits made outside Dagster, which the ``trident_ledger_commits`` sensor reports.
"""

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Unpack

import dagster as dg
import pyarrow as pa

from trident_resources import IDENTITY_COLUMNS, Trident, TridentError, validate_key
from trident_resources.dagster import (
    COLUMN_LINEAGE,
    AuditedVersion,
    TridentOutput,
    TridentResource,
    dataset_pool,
    declared,
    lineage_entry,
    merge_provenance,
    run_partition,
    staged_sources,
)

from .asset_fields import DagsterFields, check_fields, op_fields, out_fields
from .checked import audit_and_publish, checked_asset, checked_results, gates, staged_write  # checks in the asset's own step
from .column_lineage import column_lineage
from .compute import DEFAULT_BATCH_ROWS, SOURCE_ROW_INDEX, Session, open_session
from .expectations import Expectation, check_specs
from .join_guard import SourceStats, check_join, max_join_rows
from .model import model_reader
from .strategies import Strategy, replace

DEFAULT_KINDS = ("iceberg", "duckdb")
BatchFn = Callable[[pa.RecordBatch], "pa.RecordBatch | pa.Table"]


@dataclass
class Node:
    """What a factory returns: the asset(s) and the checks declared with them."""

    assets_def: dg.AssetsDefinition
    checks: list[dg.AssetChecksDefinition] = field(default_factory=list)

    @property
    def keys(self) -> list[str]:
        return ["/".join(k.path) for k in self.assets_def.keys]

    def definitions(self) -> dg.Definitions:
        return dg.Definitions(assets=[self.assets_def], asset_checks=self.checks)


def _akey(key: str) -> dg.AssetKey:
    return dg.AssetKey(validate_key(key).split("/"))


def _output(
    session: Session,
    key: str,
    data: Any,
    own_provenance: Mapping[str, Any] | None,
    t: Trident,
    extra: Mapping[str, Any] | None = None,
    on_done: Callable[[], None] | None = None,
    columns: Mapping[str, Any] | None = None,
) -> TridentOutput:
    plan = session.plan
    sources = list(dict.fromkeys(session.sources.values()))
    lineage = [lineage_entry(s, d) for s, d in plan.sources.items()]
    # the sources' provenance as planning described them (the versions the session reads: it
    # checked that none committed since), not one more look-up of each source per step
    described = {s: plan.sources[s].provenance if s in plan.sources else t.provenance(s) for s in sources}
    prov = merge_provenance(described, own_provenance, lineage)
    if columns is not None:  # this output's own: never merged from its sources (provenance.RESERVED)
        prov[COLUMN_LINEAGE] = dict(columns)
    return TridentOutput(
        data,
        mode=plan.mode,
        keys=plan.keys or None,
        provenance=prov,
        merge_upstream=False,
        watermarks=plan.watermarks,
        source_refs=sources,
        metadata={**plan.metadata(), **(extra or {})},
        on_done=on_done,
    )


def _node_output(
    t: Trident,
    key: str,
    sources: Mapping[str, str],
    strategy: Strategy,
    provenance: Mapping[str, Any] | None,
    build: Callable[[Session], tuple[Any, Mapping[str, Any] | None]],
    *,
    source_row_index: bool = False,
    partition: Any = None,
    lineage_sql: str | None = None,
    run: dg.DagsterRun | None = None,
) -> TridentOutput:
    """Open the node's DuckDB session, let ``build`` turn it into a stream, and hand that stream to
    the IO manager; the session closes when the write has consumed it, or at once on failure.
    ``lineage_sql``: the SQL the stream runs, whose column lineage the output's provenance keeps.
    ``run``: in a run that publishes once, the sources it staged are read as staged."""
    staged = staged_sources(t, run)
    session = open_session(t, key, sources, strategy, source_row_index=source_row_index, partition=partition, staged=staged)
    try:
        data, extra = build(session)
        columns = _column_lineage(session, lineage_sql, data) if lineage_sql is not None else None
        return _output(session, key, data, provenance, t, extra, on_done=session.close, columns=columns)
    except BaseException:
        session.close()
        raise


def _column_lineage(session: Session, sql: str, data: Any) -> dict[str, dict[str, Any]]:
    """Which source columns each column of ``data`` (the stream ``sql`` returns) comes from; the
    sources' columns as the session's views show them (their schemas without identity columns)."""
    plan = session.plan
    shown = {
        name: [c["name"] for c in plan.sources[k].schema if c["name"] not in IDENTITY_COLUMNS]
        for name, k in session.sources.items()
        if k in plan.sources
    }
    return column_lineage(sql, session.sources, shown, list(data.schema.names))


def _asset_kwargs(
    group: str | None,
    kinds: Sequence[str],
    description: str | None,
    strategy: Strategy,
    metadata: Mapping[str, Any] | None,
    automation_condition: dg.AutomationCondition | None,
    partitions_def: dg.PartitionsDefinition | None = None,
    backfill_policy: dg.BackfillPolicy | None = None,
    fields: DagsterFields | None = None,
) -> dict[str, Any]:
    return {
        "group_name": group,
        "kinds": set(kinds),
        "description": description,
        "metadata": {"trident/strategy": strategy.describe(), **declared(metadata, partitions_def)},
        "automation_condition": automation_condition,
        # partitions: partitions_def + metadata["partition_expr"]
        "partitions_def": partitions_def,
        "backfill_policy": backfill_policy,
        "fields": fields,
    }


def transform_asset(
    key: str,
    source: str,
    sql: str,
    *,
    strategy: Strategy | None = None,
    expectations: Sequence[Expectation] = (),
    provenance: Mapping[str, Any] | None = None,
    group: str | None = None,
    description: str | None = None,
    kinds: Sequence[str] = DEFAULT_KINDS,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    metadata: Mapping[str, Any] | None = None,
    automation_condition: dg.AutomationCondition | None = None,
    partitions_def: dg.PartitionsDefinition | None = None,
    backfill_policy: dg.BackfillPolicy | None = None,
    **dagster_fields: Unpack[DagsterFields],
) -> Node:
    """``key`` := ``sql`` over dataset ``source`` (named ``source`` in the SQL)."""
    strategy = strategy or replace()

    @checked_asset(
        key,
        expectations,
        deps=[_akey(source)],
        **_asset_kwargs(
            group,
            kinds,
            description or sql,
            strategy,
            metadata,
            automation_condition,
            partitions_def,
            backfill_policy,
            check_fields(dagster_fields, "transform_asset"),
        ),
    )
    def _transform(context: dg.AssetExecutionContext, trident: TridentResource) -> TridentOutput:
        def build(session: Session) -> tuple[Any, None]:
            context.log.info(f"{key}: {session.plan.reason}")
            return session.stream(sql, batch_rows), None

        return _node_output(
            trident.get_client(),
            key,
            {"source": source},
            strategy,
            provenance,
            build,
            partition=run_partition(context, key),
            run=context.run,
            lineage_sql=sql,
        )

    return Node(_transform)


def join_asset(
    key: str,
    sources: Mapping[str, str],
    sql: str,
    *,
    strategy: Strategy | None = None,
    max_rows: int | None = None,
    expectations: Sequence[Expectation] = (),
    provenance: Mapping[str, Any] | None = None,
    group: str | None = None,
    description: str | None = None,
    kinds: Sequence[str] = DEFAULT_KINDS,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    metadata: Mapping[str, Any] | None = None,
    automation_condition: dg.AutomationCondition | None = None,
    partitions_def: dg.PartitionsDefinition | None = None,
    backfill_policy: dg.BackfillPolicy | None = None,
    **dagster_fields: Unpack[DagsterFields],
) -> Node:
    """``key`` := ``sql`` over ``sources`` (SQL name -> dataset key)."""
    strategy = strategy or replace()
    if len(sources) < 2:
        raise ValueError(f"join_asset {key!r} needs two or more sources; use transform_asset for one")
    deps = [_akey(k) for k in dict.fromkeys(sources.values())]

    @checked_asset(
        key,
        expectations,
        deps=deps,
        **_asset_kwargs(
            group,
            kinds,
            description or sql,
            strategy,
            metadata,
            automation_condition,
            partitions_def,
            backfill_policy,
            check_fields(dagster_fields, "join_asset"),
        ),
    )
    def _join(context: dg.AssetExecutionContext, trident: TridentResource) -> TridentOutput:
        t = trident.get_client()

        def build(session: Session) -> tuple[Any, dict[str, Any]]:
            plan = session.plan
            stats = [  # a delta slice has no recorded count: the guard counts it
                SourceStats(name, k, plan.sources[k].row_count if plan.since.get(k) is None else None)
                for name, k in sources.items()
            ]
            bound = max_join_rows(max_rows, t.settings)
            estimate = check_join(session.con, sql, stats, bound, key)
            steps = "\n".join(estimate.steps) or "no join step"
            context.log.info(f"{key}: {plan.reason}; join estimate {estimate.rows:,} rows (bound {bound:,}):\n{steps}")
            return session.stream(sql, batch_rows), {
                "trident/join_estimate": estimate.rows,
                "trident/join_bound": bound,
                "trident/join_steps": steps,
            }

        return _node_output(
            t, key, sources, strategy, provenance, build, partition=run_partition(context, key), lineage_sql=sql, run=context.run
        )

    return Node(_join)


def split_asset(
    matched: str,
    unmatched: str,
    source: str,
    predicate: str,
    *,
    columns: str = "*",
    strategy: Strategy | None = None,
    expectations: Mapping[str, Sequence[Expectation]] | None = None,
    provenance: Mapping[str, Any] | None = None,
    group: str | None = None,
    description: str | None = None,
    kinds: Sequence[str] = DEFAULT_KINDS,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    name: str | None = None,
    automation_condition: dg.AutomationCondition | None = None,
    metadata: Mapping[str, Any] | None = None,
    partitions_def: dg.PartitionsDefinition | None = None,
    backfill_policy: dg.BackfillPolicy | None = None,
    **dagster_fields: Unpack[DagsterFields],
) -> Node:
    """Rows of ``source`` where ``predicate`` is TRUE go to ``matched``; all others (FALSE or NULL)
    to ``unmatched``, so the two outputs partition the source exactly."""
    strategy = strategy or replace()
    fields = check_fields(dagster_fields, "split_asset")
    outs = {"matched": matched, "unmatched": unmatched}
    for k in expectations or {}:
        if k not in outs.values():
            raise ValueError(f"split expectations name {k!r}, which is not one of its outputs {list(outs.values())}")
    wheres = {"matched": f"({predicate}) IS TRUE", "unmatched": f"({predicate}) IS NOT TRUE"}
    asset_outs = {
        _akey(k).to_python_identifier(): dg.AssetOut(
            key=_akey(k),
            group_name=group,
            kinds=set(kinds),
            io_manager_key="io_manager",
            is_required=False,  # subsettable: a run of one output yields only that output
            automation_condition=automation_condition,
            description=description or _split_description(source, predicate, o),
            metadata={
                "trident/strategy": strategy.describe(),
                "trident/split": o,
                "trident/predicate": predicate,
                **declared(metadata, partitions_def),
            },
            **out_fields(fields),
        )
        for o, k in outs.items()
    }

    @dg.multi_asset(
        name=name or f"split_{matched.replace('/', '__')}",
        outs=asset_outs,
        deps=[_akey(source)],
        can_subset=True,
        partitions_def=partitions_def,
        backfill_policy=backfill_policy,
        # checks in the op's own step; one pool (only this op writes either half)
        check_specs=[s for k, exps in (expectations or {}).items() for s in check_specs(k, exps)],
        **op_fields(fields, dataset_pool(matched, partitions_def)),
    )
    def _split(context: dg.AssetExecutionContext, trident: TridentResource) -> Iterator[Any]:
        t = trident.get_client()
        sinks = {k: t.resolve_sink(k) for k in outs.values()}
        if len(set(sinks.values())) > 1:
            raise TridentError(
                f"split {matched!r}/{unmatched!r} refused: its outputs resolve to different sinks {sinks}; "
                "a split writes both halves to one sink (pin both datasets to the same sink)"
            )
        selected = {"/".join(k.path) for k in context.selected_asset_keys}
        gated = gates(context, trident, {k: (expectations or {}).get(k, []) for k in outs.values() if k in selected})
        staged: dict[str, tuple[str, AuditedVersion]] = {}
        for o, k in outs.items():
            if k not in selected:
                continue

            half = f"SELECT {columns} FROM source WHERE {wheres[o]}"

            def build(session: Session, k: str = k, half: str = half) -> tuple[Any, dict[str, Any]]:
                context.log.info(f"{k}: {session.plan.reason}")
                return session.stream(half, batch_rows), {}

            out = _node_output(
                t,
                k,
                {"source": source},
                strategy,
                provenance,
                build,
                partition=run_partition(context, k),
                run=context.run,
                lineage_sql=half,
            )
            if gated:  # write-audit-publish: both halves staged (one txn each), published together
                staged[k] = (_akey(k).to_python_identifier(), staged_write(context, trident, k, out))
            else:
                yield dg.Output(out, output_name=_akey(k).to_python_identifier())
        if gated:
            yield from audit_and_publish(context, trident, staged, dict(expectations or {}))
            return
        for k, exps in (expectations or {}).items():  # checks, once both halves are written
            yield from checked_results(context, trident, k, exps)

    return Node(_split)


def _split_description(source: str, predicate: str, side: str) -> str:
    """What each half holds, in words that are right about NULL: ``NOT (pred)`` is NULL where
    ``pred`` is, yet those rows go to the unmatched half (its filter is ``(pred) IS NOT TRUE``)."""
    if side == "matched":
        return f"rows of {source} where ({predicate}) is true"
    return f"rows of {source} where ({predicate}) is not true: false or NULL"


def model_asset(
    key: str,
    source: str,
    fn: BatchFn,
    *,
    sql: str = "SELECT * FROM source",
    strategy: Strategy | None = None,
    expectations: Sequence[Expectation] = (),
    provenance: Mapping[str, Any] | None = None,
    group: str | None = None,
    description: str | None = None,
    kinds: Sequence[str] = ("iceberg", "duckdb", "python"),
    batch_rows: int = DEFAULT_BATCH_ROWS,
    metadata: Mapping[str, Any] | None = None,
    automation_condition: dg.AutomationCondition | None = None,
    partitions_def: dg.PartitionsDefinition | None = None,
    backfill_policy: dg.BackfillPolicy | None = None,
    **dagster_fields: Unpack[DagsterFields],
) -> Node:
    """``key`` := ``fn`` applied to each Arrow batch of ``sql`` over ``source``.

    The batches ``fn`` sees carry ``__source_row_index__`` (the source row's ``__row_index``). When
    ``fn`` returns as many rows as it got and drops that column, it is put back row for row; when it
    returns a different number of rows it must keep the column itself (a model that explodes or
    filters rows says which source row each output row came from).
    """
    strategy = strategy or replace()

    @checked_asset(
        key,
        expectations,
        deps=[_akey(source)],
        **_asset_kwargs(
            group,
            kinds,
            description or (fn.__doc__ or fn.__name__),
            strategy,
            metadata,
            automation_condition,
            partitions_def,
            backfill_policy,
            check_fields(dagster_fields, "model_asset"),
        ),
    )
    def _model(context: dg.AssetExecutionContext, trident: TridentResource) -> TridentOutput:
        def build(session: Session) -> tuple[Any, dict[str, Any]]:
            context.log.info(f"{key}: {session.plan.reason}")
            return model_reader(session.stream(sql, batch_rows), fn, key), {"trident/model": getattr(fn, "__name__", "model")}

        return _node_output(
            trident.get_client(),
            key,
            {"source": source},
            strategy,
            provenance,
            build,
            source_row_index=True,
            partition=run_partition(context, key),
            run=context.run,
        )

    return Node(_model)


__all__ = ["SOURCE_ROW_INDEX", "Node", "join_asset", "model_asset", "split_asset", "transform_asset"]
