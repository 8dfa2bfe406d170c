"""A control plane writes only to Iceberg tables it created (property ``trident.dataset-id``), and
takes over another one only through ``Trident.adopt`` / ``trident adopt KEY``."""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest
from click.testing import CliRunner
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from trident_resources import Trident
from trident_resources.core.errors import InvalidWriteError, TableOwnershipError
from trident_resources.core.keys import iceberg_identifier
from trident_resources.sinks.iceberg.sink import OWNER_PROPERTY, IcebergSink


def _catalog(t: Trident) -> tuple[Catalog, IcebergSink]:
    sink = t.driver.sink("iceberg_native")
    assert isinstance(sink, IcebergSink)
    return sink.catalog, sink


def _foreign_table(t: Trident, key: str, data: pa.Table) -> Table:
    """A table another tool wrote at the identifier Trident would use for ``key``."""
    catalog, _ = _catalog(t)
    parts = iceberg_identifier(t.settings.namespace_root, t.workspace, key)
    ident = (".".join(parts[:-1]), parts[-1])
    catalog.create_namespace_if_not_exists(ident[0])
    table = catalog.create_table(ident, schema=data.schema)
    table.append(data)
    return table


def _with_identity(n: int) -> pa.Table:
    return pa.table(
        {
            "k": pa.array(range(n), pa.int64()),
            "__row_index": pa.array(range(100, 100 + n), pa.int64()),
            "__row_id": pa.array([str(uuid.uuid4()) for _ in range(n)], pa.large_string()),
            "__created_at": pa.array([0] * n, pa.timestamp("us", tz="UTC")),
        }
    )


def test_a_table_it_created_carries_its_dataset_id(trident: Trident) -> None:
    trident.write("own/mine", pa.table({"k": [1, 2]}))
    _, sink = _catalog(trident)
    ds = trident.control.dataset(trident.workspace, "own/mine")
    assert ds is not None
    table = sink.tables.table(ds)
    assert table is not None and table.properties[OWNER_PROPERTY] == str(ds.dataset_id)


def test_an_existing_table_it_did_not_create_is_refused_and_left_alone(trident: Trident) -> None:
    foreign = _foreign_table(trident, "own/foreign", pa.table({"k": pa.array([1, 2, 3], pa.int64())}))
    with pytest.raises(TableOwnershipError, match="trident adopt own/foreign"):
        trident.write("own/foreign", pa.table({"k": [4]}), mode="append")
    assert not trident.exists("own/foreign")
    after = foreign.refresh()
    assert after.scan().to_arrow().num_rows == 3, "a refused table must not be touched (nor dropped)"
    assert after.current_snapshot() is not None
    assert after.current_snapshot().snapshot_id == foreign.current_snapshot().snapshot_id  # type: ignore[union-attr]


def test_adopt_refuses_a_table_without_identity_columns(trident: Trident) -> None:
    _foreign_table(trident, "own/plain", pa.table({"k": pa.array([1], pa.int64())}))
    with pytest.raises(TableOwnershipError, match="identity column"):
        trident.adopt("own/plain")
    assert not trident.exists("own/plain")


def test_adopt_refuses_a_table_owned_by_another_dataset(trident: Trident) -> None:
    table = _foreign_table(trident, "own/theirs", _with_identity(3))
    with table.transaction() as txn:
        txn.set_properties({OWNER_PROPERTY: str(uuid.uuid4())})
    with pytest.raises(TableOwnershipError, match="two control planes"):
        trident.adopt("own/theirs")


def test_adopt_takes_over_and_row_index_continues_after_the_max(trident: Trident) -> None:
    _foreign_table(trident, "own/adopt", _with_identity(5))
    d = trident.adopt("own/adopt")
    assert d.row_count == 5
    assert trident.history("own/adopt")[0].mode == "adopt"
    r = trident.write("own/adopt", pa.table({"k": pa.array([10, 11], pa.int64())}), mode="append")
    assert r.row_count == 7
    idx = sorted(trident.read("own/adopt", columns=["__row_index"]).column(0).to_pylist())
    assert idx == [100, 101, 102, 103, 104, 105, 106]
    with pytest.raises(InvalidWriteError, match="already a dataset"):
        trident.adopt("own/adopt")


