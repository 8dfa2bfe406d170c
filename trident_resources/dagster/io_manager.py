"""``TridentIOManager``: assets return rows; they are written and loaded through the client.

What an asset may return (all go through ``Trident.write``, writer ``pipeline.output``):
a pyarrow Table, a ``RecordBatchReader`` (streamed, never materialized: an asset larger than memory
passes straight through), an iterable of RecordBatches, a pandas/polars DataFrame, or a
``TridentOutput`` wrapping any of those with write options (mode, keys, provenance, watermarks...).
Returning ``None`` is an error (``AssetReturnedNoneError``): it is almost always a forgotten
``return``, and writing nothing while Dagster shows a materialization would be a lie. An asset that
only has side effects says so with ``-> None`` (Dagster then records it without this IO manager).

Plain returns take their options from the output's definition metadata:

=====================  ==========================================================================
``trident/mode``       replace (default), append, upsert, append_new (``Trident.write``'s modes)
``trident/keys``       key column(s) for upsert / append_new / snapshot-replace (replace + keys)
``trident/writer``     the writer name; default ``pipeline.output``
``trident/provenance`` the asset's own governance metadata (dict)
=====================  ==========================================================================

Provenance: an asset derived from Trident datasets (its upstream asset keys, whether loaded as
inputs or declared as ``deps``) stores its sources' provenance merged with its own, plus the
lineage of the source versions current when it was written, in the same COMMIT as its rows. A root
asset (no upstream dataset) stores its own as is.

Inputs load as a pyarrow Table unless the parameter is annotated ``pa.RecordBatchReader`` (a bounded
memory stream), ``pandas.DataFrame`` or ``polars.DataFrame``. Input metadata ``columns`` (a list)
projects the read, ``row_filter`` (a pyiceberg filter string) filters it, and ``identity: True``
keeps the engine's ``__row_index/__row_id/__created_at`` columns (dropped by default so that an
asset can return what it loaded without tripping ReservedColumnError).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

import dagster as dg
import pyarrow as pa

from ..client import Trident
from ..core.errors import DatasetNotFoundError, InvalidDatasetKeyError, InvalidWriteError, TridentError
from ..core.failpoints import failpoint
from ..core.identity import IDENTITY_COLUMNS
from ..core.keys import iceberg_identifier, validate_key
from ..core.results import Description, WriteResult
from ..core.schemas import describe_schema
from ..core.write_modes import WriteMode
from ..ops.group import TransactionGroup
from . import run_group
from .gate import (
    GATE_META,
    GATE_STEPS_META,
    PARTITION_KEYS,
    RUN_ID,
    audits,
    gate_checks,
    note_pending,
    staged_in_run,
    step_of,
    supersede,
)
from .metadata import materialization_metadata, report, version_metadata
from .partition_mapping import input_partition, output_partition, partition_metadata
from .provenance import lineage_entry, merge_provenance
from .resource import TridentResource
from .step_txn import output_txn_id

PIPELINE_WRITER = "pipeline.output"
META_MODE = "trident/mode"
META_KEYS = "trident/keys"
META_WRITER = "trident/writer"
META_PROVENANCE = "trident/provenance"


class AssetReturnedNoneError(TridentError):
    """An asset handled by the Trident IO manager returned ``None``."""

    def __init__(self, key: str) -> None:
        super().__init__(
            f"asset {key!r} returned None, so there is nothing to write and Dagster would show a "
            "materialization with no dataset behind it. Return the rows (an empty pyarrow Table writes "
            "an empty dataset); for an asset that only has side effects, annotate it `-> None` or "
            "return dg.MaterializeResult(), and Dagster records it without the Trident IO manager"
        )


class AssetKeyNotADatasetKeyError(InvalidDatasetKeyError):
    """An asset handled by the Trident IO manager has a key that is not a valid dataset key (its
    parts joined by '/'): the message names the asset, the key it became, and what to rename."""

    def __init__(self, asset_key: dg.AssetKey) -> None:
        TridentError.__init__(
            self,
            f"asset {asset_key.to_user_string()!r} is stored as dataset {asset_key_to_key(asset_key)!r}, which is not a "
            "valid dataset key: give the asset a key of lowercase words of [a-z0-9_] (e.g. "
            "key=['sales', 'orders'], or key_prefix='sales' with a lowercase function name), or give it another IO manager",
        )


def dataset_key(asset_key: dg.AssetKey) -> str:
    """The dataset key of an asset this IO manager stores or loads, or AssetKeyNotADatasetKeyError."""
    key = asset_key_to_key(asset_key)
    try:
        return validate_key(key)
    except InvalidDatasetKeyError as exc:
        raise AssetKeyNotADatasetKeyError(asset_key) from exc


@dataclass
class TridentOutput:
    """Rows plus how to write them; what node factories (and any asset) may return.

    ``provenance`` is the output's own governance metadata, merged with its upstream datasets'
    unless ``merge_upstream`` is False (node factories merge it themselves, with the exact source
    versions they read). ``on_done`` runs after the write whether it succeeded or not: a streamed
    output often holds a DuckDB connection open until the client has drained it.
    """

    data: Any
    mode: WriteMode | None = None
    keys: Sequence[str] | None = None
    writer: str | None = None
    provenance: Mapping[str, Any] | None = None
    merge_upstream: bool = True
    watermarks: Mapping[str, tuple[datetime, uuid.UUID | None]] | None = None
    source_refs: Sequence[str] | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    on_done: Callable[[], None] | None = None
    # Write-audit-publish: write as this staged transaction (not published; the asset's blocking
    # checks audit it and then publish it or leave it staged). Set by checked assets.
    stage_txn: uuid.UUID | None = None


@dataclass(frozen=True)
class AuditedVersion:
    """An output its own step already wrote and audited (``trident_assets.checked``): the IO
    manager only reports it. ``result`` is the published version, or the staged one when
    blocking checks in other steps still gate it."""

    result: WriteResult
    provenance: Mapping[str, Any] | None
    metadata: Mapping[str, Any] = field(default_factory=dict)


class TridentIOManager(dg.ConfigurableIOManager):
    """Writes asset outputs through ``Trident.write`` and loads inputs through its read methods.

    Write-audit-publish (gate.py): an output whose asset has blocking checks running in other
    steps of this run is written as a staged version; those checks load the staged version;
    it is published once they all pass and stays staged (readers keep the previous version)
    when one fails."""

    trident: TridentResource

    def handle_output(self, context: dg.OutputContext, obj: Any) -> None:
        """Write an asset's output (rows, a ``TridentOutput``, or an ``AuditedVersion`` its own
        step already wrote) as one transaction, staged when blocking checks of other steps gate
        it, and report the materialization's metadata.

        Raises:
            AssetReturnedNoneError: the asset returned ``None``.
            AssetKeyNotADatasetKeyError: the asset key is not a dataset key.
            PartitionError: a partitioned asset declares no ``partition_expr``, or a row lies outside the run's partition.
            and whatever ``Trident.write`` raises (the dataset is then as it was).
        """
        key = dataset_key(context.asset_key)
        if obj is None:
            raise AssetReturnedNoneError(key)
        t = self.trident.get_client()
        if isinstance(obj, AuditedVersion):
            in_group = run_group.publishes_per_run(step.dagster_run) if (step := step_of(context)) is not None else False
            self._report(
                context, t, key, obj.result, obj.provenance, obj.metadata, partition=output_partition(context), in_group=in_group
            )
            return
        out = obj if isinstance(obj, TridentOutput) else TridentOutput(data=obj)
        partition = output_partition(context)  # partitions hook: PartitionError unless declared (partition_mapping.py)
        step = step_of(context)
        run = step.dagster_run if step is not None else None
        group = run_group.join_run_group(t, run) if run is not None and run_group.publishes_per_run(run) else None
        # a run that publishes once stages everything into its group: no per-asset gate
        gate = gate_checks(step, context.asset_key) if out.stage_txn is None and group is None else {}
        if gate and not self._gateable(context, t, key, list(gate)):
            gate = {}
        if gate:
            supersede(t, key, context.run_id)
        result, provenance = write_output(
            t,
            key,
            out,
            run_id=context.run_id,
            definition_metadata=context.definition_metadata or {},
            upstream=[asset_key_to_key(d.asset_key) for d in context.asset_spec.deps],
            partition=partition,
            gate=gate,
            partition_keys=list(context.asset_partition_keys) if context.has_asset_partitions else None,
            txn_id=output_txn_id(context),  # a re-run of this step repeats its write, never adds to it
            group=group,
        )
        self._report(context, t, key, result, provenance, out.metadata, partition=partition, in_group=group is not None)

    @staticmethod
    def _gateable(context: dg.OutputContext, t: Trident, key: str, gate: Sequence[str]) -> bool:
        """Staging needs a sink that holds staged versions; otherwise the output is written
        directly, said loudly. A partition run stages too: its publish re-bases the partition's
        change onto what writers of other partitions committed meanwhile."""
        sink = t.resolve_sink(key)
        if sink == "iceberg_native":
            return True
        context.log.warning(
            f"{key}: blocking check(s) {list(gate)} do not gate this write (the {sink!r} sink cannot stage); "
            "it is published directly"
        )
        return False

    def _report(
        self,
        context: dg.OutputContext,
        t: Trident,
        key: str,
        result: WriteResult,
        provenance: Mapping[str, Any] | None,
        extra: Mapping[str, Any],
        *,
        partition: Any,
        in_group: bool = False,
    ) -> None:
        failpoint("io_manager.after_write")  # the write is done; the step has not reported it yet
        if result.staged and in_group:  # the run's group: published with the whole run
            context.log_event(run_group.staged_observation(context.asset_key, key, result, partition))
            return
        if result.staged:  # what its checks audit and publish makes current: the same numbers
            plan = t.scan_plan(key, staged=result.txn_id)
            note_pending(context.run_id)
            context.add_output_metadata(
                report(
                    {
                        **version_metadata(result, describe_schema(plan.schema), _table_name(t, key), provenance),
                        "trident/status": "staged: published only when its blocking checks pass",
                        "trident/staged_txn": str(result.txn_id),
                        **extra,
                    }
                )
            )
            return
        context.add_output_metadata(
            report(
                {
                    # the control plane's part: what a materialization reports needs no catalog look-up
                    **materialization_metadata(result, t.describe(key, storage=False)),
                    **partition_metadata(result, partition),
                    **extra,
                }
            )
        )

    def load_input(self, context: dg.InputContext) -> Any:
        """An upstream dataset's rows in the type the input is annotated with (only the mapped
        upstream partitions; a check of a gated asset reads its staged version).

        Raises:
            AssetKeyNotADatasetKeyError: the asset key is not a dataset key.
            InvalidWriteError: the input's annotation is not a type rows can be loaded as.
            and whatever ``Trident.stream`` raises (``DatasetNotFoundError`` for an upstream never written).
        """
        key = dataset_key(context.asset_key)
        meta = context.definition_metadata or {}
        t = self.trident.get_client()  # settles this run's gates first (a downstream reads what was published)
        staged = None
        step = step_of(context)
        if step is not None and context.has_asset_key and audits(step, context.asset_key):
            staged = staged_in_run(t, key, step.run_id)  # a check of this asset audits its staged version
        elif step is not None:  # a run that publishes once reads what it staged itself
            staged = run_group.staged_sources(t, step.dagster_run).get(key)
        columns = meta.get("columns")
        if columns is None and not meta.get("identity"):
            schema = pa.schema(t.scan_plan(key, staged=staged).schema) if staged is not None else t.schema(key)
            columns = [n for n in schema.names if n not in IDENTITY_COLUMNS]
        if staged is not None:
            note = {"trident/staged_txn": str(staged), "trident/status": "audit of the staged version"}
            if not context.has_asset_partitions or len(context.asset_partition_keys) == 1:
                context.add_input_metadata(note)  # Dagster can only record it for one partition
            else:  # a check of a partitioned asset loads all its partitions
                context.log.info(f"{key}: {note}")
            partition = input_partition(context) if not audits(step, context.asset_key) else None
            reader = t.stream(key, columns=columns, row_filter=meta.get("row_filter"), staged=staged, partition=partition)
            return convert_input(reader, context.dagster_type.typing_type, key)
        partition = input_partition(context)  # partitions hook: only the mapped upstream partitions
        reader = t.stream(key, columns=columns, row_filter=meta.get("row_filter"), partition=partition)
        return convert_input(reader, context.dagster_type.typing_type, key)


def write_output(
    t: Trident,
    key: str,
    out: TridentOutput,
    *,
    run_id: str,
    definition_metadata: Mapping[str, Any],
    upstream: Sequence[str],
    partition: Any = None,
    gate: Mapping[str, str] | None = None,
    partition_keys: Sequence[str] | None = None,
    txn_id: uuid.UUID | None = None,
    group: TransactionGroup | None = None,
) -> tuple[WriteResult, Mapping[str, Any] | None]:
    """Write one asset output through the client (what ``handle_output`` does, shared with
    checked assets that write and audit in their own step): a staged version when
    ``out.stage_txn`` is set or ``gate`` names blocking checks of other steps (check -> step, recorded in the
    ledger, with the run, for gate.py to settle). ``partition_keys``: the Dagster partitions the run
    writes, kept in the ledger so that an instance that does not know the run can still report
    each partition's materialization (the ledger sensor). The write's id is ``out.stage_txn``, else
    ``txn_id`` (the step's, ``step_txn.py``: a second attempt of the step is a no-op returning
    the first commit, or replaces the first staging), else a fresh one. ``group``: the run's
    transaction group (run_group.py), which the output is staged into, published with the run."""
    meta = definition_metadata
    mode: WriteMode = out.mode or meta.get(META_MODE) or "replace"
    keys = out.keys if out.keys is not None else meta.get(META_KEYS)
    ledger_meta: dict[str, Any] = {RUN_ID: run_id, **{k: _plain(v) for k, v in out.metadata.items()}}
    if partition_keys:
        ledger_meta[PARTITION_KEYS] = list(partition_keys)
    if gate:
        ledger_meta[GATE_META] = sorted(gate)
        ledger_meta[GATE_STEPS_META] = dict(gate)
    try:
        provenance = out.provenance if out.provenance is not None else meta.get(META_PROVENANCE)
        if out.merge_upstream:
            provenance = derived_provenance(t, upstream, provenance)
        writer = out.writer or meta.get(META_WRITER) or PIPELINE_WRITER
        common: dict[str, Any] = {
            "mode": mode,
            "writer": writer,
            "keys": list(keys) if keys else None,
            "source_refs": out.source_refs,
            "metadata": ledger_meta,
            "provenance": provenance,
            "watermarks": out.watermarks,
            "partition": partition,
            "txn_id": out.stage_txn or txn_id,
        }
        if group is not None:
            result = group.write(key, out.data, **common)
        else:
            result = t.write(key, out.data, stage=out.stage_txn is not None or bool(gate), **common)
    finally:
        if out.on_done is not None:
            out.on_done()
    return result, provenance


def derived_provenance(t: Trident, upstream: Sequence[str], own: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``own`` merged with the provenance of the upstream keys that are Trident datasets (with the
    lineage of their current versions); ``own`` unchanged when none is (a root asset)."""
    sources: dict[str, Description] = {}
    for key in dict.fromkeys(upstream):
        try:
            sources[key] = t.describe(key, storage=False)  # provenance and version only: no catalog look-up
        except (DatasetNotFoundError, InvalidDatasetKeyError):  # not a Trident dataset (another IO manager's asset)
            continue
    if not sources:
        return dict(own) if own is not None else None
    return merge_provenance({k: d.provenance for k, d in sources.items()}, own, [lineage_entry(k, d) for k, d in sources.items()])


