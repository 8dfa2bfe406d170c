"""Other engines read what Trident writes (issue 28): tables written in every mode, after schema
changes, maintenance, write-audit-publish and partition writes are read in full by readers nobody
here wrote, from the table's current metadata file (``describe().metadata_location``, no
catalog): pyiceberg's ``StaticTable``, polars' native Iceberg reader (``scan_iceberg`` with
``reader_override="native"``) and polars' native Parquet reader over the live data files. Each
must return exactly what ``Trident.read`` returns, row for row, identity columns included
(``__row_index``, ``__row_id``, ``__created_at``).

DuckDB's Iceberg extension is tried too, but only as installed: nothing is downloaded while the
tests run (the DuckDB the project pins has no extension wheel on the package index; the test says
so and is skipped when it cannot be loaded)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import duckdb
import polars as pl
import pyarrow as pa
import pytest
from pyiceberg.table import StaticTable

from trident_resources import PartitionFilter, Trident

pytestmark = pytest.mark.usefixtures("iceberg_writes")  # other engines read the Iceberg files (inlined rows: after a flush)

Rows = list[dict[str, Any]]
KEY = "interop/t"


def _value(v: Any) -> Any:
    """One value as every reader's Python form of it compares: ids as uuid text, instants in UTC."""
    if isinstance(v, uuid.UUID):
        return str(v)
    if isinstance(v, bytes) and len(v) == 16:
        return str(uuid.UUID(bytes=v))
    if isinstance(v, datetime) and v.tzinfo is not None:
        return v.astimezone(UTC)
    if isinstance(v, float) and v != v:
        return "NaN"
    return v


def _rows(columns: dict[str, list[Any]]) -> Rows:
    names = list(columns)
    out = [dict(zip(names, (_value(v) for v in values), strict=True)) for values in zip(*columns.values(), strict=True)]
    return sorted(out, key=lambda r: r["__row_index"])


def _arrow_rows(table: pa.Table) -> Rows:
    return _rows(table.to_pydict())


def _polars_rows(frame: pl.DataFrame) -> Rows:
    return _rows({c: frame[c].to_list() for c in frame.columns})


def _data_files(static: StaticTable) -> list[str]:
    return [task.file.file_path.removeprefix("file://") for task in static.scan().plan_files()]


def _polars_parquet(static: StaticTable) -> Rows:
    """The live data files through polars' own Parquet reader, each file on its own (files written
    before a schema change lack the added columns or hold a narrower type, which an Iceberg reader
    resolves from the table's schema: done here by name, the way Trident's columns keep theirs)."""
    wanted = static.schema().as_arrow()
    out: Rows = []
    for path in _data_files(static):
        frame = pl.read_parquet(path)
        for field in wanted:
            if field.name not in frame.columns:
                frame = frame.with_columns(pl.lit(None).alias(field.name))
        out += _polars_rows(frame.select(wanted.names))
    for row in out:  # a column an older file lacks, or holds narrower, reads as the table's type
        for name in wanted.names:
            if isinstance(row[name], int) and pa.types.is_floating(wanted.field(name).type):
                row[name] = float(row[name])
    return sorted(out, key=lambda r: r["__row_index"])


def check_readers(t: Trident, key: str) -> Rows:
    """Every reader returns what ``Trident.read`` returns (all columns, identity included), read
    from the metadata file ``describe`` names. Returns Trident's rows."""
    described = t.describe(key)
    assert described.metadata_location is not None
    ours = _arrow_rows(t.read(key))
    assert len(ours) == described.row_count
    static = StaticTable.from_metadata(described.metadata_location)
    current = static.current_snapshot()
    assert current is not None and current.summary is not None
    # the version the ledger last committed, or a maintenance rewrite of it
    assert current.snapshot_id == described.snapshot_id or current.summary.get("trident.operation") == "compaction"
    names = list(ours[0]) if ours else [f.name for f in static.schema().fields]

    def same(label: str, theirs: Rows) -> None:
        theirs = [{c: r[c] for c in names} for r in theirs]
        assert theirs == ours, f"{label} reads {key!r} differently from Trident.read"

    same("pyiceberg StaticTable", _arrow_rows(static.scan().to_arrow()))
    same("polars scan_iceberg (native reader)", _polars_rows(pl.scan_iceberg(static, reader_override="native").collect()))
    same("polars read_parquet over the live files", _polars_parquet(static))
    return ours


