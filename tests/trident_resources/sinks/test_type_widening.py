"""Type widening is Iceberg's in-place promotion (issue 28 item 6): int -> long, float -> double
and decimal(P, S) -> decimal(P', S) with P' > P keep the column's field id, whether a replace
brings the wider type or an append does (then it is a schema evolution step, logged); data files
written before keep their narrower physical type and every reader (Trident's, pyiceberg's
``StaticTable``, polars' native Iceberg reader) reads them as the wider one. What Iceberg cannot
promote is still refused, by name, with nothing written."""

from __future__ import annotations

import logging
import uuid
from decimal import Decimal
from typing import Any

import polars as pl
import pyarrow as pa
import pytest
from pyiceberg.table import StaticTable

from trident_resources import Trident
from trident_resources.core.errors import SchemaMismatchError
from trident_resources.core.schemas import compatible

NARROW_WIDE = [
    (pa.int32(), pa.int64(), [1, 2], [3_000_000_000]),
    (pa.float32(), pa.float64(), [1.5, 2.5], [1e300]),
    (pa.decimal128(9, 2), pa.decimal128(20, 2), [Decimal("1.25"), Decimal("2.50")], [Decimal("123456789012345.67")]),
]


def _live(t: Trident, key: str) -> Any:
    ds = t.control.dataset(t.workspace, key)
    return t.driver.sinks["iceberg_native"].tables.table(ds)  # type: ignore[attr-defined]


def _field_ids(t: Trident, key: str) -> dict[str, int]:
    return {f.name: f.field_id for f in _live(t, key).schema().fields}


def _everyone_reads(t: Trident, key: str, wide: pa.DataType, expected: list[Any]) -> None:
    ours = t.read(key).sort_by("__row_index")
    assert ours.schema.field("v").type == wide and ours.column("v").to_pylist() == expected
    assert t.sql(f'SELECT v FROM "{key}" ORDER BY __row_index').column("v").to_pylist() == expected
    t.flush(key)  # small appends are inlined: other engines read them once flushed into Iceberg
    static = StaticTable.from_metadata(_live(t, key).metadata_location)
    theirs = static.scan().to_arrow().sort_by("__row_index")
    assert theirs.schema.field("v").type == wide and theirs.column("v").to_pylist() == expected
    polars = pl.scan_iceberg(static, reader_override="native").sort("__row_index").collect()
    assert polars["v"].to_arrow().cast(wide).to_pylist() == expected
    assert [str(uuid.UUID(bytes=b)) for b in polars["__row_id"].to_list()] == ours.column("__row_id").to_pylist()


@pytest.mark.parametrize(("narrow", "wide", "old", "new"), NARROW_WIDE, ids=["int-long", "float-double", "decimal"])
def test_an_append_of_a_wider_type_promotes_the_column_in_place(
    trident: Trident, caplog: pytest.LogCaptureFixture, narrow: pa.DataType, wide: pa.DataType, old: list[Any], new: list[Any]
) -> None:
    t = trident
    key = f"widen/append_{str(narrow).replace('(', '_').replace(',', '_').replace(' ', '').rstrip(')')}"
    t.write(key, pa.table({"k": [1, 2], "v": pa.array(old, narrow)}))
    before = _field_ids(t, key)
    with caplog.at_level(logging.INFO, logger="trident"):
        r = t.write(key, pa.table({"k": [3], "v": pa.array(new, wide)}), mode="append")
    assert r.schema_version == 2
    assert f"column 'v' widens from {narrow} to {wide}" in caplog.text
    assert _field_ids(t, key) == before  # no column dropped and added again
    assert {c["name"]: c["type"] for c in t.describe(key).schema}["v"] == str(wide)
    _everyone_reads(t, key, wide, old + new)
    # and the narrower type is still written into the wider column as it is
    t.write(key, pa.table({"k": [4], "v": pa.array(old[:1], narrow)}), mode="append")
    _everyone_reads(t, key, wide, old + new + old[:1])


@pytest.mark.parametrize(("narrow", "wide", "old", "new"), NARROW_WIDE, ids=["int-long", "float-double", "decimal"])
def test_a_replace_with_a_wider_type_keeps_the_field_id(
    trident: Trident, narrow: pa.DataType, wide: pa.DataType, old: list[Any], new: list[Any]
) -> None:
    t = trident
    key = "widen/replace"
    t.write(key, pa.table({"k": [1, 2], "v": pa.array(old, narrow)}))
    before = _field_ids(t, key)
    t.write(key, pa.table({"k": [3, 4], "v": pa.array(new + new, wide)}))
    assert _field_ids(t, key) == before
    _everyone_reads(t, key, wide, new + new)


