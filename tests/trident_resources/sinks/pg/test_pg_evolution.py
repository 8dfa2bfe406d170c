"""pg sink schema evolution (issue 8, item 2): rows written before a column was added have no
such key in their jsonb; they read as null, through every door (read, stream, sql, migrate)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from tests.support.helpers import table
from trident_resources import Trident


def _rows(t: Trident, key: str) -> list[dict[str, object]]:
    tbl = t.read(key)
    return sorted(tbl.select([c for c in tbl.column_names if not c.startswith("__")]).to_pylist(), key=lambda r: r["k"])


def test_added_column_reads_as_null_in_older_rows(trident: Trident) -> None:
    t = trident
    t.router.set_pin("pg/evo", "pg")
    t.write("pg/evo", table(k=[1, 2], v=["a", "b"]))
    r = t.write("pg/evo", table(k=[3], v=["c"], c1=[3.5]), mode="append")
    assert r.sink == "pg" and r.schema_version == 2
    expected = [
        {"k": 1, "v": "a", "c1": None},
        {"k": 2, "v": "b", "c1": None},
        {"k": 3, "v": "c", "c1": 3.5},
    ]
    assert (
        _rows(
            t,
            "pg/evo",
        )
        == expected
    )
    assert t.read("pg/evo", columns=["k", "c1"], row_filter="c1 > 1").to_pylist() == [{"k": 3, "c1": 3.5}]
    assert t.sql('select count(*) as n, count(c1) as c from "pg/evo"').to_pylist() == [{"n": 3, "c": 1}]

    # a keyed write reads the existing keys too, and then every row again
    t.write("pg/evo", table(k=[1], v=["a2"], c2=[True]), mode="upsert", keys=["k"])
    assert [r["c2"] for r in t.read("pg/evo").sort_by("k").to_pylist()] == [True, None, None]

    t.router.clear_pin("pg/evo")
    report = t.migrate("pg/evo")
    assert report.parity and report.flipped, report.message
    assert t.describe("pg/evo").sink == "iceberg_native"
    assert [r["c1"] for r in t.read("pg/evo").sort_by("k").to_pylist()] == [None, None, 3.5]


@pytest.mark.parametrize("typ", [pa.large_binary(), pa.float64(), pa.timestamp("us", tz="UTC"), pa.decimal128(10, 2)])
def test_every_kind_of_added_column_reads_as_null(trident: Trident, typ: pa.DataType) -> None:
    """Binary (base64), floats (NaN as strings), temporal and decimal columns decode differently."""
    t = trident
    t.router.set_pin("pg/kinds", "pg")
    t.write("pg/kinds", table(k=[1]))
    t.write("pg/kinds", pa.table({"k": [2], "c": pa.array([None], typ)}), mode="append")
    assert [r["c"] for r in t.read("pg/kinds").sort_by("k").to_pylist()] == [None, None]


def test_a_stored_value_of_the_wrong_type_still_fails_loudly(trident: Trident) -> None:
    """Only absence reads as null: a value that does not fit the recorded type is an error, both
    for pyarrow's typed CSV reader and for the DuckDB cast a range falls back to when pyarrow
    refuses its text (rows that lack a key are in the same range)."""
    from trident_resources import SchemaMismatchError

    t = trident
    t.router.set_pin("pg/loud", "pg")
    t.write("pg/loud", table(k=[1, 2], v=[10, 20]))
    t.write("pg/loud", table(k=[3], v=[30], c1=["x"]), mode="append")
    dataset_id = t.describe("pg/loud").dataset_id
    t.control.execute(
        "UPDATE trident_rows SET data = jsonb_set(data, '{v}', '\"not a number\"') WHERE dataset_id = %s AND data->>'k' = '2'",
        (dataset_id,),
    )
    with pytest.raises(SchemaMismatchError, match="does not decode"):
        t.read("pg/loud")