def _data(start: int, n: int, **extra: list[Any]) -> pa.Table:
    """Rows of every common column type (``k`` unique), Trident's own inference for each."""
    ks = list(range(start, start + n))
    cols: dict[str, Any] = {
        "k": pa.array(ks, pa.int64()),
        "i32": pa.array([k % 1000 for k in ks], pa.int32()),
        "f": [k / 4 for k in ks],
        "f32": pa.array([k / 2 for k in ks], pa.float32()),
        "s": [f"s{k % 5}" for k in ks],
        "text": [f"row {k} of the interop table" for k in ks],
        "b": [k % 3 == 0 for k in ks],
        "dec": pa.array([Decimal(k) / 100 for k in ks], pa.decimal128(9, 2)),
        "dec18": pa.array([Decimal(k * 7) / 1000 for k in ks], pa.decimal128(18, 3)),
        "big": pa.array([Decimal(k) * 10**20 for k in ks], pa.decimal128(38, 0)),
        "d": [date(2024, 1, 1) + timedelta(days=k % 40) for k in ks],
        "ts": [datetime(2024, 1, 1, tzinfo=UTC) + timedelta(minutes=k) for k in ks],
        "naive": [datetime(2024, 2, 1) + timedelta(seconds=k) for k in ks],
        "bin": [bytes([k % 256]) * (k % 4) for k in ks],
        "maybe": [None if k % 4 == 0 else k for k in ks],
        "l": [[k, k + 1] for k in ks],
        "st": [{"a": k, "b": f"x{k}"} for k in ks],
    }
    cols.update(extra)
    return pa.table(cols)


# -- every write mode ------------------------------------------------------------------------------


def _replace(t: Trident) -> None:
    t.write(KEY, _data(0, 3000))
    t.write(KEY, _data(100, 2500))


def _replace_keys(t: Trident) -> None:
    t.write(KEY, _data(0, 3000))
    t.write(KEY, _data(1000, 3000), keys="k")  # keyed replace: rows of kept keys keep their identity


def _append(t: Trident) -> None:
    t.write(KEY, _data(0, 3000))
    for i in range(3):
        t.write(KEY, _data(3000 + 100 * i, 100), mode="append")


def _upsert(t: Trident) -> None:
    t.write(KEY, _data(0, 3000))
    t.write(KEY, _data(2500, 1000), mode="upsert", keys="k")


def _append_new(t: Trident) -> None:
    t.write(KEY, _data(0, 3000))
    t.write(KEY, _data(2900, 300), mode="append_new", keys="k")


def _delete(t: Trident) -> None:
    t.write(KEY, _data(0, 3000))
    t.write(KEY, _data(0, 500).select(["k"]), mode="delete", keys="k")
    t.write(KEY, None, mode="delete", row_filter="k >= 2900")


def _row_edits(t: Trident) -> None:
    t.write(KEY, _data(0, 3000))
    t.update_rows(KEY, pa.table({"k": [5, 6], "s": ["edited", "edited"]}), keys="k")
    t.delete_rows(KEY, pa.table({"k": [7]}), keys="k")
    t.delete_rows(KEY, where="k = 8")


def _stream(t: Trident) -> None:
    with t.ingest_stream(KEY) as s:
        for i in range(3):
            s.append(_data(1000 * i, 1000))


def _add_column(t: Trident) -> None:
    t.write(KEY, _data(0, 2000))
    t.write(KEY, _data(2000, 500, extra=[f"e{k}" for k in range(500)]), mode="append")
    t.write(KEY, _data(100, 10, extra=["up"] * 10), mode="upsert", keys="k")


def _widen(t: Trident) -> None:
    t.write(KEY, _data(0, 2000))
    wider = _data(2000, 500)
    wider = wider.set_column(wider.schema.get_field_index("i32"), "i32", pa.array(range(2**33, 2**33 + 500), pa.int64()))
    wider = wider.set_column(wider.schema.get_field_index("f32"), "f32", pa.array([1e300] * 500, pa.float64()))
    wider = wider.set_column(
        wider.schema.get_field_index("dec"), "dec", pa.array([Decimal("123456789012.34")] * 500, pa.decimal128(20, 2))
    )
    t.write(KEY, wider, mode="append")


