"""What a caller from outside can get wrong, probed end to end (real Postgres, real warehouse):
each case used to end in a raw pyarrow/psycopg/pydantic error, or worse, in silence (a pandas
index dropped, a staged audit that read the published version)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pandas as pd
import pyarrow as pa
import pytest

from trident_resources import Trident
from trident_resources.control.plane import probe_connection
from trident_resources.core.errors import (
    ControlPlaneUnavailableError,
    DatasetNotFoundError,
    InvalidArgumentError,
    InvalidDatasetKeyError,
    InvalidFilterError,
    InvalidReadError,
    InvalidSettingsError,
    InvalidWriteError,
    PartitionError,
    SchemaMismatchError,
    SqlError,
)
from trident_resources.core.settings import settings_from_env


def test_a_named_pandas_index_is_written_as_columns(trident: Trident) -> None:
    """``groupby`` moves the grouping column into the index: dropping it lost which group each row was."""
    sums = pd.DataFrame({"region": ["eu", "us", "eu"], "v": [1, 2, 3]}).groupby("region").sum()
    trident.write("p/sums", sums)
    got = trident.read("p/sums", columns=["region", "v"]).sort_by("region").to_pylist()
    assert got == [{"region": "eu", "v": 4}, {"region": "us", "v": 2}]

    multi = pd.DataFrame({"a": [1, 1], "b": [2, 3], "v": [5, 6]}).set_index(["a", "b"])
    trident.write("p/multi", multi)
    assert sorted(trident.read("p/multi", columns=["a", "b", "v"]).to_pylist(), key=lambda r: r["b"]) == [
        {"a": 1, "b": 2, "v": 5},
        {"a": 1, "b": 3, "v": 6},
    ]
    # an unnamed index is position, not data: a filtered frame writes its columns only
    filtered = pd.DataFrame({"v": [1, 2, 3]})[lambda d: d.v > 1]
    trident.write("p/filtered", filtered)
    assert [n for n in trident.schema("p/filtered").names if not n.startswith("__")] == ["v"]


def test_a_pandas_frame_arrow_cannot_convert_is_a_named_error(trident: Trident) -> None:
    with pytest.raises(InvalidWriteError, match="column v") as caught:
        trident.write("p/mixed", pd.DataFrame({"v": [1, "a", None]}))
    assert isinstance(caught.value.__cause__, pa.ArrowException)
    assert not trident.exists("p/mixed")


def test_column_names_that_differ_only_in_case_are_refused(trident: Trident) -> None:
    """DuckDB resolves names case-insensitively: such a dataset could not be queried, and ``sql``
    said its data files were corrupt."""
    with pytest.raises(SchemaMismatchError, match="differ only in case"):
        trident.write("c/case", pa.table({"A": [1], "a": [2]}))
    with pytest.raises(SchemaMismatchError, match="differ only in case"):
        trident.write("c/case", pa.table({"s": [{"Id": 1, "id": 2}]}))
    assert not trident.exists("c/case")


@pytest.mark.parametrize("partition", ["2024-01-01", 5, {"region": "eu"}])
def test_a_partition_that_is_not_a_partition_filter_is_a_named_error(trident: Trident, partition: object) -> None:
    trident.write("q/parts", pa.table({"region": ["eu"], "v": [1]}))
    for call in (
        lambda: trident.read("q/parts", partition=partition),  # type: ignore[arg-type]
        lambda: trident.stream("q/parts", partition=partition),  # type: ignore[arg-type]
        lambda: trident.arrow_source("q/parts", partition=partition),  # type: ignore[arg-type]
        lambda: trident.write("q/parts", pa.table({"region": ["us"], "v": [2]}), partition=partition),  # type: ignore[call-overload]
    ):
        with pytest.raises(PartitionError, match="PartitionFilter"):
            call()
    assert trident.read("q/parts", columns=["region", "v"]).to_pylist() == [{"region": "eu", "v": 1}]


@pytest.mark.parametrize("limit", [-1, 0, 1.5, True])
def test_a_history_limit_out_of_range_is_a_named_error(trident: Trident, limit: object) -> None:
    trident.write("h/x", pa.table({"a": [1]}))
    with pytest.raises(InvalidArgumentError, match="limit"):
        trident.history("h/x", limit)  # type: ignore[arg-type]
    assert len(trident.history("h/x", 1)) == 1


def test_sql_refuses_a_staged_entry_it_would_have_ignored(trident: Trident) -> None:
    """A misspelt key in ``staged=`` left the query reading the published version, silently."""
    trident.write("s/orders", pa.table({"a": [1, 2, 3]}))
    staged = trident.write("s/orders", pa.table({"a": [1]}), stage=True)
    query = 'select count(*) from "s/orders"'
    assert trident.sql(query, staged={"s/orders": staged.txn_id}).column(0)[0].as_py() == 1
    with pytest.raises(DatasetNotFoundError, match="s/order"):
        trident.sql(query, staged={"s/order": staged.txn_id})
    with pytest.raises(InvalidReadError, match="not a transaction id"):
        trident.sql("select 1", staged={"s/orders": "nope"})
    with pytest.raises(InvalidReadError, match="not a transaction of"):
        trident.sql("select 1", staged={"s/orders": uuid.uuid4()})


def test_bad_settings_are_one_named_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRIDENT_WORKSPACE", "Bad Space")
    monkeypatch.setenv("TRIDENT_SQL_MAX_ROWS", "many")
    with pytest.raises(InvalidSettingsError) as caught:
        settings_from_env()
    text = str(caught.value)
    assert "\n" not in text and "TRIDENT_WORKSPACE" in text and "TRIDENT_SQL_MAX_ROWS" in text
    with pytest.raises(InvalidSettingsError):
        Trident.from_env()


def test_an_unreachable_control_plane_is_one_line() -> None:
    """libpq puts its hint on a second line; the CLI prints errors as one."""
    with pytest.raises(ControlPlaneUnavailableError) as caught:
        probe_connection("postgresql://postgres@127.0.0.1:1/trident", timeout_s=2)
    assert "\n" not in str(caught.value) and "TRIDENT_PG_DSN" in str(caught.value)


def test_a_named_error_opening_a_read_keeps_its_cause(trident: Trident) -> None:
    """Opening a stream re-raised an already named error ``from`` itself: its cause became itself
    and the parser's error (what `trident export --where` reports from) was lost."""
    from pyparsing import ParseBaseException

    trident.write("f/x", pa.table({"a": [1, 2]}))
    with pytest.raises(InvalidFilterError) as caught:
        trident.stream("f/x", row_filter="a >")
    assert caught.value.__cause__ is not caught.value
    assert isinstance(caught.value.__cause__, ParseBaseException)


