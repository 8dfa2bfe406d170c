"""Odd inputs (issue 8, items 1 and 12): names that only look valid, argument types a caller can
get wrong, column names and types the storage cannot hold. Each gets a named TridentError, says
what to do, and leaves nothing behind."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid

import pyarrow as pa
import pytest

from tests.support.helpers import table
from trident_resources import (
    InvalidDatasetKeyError,
    InvalidReadError,
    InvalidWriteError,
    ReservedColumnError,
    SchemaMismatchError,
    Trident,
    TridentSettings,
)
from trident_resources.sinks.contract import WriteMode

# -- item 1: names are validated with a full match ------------------------------------------------
TRAILING = ["sales/orders\n", "sales\n", "orders\r\n", "a/b\n\n"]


@pytest.mark.parametrize("key", TRAILING)
def test_a_key_with_a_trailing_newline_is_refused(trident: Trident, key: str) -> None:
    """``$`` matches before a final newline; a key that did so shared another key's storage folder."""
    t = trident
    with pytest.raises(InvalidDatasetKeyError, match="invalid dataset key"):
        t.write(key, table(k=[1]))
    with pytest.raises(InvalidDatasetKeyError):
        t.read(key)
    with pytest.raises(InvalidDatasetKeyError):
        t.maintain(key)
    assert t.datasets() == []


@pytest.mark.parametrize("field", ["workspace", "namespace_root"])
@pytest.mark.parametrize("value", ["abc\n", "ab\nc", "ABC", "", "a.b"])
def test_workspace_and_namespace_root_are_full_matched(field: str, value: str) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        TridentSettings(**{field: value})  # type: ignore[arg-type]


def test_a_pin_is_for_a_valid_key_only(trident: Trident) -> None:
    """A pin on ``"sales/orders\\n"`` would never apply to any dataset: refuse it when it is set."""
    with pytest.raises(InvalidDatasetKeyError):
        trident.router.set_pin("sales/orders\n", "pg")
    with pytest.raises(InvalidDatasetKeyError):
        trident.router.clear_pin("../x")
    assert trident.router.pins() == {}


# -- item 12: raw errors where named ones are promised ----------------------------------------------
SINKS = ("iceberg_native", "pg")
UNSUPPORTED = {
    "duration": (pa.array([1], pa.duration("us")), "duration"),
    "decimal256": (pa.array([decimal.Decimal("1.5")], pa.decimal256(50, 2)), "38 digits"),
    "interval": (pa.array([pa.MonthDayNano([1, 2, 3])], pa.month_day_nano_interval()), "interval"),
    "nested": (pa.array([{"a": 1}], pa.struct([("a", pa.duration("s"))])), "duration"),
}


def _pinned(t: Trident, key: str, sink: str) -> str:
    t.router.set_pin(key, sink)
    return key


@pytest.mark.parametrize("sink", SINKS)
@pytest.mark.parametrize("kind", sorted(UNSUPPORTED))
@pytest.mark.parametrize("mode", ["replace", "upsert"])
def test_types_iceberg_cannot_store_are_a_schema_mismatch(trident: Trident, sink: str, kind: str, mode: WriteMode) -> None:
    t = trident
    arr, words = UNSUPPORTED[kind]
    key = _pinned(t, f"types/{kind}", sink)
    with pytest.raises(SchemaMismatchError, match=words) as info:
        t.write(key, pa.table({"k": [1], "c": arr}), mode=mode, keys=["k"] if mode == "upsert" else None)
    assert "'c'" in str(info.value)  # names the column the caller must change
    assert not t.exists(key)


@pytest.mark.parametrize("sink", SINKS)
@pytest.mark.parametrize("mode", ["replace", "upsert"])
def test_non_utc_timestamps_are_stored_as_the_same_instants_in_utc(trident: Trident, sink: str, mode: WriteMode) -> None:
    """Iceberg's timestamptz is an instant without a zone: the instant is kept, the zone becomes UTC."""
    t = trident
    key = _pinned(t, "types/tz", sink)
    rome = dt.datetime(2024, 1, 1, 12, tzinfo=dt.timezone(dt.timedelta(hours=1)))
    data = pa.table(
        {
            "k": [1],
            "rome": pa.array([rome], pa.timestamp("us", tz="Europe/Rome")),
            "plus2": pa.array([rome], pa.timestamp("ms", tz="+02:00")),
            "nested": pa.array([{"at": rome}], pa.struct([("at", pa.timestamp("s", tz="America/New_York"))])),
        }
    )
    t.write(key, data, mode=mode, keys=["k"] if mode == "upsert" else None)
    row = t.read(key).to_pylist()[0]
    utc = dt.datetime(2024, 1, 1, 11, tzinfo=dt.UTC)
    assert row["rome"] == row["plus2"] == row["nested"]["at"] == utc
    assert t.schema(key).field("rome").type == pa.timestamp("us", tz="UTC")
    t.write(key, data, mode="append" if mode == "replace" else "upsert", keys=None if mode == "replace" else ["k"])


@pytest.mark.parametrize("sink", SINKS)
@pytest.mark.parametrize("mode", ["replace", "upsert"])
@pytest.mark.parametrize("name", ["__file", "__x", "__data", "__row_index2"])
def test_the_whole_double_underscore_prefix_is_reserved(trident: Trident, sink: str, mode: WriteMode, name: str) -> None:
    t = trident
    key = _pinned(t, "names/reserved", sink)
    with pytest.raises(ReservedColumnError, match=name):
        t.write(key, pa.table({"k": [1], name: [2]}), mode=mode, keys=["k"] if mode == "upsert" else None)
    assert not t.exists(key)


