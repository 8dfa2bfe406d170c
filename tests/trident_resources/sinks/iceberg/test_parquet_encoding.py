"""Parquet encoding of the data files (issue 14 item 7): a mostly-unique column gets no dictionary
(in row groups sized for bounded memory it never reaches pyarrow's fallback limit, so each row
group would store a dictionary as large as the column plus indices), a repeating one keeps it,
and the files stay within 1.1x of what raw pyiceberg stores for the same columns."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from tests.conftest import make_settings
from trident_resources import Trident, TridentSettings
from trident_resources.core.identity import IDENTITY_FIELDS, stamp

pytestmark = pytest.mark.usefixtures("iceberg_writes")  # about what each Iceberg commit leaves

ROWS = 120_000


def _data() -> pa.Table:
    rng = np.random.default_rng(14)
    words = np.array(["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"])
    return pa.table(
        {
            "key": rng.permutation(ROWS * 20)[:ROWS].astype(np.int64),  # unique, unordered
            "price": np.round(rng.uniform(0, 100_000, ROWS), 2),  # nearly unique
            "comment": [" ".join(w) for w in words[rng.integers(0, len(words), size=(ROWS, 4))]],  # repeats a lot
            "status": np.array(["open", "closed", "pending"])[rng.integers(0, 3, ROWS)],  # three values
            "day": [date(2024, 1, 1) + timedelta(days=int(d)) for d in rng.integers(0, 50, ROWS)],
        }
    )


def _trident_files(t: Trident, key: str) -> tuple[list[tuple[str, int]], Any]:
    ds = t.control.dataset(t.workspace, key)
    sink = t.driver.sinks["iceberg_native"]
    table = sink.tables.table(ds)  # type: ignore[attr-defined]
    return [(task.file.file_path, task.file.file_size_in_bytes) for task in table.scan().plan_files()], table.io


def _dictionary_columns(io: object, paths: list[str]) -> dict[str, bool]:
    """Per column: does every row group of every file carry a dictionary page?"""
    seen: dict[str, bool] = {}
    for path in paths:
        with io.new_input(path).open() as f:  # type: ignore[attr-defined]
            md = pq.ParquetFile(f).metadata
        for i in range(md.num_row_groups):
            for j in range(md.num_columns):
                col = md.row_group(i).column(j)
                seen[col.path_in_schema] = seen.get(col.path_in_schema, True) and col.has_dictionary_page
    return seen


def _small_row_groups(trident_home: Path, pg_dsn: str) -> TridentSettings:
    # ~1 MiB of Arrow per row group: the same proportion of row group to data as the default
    # 16 MiB has at millions of rows, on a test-sized table.
    return make_settings(trident_home, pg_dsn, row_group_bytes=1024 * 1024)


def test_only_columns_a_dictionary_shrinks_are_dictionary_encoded(trident_home: Path, pg_dsn: str) -> None:
    with Trident(_small_row_groups(trident_home, pg_dsn)) as t:
        t.write("enc/x", _data())
        files, io = _trident_files(t, "enc/x")
        dictionary = _dictionary_columns(io, [p for p, _ in files])
    assert not dictionary["key"] and not dictionary["price"]
    assert not dictionary["__row_id"] and not dictionary["__row_index"]
    assert dictionary["status"] and dictionary["day"] and dictionary["comment"] and dictionary["__created_at"]


def test_files_within_a_tenth_of_raw_pyiceberg_with_the_same_columns(trident_home: Path, pg_dsn: str, tmp_path: Path) -> None:
    data = _data()
    with Trident(_small_row_groups(trident_home, pg_dsn)) as t:
        t.write("enc/y", data)
        files, _ = _trident_files(t, "enc/y")
    ours = sum(size for _, size in files)

    # raw pyiceberg: the same rows with the same identity columns, appended in one go
    batch = stamp(data.combine_chunks().to_batches()[0], uuid.uuid4(), 0, 0, datetime.now(UTC))
    same = pa.Table.from_batches([batch], schema=pa.schema([*IDENTITY_FIELDS, *data.schema]))
    catalog = SqlCatalog("raw", uri=f"sqlite:///{tmp_path / 'raw.db'}", warehouse=(tmp_path / "wh").as_uri())
    catalog.create_namespace("raw")
    raw = catalog.create_table(("raw", "y"), schema=same.schema)
    raw.append(same)
    theirs = sum(task.file.file_size_in_bytes for task in raw.scan().plan_files())
    assert ours <= 1.1 * theirs, f"Trident stored {ours:,} bytes, raw pyiceberg {theirs:,} ({ours / theirs:.2f}x)"


def _encodings(io: object, paths: list[str]) -> dict[str, set[str]]:
    """Per column: every data-page encoding its chunks use, over every row group of every file."""
    seen: dict[str, set[str]] = {}
    for path in paths:
        with io.new_input(path).open() as f:  # type: ignore[attr-defined]
            md = pq.ParquetFile(f).metadata
        for i in range(md.num_row_groups):
            for j in range(md.num_columns):
                col = md.row_group(i).column(j)
                seen.setdefault(col.path_in_schema, set()).update(col.encodings)
    return seen


def test_identity_columns_are_in_encodings_every_reader_decodes(trident_home: Path, pg_dsn: str) -> None:
    """``__row_index`` (counting up) is DELTA_BINARY_PACKED, a fraction of PLAIN's bytes and CPU;
    ``__row_id`` is PLAIN (issue 28: DELTA_BYTE_ARRAY on its 16 bytes was unreadable by polars'
    native reader, DuckDB 1.4 and Velox). pyarrow (``read``), DuckDB (``sql``, its own Parquet
    reader), pyiceberg's scan and polars' native Parquet reader return the same ids, and
    compaction keeps the encodings."""
    with Trident(_small_row_groups(trident_home, pg_dsn)) as t:
        t.write("enc/ids", _data())
        first = len(_trident_files(t, "enc/ids")[0])
        for i in range(4):  # small appends for compaction to merge
            t.write("enc/ids", _data().slice(i * 100, 100), mode="append")
        files, io = _trident_files(t, "enc/ids")
        assert len(files) == first + 4
        encodings = _encodings(io, [p for p, _ in files])
        assert "PLAIN" in encodings["__row_id"] and "DELTA_BYTE_ARRAY" not in encodings["__row_id"]
        assert "DELTA_BINARY_PACKED" in encodings["__row_index"] and "PLAIN" not in encodings["__row_index"]

        ids = t.read("enc/ids", columns=["__row_index", "__row_id"]).sort_by("__row_index")
        assert ids.num_rows == ROWS + 400 and ids["__row_index"].to_pylist() == list(range(ROWS + 400))
        assert all(len(uuid.UUID(v).hex) == 32 for v in ids["__row_id"].to_pylist()[:: ROWS // 7])
        ducked = t.sql('SELECT __row_index, __row_id FROM "enc/ids" ORDER BY __row_index')
        assert ducked["__row_id"].to_pylist() == ids["__row_id"].to_pylist()
        ds = t.control.dataset(t.workspace, "enc/ids")
        scanned = t.driver.sinks["iceberg_native"].tables.table(ds).scan(selected_fields=("__row_index", "__row_id")).to_arrow()  # type: ignore[attr-defined]
        # pyiceberg reads the uuid column as ``pa.uuid()`` (16 bytes): the same ids
        assert [str(u) for u in scanned.sort_by("__row_index")["__row_id"].to_pylist()] == ids["__row_id"].to_pylist()
        local = [p.removeprefix("file://") for p, _ in files]
        polars = pl.read_parquet(local, columns=["__row_index", "__row_id"]).sort("__row_index")
        assert [str(uuid.UUID(bytes=b)) for b in polars["__row_id"].to_list()] == ids["__row_id"].to_pylist()

        assert t.maintain("enc/ids").compacted_files == len(files)
        files, io = _trident_files(t, "enc/ids")
        encodings = _encodings(io, [p for p, _ in files])
        assert "PLAIN" in encodings["__row_id"] and "DELTA_BYTE_ARRAY" not in encodings["__row_id"]
        assert "DELTA_BINARY_PACKED" in encodings["__row_index"] and "PLAIN" not in encodings["__row_index"]
        after = t.read("enc/ids", columns=["__row_index", "__row_id"]).sort_by("__row_index")
        assert after["__row_id"].to_pylist() == ids["__row_id"].to_pylist()


def test_the_dictionary_trial_encodes_at_most_its_row_cap() -> None:
    """The trial (two encodes of the first row group) looks at its first ``TRIAL_MAX_ROWS`` rows
    only: a column that repeats there keeps its dictionary whatever follows in the row group."""
    from trident_resources.core.pyiceberg_compat import parquet_writer_kwargs
    from trident_resources.sinks.iceberg.encoding import TRIAL_MAX_ROWS, dictionary_columns

    head, tail = TRIAL_MAX_ROWS, 3 * TRIAL_MAX_ROWS
    rng = np.random.default_rng(12)
    repeating = np.array(["open", "closed", "pending"])[rng.integers(0, 3, head)].tolist()
    unique = [uuid.UUID(bytes=rng.bytes(16)).hex for _ in range(head + tail)]
    table = pa.table({"mixed": repeating + unique[head:], "unique": unique})
    chosen = dictionary_columns(table, [], parquet_writer_kwargs({"write.parquet.compression-codec": "zstd"}))
    assert chosen == ["mixed"]


def test_integer_columns_without_a_dictionary_are_delta_encoded_and_read_back_the_same(trident_home: Path, pg_dsn: str) -> None:
    """Ints, dates, timestamps and decimals (Parquet INT32/INT64) that get no dictionary are
    DELTA_BINARY_PACKED, not PLAIN: smaller, and cheaper to write and read. pyarrow (``read``),
    DuckDB (``sql``) and pyiceberg's scan give back the same values, and compaction keeps it."""
    rng = np.random.default_rng(7)
    start = datetime(2024, 1, 1, tzinfo=UTC)
    data = pa.table(
        {
            "key": rng.permutation(ROWS * 20)[:ROWS].astype(np.int64),
            "seq": np.arange(ROWS, dtype=np.int64) * 3,  # counting up
            "qty": rng.integers(-(2**31), 2**31 - 1, ROWS, dtype=np.int64).astype(np.int32),
            "born": pa.array(rng.integers(0, 40_000, ROWS).astype(np.int32), pa.int32()).cast(pa.date32()),
            "at": [start + timedelta(microseconds=int(u)) for u in rng.integers(0, 10**13, ROWS)],
            "price": pa.array([f"{v / 100:.2f}" for v in rng.integers(-(10**12), 10**12, ROWS)]).cast(pa.decimal128(15, 2)),
            "status": np.array(["open", "closed", "pending"])[rng.integers(0, 3, ROWS)],
            "bucket": rng.integers(0, 4, ROWS).astype(np.int64),  # four values: a dictionary pays
        }
    )
    delta = ["key", "seq", "qty", "born", "at", "price"]
    with Trident(_small_row_groups(trident_home, pg_dsn)) as t:
        t.write("enc/ints", data)
        for i in range(4):  # small appends for compaction to merge (with the big write)
            t.write("enc/ints", data.slice(i * 600, 600), mode="append")
        files, io = _trident_files(t, "enc/ints")
        encodings = _encodings(io, [max(files, key=lambda f: f[1])[0]])  # a file of the big write
        for name in delta:
            assert "DELTA_BINARY_PACKED" in encodings[name] and "PLAIN" not in encodings[name], (name, encodings[name])
        assert "RLE_DICTIONARY" in encodings["bucket"] and "RLE_DICTIONARY" in encodings["status"]

        expected = pa.concat_tables([data, data.slice(0, 2400)])
        read = t.read("enc/ints").sort_by("__row_index").select([*delta, "bucket"])
        assert read.equals(expected.select([*delta, "bucket"]).cast(read.schema))
        names = ", ".join(f'"{c}"' for c in [*delta, "bucket"])
        ducked = t.sql(f'SELECT {names} FROM "enc/ints" ORDER BY __row_index')
        assert ducked.cast(read.schema).equals(read)
        ds = t.control.dataset(t.workspace, "enc/ints")
        scanned = t.driver.sinks["iceberg_native"].tables.table(ds).scan().to_arrow()  # type: ignore[attr-defined]
        assert scanned.sort_by("__row_index").select([*delta, "bucket"]).cast(read.schema).equals(read)

        assert t.maintain("enc/ints").compacted_files == len(files)
        files, io = _trident_files(t, "enc/ints")
        encodings = _encodings(io, [p for p, _ in files])
        for name in delta:
            assert "DELTA_BINARY_PACKED" in encodings[name] and "PLAIN" not in encodings[name], (name, encodings[name])
        assert t.read("enc/ints").sort_by("__row_index").select([*delta, "bucket"]).equals(read)