def test_a_keyed_write_of_a_wider_type_promotes_and_rewrites_old_rows(trident: Trident) -> None:
    t = trident
    key = "widen/upsert"
    t.write(key, pa.table({"k": pa.array([1, 2], pa.int32()), "v": pa.array([10, 20], pa.int32())}))
    before = _field_ids(t, key)
    t.write(key, pa.table({"k": pa.array([2, 3], pa.int64()), "v": pa.array([2**40, 30], pa.int64())}), mode="upsert", keys="k")
    assert _field_ids(t, key) == before
    rows = sorted(t.read(key).select(["k", "v"]).to_pylist(), key=lambda r: r["k"])
    assert rows == [{"k": 1, "v": 10}, {"k": 2, "v": 2**40}, {"k": 3, "v": 30}]


@pytest.mark.parametrize(
    ("column", "values", "other", "bad"),
    [
        (pa.int64(), [1], pa.int32(), [7]),  # a narrower input: stored in the column as it is
        (pa.int32(), [1], pa.float64(), [2.5]),  # int to double: not an Iceberg promotion
        (pa.decimal128(9, 2), [Decimal("1.00")], pa.decimal128(12, 3), [Decimal("2.500")]),  # another scale
        (pa.decimal128(12, 2), [Decimal("1.00")], pa.decimal128(10, 2), [Decimal("2.50")]),  # fewer digits: stored as is
        (pa.string(), ["a"], pa.int64(), [1]),
        (pa.float64(), [1.5], pa.decimal128(10, 2), [Decimal("2.50")]),
    ],
)
def test_what_iceberg_cannot_promote_is_refused_and_nothing_changes(
    trident: Trident, column: pa.DataType, values: list[Any], other: pa.DataType, bad: list[Any]
) -> None:
    t = trident
    key = "widen/refused"
    t.write(key, pa.table({"k": [1], "v": pa.array(values, column)}))
    before = (t.read(key), _field_ids(t, key), t.describe(key).schema_version)
    incoming = pa.table({"k": [2], "v": pa.array(bad, other)})
    if compatible(other, column):  # a narrower type the column is a promotion of: stored as it is
        t.write(key, incoming, mode="append")
        assert t.read(key).schema.field("v").type == column and _field_ids(t, key) == before[1]
        return
    with pytest.raises(SchemaMismatchError, match="incompatible with the dataset"):
        t.write(key, incoming, mode="append")
    assert (t.read(key), _field_ids(t, key), t.describe(key).schema_version) == before


def test_the_pg_sink_widens_the_same_way(trident: Trident) -> None:
    """The rows sink plans the schema with the same rules: an append of int64 into an int32 column
    widens it, earlier rows read as int64, and a move to Iceberg keeps them."""
    t = trident
    key = "widen/pg"
    t.router.set_pin(key, "pg")
    t.write(key, pa.table({"k": [1], "v": pa.array([5], pa.int32())}))
    r = t.write(key, pa.table({"k": [2], "v": pa.array([2**40], pa.int64())}), mode="append")
    assert r.sink == "pg" and r.schema_version == 2
    out = t.read(key).sort_by("k")
    assert out.schema.field("v").type == pa.int64() and out.column("v").to_pylist() == [5, 2**40]
    with pytest.raises(SchemaMismatchError):
        t.write(key, pa.table({"k": [3], "v": pa.array([1.5], pa.float64())}), mode="append")
    t.router.clear_pin(key)
    assert t.migrate(key).flipped
    assert t.read(key).sort_by("k").column("v").to_pylist() == [5, 2**40]


