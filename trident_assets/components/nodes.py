"""The node factories as Dagster Components: a ``defs.yaml`` declares a transform, join, split or
model node, and ``build_defs`` calls the Python factory with the same arguments, so a YAML node and
a Python node are the same asset, checks and all::

    type: trident_assets.components.TransformNode
    attributes:
      key: sales/big_orders
      source: tpch/orders
      sql: SELECT o_orderkey, o_totalprice FROM source WHERE o_totalprice > 100000
      group: sales
      expectations:
        - {type: not_null, columns: o_orderkey}
        - {type: unique, columns: o_orderkey}
      partitions_def: {type: daily, start_date: "1992-01-01"}
      partition_expr: o_orderdate
      automation_condition: "{{ dg.AutomationCondition.eager() }}"
      owners: [team:sales]
      freshness_policy: "{{ dg.FreshnessPolicy.time_window(fail_window=datetime.timedelta(hours=24)) }}"

``partitions_def``, ``backfill_policy``, ``automation_condition`` and ``freshness_policy`` take
what Dagster's own components take (the same models and template scope: ``{{ dg.* }}``,
``{{ datetime.* }}``). ``dg scaffold defs trident_assets.components.TransformNode sales/big_orders``
writes a ``defs.yaml`` to start from (``scaffold.py``).
"""

from abc import abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Optional

import dagster as dg
from dagster.components.resolved.core_models import (
    DailyPartitionsDefinitionModel,
    HourlyPartitionsDefinitionModel,
    MultiRunBackfillPolicyModel,
    SingleRunBackfillPolicyModel,
    StaticPartitionsDefinitionModel,
    TimeWindowPartitionsDefinitionModel,
    WeeklyPartitionsDefinitionModel,
    resolve_backfill_policy,
    resolve_partitions_def,
)

from ..asset_fields import DagsterFields
from ..compute import DEFAULT_BATCH_ROWS
from ..factories import DEFAULT_KINDS, Node, join_asset, model_asset, split_asset, transform_asset
from .scaffold import TridentNodeScaffolder
from .specs import ExpectationModel, RetryPolicyModel, StrategyModel, import_callable

ResolvedPartitions = Annotated[
    dg.PartitionsDefinition | None,
    dg.Resolver(
        resolve_partitions_def,
        model_field_type=HourlyPartitionsDefinitionModel
        | DailyPartitionsDefinitionModel
        | WeeklyPartitionsDefinitionModel
        | TimeWindowPartitionsDefinitionModel
        | StaticPartitionsDefinitionModel,
        description="Dagster partitions of the output; `partition_expr` names the column they map to.",
    ),
]
ResolvedBackfill = Annotated[
    dg.BackfillPolicy | None,
    dg.Resolver(resolve_backfill_policy, model_field_type=SingleRunBackfillPolicyModel | MultiRunBackfillPolicyModel),
]
ResolvedAutomation = Annotated[
    dg.AutomationCondition | None,
    dg.Resolver.default(
        model_field_type=Optional[str],  # noqa: UP045  (Dagster's resolver wants the typing form)
        description="When Dagster runs the node by itself, e.g. '{{ dg.AutomationCondition.eager() }}'.",
    ),
]
ResolvedFreshness = Annotated[
    dg.FreshnessPolicy | None,
    dg.Resolver.default(
        model_field_type=Optional[str],  # noqa: UP045
        description="e.g. '{{ dg.FreshnessPolicy.time_window(fail_window=datetime.timedelta(hours=24)) }}'.",
    ),
]


