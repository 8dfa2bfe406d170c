"""Trident in Dagster: ``TridentResource`` (a configured ``Trident`` for ops and checks) and
``TridentIOManager`` (assets return rows; they are written and loaded through the facade).

Both read ``TRIDENT_*`` variables like every other part of the trident, so the same Definitions run
on the embedded default and in production; fields set here override the environment (handy with
``dg.EnvVar`` in deployments and for tests that point at their own workspace).

What an asset may return (all go through ``Trident.write``, writer ``pipeline.output``):
a pyarrow Table, a ``RecordBatchReader`` (streamed, never materialized: an asset larger than memory
passes straight through), an iterable of RecordBatches, a pandas/polars DataFrame, or a
``TridentOutput`` wrapping any of those with write options (mode, keys, provenance, watermarks...).
Plain returns take their options from the output's definition metadata:

=====================  ==========================================================================
``trident/mode``       replace (default), append, upsert, append_new (the facade's write modes)
``trident/keys``       key column(s) for upsert / append_new / snapshot-replace (replace + keys)
``trident/writer``     the facade writer name; default ``pipeline.output``
``trident/provenance`` governance metadata (dict) recorded in the same COMMIT as the rows
=====================  ==========================================================================

Inputs load as a pyarrow Table unless the parameter is annotated ``pa.RecordBatchReader`` (a bounded
memory stream), ``pandas.DataFrame`` or ``polars.DataFrame``. Input metadata ``columns`` (a list)
projects the read, ``row_filter`` (a pyiceberg filter string) filters it, and ``identity: True``
keeps the engine's ``__row_index/__row_id/__created_at`` columns (dropped by default so that an
asset can return what it loaded without tripping ReservedColumnError).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import dagster as dg
import pyarrow as pa
from pydantic import PrivateAttr, SecretStr

from ..errors import InvalidWriteError
from ..facade import Trident
from ..identity import IDENTITY_COLUMNS
from ..results import Description, WriteResult
from ..settings import TridentSettings
from .partitions import input_partition, output_partition, partition_metadata

PIPELINE_WRITER = "pipeline.output"
META_MODE = "trident/mode"
META_KEYS = "trident/keys"
META_WRITER = "trident/writer"
META_PROVENANCE = "trident/provenance"


@dataclass
class TridentOutput:
    """Rows plus how to write them; what node factories (and any asset) may return.

    ``on_done`` runs after the write whether it succeeded or not: a streamed output often holds a
    DuckDB connection open until the facade has drained it.
    """

    data: Any
    mode: str | None = None
    keys: Sequence[str] | None = None
    writer: str | None = None
    provenance: Mapping[str, Any] | None = None
    watermarks: Mapping[str, tuple[datetime, uuid.UUID | None]] | None = None
    source_refs: Sequence[str] | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    on_done: Callable[[], None] | None = None


class TridentResource(dg.ConfigurableResource):
    """A ``Trident`` client for ops, sensors and checks; unset fields come from ``TRIDENT_*``."""

    home: str | None = None
    workspace: str | None = None
    pg_dsn: str | None = None
    namespace_root: str | None = None
    overrides: dict[str, str] = {}

    _client: Trident | None = PrivateAttr(default=None)

    @classmethod
    def from_settings(cls, settings: TridentSettings) -> TridentResource:
        """A resource that reproduces ``settings`` exactly (tests, the CLI)."""
        defaults = TridentSettings.model_fields
        overrides: dict[str, str] = {}
        for name, value in settings.__dict__.items():
            if name in ("home", "workspace", "pg_dsn", "namespace_root") or value == defaults[name].get_default(call_default_factory=True):
                continue
            if isinstance(value, SecretStr):
                value = value.get_secret_value()
            overrides[name] = json.dumps(value) if isinstance(value, (dict, list)) else str(_plain(value))
        dsn = settings.pg_dsn.get_secret_value() if settings.pg_dsn else None
        return cls(
            home=str(settings.home), workspace=settings.workspace, pg_dsn=dsn,
            namespace_root=settings.namespace_root, overrides=overrides,
        )

    def settings(self) -> TridentSettings:
        values: dict[str, Any] = {k: json.loads(v) if v[:1] in "{[" else v for k, v in self.overrides.items()}
        for name in ("home", "workspace", "pg_dsn", "namespace_root"):
            if getattr(self, name) is not None:
                values[name] = getattr(self, name)
        return TridentSettings(**values)

    def get_client(self) -> Trident:
        """The run's ``Trident`` (opened on first use: a nested resource may skip setup)."""
        if self._client is None:
            self._client = Trident(self.settings())
        return self._client

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self.get_client()

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


