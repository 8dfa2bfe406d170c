"""Assets that get the Trident IO manager wrong, run for real: each fails its step with a named
error saying what to do, and a pandas result keeps its named index (a groupby's groups)."""

from __future__ import annotations

import dagster as dg
import pandas as pd
import pyarrow as pa

from tests.support.dagster_helpers import resources_for, step_errors, succeeded
from trident_resources import Trident, TridentSettings


def test_an_asset_key_that_is_not_a_dataset_key_names_the_asset(settings: TridentSettings, trident: Trident) -> None:
    @dg.asset(key=["Sales", "Orders"])
    def upper() -> pa.Table:
        return pa.table({"x": [1]})

    result = dg.materialize([upper], resources=resources_for(settings), raise_on_error=False)
    assert not result.success
    (error,) = step_errors(result)
    assert "AssetKeyNotADatasetKeyError" in error and "'Sales/Orders'" in error and "key_prefix" in error, error
    assert trident.datasets() == []


def test_a_grouped_pandas_result_keeps_its_groups(settings: TridentSettings, trident: Trident) -> None:
    @dg.asset(key=["g", "sums"])
    def sums() -> pd.DataFrame:
        return pd.DataFrame({"region": ["eu", "us", "eu"], "v": [1, 2, 3]}).groupby("region").sum()

    @dg.asset(key=["g", "down"])
    def down(sums: pd.DataFrame) -> pd.DataFrame:
        return sums

    succeeded(dg.materialize([sums, down], resources=resources_for(settings)))
    got = trident.read("g/down", columns=["region", "v"]).sort_by("region").to_pylist()
    assert got == [{"region": "eu", "v": 4}, {"region": "us", "v": 2}]


def test_input_columns_metadata_is_read_as_given(settings: TridentSettings, trident: Trident) -> None:
    """``columns: []`` loaded every column (the IO manager turned [] into "all"), and a bare string
    ``columns: "ab"`` was split into the columns 'a' and 'b'; now [] loads no column but the row
    count, as Trident.read does, and a string is refused with the read's own InvalidReadError."""

    @dg.asset(key=["ci", "src"])
    def src() -> pa.Table:
        return pa.table({"a": [1, 2, 3], "b": ["x", "y", "z"], "ab": [0, 0, 0]})

    @dg.asset(key=["ci", "count"], ins={"s": dg.AssetIn(key=["ci", "src"], metadata={"columns": []})})
    def count(s: pa.Table) -> pa.Table:
        return pa.table({"columns": [s.num_columns], "rows": [s.num_rows]})

    @dg.asset(key=["ci", "bare"], ins={"s": dg.AssetIn(key=["ci", "src"], metadata={"columns": "ab"})})
    def bare(s: pa.Table) -> pa.Table:
        return s

    succeeded(dg.materialize([src, count], resources=resources_for(settings)))
    assert trident.read("ci/count", columns=["columns", "rows"]).to_pylist() == [{"columns": 0, "rows": 3}]
    result = dg.materialize([src, bare], resources=resources_for(settings), raise_on_error=False)
    assert not result.success
    assert any("InvalidReadError" in e and "columns must be a list" in e for e in step_errors(result)), step_errors(result)
    assert not trident.exists("ci/bare")