@dataclass(kw_only=True)
class _NodeComponent(dg.Component, dg.Resolvable):
    """The attributes every Trident node takes (the factories' keyword arguments)."""

    strategy: StrategyModel | None = None
    provenance: dict[str, Any] | None = None
    group: str | None = None
    description: str | None = None
    kinds: list[str] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    partitions_def: ResolvedPartitions = None
    partition_expr: str | None = None
    backfill_policy: ResolvedBackfill = None
    automation_condition: ResolvedAutomation = None
    batch_rows: int = DEFAULT_BATCH_ROWS
    owners: list[str] | None = None
    tags: dict[str, str] | None = None
    code_version: str | None = None
    freshness_policy: ResolvedFreshness = None
    retry_policy: RetryPolicyModel | None = None
    pool: str | None = None

    def common(self, default_kinds: tuple[str, ...] = DEFAULT_KINDS) -> dict[str, Any]:
        """The keyword arguments all four factories share, Dagster's own fields included."""
        metadata = dict(self.metadata)
        if self.partition_expr is not None:
            metadata["partition_expr"] = self.partition_expr
        fields = DagsterFields()
        if self.owners is not None:
            fields["owners"] = self.owners
        if self.tags is not None:
            fields["tags"] = self.tags
        if self.code_version is not None:
            fields["code_version"] = self.code_version
        if self.freshness_policy is not None:
            fields["freshness_policy"] = self.freshness_policy
        if self.retry_policy is not None:
            fields["retry_policy"] = self.retry_policy.build()
        if self.pool is not None:
            fields["pool"] = self.pool
        return {
            "strategy": self.strategy.build() if self.strategy is not None else None,
            "provenance": self.provenance,
            "group": self.group,
            "description": self.description,
            "kinds": tuple(self.kinds) if self.kinds is not None else default_kinds,
            "batch_rows": self.batch_rows,
            "metadata": metadata or None,
            "automation_condition": self.automation_condition,
            "partitions_def": self.partitions_def,
            "backfill_policy": self.backfill_policy,
            **fields,
        }

    @abstractmethod
    def node(self) -> Node:
        """The factory call this component stands for (each node kind builds its own)."""

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        return self.node().definitions()


def _expectations(models: list[ExpectationModel]) -> list[Any]:
    return [m.build() for m in models]


@dg.scaffold_with(TridentNodeScaffolder)
@dataclass(kw_only=True)
class TransformNode(_NodeComponent):
    """A transform node: ``key`` := ``sql`` over one dataset ``source`` (named ``source`` in the SQL)."""

    key: str
    source: str
    sql: str
    expectations: list[ExpectationModel] = field(default_factory=list)

    def node(self) -> Node:
        return transform_asset(self.key, self.source, self.sql, expectations=_expectations(self.expectations), **self.common())


@dg.scaffold_with(TridentNodeScaffolder)
@dataclass(kw_only=True)
class JoinNode(_NodeComponent):
    """A join node: ``key`` := ``sql`` over ``sources`` (SQL name -> dataset key), refused before
    writing when its join guard estimates more than ``max_rows`` rows."""

    key: str
    sources: dict[str, str]
    sql: str
    max_rows: int | None = None
    expectations: list[ExpectationModel] = field(default_factory=list)

    def node(self) -> Node:
        return join_asset(
            self.key,
            self.sources,
            self.sql,
            max_rows=self.max_rows,
            expectations=_expectations(self.expectations),
            **self.common(),
        )


@dg.scaffold_with(TridentNodeScaffolder)
@dataclass(kw_only=True)
class SplitNode(_NodeComponent):
    """A split node: rows of ``source`` where ``predicate`` is true go to ``matched``, all others
    (false or NULL) to ``unmatched``; ``expectations`` maps each output key to its own."""

    matched: str
    unmatched: str
    source: str
    predicate: str
    columns: str = "*"
    name: str | None = None
    expectations: dict[str, list[ExpectationModel]] = field(default_factory=dict)

    def node(self) -> Node:
        exps: Mapping[str, Any] = {k: _expectations(v) for k, v in self.expectations.items()}
        return split_asset(
            self.matched,
            self.unmatched,
            self.source,
            self.predicate,
            columns=self.columns,
            expectations=exps,
            name=self.name,
            **self.common(),
        )


@dg.scaffold_with(TridentNodeScaffolder)
@dataclass(kw_only=True)
class ModelNode(_NodeComponent):
    """A model node: ``key`` := the Python function ``fn`` ('package.module:function') applied to
    each Arrow batch of ``sql`` over ``source``."""

    key: str
    source: str
    fn: str
    sql: str = "SELECT * FROM source"
    expectations: list[ExpectationModel] = field(default_factory=list)

    def node(self) -> Node:
        return model_asset(
            self.key,
            self.source,
            import_callable(self.fn),
            sql=self.sql,
            expectations=_expectations(self.expectations),
            **self.common(("iceberg", "duckdb", "python")),
        )