def test_staged_of_a_misspelt_key_is_a_named_error(trident: Trident) -> None:
    first = trident.write("w/first", pa.table({"a": [1]}), stage=True)  # a dataset whose only version is staged
    assert [(k, e.txn_id) for k, e in trident.staged("w/first")] == [("w/first", first.txn_id)]
    with pytest.raises(DatasetNotFoundError):
        trident.staged("w/firts")
    with pytest.raises(InvalidDatasetKeyError):
        trident.staged("../w")


def test_a_column_differing_only_in_case_from_the_datasets_is_refused(trident: Trident) -> None:
    trident.write("c/evolve", pa.table({"a": [1]}))
    with pytest.raises(SchemaMismatchError, match="differs only in case"):
        trident.write("c/evolve", pa.table({"A": [2]}), mode="append")
    with pytest.raises(SchemaMismatchError, match="differs only in case"):
        trident.write("c/evolve", pa.table({"A": [2], "k": [1]}), mode="upsert", keys=["k"])
    assert trident.sql('select count(*) from "c/evolve"').column(0)[0].as_py() == 1  # still queryable
    trident.write("c/evolve", pa.table({"A": [2]}))  # a whole replace takes the new schema: no clash
    assert [n for n in trident.schema("c/evolve").names if not n.startswith("__")] == ["A"]


