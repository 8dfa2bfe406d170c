"""Bad input gets a named error, says what to do, and loses nothing."""

from __future__ import annotations

import decimal
from pathlib import Path

import pyarrow as pa
import pytest

from tests.conftest import make_settings
from tests.support.helpers import table, user_rows
from trident_resources import (
    DatasetNotFoundError,
    DuplicateKeyError,
    EmptyInputError,
    InvalidDatasetKeyError,
    InvalidWriteError,
    NullKeyError,
    ReservedColumnError,
    ResourceLimitError,
    SchemaMismatchError,
    Trident,
)


def _unchanged(t: Trident, key: str, expected: list[dict[str, object]], txns: int) -> None:
    assert user_rows(t, key, "k") == expected
    history = t.history(key)
    assert sum(e.status == "committed" for e in history) == txns
    assert all(e.status in ("committed", "aborted") for e in history)


@pytest.mark.parametrize("column", ["__row_index", "__row_id", "__created_at"])
def test_reserved_columns_are_refused(trident: Trident, column: str) -> None:
    with pytest.raises(ReservedColumnError, match=column):
        trident.write("bad/reserved", table(k=[1], **{column: [1]}))
    assert not trident.exists("bad/reserved")


def test_null_and_duplicate_keys_abort_and_leave_the_dataset_as_it_was(trident: Trident) -> None:
    t = trident
    t.write("bad/keys", table(k=[1, 2], v=["a", "b"]))
    expected = [{"k": 1, "v": "a"}, {"k": 2, "v": "b"}]
    with pytest.raises(NullKeyError, match="'k' has 1 null"):
        t.write("bad/keys", table(k=[3, None], v=["c", "d"]), mode="upsert", keys=["k"])
    with pytest.raises(DuplicateKeyError, match="duplicate key"):
        t.write("bad/keys", table(k=[3, 3], v=["c", "d"]), mode="upsert", keys=["k"])
    with pytest.raises(DuplicateKeyError):
        t.write("bad/keys", table(k=[5, 5], v=["c", "d"]), mode="append_new", keys=["k"])
    _unchanged(t, "bad/keys", expected, txns=1)
    assert [e.status for e in t.history("bad/keys")][:3] == ["aborted"] * 3
    assert "DuplicateKeyError" in (t.history("bad/keys")[0].error or "")


def test_wrong_types_are_a_schema_mismatch(trident: Trident) -> None:
    t = trident
    t.write("bad/types", table(k=[1], v=[1.5]))
    with pytest.raises(SchemaMismatchError, match="v: dataset has double, input has large_string"):
        t.write("bad/types", table(k=[2], v=["text"]), mode="append")
    with pytest.raises(SchemaMismatchError):
        t.write("bad/types", table(k=["x"], v=[2.0]), mode="upsert", keys=["k"])
    _unchanged(t, "bad/types", [{"k": 1, "v": 1.5}], txns=1)
    # a replace redefines the dataset: a new schema version, not an error
    r = t.write("bad/types", table(k=[2], v=["text"]), mode="replace")
    assert r.schema_version == 2 and user_rows(t, "bad/types", "k") == [{"k": 2, "v": "text"}]


def test_new_columns_evolve_the_schema_in_the_same_commit(trident: Trident) -> None:
    t = trident
    t.write("evo/x", table(k=[1]))
    r = t.write("evo/x", table(k=[2], extra=["e"]), mode="append")
    assert r.schema_version == 2
    assert user_rows(t, "evo/x", "k") == [{"k": 1, "extra": None}, {"k": 2, "extra": "e"}]
    assert [c["name"] for c in t.describe("evo/x").schema][-2:] == ["k", "extra"]
    # narrower input types are widened into the column's type (int32 into int64)
    t.write("evo/x", pa.table({"k": pa.array([3], pa.int32())}), mode="append")
    assert t.describe("evo/x").schema_version == 2


def test_empty_iterable_and_unknown_things(trident: Trident) -> None:
    t = trident
    with pytest.raises(EmptyInputError):
        t.write("bad/empty", iter([]))
    with pytest.raises(InvalidWriteError, match="cannot write a str"):
        t.write("bad/str", "not data")
    with pytest.raises(InvalidWriteError, match="unknown mode"):
        t.write("bad/mode", table(k=[1]), mode="merge")  # type: ignore[call-overload]  # deliberately not a WriteMode
    with pytest.raises(InvalidWriteError, match="needs keys"):
        t.write("bad/mode", table(k=[1]), mode="upsert")
    with pytest.raises(InvalidWriteError, match="unknown writer"):
        t.write("bad/mode", table(k=[1]), writer="someone")
    with pytest.raises(InvalidWriteError, match="key column"):
        t.write("bad/mode", table(k=[1]), mode="append_new", keys=["nope"])
    for key in ("bad/mode", "bad/empty", "bad/str"):
        assert not t.exists(key)