def _compacted(t: Trident) -> None:
    t.write(KEY, _data(0, 100))
    for i in range(1, 8):
        t.write(KEY, _data(100 * i, 100), mode="append")
    assert t.maintain(KEY).compacted_files >= 5


def _expired(t: Trident) -> None:
    t.write(KEY, _data(0, 1000))
    for i in range(1, 4):
        t.write(KEY, _data(1000 * i, 1000), mode="upsert", keys="k")
    report = t.maintain(KEY, older_than=timedelta(0), retain_last=1)
    assert report.expired_snapshots >= 3


def _published(t: Trident) -> None:
    t.write(KEY, _data(0, 2000))
    staged = t.write(KEY, _data(1500, 1000), mode="upsert", keys="k", stage=True)
    t.publish(KEY, staged.txn_id)


def _day(d: date) -> PartitionFilter:
    return PartitionFilter.time_window("d", d, d + timedelta(days=1), "day")


def _partitions(t: Trident) -> None:
    whole = _data(0, 2000)
    days = sorted(set(whole.column("d").to_pylist()))
    t.write(KEY, whole, partition=PartitionFilter.time_window("d", days[0], days[-1] + timedelta(days=1), "day"))
    d5 = days[5]
    again = _data(5000, 300).set_column(whole.schema.get_field_index("d"), "d", pa.array([d5] * 300, pa.date32()))
    t.write(KEY, again, partition=_day(d5))  # one partition replaced
    staged = t.write(KEY, again.slice(0, 10), partition=_day(d5), stage=True)
    other = again.slice(0, 5).set_column(whole.schema.get_field_index("d"), "d", pa.array([days[7]] * 5, pa.date32()))
    t.write(KEY, other, partition=_day(days[7]))
    t.publish(KEY, staged.txn_id)  # re-based onto the other partition's commit


def _string_row_ids(t: Trident) -> None:
    """A table created before uuid ids (``__row_id`` a string), written on by this Trident."""
    from tests.trident_resources.sinks.iceberg.test_row_id_uuid import _legacy

    _legacy(t, KEY, _data(0, 2000).drop_columns(["l", "st"]))
    t.write(KEY, _data(2000, 500).drop_columns(["l", "st"]), mode="append")
    t.write(KEY, _data(1900, 200).drop_columns(["l", "st"]), mode="upsert", keys="k")