def test_a_pandas_series_is_written_as_its_one_column(trident: Trident) -> None:
    trident.write("p/series", pd.Series([1, 2], name="x"))
    assert trident.read("p/series", columns=["x"]).column("x").to_pylist() == [1, 2]


def test_an_unknown_sql_function_is_not_called_a_missing_dataset(trident: Trident) -> None:
    with pytest.raises(SqlError, match="getenv") as caught:
        trident.sql("select getenv('HOME')")
    assert "not a dataset" not in str(caught.value)


@pytest.mark.parametrize(
    ("watermarks", "error"),
    [
        ({"no/such": (datetime.now(UTC), None)}, DatasetNotFoundError),
        ({"w/src": "yesterday"}, InvalidWriteError),
        ({"w/src": (datetime.now(UTC), "not-a-txn")}, InvalidWriteError),
        (["w/src"], InvalidWriteError),
    ],
)
def test_a_bad_watermark_fails_the_write_before_it_opens(trident: Trident, watermarks: object, error: type[Exception]) -> None:
    """It was looked up between the transaction's WRITE and COMMIT: the write raised (a raw
    ValueError for a malformed one) with its transaction left open and its data written, and the
    reconciler then rolled the failed write forward."""
    trident.write("w/src", pa.table({"a": [1]}))
    trident.write("w/out", pa.table({"a": [1]}))
    with pytest.raises(error):
        trident.write("w/out", pa.table({"a": [2]}), mode="append", watermarks=watermarks)  # type: ignore[call-overload]
    rec = trident.reconcile()
    assert rec.rolled_forward == [] and rec.still_running == []
    assert trident.read("w/out", columns=["a"]).column("a").to_pylist() == [1]
    assert [e.status for e in trident.history("w/out")] == ["committed"] * len(trident.history("w/out"))


def test_set_provenance_of_a_non_mapping_is_a_named_error(trident: Trident) -> None:
    trident.write("w/prov", pa.table({"a": [1]}))
    with pytest.raises(InvalidArgumentError, match="mapping"):
        trident.set_provenance("w/prov", [1, 2])  # type: ignore[arg-type]


def test_dates_and_instants_outside_years_1_to_9999_round_trip(trident: Trident) -> None:
    """Arrow, Parquet and DuckDB hold days and microseconds far outside Python's ``date`` range;
    the data file statistics turned them into Python dates first and the write died with a raw
    ``OverflowError`` (the ledger aborted, the rows refused). They are stored and read back as given."""
    days = pa.array([-800_000, 5, 3_000_000], pa.date32())
    micros = pa.array([-70_000_000_000_000_000, 5, 300_000_000_000_000_000], pa.timestamp("us", tz="UTC"))
    naive = pa.array([-70_000_000_000_000_000, 5, 300_000_000_000_000_000], pa.timestamp("us"))
    rows = pa.table({"k": [1, 2, 3], "d": days, "ts": micros, "naive": naive})
    trident.write("p/far", rows)
    trident.write("p/far", rows, mode="append")
    got = trident.read("p/far", columns=["k", "d", "ts", "naive"]).sort_by([("k", "ascending")])
    assert got.column("d").cast(pa.int32()).to_pylist() == [-800_000, -800_000, 5, 5, 3_000_000, 3_000_000]
    assert got.column("ts").cast(pa.int64()).to_pylist()[::2] == micros.cast(pa.int64()).to_pylist()
    assert got.column("naive").cast(pa.int64()).to_pylist()[1::2] == naive.cast(pa.int64()).to_pylist()
    low = trident.sql("select count(*) as n from \"p/far\" where d < DATE '1900-01-01'")
    assert low.column("n").to_pylist() == [2]
    trident.write("p/far_keyed", rows, mode="upsert", keys=["k"])
    assert trident.write("p/far_keyed", rows, mode="upsert", keys=["k"]).preserved == 3