def test_trident_adopt_cli(trident: Trident, monkeypatch: pytest.MonkeyPatch) -> None:
    from trident_cli.main import cli

    _foreign_table(trident, "own/cli", _with_identity(2))
    s = trident.settings
    monkeypatch.setenv("TRIDENT_HOME", str(s.home))
    monkeypatch.setenv("TRIDENT_PG_DSN", s.pg_dsn.get_secret_value() if s.pg_dsn else "")
    monkeypatch.setenv("TRIDENT_WORKSPACE", s.workspace)
    result = CliRunner().invoke(cli, ["adopt", "own/cli"])
    assert result.exit_code == 0, result.output
    assert trident.describe("own/cli").row_count == 2
    again = CliRunner().invoke(cli, ["adopt", "own/cli"])
    assert again.exit_code != 0 and "already a dataset" in again.output


def _strip_owner(t: Trident, key: str) -> Table:
    """What a Trident older than the ownership property left: the dataset's table without it."""
    _, sink = _catalog(t)
    ds = t.control.dataset(t.workspace, key)
    assert ds is not None
    table = sink.catalog.load_table(sink.tables.identifier(ds))
    with table.transaction() as txn:
        txn.remove_properties(OWNER_PROPERTY)
    return table.refresh()


# An inlined append does not touch the table (nor load it: its schema is cached per recorded
# snapshot), so a stamp another tool removed is met by the next flush or Iceberg write, not by it.
@pytest.mark.usefixtures("iceberg_writes")
def test_a_table_from_before_ownership_is_refused_then_stamped_by_adopt(trident: Trident) -> None:
    trident.write("own/old", pa.table({"k": pa.array([1, 2, 3], pa.int64())}))
    trident.write("own/old", pa.table({"k": pa.array([4], pa.int64())}), mode="append")
    before = trident.read("own/old").sort_by("k")
    _strip_owner(trident, "own/old")
    with pytest.raises(TableOwnershipError, match="trident adopt own/old"):
        trident.write("own/old", pa.table({"k": pa.array([5], pa.int64())}), mode="append")
    refused = trident.history("own/old")[0]
    assert refused.status == "aborted", "a refused write is aborted, not left open for the reconciler"
    assert trident.control.open_entries(refused.dataset_id) == []

    d = trident.adopt("own/old")
    assert d.row_count == 4
    assert trident.history("own/old")[0].mode == "adopt"
    assert trident.read("own/old").sort_by("k").equals(before), "adopting rewrites nothing"

    r = trident.write("own/old", pa.table({"k": pa.array([5], pa.int64())}), mode="append")
    assert r.row_count == 5
    got = trident.read("own/old").sort_by("k")
    assert got.column("__row_index").to_pylist() == [0, 1, 2, 3, 4], "identity continues where it was"
    assert got.column("__row_id").to_pylist()[:4] == before.column("__row_id").to_pylist()
    with pytest.raises(InvalidWriteError, match="already a dataset"):
        trident.adopt("own/old")


def test_adopt_refuses_an_unowned_table_the_ledger_does_not_agree_with(trident: Trident) -> None:
    trident.write("own/drift", pa.table({"k": pa.array([1, 2], pa.int64())}))
    table = _strip_owner(trident, "own/drift")
    # another tool appended to it since: its current snapshot is no transaction of this ledger
    # (rows as that tool reads them: pyiceberg's own scan, __row_id as the table's uuid)
    extra = table.scan().to_arrow().slice(0, 1)
    table.append(extra.cast(table.schema().as_arrow()))
    head = table.refresh().current_snapshot()
    with pytest.raises(TableOwnershipError, match=r"not the version .* last committed"):
        trident.adopt("own/drift")
    after = table.refresh()
    assert OWNER_PROPERTY not in after.properties and after.current_snapshot() == head, "a refused table is left alone"
    assert trident.history("own/drift")[0].mode != "adopt"


def test_trident_adopt_cli_stamps_a_table_from_before_ownership(trident: Trident, monkeypatch: pytest.MonkeyPatch) -> None:
    from trident_cli.main import cli

    trident.write("own/oldcli", pa.table({"k": pa.array([1, 2], pa.int64())}))
    _strip_owner(trident, "own/oldcli")
    s = trident.settings
    monkeypatch.setenv("TRIDENT_HOME", str(s.home))
    monkeypatch.setenv("TRIDENT_PG_DSN", s.pg_dsn.get_secret_value() if s.pg_dsn else "")
    monkeypatch.setenv("TRIDENT_WORKSPACE", s.workspace)
    result = CliRunner().invoke(cli, ["adopt", "own/oldcli"])
    assert result.exit_code == 0, result.output
    assert trident.write("own/oldcli", pa.table({"k": pa.array([3], pa.int64())}), mode="append").row_count == 3
