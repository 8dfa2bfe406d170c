"""Prober 3: a pg read through the row-block cache returns exactly what the jsonb-only read and
the Iceberg sink return (``sinks/pg/blocks.py``), for types and write sequences the first tests
did not try. Each test here failed before the fix it names."""

from __future__ import annotations

import decimal

import pyarrow as pa

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
