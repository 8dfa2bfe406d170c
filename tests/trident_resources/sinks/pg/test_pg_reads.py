"""The pg sink's bulk reader (issue 12): a dataset read as many row-index ranges on several
connections is still exactly one version of it, in ``__row_index`` order, with every odd value
intact, and still complete when the pool has no connection to spare."""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tests.support.sink_helpers import comparable
from trident_resources import Trident
from trident_resources.sinks.pg import blocks, reader


@pytest.fixture
def small_ranges(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Ranges and row blocks of a few rows, so that small test datasets take the multi-range,
    multi-block, multi-connection path."""
    monkeypatch.setattr(reader, "CHUNK_ROWS", 7)
    monkeypatch.setattr(blocks, "BLOCK_ROWS", 7)
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


def test_every_routed_type_round_trips_across_ranges(trident: Trident, small_ranges: None) -> None:
    """Each column type takes one route (typed text, base64, the member's JSON; columns.py):
    every one of them reads back exactly what an Iceberg dataset of the same rows reads, nulls,
    odd values and text that pyarrow refuses (a BC date: DuckDB casts it) included."""
    t = trident
    n = 40
    when = dt.datetime(2024, 1, 1, 1, 2, 3, 456789)
    data = pa.table(
        {
            "k": list(range(n)),
            "i8": pa.array([[-128, 127, None, 0][i % 4] for i in range(n)], pa.int8()),
            "i32": pa.array([[-(2**31), 2**31 - 1, None, 7][i % 4] for i in range(n)], pa.int32()),
            "u": pa.array([[0, 2**32 - 1, None][i % 3] for i in range(n)], pa.uint32()),
            "big": pa.array([[2**63 - 1, -(2**63), 2**53 + 1, None][i % 4] for i in range(n)], pa.int64()),
            "f32": pa.array(
                [[1.1, float("nan"), float("-inf"), 3.4028235e38, 1e-45, None][i % 6] for i in range(n)], pa.float32()
            ),
            "f64": [[5e-324, 1e300, -0.5, 0.1 + 0.2, float("inf"), None][i % 6] for i in range(n)],
            "dec": pa.array(
                [[decimal.Decimal("-0.01"), decimal.Decimal("12345678901.10"), None][i % 3] for i in range(n)],
                pa.decimal128(15, 2),
            ),
            "flag": [[True, False, None][i % 3] for i in range(n)],
            "day": pa.array([[0, -719_162, 2_932_896, None, 19_000][i % 5] for i in range(n)], pa.date32()),
            "ts": pa.array([when + dt.timedelta(microseconds=i) if i % 3 else None for i in range(n)], pa.timestamp("us")),
            "tstz": pa.array(
                [when.replace(tzinfo=dt.UTC) + dt.timedelta(days=i) for i in range(n)], pa.timestamp("us", tz="UTC")
            ),
            "tod": pa.array([dt.time(i % 24, 59, 58, 999999) if i % 2 else None for i in range(n)], pa.time64("us")),
            "s": [["(a,b)", '"', "\\", "", None, "NULL", " x ", "\n"][i % 8] for i in range(n)],
            "bin": [[b"\x00,\n(", b"", None][i % 3] for i in range(n)],
            "m": [{"a": [i, None], "b": {"c": "x\ny"}} if i % 2 else None for i in range(n)],
        }
    )
    keys = {"pg": "pg/types_pg", "iceberg_native": "pg/types_ice"}
    for sink, key in keys.items():
        t.router.set_pin(key, sink)
        t.write(key, data)
        t.write(key, pa.table({"k": list(range(0, n, 3))}), mode="delete", keys=["k"])
    pg, ice = t.read(keys["pg"]), t.read(keys["iceberg_native"])
    assert pg.schema.equals(ice.schema)
    drop = ("__row_id", "__created_at")
    assert comparable(pg, drop=drop) == comparable(ice, drop=drop)
    projected = t.read(keys["pg"], columns=["day", "k", "bin"], row_filter="k > 20")
    expected = ice.filter(pc.greater(ice["k"], 20)).select(["day", "k", "bin"])
    assert projected.sort_by("k").to_pylist() == expected.sort_by("k").to_pylist() and projected.num_rows > 5
    # A BC date is "0220-...(BC)" text, which pyarrow refuses: that range is cast by DuckDB (the
    # Iceberg sink cannot write such a date, so it is checked against the input).
    days = pa.array([-800_000, 1, None] * 5, pa.date32())
    t.router.set_pin("pg/bc", "pg")
    t.write("pg/bc", pa.table({"k": list(range(15)), "day": days}))
    assert t.read("pg/bc", columns=["day"]).column("day").combine_chunks().cast(pa.int32()).equals(days.cast(pa.int32()))


def test_a_projection_fetches_only_its_columns(trident: Trident) -> None:
    """Postgres extracts the projected members server side: reading one small column of wide rows
    moves a fraction of the rows' bytes (whole documents were fetched before)."""
    from tests.conftest import make_settings
    from tests.support.tcp_proxy import TcpProxy

    assert trident.settings.pg_dsn is not None
    real = trident.settings.pg_dsn.get_secret_value()
    host, port = real.split("@", 1)[1].split("/", 1)[0].rsplit(":", 1)
    n, pad = 2_000, "p" * 1_000
    with TcpProxy(host, int(port)) as proxy:
        dsn = real.replace(f"{host}:{port}", f"127.0.0.1:{proxy.port}")
        with Trident(make_settings(trident.settings.home, dsn, workspace=trident.settings.workspace)) as t:
            t.router.set_pin("pg/wide", "pg")
            t.write("pg/wide", pa.table({"k": list(range(n)), "pad": [pad] * n}))
            before = proxy.received
            got = t.read("pg/wide", columns=["k"])
            fetched = proxy.received - before
    assert got.column("k").to_pylist() == list(range(n))
    assert fetched < n * 100, f"{fetched:,} bytes fetched for {n:,} small values"
