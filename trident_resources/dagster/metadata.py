"""What a Trident materialization shows in Dagster: Dagster's standard keys, then a few of ours.

Dagster's keys: ``dagster/row_count``, ``dagster/column_schema`` (the user's columns, then the
engine's identity columns, with Iceberg's type names: ``string``, ``timestamptz``,
``decimal(38, 4)``, ``uuid``, as any Iceberg engine would name them, not Arrow's
``large_string`` / ``timestamp[us, tz=UTC]``), ``dagster/table_name`` (the Iceberg identifier) and,
for a SQL node, ``dagster/column_lineage`` (which source columns each column was computed from,
kept in the dataset's provenance as ``column_lineage``).

Ours, on purpose few (``report``):

==========================  ===================================================================
``trident/txn_id``          the ledger transaction that wrote this version (text)
``trident/snapshot_id``     its Iceberg snapshot (text: a 64-bit id the browser would round)
``trident/committed_at``    when it became visible (a timestamp value)
``trident/provenance``      the dataset's governance metadata, lineage included (JSON)
``trident/environment``     the environment it was written in (only outside production; environments.md)
``trident/column_lineage``  a SQL node's: per column, its source columns or why it is untraced
                            (JSON; the provenance keeps it too, as ``column_lineage``)
``trident/write``           everything else about the write, one JSON entry: sink, mode, writer,
                            route, rows_written, skipped, preserved, schema_version, and what the
                            node said (plan, incremental, partition, dataset_row_count, join
                            estimate, ...)
``trident/inlined_rows``    an ``iceberg_native`` dataset's rows kept in the control plane by small
                            writes (``TRIDENT_INLINE_MAX_ROWS``) and not flushed into Iceberg yet:
                            Trident reads them, other Iceberg engines see them after a flush
``trident/status``,         a staged version only: that it waits for its checks, and its txn
``trident/staged_txn``
==========================  ===================================================================

Every other ``trident/<name>`` a caller passes is folded into ``trident/write`` as ``<name>``;
keys of any other prefix (a user's own output metadata) are shown as they are.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import dagster as dg

from ..core.identity import IDENTITY_COLUMNS, ROW_ID
from ..core.results import Description, WriteResult
from ..core.settings import PRODUCTION
from ..transaction.inline import INLINE_SINK

JS_SAFE_INTEGER = 2**53 - 1
WRITE = "trident/write"
COLUMN_LINEAGE_KEY = "trident/column_lineage"
ENVIRONMENT_KEY = "trident/environment"
SHOWN = (
    "trident/txn_id",
    "trident/snapshot_id",
    "trident/committed_at",
    "trident/provenance",
    ENVIRONMENT_KEY,
    "trident/inlined_rows",
    COLUMN_LINEAGE_KEY,
    "trident/status",
    "trident/staged_txn",
)
COLUMN_LINEAGE = "column_lineage"  # the provenance field a SQL node's column lineage is kept in
PREFIX = "trident/"

_PRIMITIVES = {
    "bool": "boolean",
    "int8": "int",
    "int16": "int",
    "int32": "int",
    "uint8": "int",
    "uint16": "int",
    "uint32": "long",
    "int64": "long",
    "uint64": "long",
    "halffloat": "float",
    "float": "float",
    "double": "double",
    "string": "string",
    "large_string": "string",
    "string_view": "string",
    "binary": "binary",
    "large_binary": "binary",
    "binary_view": "binary",
    "date32[day]": "date",
    "date64[ms]": "date",
}
_TIMESTAMP = re.compile(r"timestamp\[(s|ms|us|ns)(, tz=.+)?\]")
_DECIMAL = re.compile(r"decimal(?:32|64|128|256)?\((\d+), ?(-?\d+)\)")
_FIXED = re.compile(r"fixed_size_binary\[(\d+)\]")
_NESTED = re.compile(r"(large_list|list|list_view|large_list_view|struct|map)<(.*)>")


def iceberg_type_name(arrow_type: str) -> str:
    """The Iceberg name of a type written as Arrow prints it (the control plane keeps a schema as
    those strings). A type Iceberg has no name for is shown as Arrow names it."""
    t = arrow_type.strip()
    if t in _PRIMITIVES:
        return _PRIMITIVES[t]
    if m := _TIMESTAMP.fullmatch(t):
        base = "timestamptz" if m.group(2) else "timestamp"
        return f"{base}_ns" if m.group(1) == "ns" else base
    if t.startswith("time32[") or t.startswith("time64["):
        return "time"
    if m := _DECIMAL.fullmatch(t):
        return f"decimal({m.group(1)}, {m.group(2)})"
    if m := _FIXED.fullmatch(t):
        return f"fixed[{m.group(1)}]"
    if m := _NESTED.fullmatch(t):
        kind, inner = m.group(1), m.group(2)
        parts = _split_top(inner)
        if kind == "struct":
            return "struct<" + ", ".join(_field(p) for p in parts) + ">"
        if kind == "map" and len(parts) == 2:
            return f"map<{iceberg_type_name(parts[0])}, {iceberg_type_name(_field_type(parts[1]))}>"
        if kind != "map" and len(parts) == 1:
            return f"list<{iceberg_type_name(_field_type(parts[0]))}>"
    return t


def _split_top(inner: str) -> list[str]:
    """``inner`` split on the commas outside any <...>, (...) or [...]."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(inner):
        if ch in "<([":
            depth += 1
        elif ch in ">)]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(inner[start:i].strip())
            start = i + 1
    parts.append(inner[start:].strip())
    return [p for p in parts if p]


