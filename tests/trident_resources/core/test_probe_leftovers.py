"""Outside-in probe, round three (real Postgres, real warehouse): each case was a misleading
message, a silent no-op or a raw engine error before its fix."""

from __future__ import annotations

import uuid
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

from trident_resources import PartitionFilter, Trident, TridentSettings
from trident_resources.core.errors import (
    FlagNotFoundError,
    InvalidArgumentError,
    InvalidFilterError,
    InvalidReadError,
    InvalidSettingsError,
    InvalidWriteError,
    NullKeyError,
    PartitionError,
    PinNotFoundError,
    TridentClosedError,
)
from trident_resources.core.settings import settings_from_env


def test_update_rows_with_a_null_key_is_a_null_key_error(trident: Trident) -> None:
    """It said KeyNotFoundError "no row with key None": a null key names no row at all."""
    trident.write("pe/edit", pa.table({"id": [1, 2], "v": ["a", "b"]}))
    with pytest.raises(NullKeyError, match="'id'"):
        trident.update_rows("pe/edit", pa.table({"id": pa.array([None, 2], pa.int64()), "v": ["x", "y"]}), keys=["id"])
    assert trident.read("pe/edit", columns=["id", "v"]).sort_by("id").to_pylist() == [
        {"id": 1, "v": "a"},
        {"id": 2, "v": "b"},
    ]


def test_reading_no_columns_keeps_the_row_count_and_no_column(trident: Trident) -> None:
    """``columns=[]`` returned every column, identity included; pyarrow's ``columns=[]`` returns
    none and keeps ``num_rows``."""
    trident.write("pe/cols", pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}))
    got = trident.read("pe/cols", columns=[])
    assert got.num_columns == 0
    assert got.num_rows == 3
    assert trident.read("pe/cols", columns=[], row_filter="id > 1").num_rows == 2
    streamed = trident.stream("pe/cols", columns=[])
    assert streamed.schema.names == []
    assert streamed.read_all().num_rows == 3
    first = trident.history("pe/cols")[0].txn_id
    assert trident.read("pe/cols", columns=[], as_of=first).shape == (3, 0)


def test_reading_a_column_twice_is_refused(trident: Trident) -> None:
    """``columns=['id', 'id']`` returned two columns named ``id``: a table that cannot be written
    back nor selected by name."""
    trident.write("pe/twice", pa.table({"id": [1]}))
    with pytest.raises(InvalidReadError, match="'id'"):
        trident.read("pe/twice", columns=["id", "id"])
    with pytest.raises(InvalidReadError, match="'id'"):
        trident.stream("pe/twice", columns=["id", "id"])


def test_clearing_a_pin_or_flag_that_is_not_there_is_a_named_error(trident: Trident) -> None:
    """Both said nothing and returned: ``trident pin clear sales/ordrs`` printed "cleared" while the
    real pin (sales/orders) stayed in force."""
    trident.router.set_pin("pe/pinned", "pg")
    with pytest.raises(PinNotFoundError, match=r"'pe/pinnd'.*nothing was cleared.*pe/pinned"):
        trident.router.clear_pin("pe/pinnd")
    assert trident.router.pins() == {"pe/pinned": "pg"}
    trident.router.clear_pin("pe/pinned")
    assert trident.router.pins() == {}
    with pytest.raises(PinNotFoundError):
        trident.router.clear_pin("pe/pinned")  # twice: the second has nothing to clear
    with pytest.raises(FlagNotFoundError, match=r"'sync\.full'"):
        trident.router.clear_flag("sync.full")
    trident.router.set_flag("sync.full", "pg")
    trident.router.clear_flag("sync.full")
    assert trident.router.flags() == {}


def test_maintaining_a_pg_dataset_reports_its_row_blocks_not_files(trident: Trident) -> None:
    """It reported zero files compacted and zero versions expired, which reads as "done" for a
    sink with no files. Maintenance of a pg dataset now rebuilds its row blocks (the read cache
    keyed writes drop) and says so; its file counts stay unset, not zero."""
    trident.router.set_pin("pe/rows", "pg")
    trident.write("pe/rows", pa.table({"id": list(range(3000))}))
    trident.write("pe/rows", pa.table({"id": [7]}), mode="upsert", keys=["id"])
    report = trident.maintain("pe/rows")
    assert report.skipped is None and report.rebuilt_blocks == 1
    assert report.data_files_before is None and report.data_files_after is None
    assert trident.read("pe/rows", columns=["id"]).column("id").to_pylist() == list(range(3000))


