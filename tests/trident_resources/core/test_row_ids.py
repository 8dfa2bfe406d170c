"""``__row_id`` is unique whatever transaction ids callers pass (issue 8, item 5).

Row ids used to be the txn id's first 64 bits plus a per-transaction sequence: two UUIDv7 txn ids
of the same millisecond (which share those 64 bits whenever their 12 ``rand_a`` bits do, and
always with a monotonic-counter generator) gave rows with the same id.
"""

from __future__ import annotations

import os
import time
import uuid

import numpy as np
import pyarrow as pa
import pytest

from tests.support.helpers import table
from trident_resources import Trident


def _uuid7_pair() -> tuple[uuid.UUID, uuid.UUID]:
    """Two valid UUIDv7s of the same millisecond with the same ``rand_a``: equal first 64 bits."""
    ms = int(time.time() * 1000)
    hi = (ms << 16) | 0x7000 | 0x123  # version 7, rand_a
    los = [(0b10 << 62) | int.from_bytes(os.urandom(8), "big") >> 2 for _ in range(2)]
    a, b = (uuid.UUID(int=(hi << 64) | lo) for lo in los)
    assert a.version == b.version == 7 and a != b and a.bytes[:8] == b.bytes[:8]
    return a, b


def _ids(t: Trident, key: str) -> list[str]:
    return t.read(key, columns=["__row_id"]).column("__row_id").to_pylist()


def _canonical_v8(ids: list[str]) -> None:
    for i in ids:
        u = uuid.UUID(i)
        assert str(u) == i and u.version == 8 and u.variant == uuid.RFC_4122, i


@pytest.mark.parametrize("sink", ["iceberg_native", "pg"])
def test_same_millisecond_uuid7_txn_ids_give_distinct_row_ids(trident: Trident, sink: str) -> None:
    t = trident
    t.router.set_pin("ids/stream", sink)
    a, b = _uuid7_pair()
    t.write("ids/stream", table(k=[1, 2]), txn_id=a)
    t.write("ids/stream", table(k=[3, 4, 5]), mode="append", txn_id=b)
    ids = _ids(t, "ids/stream")
    assert len(ids) == 5 and len(set(ids)) == 5
    _canonical_v8(ids)


@pytest.mark.parametrize("sink", ["iceberg_native", "pg"])
def test_keyed_writes_mint_distinct_row_ids_too(trident: Trident, sink: str) -> None:
    """Keyed writes mint ids in SQL (DuckDB), streamed writes in numpy: one scheme, no overlap."""
    t = trident
    t.router.set_pin("ids/keyed", sink)
    a, b = _uuid7_pair()
    c, d = _uuid7_pair()
    t.write("ids/keyed", table(k=[1, 2]), mode="upsert", keys=["k"], txn_id=a)
    t.write("ids/keyed", table(k=[3, 4, 5]), mode="append_new", keys=["k"], txn_id=b)
    t.write("ids/keyed", table(k=[6, 7]), mode="append", txn_id=c)
    t.write("ids/keyed", table(k=[1, 8]), mode="upsert", keys=["k"], txn_id=d)
    rows = {r["k"]: r["__row_id"] for r in t.read("ids/keyed").to_pylist()}
    assert len(rows) == 8 and len(set(rows.values())) == 8
    _canonical_v8(list(rows.values()))


def test_writes_of_two_datasets_never_share_row_ids(trident: Trident) -> None:
    """Row ids are unique across datasets too: they do not come from the caller's txn id at all
    (the same txn id on another dataset is refused outright, see tests/trident_resources/transaction/test_core_faults.py)."""
    t = trident
    t.write("ids/one", table(k=[1, 2, 3]), txn_id=uuid.UUID(int=1))
    t.write("ids/two", table(k=[1, 2, 3]), txn_id=uuid.UUID(int=2))
    assert not set(_ids(t, "ids/one")) & set(_ids(t, "ids/two"))


def test_python_and_sql_generators_share_one_scheme() -> None:
    """Same layout from both generators: a fixed 24-character head per minted block, then 12 hex
    digits of (block constant + sequence)."""
    import duckdb

    from trident_resources.core.identity import RowIdBlock

    block = RowIdBlock.mint()
    py = block.arrow(5, 3).to_pylist()
    con = duckdb.connect()
    sql = [r[0] for r in con.execute(f"SELECT {block.sql('s')} FROM range(5, 8) t(s) ORDER BY s").fetchall()]
    assert py == sql
    _canonical_v8(py)
    assert len({p[:24] for p in py}) == 1