def _field_type(field: str) -> str:
    """The type of ``name: type`` (a list's ``item: int64``), or ``field`` when it has no name."""
    name, sep, rest = field.partition(": ")
    return rest if sep and "<" not in name and "(" not in name else field


def _field(field: str) -> str:
    name, sep, rest = field.partition(": ")
    rest = rest.removesuffix(" not null")
    return f"{name}: {iceberg_type_name(rest)}" if sep else iceberg_type_name(field)


def column_schema(description: Description | Sequence[Mapping[str, Any]]) -> dg.TableSchema:
    """``dagster/column_schema``: the user's columns in their order, then the identity columns
    (``__row_index``, ``__row_id``, ``__created_at``), each with its Iceberg type name."""
    columns = description.schema if isinstance(description, Description) else description
    own = [c for c in columns if c["name"] not in IDENTITY_COLUMNS]
    identity = sorted((c for c in columns if c["name"] in IDENTITY_COLUMNS), key=lambda c: IDENTITY_COLUMNS.index(c["name"]))
    return dg.TableSchema(
        columns=[
            dg.TableColumn(
                name=c["name"],
                # __row_id is a UUID (stored as Iceberg uuid; readers get its text), whatever string the schema keeps
                type="uuid" if c["name"] == ROW_ID else iceberg_type_name(str(c["type"])),
                constraints=dg.TableColumnConstraints(nullable=bool(c.get("nullable", True))),
            )
            for c in [*own, *identity]
        ]
    )


def column_lineage(provenance: Mapping[str, Any] | None) -> dg.TableColumnLineage | None:
    """``dagster/column_lineage`` from a provenance's ``column_lineage`` (traced columns only:
    an untraced column has no entry, so the UI shows no guessed source)."""
    columns = (provenance or {}).get(COLUMN_LINEAGE)
    if not isinstance(columns, Mapping):
        return None
    deps = {
        name: [dg.TableColumnDep(asset_key=dg.AssetKey(s["key"].split("/")), column_name=s["column"]) for s in entry["sources"]]
        for name, entry in columns.items()
        if isinstance(entry, Mapping) and entry.get("sources")
    }
    return dg.TableColumnLineage(deps_by_column=deps) if deps else None