def test_partition_errors_of_plain_calls_speak_of_partition_filters_not_dagster(trident: Trident) -> None:
    """A plain read/write caller built a PartitionFilter and never saw ``partition_expr`` or
    ``partitions_def``; the errors told them to declare those."""
    trident.write("pe/part", pa.table({"id": [1], "v": ["x"]}), partition=PartitionFilter.of_values("id", 1))
    with pytest.raises(PartitionError) as missing:
        trident.read("pe/part", partition=PartitionFilter.of_values("nope", 1))
    with pytest.raises(PartitionError) as other:
        trident.write("pe/part", pa.table({"id": [1], "v": ["x"]}), partition=PartitionFilter.of_values("v", "x"))
    for caught in (missing, other):
        text = str(caught.value)
        assert "partition_expr" not in text and "partitions_def" not in text, text
        assert "PartitionFilter" in text, text
    assert trident.read("pe/part", columns=["id", "v"]).to_pylist() == [{"id": 1, "v": "x"}]


def test_an_ingest_stream_of_an_empty_table_commits_like_write_does(trident: Trident) -> None:
    """An empty table has no batches: the session never opened a transaction and created nothing,
    where ``write`` of the same table creates the (empty) dataset in one committed transaction."""
    empty = pa.table({"id": pa.array([], pa.int64())})
    with trident.ingest_stream("pe/stream") as s:
        s.append(empty)
    assert s.result is not None and s.result.rows_written == 0
    assert trident.read("pe/stream").num_rows == 0
    assert trident.read("pe/stream").schema.names[-1] == "id"
    with trident.ingest_stream("pe/stream") as s:  # into an existing dataset: a committed no-op append
        s.append(empty)
    assert s.result is not None and s.result.row_count == 0
    assert [e.status for e in trident.history("pe/stream")] == ["committed", "committed"]


@pytest.mark.parametrize(
    "column",
    [
        pa.array([1.0, 2.0], pa.float64()).cast(pa.float16()),
        pa.array([Decimal("1.50"), Decimal("2.25")], pa.decimal256(20, 2)),
        pa.array([uuid.UUID(int=1).bytes, uuid.UUID(int=2).bytes], pa.binary(16)).cast(pa.uuid()),
    ],
    ids=["float16", "decimal256", "uuid"],
)
def test_keyed_writes_take_every_type_a_replace_stores(trident: Trident, column: pa.Array) -> None:
    """A replace stored float16 as float and decimal256 as decimal128, but upsert/append_new of the
    same table failed inside DuckDB's merge (WriteFailedError), and a uuid column came back from
    the merge as text that its own column refused (SchemaMismatchError)."""
    rows = pa.table({"id": [1, 2], "c": column})
    trident.write("pe/typed", rows)
    r = trident.write("pe/typed", rows.slice(1), mode="upsert", keys=["id"])
    assert (r.rows_written, r.row_count) == (1, 2)
    trident.write("pe/typed_new", rows, mode="append_new", keys=["c"])
    got = trident.read("pe/typed", columns=["id", "c"]).sort_by("id")
    assert (
        got.column("c")
        .cast(trident.schema("pe/typed").field("c").type)
        .equals(rows.column("c").cast(trident.schema("pe/typed").field("c").type))
    )
    assert trident.read("pe/typed_new").num_rows == 2


@pytest.mark.parametrize(
    ("name", "value", "needle"),
    [
        ("TRIDENT_DUCKDB_MEMORY_LIMIT", "lots", "DuckDB refuses it"),
        ("TRIDENT_CATALOG_PROPERTIES", "notjson", "not valid JSON"),
        ("TRIDENT_REBUILD_CRON", "garbage", "not a cron schedule"),
    ],
)
def test_settings_refused_by_duckdb_or_json_are_invalid_settings(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, needle: str
) -> None:
    """A memory limit DuckDB cannot parse surfaced at the first query as a raw ParserException;
    a non-JSON catalog_properties as pydantic_settings' SettingsError traceback; a cron Dagster
    refuses as DagsterInvalidDefinitionError when the Definitions loaded (``trident check`` exit 1)."""
    monkeypatch.setenv(name, value)
    with pytest.raises(InvalidSettingsError, match=f"{name}: .*{needle}") as caught:
        settings_from_env()
    assert caught.value.__cause__ is not None