def test_unknown_dataset(trident: Trident) -> None:
    with pytest.raises(DatasetNotFoundError, match="does not exist"):
        trident.read("no/such")
    with pytest.raises(DatasetNotFoundError):
        trident.describe("no/such")
    with pytest.raises(DatasetNotFoundError):
        trident.write("no/such", table(k=[1]), mode="delete", keys=["k"])


@pytest.mark.parametrize("key", ["../x", "a/../b", "Sales/orders", 'a"b', "a'b", "a b", "a.b", "/a", "a/", "", "a//b", "ä"])
def test_invalid_keys(trident: Trident, key: str) -> None:
    with pytest.raises(InvalidDatasetKeyError, match="invalid dataset key"):
        trident.write(key, table(k=[1]))
    with pytest.raises(InvalidDatasetKeyError):
        trident.read(key)


def test_secrets_stay_out_of_reprs(trident: Trident) -> None:
    from trident_resources import TridentSettings

    s = TridentSettings(pg_dsn="postgresql://u:hunter2@h/db", s3_secret_access_key="s3cr3t", catalog_token="tok3n")
    for text in (repr(s), str(s.redacted()), repr(trident)):
        assert "hunter2" not in text and "s3cr3t" not in text and "tok3n" not in text


def test_unreachable_object_storage_is_a_named_error_and_loses_nothing(trident_home, pg_dsn) -> None:
    """S3 refusing connections: StorageUnavailableError, the ledger says aborted, no dataset appears."""
    import socket

    from tests.conftest import make_settings
    from trident_resources import StorageUnavailableError

    with socket.socket() as s:  # a loopback port with nobody listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings = make_settings(
        trident_home,
        pg_dsn,
        s3_endpoint=f"http://127.0.0.1:{port}",
        s3_bucket="nowhere",
        s3_access_key_id="x",
        s3_secret_access_key="y",
        s3_region="us-east-1",
    )
    with Trident(settings) as t:
        with pytest.raises(StorageUnavailableError, match="storage unavailable"):
            t.write("down/x", table(k=[1, 2]))
        assert not t.exists("down/x")
        assert [e.status for e in t.history("down/x")] == ["aborted"]


def test_a_merge_past_its_memory_limit_is_a_named_error_and_loses_nothing(trident_home: Path, pg_dsn: str) -> None:
    """DuckDB running out of memory (a limit set too low, a full spill disk) reached the caller as
    a raw ``duckdb.OutOfMemoryException``; it must be a named error that says what to change."""
    import numpy as np

    t = Trident(make_settings(trident_home, pg_dsn, duckdb_memory_limit="2MB"))
    try:
        n = 300_000
        data = pa.table({"k": np.arange(n), "s": pa.array([f"v{i}" for i in range(n)])})
        t.write("bad/oom", data)
        with pytest.raises(ResourceLimitError, match="TRIDENT_DUCKDB_MEMORY_LIMIT") as err:
            t.write("bad/oom", data, mode="upsert", keys=["k"])
        assert err.value.__cause__ is not None
        assert t.history("bad/oom")[0].status == "aborted"
        assert t.read("bad/oom").num_rows == n
    finally:
        t.close()


@pytest.mark.parametrize("sink", ["iceberg_native", "pg"])
def test_a_negative_decimal_scale_is_a_schema_mismatch_on_both_sinks(trident: Trident, sink: str) -> None:
    """Prober 3: decimal128(5, -2) passed schema planning (pyiceberg accepts it); then the Parquet
    writer refused it mid-write as StorageUnavailableError ('storage unavailable') and the pg
    sink's DuckDB as WriteFailedError (an internal cast error). It is a type no sink can store."""
    t = trident
    t.router.set_pin("bad/negscale", sink)
    t.write("bad/negscale", table(k=[1]))
    data = pa.table({"k": [2], "d": pa.array([decimal.Decimal(12300)], pa.decimal128(5, -2))})
    with pytest.raises(SchemaMismatchError, match=r"negative decimal scale.*decimal128\(7, 0\)"):
        t.write("bad/negscale", data, mode="append")
    _unchanged(t, "bad/negscale", [{"k": 1}], txns=1)