def test_numpy_generator_matches_the_sql_one_across_digit_carries() -> None:
    """The numpy generator builds the last group's three 4-digit words separately (the lowest
    cycles, the upper ones change every 65536 rows): its ids equal the SQL scheme's per-row
    formatting wherever a carry crosses those words, including a block's last sequence numbers."""
    import duckdb

    from trident_resources.core.identity import SEQ_BITS, RowIdBlock

    con = duckdb.connect()
    for block in (RowIdBlock.mint(), RowIdBlock(head=RowIdBlock.mint().head, low=0xFF << SEQ_BITS)):
        for first, n in [(0, 1), (65535, 1), (65530, 70_000), ((1 << 32) - 3, 65_540), ((1 << SEQ_BITS) - 4, 4), (7, 200_001)]:
            py = block.arrow(first, n).to_pylist()
            sql = [
                r[0] for r in con.execute(f"SELECT {block.sql('s')} FROM range({first}, {first + n}) t(s) ORDER BY s").fetchall()
            ]
            assert py == sql, (first, n)


def test_the_small_write_texts_match_the_array_ones() -> None:
    """``texts`` (a small pg append's ids, formatted in Python) are ``arrow``'s ids, across the
    carries of the last group's words and at a block's last sequence numbers."""
    from trident_resources.core.identity import SEQ_BITS, RowIdBlock

    for block in (RowIdBlock.mint(), RowIdBlock(head=RowIdBlock.mint().head, low=0xFF << SEQ_BITS)):
        for first, n in [(0, 10), (65530, 12), ((1 << 32) - 3, 6), ((1 << SEQ_BITS) - 4, 4)]:
            assert block.texts(first, n) == block.arrow(first, n).to_pylist(), (first, n)


def test_uuid_generators_match_the_text_ones() -> None:
    """16-byte ids (numpy ``uuid16``, DuckDB's UUID from ``sql(..., pa.uuid())``) are the very ids
    the text generators give, as values: a uuid table's ids read back as the same strings."""
    import duckdb
    import pyarrow as pa

    from trident_resources.core.identity import SEQ_BITS, RowIdBlock, ids_as_text

    con = duckdb.connect(config={"arrow_lossless_conversion": True})
    for block in (RowIdBlock.mint(), RowIdBlock(head=RowIdBlock.mint().head, low=0xFF << SEQ_BITS)):
        for first, n in [(0, 3), (65530, 70_000), ((1 << SEQ_BITS) - 4, 4)]:
            text = block.arrow(first, n).to_pylist()
            fixed = block.uuid16(first, n)
            assert fixed.type == pa.uuid() and ids_as_text(fixed).to_pylist() == text
            sql = con.sql(f"SELECT {block.sql('s', pa.uuid())} AS id FROM range({first}, {first + n}) t(s) ORDER BY s")
            got = sql.to_arrow_table().column("id")
            assert got.type == pa.uuid() and ids_as_text(got).to_pylist() == text, (first, n)


def test_the_ids_of_a_whole_read_convert_chunk_by_chunk_on_a_pool() -> None:
    """A read's many chunks of 16-byte ids are turned into text on a thread pool (numpy releases
    the GIL); the text is exactly the UUID text of each id, chunk for chunk."""
    from trident_resources.core.identity import ids_as_text

    n = 200_000
    words = np.empty((n, 2), dtype=">u8")
    words[:, 0] = 0x0123456789AB8CDE
    words[:, 1] = np.arange(n, dtype=np.uint64) + (5 << 40)
    storage = pa.FixedSizeBinaryArray.from_buffers(pa.binary(16), n, [None, pa.py_buffer(words.tobytes())])
    ids = pa.chunked_array([pa.ExtensionArray.from_storage(pa.uuid(), storage.slice(i, 65_536)) for i in range(0, n, 65_536)])
    text = ids_as_text(ids)
    assert text.num_chunks == ids.num_chunks
    assert text.to_pylist() == [str(uuid.UUID(bytes=words[i].tobytes())) for i in range(n)]