def test_text_of_any_arrow_type_is_written_as_is_and_read_back_as_the_tables_type(trident: Trident) -> None:
    """Text reaches a write as ``string_view`` (DuckDB, Polars, tpchgen-cli's files), ``string`` or
    ``large_string``, one kind after another in one write; the files are encoded from views (no
    copy of the strings into ``large_string`` first) and keep no Arrow schema of their own, so
    Trident reads the table's type (``large_string``), pyarrow alone Parquet's ``string``, and
    every value is what was written, for polars and DuckDB too."""
    import duckdb

    values = [f"row {i} {'x' * (i % 40)}" for i in range(3000)]
    kinds = [pa.string_view(), pa.string(), pa.large_string()]
    batches = [
        pa.record_batch(
            {"id": pa.array(range(i * 1000, (i + 1) * 1000), pa.int64()), "s": pa.array(values[i * 1000 : (i + 1) * 1000], kind)}
        )
        for i, kind in enumerate(kinds)
    ]
    trident.write("enc/text", pa.Table.from_batches([batches[0]]))
    for b in batches[1:]:  # one input has one schema: each kind arrives as its own write
        trident.write("enc/text", pa.Table.from_batches([b]), mode="append")
    trident.write("enc/text", pa.table({"id": [9000], "s": pa.array(["tail"], pa.string_view())}), mode="append")
    got = trident.read("enc/text").sort_by("id")
    assert got.schema.field("s").type == pa.large_string()
    assert got.column("s").to_pylist() == [*values, "tail"]
    paths, _ = _trident_files(trident, "enc/text")
    for path, _size in paths:
        local = path.removeprefix("file://")
        assert pq.ParquetFile(local).metadata.metadata is None or b"ARROW:schema" not in pq.ParquetFile(local).metadata.metadata
        assert pq.read_table(local).schema.field("s").type == pa.string()
    files = [p.removeprefix("file://") for p, _ in paths]
    assert sorted(pl.read_parquet(files)["s"].to_list()) == sorted([*values, "tail"])
    rel = duckdb.sql(f"select s from read_parquet({files})")
    assert rel is not None and sorted(r[0] for r in rel.fetchall()) == sorted([*values, "tail"])
