"""The pg sink's bulk reader (issue 12): a dataset read as many row-index ranges on several
connections is still exactly one version of it, in ``__row_index`` order, with every odd value
intact, and still complete when the pool has no connection to spare."""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Iterator

import pyarrow as pa
import pytest

from tests.sinks_support import comparable
from trident_resources import Trident
from trident_resources.sinks.pg import reader


@pytest.fixture
def small_ranges(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Ranges of a few rows, so that small test datasets take the multi-range, multi-connection path."""
    monkeypatch.setattr(reader, "CHUNK_ROWS", 7)
    yield


def _rows(n: int) -> pa.Table:
    return pa.table({"k": list(range(n)), "v": [f"v{i}" for i in range(n)], "f": [i * 0.5 for i in range(n)]})


def test_a_read_in_many_ranges_is_one_snapshot(trident: Trident, small_ranges: None) -> None:
    """Writes that commit while a read is half-way must not show in its later ranges: every
    connection reads the snapshot the first one exported."""
    t = trident
    t.router.set_pin("pg/snap", "pg")
    t.write("pg/snap", _rows(300))
    before = t.read("pg/snap")
    stream = t.stream("pg/snap")
    got = [stream.read_next_batch()]
    t.write("pg/snap", pa.table({"k": list(range(300)), "v": ["new"] * 300, "f": [-1.0] * 300}), mode="upsert", keys=["k"])
    t.write("pg/snap", pa.table({"k": list(range(0, 300, 3))}), mode="delete", keys=["k"])
    got += list(stream)
    assert len(got) > 10  # it did read many ranges
    assert comparable(pa.Table.from_batches(got)) == comparable(before)
    after = t.read("pg/snap")
    assert after.num_rows == 200 and set(after.column("v").to_pylist()) == {"new"}


def test_ranges_over_sparse_indexes_keep_order_and_odd_values(trident: Trident, small_ranges: None) -> None:
    t = trident
    when = dt.datetime(2024, 1, 1, 1, 2, 3, 456789, tzinfo=dt.UTC)
    n = 60
    data = pa.table(
        {
            "k": list(range(n)),
            "i": pa.array([2**62 + i if i % 5 else None for i in range(n)], pa.int64()),
            "f": [[1.1, float("nan"), float("inf"), float("-inf"), None][i % 5] for i in range(n)],
            "d": pa.array([decimal.Decimal(f"{i}1234567890123456789012.99") for i in range(n)], pa.decimal128(38, 2)),
            "ts": pa.array([when + dt.timedelta(seconds=i) for i in range(n)], pa.timestamp("us", tz="UTC")),
            "s": [['line\nbreak\t"q" \\ é ☃ 𝄞', "", None, "{}", "\r\n"][i % 5] for i in range(n)],
            "b": [[b"\x00\n\xff", b"", None, b"\\", b"\t"][i % 5] for i in range(n)],
            "l": [[[i, None], None, []][i % 3] for i in range(n)],
            "st": [{"x": i, "y": "a\nb"} if i % 2 else None for i in range(n)],
        }
    )
    keys = {"pg": "pg/sparse_pg", "iceberg_native": "pg/sparse_ice"}
    for sink, key in keys.items():
        t.router.set_pin(key, sink)
        t.write(key, data)
        t.write(key, pa.table({"k": [k for k in range(n) if k % 4 in (1, 2)]}), mode="delete", keys=["k"])
        t.write(key, data.slice(0, 5).set_column(0, "k", pa.array(range(n, n + 5))), mode="append")
    pg, ice = t.read(keys["pg"]), t.read(keys["iceberg_native"])
    indexes = pg.column("__row_index").to_pylist()
    assert indexes == sorted(indexes) and len(indexes) == n // 2 + 5
    assert pg.schema.equals(ice.schema)
    drop = ("__row_id", "__created_at")
    assert comparable(pg, drop=drop) == comparable(ice, drop=drop)
    ids = t.read(keys["pg"], columns=["__row_id", "__row_index"])  # identity only: no documents fetched
    assert ids.column("__row_id").to_pylist() == pg.column("__row_id").to_pylist()


def test_a_busy_pool_leaves_the_whole_read_to_the_lead_connection(
    trident: Trident, small_ranges: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = trident
    t.router.set_pin("pg/busy", "pg")
    t.write("pg/busy", _rows(100))
    expected = comparable(t.read("pg/busy"))
    monkeypatch.setattr(reader, "HELPER_WAIT_S", 0.2)
    pool = t.control.pool
    held = []
    try:
        for _ in range(pool.max_size - 1):  # one left: the lead's
            held.append(pool.getconn(timeout=5))
        assert comparable(t.read("pg/busy")) == expected
    finally:
        for conn in held:
            pool.putconn(conn)