def test_a_home_that_cannot_be_created_is_invalid_settings(tmp_path: Path, pg_dsn: str) -> None:
    """A TRIDENT_HOME under a file was a raw FileNotFoundError/NotADirectoryError from deep inside."""
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    with pytest.raises(InvalidSettingsError, match="TRIDENT_HOME") as caught:
        Trident(TridentSettings(home=blocker / "home", pg_dsn=pg_dsn, workspace="w"))
    assert isinstance(caught.value.__cause__, OSError)


def test_a_history_limit_beyond_postgres_bigint_reads_all(trident: Trident) -> None:
    """``history(limit=2**70)`` (and ``trident history --limit`` with a huge number) was a raw
    psycopg NumericValueOutOfRange."""
    trident.write("pe/hist", pa.table({"id": [1]}))
    assert len(trident.history("pe/hist", limit=2**70)) == 1


@pytest.mark.parametrize("value", [2**70, [1], {"a": 1}], ids=["beyond-int64", "list", "dict"])
def test_a_partition_value_that_cannot_be_the_columns_type_is_a_partition_error(trident: Trident, value: object) -> None:
    """2**70 for an int64 column was a raw OverflowError, a list or dict a raw ArrowNotImplementedError."""
    trident.write("pe/pv", pa.table({"p": [1], "v": [1]}), partition=PartitionFilter.of_values("p", 1))
    with pytest.raises(PartitionError, match="does not fit column 'p'"):
        trident.write("pe/pv", pa.table({"p": [1], "v": [2]}), partition=PartitionFilter.of_values("p", value))
    with pytest.raises(PartitionError, match="does not fit column 'p'"):
        trident.read("pe/pv", partition=PartitionFilter.of_values("p", value))
    assert trident.read("pe/pv", columns=["v"]).to_pylist() == [{"v": 1}]
    assert "open" not in [e.status for e in trident.history("pe/pv")]  # a refused write never leaves the ledger open


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"metadata": 5}, "metadata must be a mapping"),
        ({"provenance": ["a"]}, "provenance must be a mapping"),
        ({"metadata": {"x": float("nan")}}, "NaN"),
        ({"metadata": {"x": "a\x00b"}}, "NUL"),
        ({"provenance": {"x": "a\x00b"}}, "NUL"),
        ({"source_refs": [""]}, "source_refs"),
        ({"source_refs": 5}, "source_refs"),
    ],
    ids=["metadata-int", "provenance-list", "metadata-nan", "metadata-nul", "provenance-nul", "empty-ref", "refs-int"],
)
def test_write_arguments_postgres_cannot_hold_are_refused_before_the_transaction(
    trident: Trident, kwargs: dict[str, object], needle: str
) -> None:
    """Each was a raw TypeError/ValueError/psycopg error, and a NUL in provenance, met at COMMIT,
    was reported as ControlPlaneUnavailableError ("Postgres failed")."""
    trident.write("pe/args", pa.table({"id": [1]}))
    with pytest.raises(InvalidWriteError, match=needle):
        trident.write("pe/args", pa.table({"id": [2]}), **kwargs)  # type: ignore[call-overload]
    assert [e.status for e in trident.history("pe/args")] == ["committed"]  # no transaction was even opened
    assert trident.read("pe/args", columns=["id"]).to_pylist() == [{"id": 1}]


def test_a_single_source_ref_is_recorded_whole(trident: Trident) -> None:
    """``source_refs="raw/orders"`` was recorded letter by letter: ['r', 'a', 'w', '/', ...]."""
    trident.write("pe/refs", pa.table({"id": [1]}), source_refs="raw/orders")
    assert trident.history("pe/refs")[0].source_refs == ["raw/orders"]


@pytest.mark.parametrize(
    ("row_filter", "needle"),
    [(5, "must be a string"), ("id in ()", "does not parse at column 1"), ("id = 1 or", "does not parse at its end")],
)
def test_row_filters_that_are_not_filters_say_so_in_one_line(trident: Trident, row_filter: object, needle: str) -> None:
    """A number failed as "'int' object has no attribute 'expandtabs'"; a filter that does not
    parse dumped pyparsing's whole grammar ("Expected {{{W:(A-Z_a-z, ...") into the message."""
    trident.write("pe/filt", pa.table({"id": [1]}))
    with pytest.raises(InvalidFilterError, match=needle) as caught:
        trident.read("pe/filt", row_filter=row_filter)  # type: ignore[arg-type]
    assert "W:(A-Z" not in str(caught.value) and "\n" not in str(caught.value)


