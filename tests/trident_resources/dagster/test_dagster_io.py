"""TridentIOManager: streamed outputs, typed inputs, column projection, options from metadata."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import dagster as dg
import pandas as pd
import polars as pl
import pyarrow as pa

from tests.support.dagster_helpers import materialize_nodes, materialized, resources_for, step_errors, succeeded
from trident_assets import merge_provenance, transform_asset
from trident_resources import Trident, TridentSettings
from trident_resources.dagster.metadata import json_safe

JS_SAFE = 2**53 - 1


def test_a_lazy_reader_streams_through_and_inputs_load_by_annotation(settings: TridentSettings, trident: Trident) -> None:
    pulled: list[int] = []

    @dg.asset(key=["io", "big"])
    def big() -> pa.RecordBatchReader:
        schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("score", pa.float64())])

        def batches() -> Iterator[pa.RecordBatch]:
            for i in range(20):
                pulled.append(i)
                ids = list(range(i * 1000, (i + 1) * 1000))
                yield pa.RecordBatch.from_pydict(
                    {"id": ids, "name": [f"n{x}" for x in ids], "score": [x / 2 for x in ids]}, schema=schema
                )

        return pa.RecordBatchReader.from_batches(schema, batches())

    seen: dict[str, object] = {}

    @dg.asset(key=["io", "narrow"], ins={"big": dg.AssetIn(key=["io", "big"], metadata={"columns": ["id"]})})
    def narrow(big: pa.Table) -> pa.Table:
        seen["narrow"] = big.column_names
        return big.slice(0, 10)

    @dg.asset(key=["io", "as_pandas"], ins={"big": dg.AssetIn(key=["io", "big"], metadata={"row_filter": "id < 5"})})
    def as_pandas(big: pd.DataFrame) -> pd.DataFrame:
        seen["pandas"] = (type(big), list(big.columns), len(big))
        return big

    @dg.asset(key=["io", "as_polars"], ins={"big": dg.AssetIn(key=["io", "big"])})
    def as_polars(big: pl.DataFrame) -> pl.DataFrame:
        seen["polars"] = type(big)
        return big.filter(pl.col("id") < 3)

    @dg.asset(key=["io", "as_reader"], ins={"big": dg.AssetIn(key=["io", "big"], metadata={"identity": True})})
    def as_reader(big: pa.RecordBatchReader) -> None:
        seen["reader"] = (type(big), big.schema.names[:3])
        big.close()

    result = dg.materialize(
        [big, narrow, as_pandas, as_polars, as_reader], resources=resources_for(settings), raise_on_error=False
    )
    assert result.success, step_errors(result)
    assert pulled == list(range(20))
    meta = materialized(result)
    assert meta["io/big"]["dagster/row_count"] == 20_000
    assert [c.name for c in meta["io/big"]["dagster/column_schema"].columns] == [  # the user's columns first
        "id",
        "name",
        "score",
        "__row_index",
        "__row_id",
        "__created_at",
    ]
    assert meta["io/big"]["trident/write"]["writer"] == "pipeline.output"
    assert seen["narrow"] == ["id"]  # only the projected column was read
    assert seen["pandas"] == (pd.DataFrame, ["id", "name", "score"], 5)
    assert seen["polars"] is pl.DataFrame
    assert seen["reader"] == (pa.RecordBatchReader, ["__row_index", "__row_id", "__created_at"])
    assert trident.describe("io/as_polars").row_count == 3
    assert not trident.exists("io/as_reader")  # an asset that returns None writes nothing


def test_write_options_come_from_output_metadata(settings: TridentSettings, trident: Trident) -> None:
    trident.write("io/people", pa.table({"id": [1, 2], "name": ["a", "b"]}))
    before = {r["id"]: r["__row_id"] for r in trident.read("io/people").to_pylist()}

    @dg.asset(
        key=["io", "people"],
        metadata={"trident/mode": "upsert", "trident/keys": ["id"], "trident/provenance": {"contract": "c-1"}},
    )
    def people() -> pa.Table:
        return pa.table({"id": [2, 3], "name": ["B", "c"]})

    result = dg.materialize([people], resources=resources_for(settings))
    assert result.success, step_errors(result)
    meta = materialized(result)["io/people"]
    assert (
        meta["trident/write"]["mode"] == "upsert" and meta["trident/write"]["preserved"] == 1 and meta["dagster/row_count"] == 3
    )
    after = {r["id"]: r["__row_id"] for r in trident.read("io/people").to_pylist()}
    assert after[2] == before[2] and after[1] == before[1]
    assert trident.describe("io/people").provenance == {"contract": "c-1"}


def test_returning_identity_columns_is_a_clear_error(settings: TridentSettings, trident: Trident) -> None:
    @dg.asset(key=["io", "bad"])
    def bad() -> pa.Table:
        return pa.table({"__row_id": ["x"], "v": [1]})

    result = dg.materialize([bad], resources=resources_for(settings), raise_on_error=False)
    assert not result.success
    assert any("__row_id" in e for e in step_errors(result))
    assert not trident.exists("io/bad")


def test_provenance_merge_unions_lists_and_records_conflicts() -> None:
    merged = merge_provenance(
        {
            "a/x": {"counterparty": "acme", "contract": "k1", "tags": ["pii", "eu"], "upstream": ["raw/x"]},
            "a/y": {"counterparty": "acme", "contract": "k2", "tags": ["eu", "finance"], "owner": {"team": "t1"}},
        },
        own={"tags": ["derived"], "counterparty": "acme-group"},
        lineage=[{"key": "a/x"}],
    )
    assert merged["tags"] == ["pii", "eu", "finance", "derived"]
    assert merged["contract"] == ["k1", "k2"]
    assert merged["counterparty"] == "acme-group"
    assert merged["owner"] == {"team": "t1"}
    assert merged["upstream"] == ["a/x", "a/y", "raw/x"]
    fields = [c["field"] for c in merged["conflicts"]]
    assert fields == ["contract", "counterparty"]
    assert merged["conflicts"][0]["values"] == {"a/x": "k1", "a/y": "k2"}
    assert merged["conflicts"][1]["resolved_by"] == "node"
    # carried forward: a further derivation keeps the earlier conflict
    again = merge_provenance({"b/z": merged})
    assert again["conflicts"][:2] == merged["conflicts"] and again["upstream"] == ["a/x", "a/y", "b/z", "raw/x"]


def _numbers(value: Any, path: str = "") -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        return [x for k, v in value.items() for x in _numbers(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [x for i, v in enumerate(value) for x in _numbers(v, f"{path}[{i}]")]
    return [(path, value)] if isinstance(value, int) and not isinstance(value, bool) else []


def test_every_id_in_json_metadata_is_a_string(settings: TridentSettings, trident: Trident) -> None:
    """Issue 9.4: the UI parses JSON numbers as doubles, so a 64-bit snapshot id would show rounded."""
    trident.write("src/items", pa.table({"id": [1, 2, 3]}), provenance={"contract": "k-1"})
    node = transform_asset("out/copy", "src/items", "SELECT * FROM source")
    meta = materialized(succeeded(materialize_nodes(settings, [node])))["out/copy"]
    prov = meta["trident/provenance"]
    [lineage] = prov["lineage"]
    assert lineage["snapshot_id"] == str(trident.describe("src/items").snapshot_id)
    assert _numbers(prov) == []  # nothing numeric: every id is a string
    assert trident.describe("out/copy").provenance["lineage"][0]["snapshot_id"] == lineage["snapshot_id"]  # stored so too
    assert not [k for k, v in meta.items() if isinstance(v, int) and not isinstance(v, bool) and abs(v) > JS_SAFE]


def test_json_metadata_turns_ids_and_big_integers_into_strings() -> None:
    """Provenance stored before ids were strings is shown safely too."""
    stored = {"lineage": [{"snapshot_id": 7310198725693374725, "txn_id": "t"}], "n": 3, "big": 2**60, "ok": True, "x": 1.5}
    assert json_safe(stored) == {
        "lineage": [{"snapshot_id": "7310198725693374725", "txn_id": "t"}],
        "n": 3,
        "big": str(2**60),
        "ok": True,
        "x": 1.5,
    }


def test_a_plain_asset_merges_its_upstream_provenance(settings: TridentSettings, trident: Trident) -> None:
    """Issue 9.2: a plain @asset that loads a governed source through the IO manager (and declares
    another as a dep) keeps their counterparty and contract, with the lineage of what it read."""
    trident.write("src/gov", pa.table({"id": [1, 2, 3]}), provenance={"counterparty": "acme", "contract": "k-9", "tags": ["pii"]})
    trident.write("src/ref", pa.table({"id": [1]}), provenance={"counterparty": "acme", "tags": ["ref"]})

    @dg.asset(
        key=["out", "derived"],
        ins={"gov": dg.AssetIn(key=["src", "gov"])},
        deps=[dg.AssetKey(["src", "ref"])],
        metadata={"trident/provenance": {"tags": ["derived"]}},
    )
    def derived(gov: pa.Table) -> pa.Table:
        return gov.filter(pa.compute.greater(gov["id"], 1))

    sources = [dg.AssetSpec(["src", "gov"]), dg.AssetSpec(["src", "ref"])]
    result = dg.materialize([*sources, derived], resources=resources_for(settings), selection=[derived], raise_on_error=False)
    assert result.success, step_errors(result)
    prov = trident.describe("out/derived").provenance
    assert prov["counterparty"] == "acme" and prov["contract"] == "k-9"
    assert prov["tags"] == ["pii", "ref", "derived"]
    assert prov["upstream"] == ["src/gov", "src/ref"] and prov["conflicts"] == []
    gov = trident.describe("src/gov")
    assert prov["lineage"][0] == {
        "key": "src/gov",
        "txn_id": str(gov.last_txn_id),
        "snapshot_id": str(gov.snapshot_id),
        "committed_at": gov.committed_at.isoformat(),  # type: ignore[union-attr]
    }
    assert materialized(result)["out/derived"]["trident/provenance"]["contract"] == "k-9"

    # and one more hop: a derivation of the derived asset still carries them
    @dg.asset(key=["out", "again"], ins={"d": dg.AssetIn(key=["out", "derived"])})
    def again(d: pa.Table) -> pa.Table:
        return d

    assert dg.materialize([dg.AssetSpec(["out", "derived"]), again], resources=resources_for(settings), selection=[again]).success
    assert trident.describe("out/again").provenance["contract"] == "k-9"
    assert trident.describe("out/again").provenance["upstream"] == ["out/derived", "src/gov", "src/ref"]


def test_an_asset_returning_none_is_a_named_error(settings: TridentSettings, trident: Trident) -> None:
    """Issue 9.5: it was shown as materialized, with no metadata and no dataset behind it."""

    @dg.asset(key=["io", "forgot"])
    def forgot():  # what a user writes when they forget the return
        pa.table({"id": [1]})

    result = dg.materialize([forgot], resources=resources_for(settings), raise_on_error=False)
    assert not result.success
    [error] = step_errors(result)
    assert "AssetReturnedNoneError" in error and "'io/forgot' returned None" in error and "`-> None`" in error, error
    assert materialized(result) == {} and not trident.exists("io/forgot")