class TridentIOManager(dg.ConfigurableIOManager):
    """Writes asset outputs through ``Trident.write`` and loads inputs through its read methods."""

    trident: TridentResource
    batch_rows: int = 65_536

    def handle_output(self, context: dg.OutputContext, obj: Any) -> None:
        if obj is None:
            context.log.debug("asset returned None: nothing written")
            return
        out = obj if isinstance(obj, TridentOutput) else TridentOutput(data=obj)
        key = asset_key_to_key(context.asset_key)
        meta = context.definition_metadata or {}
        mode = out.mode or meta.get(META_MODE) or "replace"
        keys = out.keys if out.keys is not None else meta.get(META_KEYS)
        provenance = out.provenance if out.provenance is not None else meta.get(META_PROVENANCE)
        t = self.trident.get_client()
        partition = output_partition(context)  # partitions hook: PartitionError unless declared (partitions.py)
        try:
            result = t.write(
                key, out.data, mode=mode, writer=out.writer or meta.get(META_WRITER) or PIPELINE_WRITER,
                keys=list(keys) if keys else None, source_refs=out.source_refs,
                metadata={"dagster_run_id": context.run_id, **{k: _plain(v) for k, v in out.metadata.items()}},
                provenance=provenance, watermarks=out.watermarks, partition=partition,
            )
        finally:
            if out.on_done is not None:
                out.on_done()
        context.add_output_metadata(
            {**materialization_metadata(result, t.describe(key)), **partition_metadata(result, partition), **out.metadata}
        )

    def load_input(self, context: dg.InputContext) -> Any:
        key = asset_key_to_key(context.asset_key)
        meta = context.definition_metadata or {}
        t = self.trident.get_client()
        columns = meta.get("columns")
        if columns is None and not meta.get("identity"):
            columns = [n for n in t.schema(key).names if n not in IDENTITY_COLUMNS]
        partition = input_partition(context)  # partitions hook: only the mapped upstream partitions
        reader = t.stream(key, columns=list(columns) if columns else None, row_filter=meta.get("row_filter"), partition=partition)
        return convert_input(reader, context.dagster_type.typing_type, key)


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

        frame = pl.from_arrow(reader.read_all())
        return frame.lazy() if name == "LazyFrame" else frame
    raise InvalidWriteError(
        f"cannot load {key!r} as {wanted!r}: annotate the input as pyarrow.Table, pyarrow.RecordBatchReader, "
        "pandas.DataFrame or polars.DataFrame"
    )


def column_schema(description: Description) -> dg.TableSchema:
    return dg.TableSchema(
        columns=[
            dg.TableColumn(
                name=c["name"], type=str(c["type"]),
                constraints=dg.TableColumnConstraints(nullable=bool(c.get("nullable", True))),
            )
            for c in description.schema
        ]
    )


def materialization_metadata(result: WriteResult, description: Description) -> dict[str, Any]:
    """What every Trident materialization reports in Dagster (the standard keys, then ours)."""
    return {
        "dagster/row_count": dg.MetadataValue.int(result.row_count),
        "dagster/column_schema": column_schema(description),
        "dagster/table_name": description.iceberg_identifier or description.key,
        "trident/txn_id": str(result.txn_id),
        "trident/snapshot_id": dg.MetadataValue.text(str(result.snapshot_id)),
        "trident/schema_version": result.schema_version,
        "trident/sink": result.sink,
        "trident/mode": result.mode,
        "trident/writer": result.writer,
        "trident/route": result.route,
        "trident/rows_written": result.rows_written,
        "trident/skipped": result.skipped,
        "trident/preserved": result.preserved,
        "trident/committed_at": result.committed_at.isoformat(),
        "trident/provenance": dg.MetadataValue.json(json.loads(json.dumps(description.provenance, default=str))),
    }


def _plain(value: Any) -> Any:
    """JSON-safe scalars for the ledger's metadata and for config strings."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value if not isinstance(value, bool) else str(value).lower()
    return str(value)