def test_sql_arguments_of_the_wrong_type_are_named_errors(trident: Trident) -> None:
    """``sql(5)`` was a raw TypeError from DuckDB's parser, ``staged=['k']`` a raw ValueError."""
    trident.write("pe/q", pa.table({"id": [1]}))
    with pytest.raises(InvalidArgumentError, match="query must be a string"):
        trident.sql(5)  # type: ignore[arg-type]
    with pytest.raises(InvalidReadError, match="staged must map"):
        trident.sql('select * from "pe/q"', staged=["pe/q"])  # type: ignore[arg-type]


def test_maintain_with_an_age_reaching_past_year_one_keeps_everything(trident: Trident) -> None:
    """``older_than=timedelta.max`` ("keep every version") was a raw OverflowError from now - age."""
    trident.write("pe/keep", pa.table({"id": [1]}))
    trident.write("pe/keep", pa.table({"id": [2]}), mode="append")
    report = trident.maintain("pe/keep", older_than=timedelta.max, uploads_older_than=timedelta.max, retain_last=1)
    assert report.expired_snapshots == 0
    first = trident.history("pe/keep")[-1].txn_id
    assert trident.read("pe/keep", columns=["id"], as_of=first).to_pylist() == [{"id": 1}]


def test_a_uuid_column_in_the_pg_sink_reads_back_as_uuid(trident: Trident) -> None:
    """It was written, then every read (read, stream, sql, the canary) failed with
    SchemaMismatchError "cannot store string as extension<arrow.uuid>": the dataset was stuck."""
    ids = pa.array([uuid.UUID(int=i).bytes for i in (1, 2)], pa.binary(16)).cast(pa.uuid())
    trident.router.set_pin("pe/pgu", "pg")
    trident.write("pe/pgu", pa.table({"id": [1, 2], "u": ids}))
    assert trident.read("pe/pgu", columns=["u"]).column("u").to_pylist() == [uuid.UUID(int=1), uuid.UUID(int=2)]
    assert trident.stream("pe/pgu", columns=["u"]).read_all().num_rows == 2
    assert trident.sql('select count(u) n from "pe/pgu"').column("n").to_pylist() == [2]
    trident.write("pe/pgu", pa.table({"id": [2], "u": ids.slice(0, 1)}), mode="upsert", keys=["id"])
    trident.router.clear_pin("pe/pgu")
    assert trident.migrate("pe/pgu", "iceberg_native").flipped
    assert sorted(trident.read("pe/pgu", columns=["u"]).column("u").to_pylist()) == [uuid.UUID(int=1)] * 2


def test_watermarks_with_a_partition_that_is_not_a_filter_is_a_partition_error(trident: Trident) -> None:
    """The sibling of an earlier fix for read/write: ``watermarks(key, partition='2024-01-01')`` was
    a raw AttributeError ("'str' object has no attribute 'bind'")."""
    trident.write("pe/wm", pa.table({"id": [1]}))
    with pytest.raises(PartitionError, match="PartitionFilter"):
        trident.watermarks("pe/wm", partition="2024-01-01")  # type: ignore[arg-type]


@pytest.mark.parametrize("column", ["a b", "ünï", "it's", "and", "a.b"])
def test_a_partition_of_a_column_with_an_unusual_name_can_be_read(trident: Trident, column: str) -> None:
    """The partition's row filter named the column unquoted, so reading a partition of a dataset
    partitioned by ``a b`` (or ``ünï``, ``it's``, ``and``) failed as an unparsable filter."""
    part = PartitionFilter.of_values(column, 1)
    trident.write("pe/odd", pa.table({column: [1], "v": [1]}), partition=part)
    trident.write("pe/odd", pa.table({column: [2], "v": [2]}), partition=PartitionFilter.of_values(column, 2))
    assert trident.read("pe/odd", columns=["v"], partition=part).to_pylist() == [{"v": 1}]
    assert trident.stream("pe/odd", columns=["v"], partition=part).read_all().num_rows == 1