def asset_key_to_key(asset_key: dg.AssetKey) -> str:
    """Dataset keys are asset keys: ``AssetKey(["sales", "orders"])`` is ``sales/orders``."""
    return "/".join(asset_key.path)


def convert_input(reader: pa.RecordBatchReader, wanted: Any, key: str) -> Any:
    """Hand the rows over in the type the parameter asks for (Table when it does not say)."""
    name = getattr(wanted, "__name__", "")
    module = getattr(wanted, "__module__", "") or ""
    if wanted is pa.RecordBatchReader:
        return reader
    if wanted is pa.Table or wanted is Any or wanted is None or name in ("Any", "Nothing") or module == "builtins":
        return reader.read_all()
    if module.startswith("pandas") and name == "DataFrame":
        return reader.read_all().to_pandas()
    if module.startswith("polars") and name in ("DataFrame", "LazyFrame"):
        import polars as pl

        frame = cast(pl.DataFrame, pl.from_arrow(reader.read_all()))  # a Table gives a DataFrame
        return frame.lazy() if name == "LazyFrame" else frame
    raise InvalidWriteError(
        f"cannot load {key!r} as {wanted!r}: annotate the input as pyarrow.Table, pyarrow.RecordBatchReader, "
        "pandas.DataFrame or polars.DataFrame"
    )


def _table_name(t: Trident, key: str) -> str:
    return ".".join(iceberg_identifier(t.settings.namespace_root, t.workspace, key))


def _plain(value: Any) -> Any:
    """JSON-safe scalars for the ledger's metadata."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value if not isinstance(value, bool) else str(value).lower()
    return str(value)
