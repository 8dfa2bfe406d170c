"""Canary migration of TPC-H tables from pg to iceberg_native: parity keeps the flip (identity
preserved, old copy gone); a forced mismatch reverts it and leaves the dataset untouched."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

from tests.support.sink_helpers import TPCH_TABLES, comparable, tpch
from trident_cli.main import cli
from trident_resources import Trident, TridentSettings
from trident_resources.core.failpoints import armed


@pytest.fixture(scope="module")
def tpch_tables(tmp_path_factory: pytest.TempPathFactory) -> dict[str, pa.Table]:
    return tpch(tmp_path_factory.mktemp("tpch"), 0.01)


def _rows_left_in_pg(t: Trident, key: str) -> int:
    ds = t.dataset_record(key)
    return t.control.execute("SELECT count(*) AS n FROM trident_rows WHERE dataset_id = %s", (ds.dataset_id,))[0]["n"]


def test_full_canary_of_tpch_keeps_every_row_and_its_identity(trident: Trident, tpch_tables: dict[str, pa.Table]) -> None:
    t = trident
    for name in TPCH_TABLES:
        t.router.set_pin(f"tpch/{name}", "pg")
        t.write(f"tpch/{name}", tpch_tables[name], writer="sync.full")
    t.write("tpch/orders", tpch_tables["orders"].slice(0, 10), mode="upsert", keys=["o_orderkey"], writer="sync.full")
    q = 'select l_returnflag, sum(l_extendedprice) p, count(*) n from "tpch/lineitem" group by 1 order by 1'
    answer = t.sql(q)
    for name in TPCH_TABLES:
        key = f"tpch/{name}"
        before, desc = t.read(key), t.describe(key)
        seen: list[tuple[str, int, int]] = []
        report = t.migrate(key, progress=lambda phase, done, total: seen.append((phase, done, total)))  # noqa: B023 - called before the loop moves on
        assert report.parity and report.flipped, report.message
        assert report.source_rows == report.target_rows == tpch_tables[name].num_rows
        assert {p for p, _, _ in seen} == {"copy", "verify"} and seen[-1][1] == desc.row_count
        after = t.describe(key)
        assert (after.sink, after.row_count, after.schema, after.schema_version) == (
            "iceberg_native",
            desc.row_count,
            desc.schema,
            desc.schema_version,
        )
        assert comparable(t.read(key)) == comparable(before)  # identity columns included
        assert _rows_left_in_pg(t, key) == 0
        assert t.router.pins()[key] == "iceberg_native"
        assert t.history(key)[0].writer == "canary"
    assert t.sql(q).equals(answer)
    # the migrated dataset keeps working: appends continue the row index
    r = t.write("tpch/region", pa.table({"r_regionkey": [5], "r_name": ["MARS"], "r_comment": ["new"]}), mode="append")
    assert r.sink == "iceberg_native" and t.read("tpch/region", row_filter="r_regionkey = 5").column(
        "__row_index"
    ).to_pylist() == [5]


def test_a_checksum_mismatch_reverts_the_flip(
    trident: Trident, settings: TridentSettings, tpch_tables: dict[str, pa.Table]
) -> None:
    t = trident
    t.router.set_pin("tpch/nation", "pg")
    t.write("tpch/nation", tpch_tables["nation"])
    before, desc = t.read("tpch/nation"), t.describe("tpch/nation")
    with armed("canary.drop_row"):
        report = t.migrate("tpch/nation")
    assert not report.parity and not report.flipped
    assert report.target_rows == report.source_rows - 1 and "checksums differ" in report.message
    after = t.describe("tpch/nation")
    assert (after.sink, after.last_txn_id, after.row_count) == ("pg", desc.last_txn_id, desc.row_count)
    assert comparable(t.read("tpch/nation")) == comparable(before)
    entry = t.history("tpch/nation")[0]
    assert (entry.writer, entry.status) == ("canary", "aborted") and "no parity" in (entry.error or "")
    assert t.driver.sinks["iceberg_native"].tables.table(t.dataset_record("tpch/nation")) is None  # type: ignore[attr-defined]
    # the CLI reports it and exits 1; a clean retry then flips
    env = {
        "TRIDENT_HOME": str(settings.home),
        "TRIDENT_PG_DSN": settings.pg_dsn.get_secret_value(),  # type: ignore[union-attr]
        "TRIDENT_WORKSPACE": settings.workspace,
    }
    res = CliRunner().invoke(cli, ["canary", "tpch/nation"], env=env)
    assert res.exit_code == 0 and "FLIPPED" in res.output, res.output
    assert t.describe("tpch/nation").sink == "iceberg_native"
    res = CliRunner().invoke(cli, ["canary", "tpch/nation"], env=env)
    assert res.exit_code == 2 and "already lives in" in res.output


def test_canary_cli_exit_status_on_mismatch(
    trident: Trident, settings: TridentSettings, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    trident.router.set_pin("c/x", "pg")
    trident.write("c/x", pa.table({"a": [1, 2, 3]}))
    monkeypatch.setenv("TRIDENT_FAILPOINTS", "canary.drop_row=corrupt")
    env = {
        "TRIDENT_HOME": str(settings.home),
        "TRIDENT_PG_DSN": settings.pg_dsn.get_secret_value(),  # type: ignore[union-attr]
        "TRIDENT_WORKSPACE": settings.workspace,
    }
    res = CliRunner().invoke(cli, ["canary", "c/x"], env=env)
    assert res.exit_code == 1 and "REVERTED" in res.output
    assert trident.describe("c/x").sink == "pg"
