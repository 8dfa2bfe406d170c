"""Prober 2: the pg sink's text route (``sinks/pg/columns.py``: members extracted in Postgres,
each row shipped as ``ROW(...)::text`` and parsed by pyarrow's CSV reader) reads back exactly
what the Iceberg sink reads back for the same rows: odd strings (quotes, backslashes, commas,
parentheses, newlines, spaces, the text NULL, empty vs null, astral characters), float edge
values, decimals at full precision, int64 extremes, far dates, binary of every byte, nested
values holding all of those, under projections and row filters."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from typing import Any

import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trident_resources import Trident
from trident_resources.core.identity import IDENTITY_COLUMNS

_ODD = st.sampled_from(['"', "\\", ",", "(", ")", " ", "\n", "\r", "\t", "NULL", '""', "'", "\U0001f600", "é", "\x00"])
_TEXT = st.one_of(
    st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=12),
    st.lists(_ODD.filter(lambda c: c != "\x00"), max_size=6).map("".join),
    st.just(""),
    st.just("NULL"),
)
_FLOAT = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([-0.0, 0.0, 5e-324, -2.2250738585072014e-308, 1e308, -1.7976931348623157e308]),
)
_DEC = st.decimals(
    min_value=decimal.Decimal("-" + "9" * 28 + ".9999999999"),
    max_value=decimal.Decimal("9" * 28 + ".9999999999"),
    places=10,
    allow_nan=False,
    allow_infinity=False,
)
_ROW = st.fixed_dictionaries(
    {
        "s": st.none() | _TEXT,
        "n": st.none() | st.integers(-(2**63), 2**63 - 1),
        "f": st.none() | _FLOAT,
        "dec": st.none() | _DEC,
        "d": st.none() | st.dates(),
        "ts": st.none()
        | st.datetimes(min_value=dt.datetime(1, 1, 1), max_value=dt.datetime(9999, 12, 31)).map(
            lambda x: x.replace(tzinfo=dt.UTC)
        ),
        "b": st.none() | st.booleans(),
        "bin": st.none() | st.binary(max_size=8) | st.just(bytes(range(256))),
        "l": st.none() | st.lists(st.none() | _TEXT, max_size=3),
        "st": st.none() | st.fixed_dictionaries({"x": st.none() | _TEXT, "y": st.none() | _FLOAT}),
        "lf": st.none() | st.lists(st.none() | _FLOAT, max_size=3),
    }
)
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("s", pa.string()),
        ("n", pa.int64()),
        ("f", pa.float64()),
        ("dec", pa.decimal128(38, 10)),
        ("d", pa.date32()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("b", pa.bool_()),
        ("bin", pa.binary()),
        ("l", pa.list_(pa.string())),
        ("st", pa.struct([("x", pa.string()), ("y", pa.float64())])),
        ("lf", pa.list_(pa.float32())),
    ]
)


def _rows(table: pa.Table) -> list[dict[str, Any]]:
    """Floats (nested ones too) by their repr: -0.0 apart from 0.0, NaN equal to NaN."""
    keep = [c for c in table.column_names if c not in IDENTITY_COLUMNS]
    return sorted((_exact(r) for r in table.select(keep).to_pylist()), key=lambda r: r["id"])


def _exact(value: Any) -> Any:
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dict):
        return {k: _exact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_exact(v) for v in value]
    return value


@given(rows=st.lists(_ROW, min_size=1, max_size=8), later=st.lists(_ROW, max_size=3))
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_pg_text_route_reads_what_iceberg_reads(
    trident: Trident, rows: list[dict[str, Any]], later: list[dict[str, Any]]
) -> None:
    t = trident
    tag = uuid.uuid4().hex[:10]
    pg, ice = f"pg/p{tag}", f"ice/i{tag}"
    t.router.set_pin(pg, "pg")
    # float32 values as float32 holds them, so both sinks are compared on what was stored
    rows = [{**r, "lf": None if r["lf"] is None else [None if v is None else _f32(v) for v in r["lf"]]} for r in rows]
    later = [{**r, "lf": None if r["lf"] is None else [None if v is None else _f32(v) for v in r["lf"]]} for r in later]
    old = pa.Table.from_pylist([{"id": i, **r} for i, r in enumerate(rows)], schema=SCHEMA).drop_columns(["st"])
    new = pa.Table.from_pylist([{"id": 100 + i, **r} for i, r in enumerate(later)], schema=SCHEMA)
    for key in (pg, ice):
        t.write(key, old)  # the struct column is added later: null in the old rows
        if later:
            t.write(key, new, mode="append")
    if not later:
        return
    assert _rows(t.read(pg)) == _rows(t.read(ice))
    for columns in (["id", "s", "st"], ["id", "bin", "dec"], ["id", "l", "f", "lf"]):
        assert _rows(t.read(pg, columns=columns)) == _rows(t.read(ice, columns=columns))
    for row_filter in ("s = 'NULL'", "s is null", "n > 0", "f < 0", "b = true", "id >= 100"):
        assert _rows(t.read(pg, row_filter=row_filter)) == _rows(t.read(ice, row_filter=row_filter)), row_filter


def test_pg_sink_keeps_negative_zero(trident: Trident) -> None:
    """-0.0 was written as the JSON number -0.0, which jsonb keeps as a numeric: 0.0 came back."""
    t = trident
    t.router.set_pin("pg/z", "pg")
    t.write(
        "pg/z",
        pa.table(
            {
                "f": [-0.0, 0.0, -1.5, float("nan"), float("-inf")],
                "g": pa.array([-0.0, 2.0, None, 0.0, float("-inf")], pa.float32()),
            }
        ),
    )
    got = t.read("pg/z", columns=["f", "g"]).to_pylist()
    assert [repr(r["f"]) for r in got] == ["-0.0", "0.0", "-1.5", "nan", "-inf"]
    assert [repr(r["g"]) for r in got] == ["-0.0", "2.0", "None", "0.0", "-inf"]
    assert t.read("pg/z", row_filter="f < 0").column("f").to_pylist() == [-1.5, float("-inf")]
    assert t.read("pg/z", row_filter="f = 0").num_rows == 2


def _f32(v: float) -> float:
    with np.errstate(over="ignore"):  # past float32's range: its infinity, as a float32 column holds it
        return float(np.float32(v))


def test_pg_sink_stores_nested_nan_infinity_and_negative_zero(trident: Trident) -> None:
    """A NaN or infinity inside a list or struct made the row's JSON invalid ('[1.0,NaN]') and
    Postgres refused the whole write (SchemaMismatchError), though the Iceberg sink stores it."""
    t = trident
    t.router.set_pin("pg/nested", "pg")
    data = pa.table(
        {
            "l": pa.array([[1.0, float("nan"), -0.0, float("-inf")], None, [None]], pa.list_(pa.float64())),
            "st": pa.array(
                [{"y": float("inf"), "z": [float("nan")]}, None, {"y": None, "z": None}],
                pa.struct([("y", pa.float32()), ("z", pa.list_(pa.float64()))]),
            ),
        }
    )
    t.write("pg/nested", data)
    got = t.read("pg/nested", columns=["l", "st"])
    assert _exact(got.to_pylist()) == _exact(data.to_pylist())


_STEP = st.tuples(
    st.sampled_from(["replace", "append", "upsert", "update_rows", "delete_rows"]),
    st.lists(_ROW, min_size=1, max_size=5),
    st.integers(min_value=0, max_value=1000),
)


@given(first=st.lists(_ROW, min_size=1, max_size=8), steps=st.lists(_STEP, min_size=1, max_size=5))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_pg_reads_match_iceberg_over_write_sequences(
    trident: Trident,
    jsonb_only: Trident,
    every_write_blocked: None,
    first: list[dict[str, Any]],
    steps: list[tuple[str, list[dict[str, Any]], int]],
) -> None:
    """Issue 12.3: random sequences of replace / append / upsert / update_rows / delete_rows on
    both sinks; after every step the pg read (through its row blocks, which keyed writes and
    deletes break up) equals the Iceberg read and the pg read from jsonb alone."""
    t = trident
    tag = uuid.uuid4().hex[:10]
    pg, ice = f"pg/q{tag}", f"ice/j{tag}"
    t.router.set_pin(pg, "pg")
    next_id, ids = 0, list[int]()

    def table(rows: list[dict[str, Any]], keys: list[int], *, narrow: bool) -> pa.Table:
        rows = [{**r, "lf": None if r["lf"] is None else [None if v is None else _f32(v) for v in r["lf"]]} for r in rows]
        tbl = pa.Table.from_pylist([{**r, "id": k} for k, r in zip(keys, rows, strict=False)], schema=SCHEMA)
        return tbl.drop_columns(["st"]) if narrow else tbl  # the struct column comes and goes: added later

    for i, (op, rows, pick) in enumerate([("replace", first, 0), *steps]):
        plain = op in ("replace", "append") or not ids  # a plain write: its batch is stored as a block too
        if plain:
            keys = list(range(next_id, next_id + len(rows)))
            data = table(rows, keys, narrow=op == "replace" or not ids)
            replace = op == "replace" or not ids
            for key in (pg, ice):
                t.write(key, data, mode="replace" if replace else "append")
            ids = keys if replace else ids + keys
            next_id += len(rows)
        elif op == "upsert":
            keys = [ids[pick % len(ids)], *range(next_id, next_id + len(rows) - 1)]
            data = table(rows, keys, narrow=False)
            for key in (pg, ice):
                t.write(key, data, mode="upsert", keys=["id"])
            ids += [k for k in keys if k not in ids]
            next_id += len(rows) - 1
        elif op == "update_rows":
            keys = sorted({ids[(pick + j) % len(ids)] for j in range(len(rows))})
            data = table(rows, keys, narrow=False).select(["id", "s", "f"])
            for key in (pg, ice):
                t.update_rows(key, data.slice(0, len(keys)), keys="id")
        else:
            gone = ids[pick % len(ids)]
            for key in (pg, ice):
                t.delete_rows(key, where=f"id = {gone}")
            ids.remove(gone)
        assert _rows(t.read(pg)) == _rows(t.read(ice)), (i, op)
        assert _exact(t.read(pg).to_pylist()) == _exact(jsonb_only.read(pg).to_pylist()), (i, op)
        for columns in (["id", "s", "bin"], ["id", "dec", "l", "lf"]):
            assert _rows(t.read(pg, columns=columns)) == _rows(t.read(ice, columns=columns)), (i, op, columns)
        for row_filter in ("n > 0", "s is null"):
            assert _rows(t.read(pg, row_filter=row_filter)) == _rows(t.read(ice, row_filter=row_filter)), (i, op, row_filter)
    ds = t.control.dataset(t.settings.workspace, pg)
    assert ds is not None
    with t.control.pool.connection() as conn:  # the reads went through blocks: the last plain write's block is there
        n = conn.execute("SELECT count(*) AS n FROM trident_row_blocks WHERE dataset_id = %s", (ds.dataset_id,)).fetchone()
    assert n is not None and (n["n"] > 0 or not plain)
