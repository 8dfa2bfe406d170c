"""The CLI for scripts and CI: ``--json`` on every reader, ``sql --format``, ``--version``, exit
codes, transaction id prefixes, repeatable clears and publishes, ``pin set`` that refuses a sink
the dataset is not in, SQL errors that point at the right key, one option name per meaning, one
timestamp form, and output outside a terminal (titles at the left margin, JSON below tables).

The real CLI against the session's embedded Postgres; what depends on stdout not being a terminal
runs the CLI as its own process with a pipe for stdout."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

from tests.support.helpers import cli_env
from trident_cli.main import cli
from trident_resources import Trident, TridentSettings

REPO = Path(__file__).resolve().parents[2]
INSTANT = re.compile(r"\b\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ\b")


def _run(args: list[str], settings: TridentSettings) -> tuple[int, str, str]:
    res = CliRunner().invoke(cli, args, env=cli_env(settings))
    return res.exit_code, res.stdout, res.stderr


def _piped(args: list[str], settings: TridentSettings) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIDENT_") and k != "COLUMNS"}
    env.update(cli_env(settings), PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "trident_cli.main", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=180
    )


def test_json_on_every_reader(trident: Trident, settings: TridentSettings) -> None:
    w = trident.write("js/orders", pa.table({"id": [1, 2, 3]}), provenance={"counterparty": "acme"})
    staged = trident.write("js/orders", pa.table({"id": [4]}), mode="append", stage=True)
    trident.router.set_pin("js/orders", "iceberg_native")

    code, out, _ = _run(["datasets", "--json"], settings)
    assert code == 0
    [d] = json.loads(out)
    assert d["key"] == "js/orders" and d["row_count"] == 3 and d["last_txn_id"] == str(w.txn_id) and d["sink"] == "iceberg_native"

    code, out, _ = _run(["describe", "js/orders", "--json"], settings)
    desc = json.loads(out)
    assert code == 0 and desc["row_count"] == 3 and desc["pin"] == "iceberg_native"
    assert desc["provenance"]["counterparty"] == "acme" and any(f["name"] == "id" for f in desc["schema"])

    code, out, _ = _run(["history", "js/orders", "--json"], settings)
    entries = json.loads(out)
    assert code == 0 and [e["txn_id"] for e in entries] == [str(staged.txn_id), str(w.txn_id)]
    assert entries[1]["status"] == "committed" and entries[1]["committed_at"].endswith("+00:00")
    code, out, _ = _run(["history", "js/orders", "--json", "--limit", "1"], settings)
    assert [e["txn_id"] for e in json.loads(out)] == [str(staged.txn_id)]

    code, out, _ = _run(["staged", "--json"], settings)
    assert code == 0 and [(s["key"], s["txn_id"]) for s in json.loads(out)] == [("js/orders", str(staged.txn_id))]

    code, out, _ = _run(["pins", "--json"], settings)
    assert code == 0 and json.loads(out) == {"flags": {}, "pins": {"js/orders": "iceberg_native"}}

    code, out, _ = _run(["maintain", "js/orders", "--json"], settings)
    [m] = json.loads(out)
    assert code == 0 and m["key"] == "js/orders" and "expired_snapshots" in m


def test_sql_formats_and_the_one_limit_option(trident: Trident, settings: TridentSettings) -> None:
    trident.write("fmt/t", pa.table({"id": [1, 2, 3], "name": ["a", "b,c", None]}))
    q = 'select id, name from "fmt/t" order by id'
    code, out, _ = _run(["sql", q, "--format", "csv"], settings)
    assert code == 0 and out.splitlines() == ['"id","name"', '1,"a"', '2,"b,c"', "3,"], out
    code, out, _ = _run(["sql", q, "--format", "json"], settings)
    assert code == 0 and json.loads(out) == [{"id": 1, "name": "a"}, {"id": 2, "name": "b,c"}, {"id": 3, "name": None}]
    code, out, _ = _run(["sql", q, "--format", "json", "--limit", "2"], settings)
    assert [r["id"] for r in json.loads(out)] == [1, 2]
    code, out, _ = _run(["sql", q, "--limit", "1"], settings)
    assert code == 0 and "2 more rows (3 in all; --limit 0 prints all)" in out
    code, out, _ = _run(["sql", q, "--limit", "0"], settings)
    assert code == 0 and "more rows" not in out and "b,c" in out
    for command in (["history", "fmt/t"], ["describe", "fmt/t"], ["sql", q]):
        code, _, err = _run([*command, "--max-rows", "1"], settings)  # the old names are gone: one name
        assert code == 2 and "No such option" in err, err


def test_version_and_exit_codes(trident: Trident, settings: TridentSettings) -> None:
    res = CliRunner().invoke(cli, ["--version"])
    assert res.exit_code == 0 and re.fullmatch(r"trident \d+\.\d+\.\d+\S*\n", res.output), res.output
    assert _run(["datasets", "--no-such-option"], settings)[0] == 2  # usage error
    assert _run(["describe", "no/such"], settings)[0] == 2  # a named error
    assert _run(["pg", "start", "--idle-minutes", "0"], settings)[0] == 2  # 0 means only the setting's meaning


def test_transaction_prefixes_and_repeatable_publish(trident: Trident, settings: TridentSettings) -> None:
    trident.write("px/t", pa.table({"id": [1]}))
    one = uuid.UUID("abcd1234-0000-4000-8000-000000000001")
    two = uuid.UUID("abcd1234-9000-4000-8000-000000000002")
    trident.write("px/t", pa.table({"id": [2]}), mode="append", stage=True, txn_id=one)
    trident.write("px/t", pa.table({"id": [3]}), mode="append", stage=True, txn_id=two)
    code, _, err = _run(["publish", "px/t", "abcd1234"], settings)
    assert code == 2 and "names 2" in err and str(one) in err and str(two) in err, err  # ambiguous: never guessed
    code, out, _ = _run(
        ["sql", 'select count(*) as n from "px/t"', "--staged", "px/t=abcd1234", "--format", "json"],
        settings,
    )
    assert code == 2
    code, out, _ = _run(
        ["sql", 'select max(id) as n from "px/t"', "--staged", f"px/t={two.hex[:12]}", "--format", "json"], settings
    )
    assert code == 0 and json.loads(out) == [{"n": 3}], out
    code, out, _ = _run(["discard", "px/t", str(two)[:-1]], settings)
    assert code == 0 and str(two) in out
    code, out, _err = _run(["publish", "px/t", "abcd1234"], settings)  # now unique
    assert code == 0 and f"txn {one}" in out, out
    assert sorted(trident.read("px/t").column("id").to_pylist()) == [1, 2]
    code, out, _ = _run(["publish", "px/t", str(one)[:13]], settings)  # again: done already, with a note
    assert code == 0 and out.startswith("note: ") and "published already" in out, out
    code, _, err = _run(["publish", "px/t", str(two)], settings)  # a discarded version is still an error
    assert code == 2 and "rejected" in err


def test_pin_set_refuses_a_sink_the_dataset_is_not_in(trident: Trident, settings: TridentSettings) -> None:
    trident.write("pn/t", pa.table({"id": [1]}), writer="ingest.api")
    lives = trident.describe("pn/t").sink
    other = "pg" if lives == "iceberg_native" else "iceberg_native"
    code, _, err = _run(["pin", "set", "pn/t", other], settings)
    assert code == 2 and f"lives in {lives}" in err and "--force" in err, err
    assert "pn/t" not in _pins(trident)
    code, out, _ = _run(["pin", "set", "pn/t", lives], settings)
    assert code == 0 and _pins(trident)["pn/t"] == lives
    code, out, _ = _run(["pin", "set", "pn/t", other, "--force"], settings)
    assert code == 0 and _pins(trident)["pn/t"] == other and f"lives in {lives}" in " ".join(out.split())


def _pins(t: Trident) -> dict[str, str]:
    t.router.invalidate()  # the CLI changed them in another Trident: read them again, not from the cache
    return t.router.pins()


def test_sql_errors_point_at_the_key(trident: Trident, settings: TridentSettings) -> None:
    trident.write("sales/q3_revenue", pa.table({"revenue": [1.0]}))
    trident.write("sales/orders", pa.table({"id": [1]}))
    ident = trident.describe("sales/q3_revenue").iceberg_identifier
    assert ident is not None
    code, _, err = _run(["sql", f"select * from {ident}"], settings)
    assert code == 2 and "Iceberg identifier of dataset 'sales/q3_revenue'" in err and 'FROM "sales/q3_revenue"' in err, err
    code, _, err = _run(["sql", 'select * from "sales/q3_revenu"'], settings)
    assert code == 2 and 'did you mean "sales/q3_revenue"?' in err, err
    assert '"sales/orders"' in err  # the datasets that exist
    code, _, err = _run(["sql", "select * from nothing_like_it"], settings)
    assert code == 2 and "did you mean" not in err and '"sales/orders", "sales/q3_revenue"' in err, err


def test_outside_a_terminal_titles_left_json_below_one_timestamp_form(trident: Trident, settings: TridentSettings) -> None:
    trident.write("tty/t", pa.table({"id": [1]}), provenance={"counterparty": "acme", "contract": {"id": "c-1"}})
    trident.write("tty/t", pa.table({"id": [2]}), mode="append", stage=True)
    done = _piped(["describe", "tty/t"], settings)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].rstrip() == "tty/t", lines[:2]  # the title at the left margin, not centred over the table
    assert "schema" in [line.rstrip() for line in lines] and not any(
        "counterparty" in line and "│" in line for line in lines
    )  # not in a cell
    start = lines.index("provenance")
    block = "\n".join(lines[start + 1 :])
    assert all(line.startswith("  ") for line in lines[start + 1 :] if line), block  # indented below the tables
    assert json.loads(block)["contract"] == {"id": "c-1"}
    for args in (["datasets"], ["history", "tty/t"], ["staged"], ["describe", "tty/t"]):
        out = _piped(args, settings).stdout
        assert INSTANT.search(out), (args, out)  # one form: UTC to the second, with a Z
        assert not re.search(r"\d\d:\d\d:\d\d(\.\d+)?[+-]\d\d:?\d\d", out), (args, out)  # never an offset or microseconds


def test_option_names_are_dagsters(settings: TridentSettings) -> None:
    for command in (["ui", "--help"], ["check", "--help"]):
        code, out, _ = _run(command, settings)
        assert code == 0 and "-f, --python-file" in out and "-m, --module-name" in out, out
    code, out, _ = _run(["--help"], settings)
    assert "-v, --verbose" in out and "--version" in out


def test_datasets_says_where_it_looked_when_it_finds_nothing(settings: TridentSettings) -> None:
    code, out, err = _run(["datasets"], settings)
    assert code == 0 and f"no datasets in workspace {settings.workspace!r} (control plane TRIDENT_PG_DSN" in out, out
    code, out, err = _run(["datasets", "--json"], settings)
    assert code == 0 and json.loads(out) == [] and "no datasets" in err  # stdout stays JSON


@pytest.mark.parametrize("args", [["describe", "no/such"], ["history", "no/such"]])
def test_a_missing_dataset_names_the_home_it_looked_in(settings: TridentSettings, args: list[str]) -> None:
    code, _, err = _run(args, settings)
    assert code == 2 and "does not exist" in err and f"TRIDENT_HOME {settings.home}" in err, err