def test_a_staged_partition_write_that_widens_publishes_onto_other_partitions_commits(trident: Trident) -> None:
    """The re-based publish of a staged partition write (another partition committed meanwhile)
    carries its promotion onto main's schema, field id kept, instead of committing files of the
    wider type under the narrower column."""
    from datetime import date, timedelta

    from trident_resources import PartitionFilter

    def day(d: date) -> PartitionFilter:
        return PartitionFilter.time_window("d", d, d + timedelta(days=1), "day")

    t = trident
    key = "widen/staged"
    d1, d2, d3 = date(2024, 1, 1), date(2024, 1, 2), date(2024, 1, 3)
    t.write(
        key,
        pa.table({"d": [d1, d2], "v": pa.array([1, 2], pa.int32())}),
        partition=PartitionFilter.time_window("d", d1, d3, "day"),
    )
    before = _field_ids(t, key)
    staged = t.write(key, pa.table({"d": [d1], "v": pa.array([2**40], pa.int64())}), partition=day(d1), stage=True)
    t.write(key, pa.table({"d": [d3], "v": pa.array([3], pa.int32())}), partition=day(d3))
    published = t.publish(key, staged.txn_id)
    assert published.snapshot_id != staged.snapshot_id  # re-based onto d3's commit
    assert _field_ids(t, key) == before
    static = StaticTable.from_metadata(_live(t, key).metadata_location)
    assert static.schema().find_field("v").field_type == _live(t, key).schema().find_field("v").field_type
    assert str(static.schema().find_field("v").field_type) == "long"
    ours = t.read(key).sort_by("d")
    assert ours.schema.field("v").type == pa.int64() and ours.column("v").to_pylist() == [2**40, 2, 3]
    polars = pl.scan_iceberg(static, reader_override="native").sort("d").collect()
    assert polars["v"].to_list() == [2**40, 2, 3]


@pytest.mark.parametrize("who_widens", ["this write", "the other partition's write"])
def test_a_partition_write_rebased_onto_another_partitions_commit_keeps_a_promotion(
    trident: Trident, monkeypatch: pytest.MonkeyPatch, who_widens: str
) -> None:
    """A partition write re-bases onto commits of other partitions that landed while it wrote: a
    promotion on either side is carried onto the new parent (field id kept) instead of being
    refused as a schema change (``commits._rebased``). The other writer is another process,
    run while this write's files are written and its commit not yet made."""
    import os
    import subprocess
    import sys
    from datetime import date, timedelta
    from pathlib import Path

    from trident_resources import PartitionFilter
    from trident_resources.sinks.iceberg import sink as iceberg_sink

    def day(d: date) -> PartitionFilter:
        return PartitionFilter.time_window("d", d, d + timedelta(days=1), "day")

    t = trident
    key = "widen/rebase"
    d1, d3 = date(2024, 1, 1), date(2024, 1, 3)
    ours_type, theirs_type = ("int64", "int32") if who_widens == "this write" else ("int32", "int64")
    window = PartitionFilter.time_window("d", d1, d3 + timedelta(days=1), "day")
    t.write(key, pa.table({"d": [d1, d3], "v": pa.array([1, 2], pa.int32())}), partition=window)
    before = _field_ids(t, key)
    s = t.settings
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIDENT_")} | {
        "TRIDENT_HOME": str(s.home),
        "TRIDENT_PG_DSN": s.pg_dsn.get_secret_value() if s.pg_dsn else "",
        "TRIDENT_WORKSPACE": s.workspace,
        "PYTHONPATH": str(Path(__file__).resolve().parents[3]),
    }
    other = (
        "import pyarrow as pa\nfrom datetime import date\nfrom trident_resources import PartitionFilter, Trident\n"
        "with Trident.from_env() as t:\n"
        f"    t.write({key!r}, pa.table({{'d': [date(2024, 1, 3)], 'v': pa.array([3], pa.{theirs_type}())}}),"
        " partition=PartitionFilter.time_window('d', date(2024, 1, 3), date(2024, 1, 4), 'day'))\n"
    )
    real = iceberg_sink.failpoint
    landed: list[int] = []

    def meanwhile(name: str) -> None:
        real(name)
        if name == "write.before_commit" and not landed:
            child = subprocess.run([sys.executable, "-c", other], env=env, capture_output=True, text=True, timeout=120)
            assert child.returncode == 0, child.stderr[-3000:]
            landed.append(child.returncode)

    monkeypatch.setattr(iceberg_sink, "failpoint", meanwhile)
    mine = 2**40 if ours_type == "int64" else 10
    t.write(key, pa.table({"d": [d1], "v": pa.array([mine], getattr(pa, ours_type)())}), partition=day(d1))
    monkeypatch.setattr(iceberg_sink, "failpoint", real)
    assert landed and _field_ids(t, key) == before
    static = StaticTable.from_metadata(_live(t, key).metadata_location)
    assert str(static.schema().find_field("v").field_type) == "long"
    expected = [mine, 3]
    assert t.read(key).sort_by("d").column("v").to_pylist() == expected
    assert static.scan().to_arrow().sort_by("d").column("v").to_pylist() == expected
    assert pl.scan_iceberg(static, reader_override="native").sort("d").collect()["v"].to_list() == expected
