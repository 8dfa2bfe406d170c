"""What a Trident materialization shows in Dagster: Iceberg type names in the column schema with
the identity columns after the user's, a handful of ``trident/*`` keys (``committed_at`` a
timestamp, the rest of the write one JSON entry), the same few keys for commits the ledger sensor
reports."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import dagster as dg
import pyarrow as pa

from tests.support.dagster_helpers import resources_for, step_errors
from trident_resources import Trident, TridentSettings
from trident_resources.dagster.metadata import iceberg_type_name, report

TRIDENT_KEYS = {
    "trident/txn_id",
    "trident/snapshot_id",
    "trident/committed_at",
    "trident/provenance",
    "trident/inlined_rows",  # an iceberg_native dataset's rows not in Iceberg yet
    "trident/write",
}


@dg.asset(key=["meta", "typed"])
def typed() -> pa.Table:
    return pa.table(
        {
            "name": pa.array(["a"], pa.large_string()),
            "at": pa.array([dt.datetime(2024, 1, 1, tzinfo=dt.UTC)], pa.timestamp("us", tz="UTC")),
            "amount": pa.array([Decimal("1.2345")], pa.decimal128(38, 4)),
            "day": pa.array([dt.date(2024, 1, 1)], pa.date32()),
            "n": pa.array([1], pa.int64()),
            "tags": pa.array([["x"]], pa.list_(pa.string())),
        }
    )


def test_the_column_schema_has_iceberg_types_and_identity_last(settings: TridentSettings, trident: Trident) -> None:
    result = dg.materialize([typed], resources=resources_for(settings), raise_on_error=False)
    assert result.success, step_errors(result)
    [event] = result.get_asset_materialization_events()
    meta = event.materialization.metadata
    schema = meta["dagster/column_schema"].value
    assert isinstance(schema, dg.TableSchema)
    shown = [(c.name, c.type) for c in schema.columns]
    assert shown == [
        ("name", "string"),
        ("at", "timestamptz"),
        ("amount", "decimal(38, 4)"),
        ("day", "date"),
        ("n", "long"),
        ("tags", "list<string>"),
        ("__row_index", "long"),
        ("__row_id", "uuid"),
        ("__created_at", "timestamptz"),
    ]
    assert {k for k in meta if k.startswith("trident/")} == TRIDENT_KEYS
    assert meta["trident/inlined_rows"].value == 0  # a replace: every row in its Iceberg snapshot
    committed = meta["trident/committed_at"]
    assert isinstance(committed, dg.TimestampMetadataValue)
    assert committed.value == trident.describe("meta/typed").committed_at.timestamp()  # type: ignore[union-attr]
    write = meta["trident/write"].value
    assert isinstance(write, dict)
    assert write["mode"] == "replace" and write["sink"] == "iceberg_native" and write["writer"] == "pipeline.output"
    assert write["rows_written"] == 1 and write["schema_version"] == 1


def test_report_folds_every_other_trident_key_into_one_json_entry() -> None:
    shown = report(
        {
            "dagster/row_count": dg.MetadataValue.int(3),
            "trident/txn_id": "t",
            "trident/plan": "full rebuild",
            "trident/dataset_row_count": dg.MetadataValue.int(9),
            "mine/owner": "ann",
        }
    )
    assert set(shown) == {"dagster/row_count", "trident/txn_id", "trident/write", "mine/owner"}
    assert shown["trident/write"].value == {"plan": "full rebuild", "dataset_row_count": 9}


def test_iceberg_type_names_of_arrow_types() -> None:
    assert iceberg_type_name("timestamp[ns]") == "timestamp_ns"
    assert iceberg_type_name("struct<a: int32, b: map<large_string, double>>") == "struct<a: int, b: map<string, double>>"
    assert iceberg_type_name("fixed_size_binary[16]") == "fixed[16]" and iceberg_type_name("bool") == "boolean"
    assert iceberg_type_name("dictionary<values=string, indices=int32, ordered=0>").startswith("dictionary")  # unknown: as is