def test_a_partition_column_no_filter_can_name_is_refused_before_writing(trident: Trident) -> None:
    """``q"t`` cannot be written in pyiceberg's filter syntax: the write succeeded and every later
    read of one of its partitions failed."""
    with pytest.raises(PartitionError, match="rename the column"):
        trident.write("pe/quote", pa.table({'q"t': [1]}), partition=PartitionFilter.of_values('q"t', 1))
    assert not trident.exists("pe/quote")


def test_a_closed_trident_says_so(settings: TridentSettings) -> None:
    """Used after its with-block, every call was psycopg_pool's raw PoolClosed."""
    with Trident(settings) as t:
        t.write("pe/closed", pa.table({"id": [1]}))
    for call in (lambda: t.read("pe/closed"), lambda: t.write("pe/closed", pa.table({"id": [2]})), lambda: t.sql("select 1")):
        with pytest.raises(TridentClosedError, match="open a new one"):
            call()
    with Trident(settings) as again:
        assert again.read("pe/closed", columns=["id"]).to_pylist() == [{"id": 1}]


def test_settings_that_are_not_trident_settings_are_refused() -> None:
    """``Trident(settings={...})`` failed as AttributeError "'dict' object has no attribute 'home'"."""
    with pytest.raises(InvalidSettingsError, match="TridentSettings"):
        Trident(settings={"workspace": "x"})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"schema": {"a": "int64"}}, "schema must be a pyarrow Schema"),
        ({"max_queued": 0}, "max_queued"),
        ({"max_queued": -1}, "max_queued"),
        ({"max_queued": "4"}, "max_queued"),
    ],
    ids=["schema-dict", "queue-0", "queue-negative", "queue-str"],
)
def test_ingest_stream_knobs_are_checked_when_it_opens(trident: Trident, kwargs: dict[str, object], needle: str) -> None:
    """A dict schema was a raw AttributeError; max_queued 0 or -1 made the queue unbounded (no
    back-pressure, so no bounded memory), and "4" failed only at the first append."""
    with pytest.raises(InvalidWriteError, match=needle):
        trident.ingest_stream("pe/knobs", **kwargs)  # type: ignore[arg-type]
    assert not trident.exists("pe/knobs")


@pytest.mark.parametrize("sink", ["iceberg_native", "pg"])
def test_arrow_json_and_bool8_columns_are_stored_as_string_and_bool(trident: Trident, sink: str) -> None:
    """Arrow's canonical extension types ``arrow.json`` (DuckDB and Polars emit it) and
    ``arrow.bool8`` were refused as "cast it to a type Iceberg supports", though their values
    are JSON text and booleans."""
    trident.router.set_pin("pe/ext", sink)
    rows = pa.table(
        {
            "id": [1, 2],
            "doc": pa.array(['{"a": 1}', None], pa.string()).cast(pa.json_()),
            "flag": pa.array([1, 0], pa.int8()).cast(pa.bool8()),
        }
    )
    trident.write("pe/ext", rows)
    trident.write("pe/ext", rows.slice(0, 1), mode="upsert", keys=["id"])
    got = trident.read("pe/ext", columns=["id", "doc", "flag"]).sort_by("id")
    assert got.schema.field("doc").type == pa.large_string() and got.schema.field("flag").type == pa.bool_()
    assert got.to_pylist() == [{"id": 1, "doc": '{"a": 1}', "flag": True}, {"id": 2, "doc": None, "flag": False}]


def test_a_memory_limit_is_checked_by_duckdb_once_per_value(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 12: asking DuckDB's parser opened a database (~15-20 ms) at every settings read, and
    every Dagster run reads them; its answer for a value never changes, so it is asked once."""
    import duckdb

    monkeypatch.setenv("TRIDENT_DUCKDB_MEMORY_LIMIT", "321MB")
    settings_from_env()
    opened: list[object] = []
    real = duckdb.connect

    def counting(*args: object, **kwargs: object) -> duckdb.DuckDBPyConnection:
        opened.append(kwargs.get("config"))
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(duckdb, "connect", counting)
    assert settings_from_env().duckdb_memory_limit == "321MB"
    assert opened == []
    monkeypatch.setenv("TRIDENT_DUCKDB_MEMORY_LIMIT", "lots")
    for _ in range(2):  # a refused value stays refused, the same way
        with pytest.raises(InvalidSettingsError, match="DuckDB refuses it"):
            settings_from_env()