def test_the_engine_lineage_column_is_not_reserved(trident: Trident) -> None:
    """``__source_row_index__`` is written by model nodes (the engine's own lineage column)."""
    t = trident
    t.write("names/model", pa.table({"__source_row_index__": [0, 1], "score": [0.5, 0.7]}))
    assert t.read("names/model").num_rows == 2


@pytest.mark.parametrize("sink", SINKS)
@pytest.mark.parametrize("mode", ["replace", "upsert"])
@pytest.mark.parametrize(
    ("names", "words"),
    [(["k", ""], "empty"), (["k", "a\x00b"], "NUL"), (["k", "a", "a"], "more than once")],
    ids=["empty", "nul", "duplicate"],
)
def test_unusable_column_names_are_a_schema_mismatch(
    trident: Trident, sink: str, mode: WriteMode, names: list[str], words: str
) -> None:
    t = trident
    key = _pinned(t, "names/bad", sink)
    data = pa.Table.from_arrays([pa.array([i]) for i in range(len(names))], names=names)
    with pytest.raises(SchemaMismatchError, match=words):
        t.write(key, data, mode=mode, keys=["k"] if mode == "upsert" else None)
    assert not t.exists(key)


def test_nested_field_names_are_checked_too(trident: Trident) -> None:
    with pytest.raises(SchemaMismatchError, match="empty"):
        trident.write("names/nested", pa.table({"s": pa.array([{"": 1}], pa.struct([("", pa.int64())]))}))


class ProducerBroke(Exception):
    """A producer's own exception type: the caller catches this, not a DuckDB wrapper."""


def _failing() -> object:
    yield pa.record_batch({"k": [1], "v": ["a"]})
    raise ProducerBroke("the upstream API went away")


def _drifting() -> object:
    yield pa.record_batch({"k": [1], "v": ["a"]})
    yield pa.record_batch({"k": ["x"], "v": ["b"]})


@pytest.mark.parametrize("sink", SINKS)
@pytest.mark.parametrize("mode", ["upsert", "append_new", "replace", "delete"])
def test_a_producers_exception_reaches_the_caller_from_a_keyed_write(trident: Trident, sink: str, mode: WriteMode) -> None:
    t = trident
    key = _pinned(t, "prod/fail", sink)
    t.write(key, table(k=[0], v=["z"]))
    with pytest.raises(ProducerBroke, match="went away"):
        t.write(key, _failing(), mode=mode, keys=["k"])
    assert t.read(key).num_rows == 1
    assert t.history(key)[0].status == "aborted"


@pytest.mark.parametrize("sink", SINKS)
def test_a_mid_stream_schema_change_in_a_keyed_write_is_named(trident: Trident, sink: str) -> None:
    t = trident
    key = _pinned(t, "prod/drift", sink)
    t.write(key, table(k=[0], v=["z"]))
    with pytest.raises(InvalidWriteError, match="schema changed mid-stream"):
        t.write(key, _drifting(), mode="upsert", keys=["k"])
    assert t.read(key).num_rows == 1


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"keys": 5, "mode": "upsert"}, "keys"),
        ({"keys": [5], "mode": "upsert"}, "keys"),
        ({"keys": ["k", ""], "mode": "upsert"}, "keys"),
        ({"keys": {"k": 1}, "mode": "upsert"}, "keys"),
        ({"txn_id": "nope"}, "txn_id"),
        ({"txn_id": 5}, "txn_id"),
        ({"txn_id": ""}, "txn_id"),
    ],
)
def test_malformed_write_arguments_are_invalid_writes(trident: Trident, kwargs: dict[str, object], words: str) -> None:
    with pytest.raises(InvalidWriteError, match=words):
        trident.write("args/w", table(k=[1]), **kwargs)  # type: ignore[call-overload]
    assert not trident.exists("args/w")


def test_txn_id_accepts_a_uuid_or_its_text(trident: Trident) -> None:
    txn = uuid.uuid4()
    assert trident.write("args/ok", table(k=[1]), txn_id=txn).txn_id == txn
    assert trident.write("args/ok", table(k=[1]), txn_id=str(uuid.uuid4()).upper()).row_count == 1


@pytest.mark.parametrize("columns", ["k", 5, ["k", 5], ("k",)], ids=["str", "int", "mixed", "tuple"])
def test_malformed_read_columns_are_invalid_reads(trident: Trident, columns: object) -> None:
    t = trident
    t.write("args/r", table(k=[1], a=[2]))
    if columns == ("k",):  # a tuple of names is a sequence of names: fine
        assert t.read("args/r", columns=columns).column_names == ["k"]  # type: ignore[arg-type]
        return
    with pytest.raises(InvalidReadError, match="columns"):
        t.read("args/r", columns=columns)  # type: ignore[arg-type]
    with pytest.raises(InvalidReadError, match="columns"):
        t.stream("args/r", columns=columns)  # type: ignore[arg-type]


@pytest.mark.parametrize("sink", SINKS)
def test_an_input_without_columns_is_refused(trident: Trident, sink: str) -> None:
    """``pa.table({})`` used to create a dataset of identity columns alone."""
    key = _pinned(trident, "odd/nocols", sink)
    with pytest.raises(SchemaMismatchError, match="no columns"):
        trident.write(key, pa.table({}))
    assert not trident.exists(key)