def report(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """``metadata`` as a materialization shows it: the kept ``trident/*`` keys and any non-Trident
    key as they are, every other ``trident/<name>`` folded into the one JSON entry ``trident/write``."""
    shown: dict[str, Any] = {}
    write: dict[str, Any] = {}
    for k, v in metadata.items():
        if k.startswith(PREFIX) and k not in SHOWN and k != WRITE:
            write[k.removeprefix(PREFIX)] = _plain_value(v)
        elif k == WRITE:
            write.update(_plain_value(v))
        else:
            shown[k] = v
    if write:
        shown[WRITE] = dg.MetadataValue.json(json_safe(write))
    return shown


def version_metadata(
    result: WriteResult, schema: Sequence[Mapping[str, Any]], table_name: str, provenance: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The metadata of one written version (published, or staged and about to be published),
    before ``report`` folds it."""
    meta: dict[str, Any] = {
        "dagster/row_count": dg.MetadataValue.int(result.row_count),
        "dagster/column_schema": column_schema(schema),
        "dagster/table_name": table_name,
        "trident/txn_id": str(result.txn_id),
        "trident/snapshot_id": dg.MetadataValue.text(str(result.snapshot_id)),
        "trident/committed_at": dg.MetadataValue.timestamp(result.committed_at),
        # the column lineage has an entry of its own (below): inside the provenance it would make the
        # UI fold the whole provenance away behind a link
        "trident/provenance": dg.MetadataValue.json(
            json_safe({k: v for k, v in (provenance or {}).items() if k != COLUMN_LINEAGE})
        ),
        "trident/sink": result.sink,
        "trident/mode": result.mode,
        "trident/writer": result.writer,
        "trident/route": result.route,
        "trident/rows_written": result.rows_written,
        "trident/skipped": result.skipped,
        "trident/preserved": result.preserved,
        "trident/schema_version": result.schema_version,
    }
    if result.environment != PRODUCTION:  # a code location started in an environment says so on every version
        meta[ENVIRONMENT_KEY] = result.environment
    lineage = column_lineage(provenance)
    if lineage is not None:
        meta["dagster/column_lineage"] = lineage
    columns = (provenance or {}).get(COLUMN_LINEAGE)
    if columns:  # per column, traced or not: what open source Dagster's UI shows of the lineage
        meta[COLUMN_LINEAGE_KEY] = dg.MetadataValue.json(json_safe(columns))
    return meta


def materialization_metadata(result: WriteResult, description: Description) -> dict[str, Any]:
    """What every Trident materialization reports in Dagster (before ``report`` folds it): the
    version's, and for an ``iceberg_native`` dataset how many of its rows are not in Iceberg yet
    (``trident/inlined_rows``), as ``describe`` counts them when the write has committed."""
    meta = version_metadata(result, description.schema, description.iceberg_identifier or description.key, description.provenance)
    if description.sink == INLINE_SINK:
        meta["trident/inlined_rows"] = dg.MetadataValue.int(description.inlined_rows)
    return meta


def json_safe(value: Any, key: str = "") -> Any:
    """``value`` as JSON that survives the Dagster UI: the browser parses JSON numbers as doubles,
    so every id (a key named ``id`` or ``*_id``) and any integer past 2**53 becomes a string, and
    whatever JSON cannot hold (UUIDs, datetimes) becomes its text."""
    if isinstance(value, Mapping):
        return {str(k): json_safe(v, str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v, key) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, (str, float)):
        return value
    if isinstance(value, int):
        is_id = key == "id" or key.endswith("_id") or key.endswith("_ids")
        return str(value) if is_id or abs(value) > JS_SAFE_INTEGER else value
    return str(value)


def _plain_value(v: Any) -> Any:
    """A metadata value as plain data (``MetadataValue.int(3)`` is 3)."""
    return v.value if isinstance(v, dg.MetadataValue) else v