SCENARIOS: dict[str, Callable[[Trident], None]] = {
    "replace": _replace,
    "replace_keys": _replace_keys,
    "append": _append,
    "upsert": _upsert,
    "append_new": _append_new,
    "delete": _delete,
    "row_edits": _row_edits,
    "ingest_stream": _stream,
    "add_column": _add_column,
    "widen": _widen,
    "compaction": _compacted,
    "expiry": _expired,
    "publish": _published,
    "partitions": _partitions,
    "string_row_ids": _string_row_ids,
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_every_reader_reads_what_trident_reads(trident: Trident, scenario: str) -> None:
    SCENARIOS[scenario](trident)
    rows = check_readers(trident, KEY)
    assert rows and len({r["__row_id"] for r in rows}) == len(rows)


def _duckdb_with_iceberg() -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with its Iceberg extension loaded from what is installed, or skip."""
    con = duckdb.connect()
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET autoload_known_extensions = false")
    try:
        con.execute("LOAD iceberg")
    except duckdb.Error as exc:
        con.close()
        pytest.skip(f"DuckDB {duckdb.__version__} has no Iceberg extension installed and none is downloaded here: {exc}")
    return con


def test_duckdb_iceberg_reads_what_trident_reads(trident: Trident) -> None:
    con = _duckdb_with_iceberg()
    t = trident
    _upsert(t)
    location = t.describe(KEY).metadata_location
    ours = _arrow_rows(t.read(KEY))
    theirs = _arrow_rows(con.execute("SELECT * FROM iceberg_scan(?)", [location]).to_arrow_table())
    assert [{c: r[c] for c in ours[0]} for r in theirs] == ours


def test_duckdb_lts_iceberg_reads_what_trident_reads(trident: Trident) -> None:
    """DuckDB 1.4 LTS (which refused the DELTA_BYTE_ARRAY ``__row_id``), when a Python with it and
    its Iceberg extension is named by ``DUCKDB_LTS_PYTHON`` (the project pins DuckDB 2, so
    the two cannot share an environment: ``pip install duckdb==1.4.4 duckdb-ext-iceberg==1.4.4.*
    duckdb-ext-avro==1.4.4.*`` into another venv). Skipped otherwise."""
    import json
    import os
    import subprocess

    python = os.environ.get("DUCKDB_LTS_PYTHON")
    if not python:
        pytest.skip("DUCKDB_LTS_PYTHON names no Python with DuckDB 1.4 and its Iceberg extension")
    t = trident
    _upsert(t)
    location = t.describe(KEY).metadata_location
    script = (
        "import duckdb, json, os, sys\n"
        "import duckdb_ext\n"
        "ext = os.path.join(list(duckdb_ext.__path__)[0], 'extensions')\n"
        "con = duckdb.connect(config={'extension_directory': ext, 'autoinstall_known_extensions': False})\n"
        "con.execute('LOAD avro'); con.execute('LOAD iceberg')\n"
        "q = 'SELECT __row_index, __row_id::VARCHAR, k, s FROM iceberg_scan(?) ORDER BY __row_index'\n"
        "print(json.dumps(con.execute(q, [sys.argv[1]]).fetchall()))\n"
    )
    out = subprocess.run([python, "-c", script, str(location)], capture_output=True, text=True, check=True, timeout=120)
    ours = [[r["__row_index"], r["__row_id"], r["k"], r["s"]] for r in _arrow_rows(t.read(KEY))]
    assert json.loads(out.stdout) == ours


def _location(t: Trident) -> str:
    location = t.describe(KEY).metadata_location
    assert location is not None
    return location


def _as_an_older_trident_wrote_it(t: Trident, monkeypatch: pytest.MonkeyPatch) -> None:
    """Writes as a Trident before issue 28 did: ``__row_id`` DELTA_BYTE_ARRAY, and snapshots that
    do not say their files use the standard encodings."""
    from trident_resources.sinks.iceberg import committer, files, reencoding

    with monkeypatch.context() as m:
        m.setitem(files._IDENTITY_ENCODING, "__row_id", "DELTA_BYTE_ARRAY")
        m.setattr(committer, "STANDARD_ENCODINGS", "v0")
        t.write(KEY, _data(0, 3000))
        t.write(KEY, _data(2500, 1000), mode="upsert", keys="k")
        t.write(KEY, _data(4000, 2000), mode="append")
    assert reencoding.STANDARD_ENCODINGS == "v1"


def test_maintain_rewrites_files_an_older_trident_encoded_for_no_other_reader(
    trident: Trident, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tables written before the encoding fix stay unreadable by polars' native reader (and DuckDB
    1.4, Velox) until their files are rewritten: ``maintain`` does that once, whatever their size,
    identity unchanged; the next pass opens no footer."""
    from trident_resources.sinks.iceberg import reencoding

    t = trident
    _as_an_older_trident_wrote_it(t, monkeypatch)
    static = StaticTable.from_metadata(_location(t))
    with pytest.raises(pl.exceptions.ComputeError, match="DeltaByteArray"):
        pl.scan_iceberg(static, reader_override="native").collect()
    before = _arrow_rows(t.read(KEY))

    report = t.maintain(KEY)
    assert report.reencoded_files == len(_data_files(static)) >= 1
    assert _arrow_rows(t.read(KEY)) == before
    assert check_readers(t, KEY) == before
    snap = StaticTable.from_metadata(_location(t)).current_snapshot()
    assert snap is not None and snap.summary is not None and snap.summary.operation.value == "replace"

    opened: list[str] = []
    real = reencoding._unreadable

    def counted(table: Any, f: Any) -> bool:
        opened.append(f.file_path)
        return real(table, f)

    monkeypatch.setattr(reencoding, "_unreadable", counted)
    t.write(KEY, _data(9000, 10), mode="append")  # this tree's write: marked, never opened
    again = t.maintain(KEY)
    assert again.reencoded_files == 0 and opened == []
    check_readers(t, KEY)
