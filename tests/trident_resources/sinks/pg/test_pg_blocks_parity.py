"""Prober 3: a pg read through the row-block cache returns exactly what the jsonb-only read and
the Iceberg sink return (``sinks/pg/blocks.py``), for types and write sequences the first tests
did not try. Each test here failed before the fix it names."""

from __future__ import annotations

import decimal
from typing import Any

import pyarrow as pa
import pytest

from trident_resources import Trident


def _decimals() -> pa.Table:
    """Every precision at scales 0, 1 and full, with its largest value, a unit and zero."""
    cols: dict[str, pa.Array] = {"k": pa.array(range(4), pa.int64())}
    with decimal.localcontext() as ctx:
        ctx.prec = 80
        for p in range(1, 39):
            for s in sorted({0, 1, p}):
                big = decimal.Decimal("9" * p).scaleb(-s)
                cols[f"d{p}_{s}"] = pa.array([big, -big, decimal.Decimal(1).scaleb(-s), None], pa.decimal128(p, s))
    return pa.table(cols)


def test_decimals_of_every_precision_read_the_same_from_blocks_jsonb_and_iceberg(trident: Trident, jsonb_only: Trident) -> None:
    """DuckDB's to_json writes a decimal of at most 15 digits through a double: a decimal(5, 0)
    99999 is stored as the jsonb number ``99999.0``, which the jsonb read refused
    (StorageUnavailableError: 'precision not supported by type'). The block read hid it until a
    keyed write dropped the block: then the dataset could not be read at all."""
    t, data = trident, _decimals()
    for key, sink in (("dec/pg", "pg"), ("dec/ice", "iceberg_native")):
        t.router.set_pin(key, sink)
        t.write(key, data)
    user = data.column_names
    blocks, jsonb, ice = (x.read(k).select(user).sort_by("k") for x, k in ((t, "dec/pg"), (jsonb_only, "dec/pg"), (t, "dec/ice")))
    assert blocks.equals(data) and jsonb.equals(data) and ice.equals(data)
    t.update_rows("dec/pg", pa.table({"k": [3], "d5_0": pa.array([decimal.Decimal(7)], pa.decimal128(5, 0))}), keys="k")
    got = t.read("dec/pg").select(user).sort_by("k")  # the block is gone: every row from jsonb
    assert got.column("d5_0").to_pylist() == [decimal.Decimal(99999), decimal.Decimal(-99999), 1, 7]
    assert got.drop_columns(["d5_0"]).equals(data.drop_columns(["d5_0"]))


def test_a_pg_stream_opened_before_two_writes_never_returns_rows_of_no_version(trident: Trident) -> None:
    """A pg read looked its commit (generation, schema) up before its Postgres snapshot existed.
    A stream opened, then a replace (new generation) and an append (which purges the old one):
    the stream returned NO rows, silently, though the dataset never was empty (the Iceberg sink
    returns the version it was opened on). The pg sink keeps one version: the read now names
    the change (DatasetChangedError), and an eager read or SQL reads the new version."""
    from trident_resources import DatasetChangedError

    t = trident
    for key, sink in (("race/pg", "pg"), ("race/ice", "iceberg_native")):
        t.router.set_pin(key, sink)
        t.write(key, pa.table({"k": [1, 2, 3]}))
    ice = t.stream("race/ice")
    stream = t.stream("race/pg")
    for key in ("race/pg", "race/ice"):
        t.write(key, pa.table({"k": [10, 20]}))
        t.write(key, pa.table({"k": [30], "extra": ["x"]}), mode="append")
    assert ice.read_all().column("k").to_pylist() == [1, 2, 3]
    try:
        got = stream.read_all().column("k").to_pylist()
    except DatasetChangedError as exc:
        assert "read again" in str(exc)
    else:
        raise AssertionError(f"a stream of a version that is gone returned {got}")
    assert sorted(t.read("race/pg").column("k").to_pylist()) == [10, 20, 30]
    assert t.sql('select sum(k) as s from "race/pg"').column("s").to_pylist() == [60]


def test_an_eager_pg_read_with_commits_between_its_plan_and_its_snapshot_reads_the_new_version(
    trident: Trident, jsonb_only: Trident, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same race for ``read``: two real commits (by another Trident) land right after the read
    looked its commit up. It returned an empty table; now it reads again and gets the new version."""
    t = trident
    t.router.set_pin("race/eager", "pg")
    t.write("race/eager", pa.table({"k": [1, 2, 3]}))
    sink = t.driver.sink("pg")
    planned = sink._existing  # type: ignore[attr-defined]
    landed: list[int] = []

    def plan_then_two_commits(ds: Any) -> Any:
        state = planned(ds)
        if not landed:
            landed.append(jsonb_only.write("race/eager", pa.table({"k": [10, 20]})).row_count)
            landed.append(jsonb_only.write("race/eager", pa.table({"k": [30]}), mode="append").row_count)
        return state

    monkeypatch.setattr(sink, "_existing", plan_then_two_commits)
    assert sorted(t.read("race/eager").column("k").to_pylist()) == [10, 20, 30]
    assert landed == [2, 3]


def test_floats_in_map_values_are_stored_like_other_nested_floats(trident: Trident, jsonb_only: Trident) -> None:
    """A NaN (or infinity) inside a map's value made the row invalid JSON ('{"k":{"x":NaN}}'):
    Postgres refused the whole write (SchemaMismatchError) though the Iceberg sink stores it.
    Lists and structs were fixed before; maps were left 'as they are'."""
    nan, inf = float("nan"), float("inf")
    data = pa.table(
        {
            "k": pa.array([0, 1, 2, 3], pa.int64()),
            "m": pa.array([[("a", nan), ("b", -0.0)], None, [], [("c", inf), ("d", None)]], pa.map_(pa.string(), pa.float64())),
            "ms": pa.array(
                [[("a", {"x": nan})], [("b", None)], None, [("c", {"x": -inf})]],
                pa.map_(pa.string(), pa.struct([("x", pa.float32())])),
            ),
            "lm": pa.array([[[("a", -0.0)]], None, [None, []], [[("b", nan)]]], pa.list_(pa.map_(pa.string(), pa.float64()))),
        }
    )
    for key, sink in (("map/pg", "pg"), ("map/ice", "iceberg_native")):
        t = trident
        t.router.set_pin(key, sink)
        t.write(key, data)
    user = data.column_names
    ice = trident.read("map/ice").select(user).sort_by("k")
    for got in (trident.read("map/pg"), jsonb_only.read("map/pg")):
        got = got.select(user).sort_by("k")
        assert got.schema.equals(ice.schema)
        assert repr(got.to_pylist()) == repr(ice.to_pylist())  # repr: NaN equal to NaN, -0.0 apart from 0.0
