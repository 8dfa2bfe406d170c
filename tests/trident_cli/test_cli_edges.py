"""CLI rough edges (issue 15 item 4, issue 9 item 7): errors are one line and exit 2, markup is
rendered, keys and ids are never cut outside a terminal, and ``trident --help`` does not import Dagster.

Everything runs the real CLI against the session's embedded Postgres; the width and import tests
run it as a separate process, because what they check is what a real pipe or interpreter sees."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import click
import duckdb
import pyarrow as pa
import pytest
from click.testing import CliRunner

from tests.support.helpers import cli_env
from trident_cli.main import cli
from trident_resources import Trident, TridentError, TridentSettings
from trident_resources.core.errors import SqlError

REPO = Path(__file__).resolve().parents[2]


def _one_error_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    assert lines[0].startswith("error: "), output
    return lines[0]


@pytest.mark.parametrize(
    ("query", "kind", "needle"),
    [
        ('select no_such_column from "x/y"', duckdb.BinderException, "no_such_column"),
        ("select 'abc'::int as n", duckdb.ConversionException, "abc"),
        ("select error('boom') as n", duckdb.InvalidInputException, "boom"),
        ('select a from "x/y" where a = [1, 2][1.5 / 0]', duckdb.Error, "array_extract"),
    ],
)
def test_every_duckdb_error_is_a_named_error_and_one_cli_line(
    trident: Trident, settings: TridentSettings, query: str, kind: type[Exception], needle: str
) -> None:
    trident.write("x/y", pa.table({"a": [1, 2, 3]}))
    with pytest.raises(SqlError) as caught:
        trident.sql(query)
    assert isinstance(caught.value, TridentError)
    assert isinstance(caught.value.__cause__, kind)  # the DuckDB error is chained, not swallowed
    assert "\n" not in str(caught.value) and needle in str(caught.value)

    res = CliRunner().invoke(cli, ["sql", query], env=cli_env(settings))
    assert res.exit_code == 2, res.output
    line = _one_error_line(res.output)
    assert needle in line and "Traceback" not in res.output


def test_canary_result_is_rendered_not_printed_as_markup(trident: Trident, settings: TridentSettings) -> None:
    trident.router.set_pin("c/m", "pg")
    trident.write("c/m", pa.table({"a": [1, 2, 3]}))
    trident.router.clear_pin("c/m")
    res = CliRunner().invoke(cli, ["canary", "c/m"], env=cli_env(settings))
    assert res.exit_code == 0, res.output
    assert "FLIPPED" in res.output
    assert "[green]" not in res.output and "[/" not in res.output, res.output


def test_invalid_where_is_one_clear_line(trident: Trident, settings: TridentSettings, tmp_path: Path) -> None:
    trident.write("w/x", pa.table({"a": [1, 2, 3]}))
    out = tmp_path / "x.csv"
    res = CliRunner().invoke(
        cli, ["export", "w/x", "--format", "csv", "--out", str(out), "--where", "a >"], env=cli_env(settings)
    )
    assert res.exit_code == 2, res.output
    line = _one_error_line(res.output)
    assert "'a >'" in line and "--where" in line
    assert len(line) < 300 and "W:(" not in line and "Group:" not in line, line  # no grammar dump
    assert not out.exists()
    # an unknown column is also one line, naming the column
    res = CliRunner().invoke(
        cli, ["export", "w/x", "--format", "csv", "--out", str(out), "--where", "b > 1"], env=cli_env(settings)
    )
    assert res.exit_code == 2 and "b" in _one_error_line(res.output)
    # and a good filter still exports exactly the matching rows
    res = CliRunner().invoke(
        cli, ["export", "w/x", "--format", "csv", "--out", str(out), "--where", "a > 1"], env=cli_env(settings)
    )
    assert res.exit_code == 0, res.output
    assert out.read_text().splitlines()[1:] and len(out.read_text().splitlines()) == 3


def _child_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIDENT_") and k not in ("COLUMNS", "LINES")}
    env["PYTHONPATH"] = str(REPO)
    env.update(extra)
    return env


def test_datasets_outside_a_terminal_never_cuts_keys_or_ids(trident: Trident, settings: TridentSettings) -> None:
    long_key = "a_rather_long_folder_name/with_a_long_dataset_name_below_it/and_one_more_level"
    r = trident.write(long_key, pa.table({"a": [1]}))
    trident.router.set_pin("p/legacy_rows", "pg")
    p = trident.write("p/legacy_rows", pa.table({"a": [1]}))
    done = subprocess.run(
        [sys.executable, "-m", "trident_cli.main", "datasets"],
        cwd=REPO,
        env=_child_env(cli_env(settings)),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for whole in (long_key, str(r.txn_id), str(p.txn_id), "iceberg_native"):
        assert whole in out, f"{whole!r} was cut:\n{out}"
    assert "…" not in out, out


def test_registering_the_cli_does_not_import_dagster() -> None:
    code = "import sys, trident_cli.main; print(len([m for m in sys.modules if m == 'dagster' or m.startswith('dagster.')]))"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=_child_env({}), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0", f"{done.stdout.strip()} dagster modules imported"
    helped = subprocess.run(
        [sys.executable, "-m", "trident_cli.main", "--help"],
        cwd=REPO,
        env=_child_env({}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert helped.returncode == 0 and "check" in helped.stdout and "datasets" in helped.stdout, helped.stdout + helped.stderr


def test_odd_arguments_and_settings_are_one_line_not_a_traceback(trident: Trident, settings: TridentSettings) -> None:
    """A negative --limit reached Postgres (raw psycopg error), and a bad TRIDENT_* variable
    printed pydantic's traceback."""
    trident.write("h/x", pa.table({"a": [1]}))
    res = CliRunner().invoke(cli, ["history", "h/x", "--limit", "-1"], env=cli_env(settings))
    assert res.exit_code == 2 and "Traceback" not in res.output and "--limit" in res.output, res.output
    res = CliRunner().invoke(cli, ["sql", "select 1", "--limit", "-1"], env=cli_env(settings))
    assert res.exit_code == 2 and "--limit" in res.output, res.output
    res = CliRunner().invoke(cli, ["datasets"], env={**cli_env(settings), "TRIDENT_WORKSPACE": "Bad Space"})
    assert res.exit_code == 2, res.output
    assert "TRIDENT_WORKSPACE" in _one_error_line(res.output)
    # a misspelt key in --staged is named, not ignored (the query would read the published version)
    res = CliRunner().invoke(cli, ["sql", 'select count(*) from "h/x"', "--staged", f"h/y={uuid.uuid4()}"], env=cli_env(settings))
    assert res.exit_code == 2 and "h/y" in _one_error_line(res.output)


def test_export_faults_on_the_output_side_are_one_line(trident: Trident, settings: TridentSettings, tmp_path: Path) -> None:
    """A missing directory, an unwritable place or a nested column in a CSV ended in a raw
    FileNotFoundError/ArrowInvalid traceback."""
    trident.write("e/nested", pa.table({"id": [1], "s": [{"a": 1}]}))
    env = cli_env(settings)
    res = CliRunner().invoke(cli, ["export", "e/nested", "--format", "csv", "--out", str(tmp_path / "no" / "x.csv")], env=env)
    assert res.exit_code == 2 and "is not a directory" in res.output and "Traceback" not in res.output, res.output
    res = CliRunner().invoke(cli, ["export", "e/nested", "--format", "csv", "--out", "/proc/x.csv", "--columns", "id"], env=env)
    assert res.exit_code == 2 and "/proc/x.csv" in res.output and res.exception is not None, (
        res.output
    )  # 1 is only "a check failed"
    assert isinstance(res.exception, SystemExit), res.exception  # click's own error, not an escaping OSError
    out = tmp_path / "x.csv"
    res = CliRunner().invoke(cli, ["export", "e/nested", "--format", "csv", "--out", str(out)], env=env)
    assert res.exit_code == 2 and "nested" in res.output and "['s']" in res.output, res.output
    assert not out.exists() and not list(tmp_path.glob(".x.csv.partial-*"))
    res = CliRunner().invoke(cli, ["export", "e/nested", "--format", "csv", "--out", str(out), "--columns", "id"], env=env)
    assert res.exit_code == 0 and out.read_text().splitlines() == ['"id"', "1"], res.output


def test_pin_clear_of_a_key_without_a_pin_succeeds_with_a_note_naming_the_pins(
    trident: Trident, settings: TridentSettings
) -> None:
    """It printed "pin of KEY cleared" when KEY had no pin (a typo left the real pin in force), then
    exited 2 (a script clearing a pin twice failed): now it exits 0 with a note naming the pins there are."""
    trident.router.set_pin("c/pinned", "pg")
    res = CliRunner().invoke(cli, ["pin", "clear", "c/pinnd"], env=cli_env(settings))
    assert res.exit_code == 0, res.output
    assert res.output.startswith("note: ") and "nothing was cleared" in res.output and "c/pinned" in res.output
    res = CliRunner().invoke(cli, ["flag", "clear", "sync.full"], env=cli_env(settings))
    assert res.exit_code == 0, res.output
    assert res.output.startswith("note: ") and "no flag" in res.output
    res = CliRunner().invoke(cli, ["pin", "clear", "c/pinned"], env=cli_env(settings))
    assert res.exit_code == 0 and "pin of c/pinned cleared" in res.output, res.output
    assert "c/pinned" not in trident.router.pins()
    again = CliRunner().invoke(cli, ["pin", "clear", "c/pinned"], env=cli_env(settings))
    assert again.exit_code == 0 and again.output.startswith("note: "), again.output


def test_maintain_of_a_pg_dataset_rebuilds_its_row_blocks(trident: Trident, settings: TridentSettings) -> None:
    """A pg dataset has no files or snapshots; maintain rebuilds the row blocks (its read cache)
    its keyed writes dropped, and says how many, not a line of zero files."""
    trident.router.set_pin("c/rows", "pg")
    trident.write("c/rows", pa.table({"a": list(range(2000))}))
    trident.write("c/rows", pa.table({"a": [5]}), mode="upsert", keys=["a"])
    res = CliRunner().invoke(cli, ["maintain", "c/rows"], env=cli_env(settings))
    assert res.exit_code == 0, res.output
    assert "1 row blocks rebuilt (pg sink)" in res.output and "small files" not in res.output, res.output


@pytest.mark.parametrize(
    "args",
    [
        ["maintain", "c/ice", "--older-than-days", "nan"],
        ["maintain", "c/ice", "--older-than-days", "inf"],
        ["maintain", "c/ice", "--older-than-days", "1e308"],
        ["describe", "c/ice", "--limit", "-5"],
        ["demo", "--scale", "abc"],
        ["demo", "--scale", "-1"],
    ],
    ids=["age-nan", "age-inf", "age-huge", "limit-negative", "scale-word", "scale-negative"],
)
def test_out_of_range_options_exit_2_without_a_traceback(trident: Trident, settings: TridentSettings, args: list[str]) -> None:
    """The maintenance ages were OverflowError/ValueError tracebacks from timedelta, --scale a
    pydantic ValidationError traceback, and a negative --limit was silently taken."""
    trident.write("c/ice", pa.table({"a": [1]}))
    res = CliRunner().invoke(cli, args, env=cli_env(settings))
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert "Invalid value" in res.output, res.output


def test_sql_max_rows_beyond_a_c_long_prints_every_row(trident: Trident, settings: TridentSettings) -> None:
    """``--limit 99999999999999999999`` was an OverflowError traceback from pyarrow's slice."""
    trident.write("c/many", pa.table({"a": [1, 2]}))
    res = CliRunner().invoke(cli, ["sql", 'select a from "c/many"', "--limit", str(2**70)], env=cli_env(settings))
    assert res.exit_code == 0, res.output
    assert "more rows" not in res.output and "2" in res.output


def test_ui_port_out_of_range_is_refused_by_the_option() -> None:
    """``trident ui --port 99999`` started dagster dev anyway. Checked on the option itself, so that
    a regression fails here instead of launching a webserver from the test."""
    from trident_cli.ui import ui

    port = next(p for p in ui.params if p.name == "port")
    for bad in ("99999", "-1", "0"):
        with pytest.raises(click.BadParameter):
            port.type.convert(bad, port, None)
    assert port.type.convert("3000", port, None) == 3000


def test_check_with_a_workspace_file_that_is_not_a_mapping_is_one_error_line(tmp_path: Path) -> None:
    """``trident check -w /etc/passwd`` was AttributeError: 'str' object has no attribute 'get'."""
    not_yaml_mapping = tmp_path / "workspace.yaml"
    not_yaml_mapping.write_text("just a line of text\n")
    res = CliRunner().invoke(cli, ["check", "-w", str(not_yaml_mapping)])
    assert res.exit_code == 2, res.output
    assert "is not a Dagster workspace.yaml" in res.output and "Traceback" not in res.output


@pytest.mark.parametrize("columns", [",", "a,,b", "a,"])
def test_export_columns_with_an_empty_name_is_a_usage_error(
    trident: Trident, settings: TridentSettings, tmp_path: Path, columns: str
) -> None:
    """``--columns ,`` said "columns= lists [''] more than once", ``a,,b`` "unknown column ''"."""
    trident.write("c/cols", pa.table({"a": [1], "b": [2]}))
    out = tmp_path / "x.csv"
    res = CliRunner().invoke(
        cli, ["export", "c/cols", "--format", "csv", "--out", str(out), "--columns", columns], env=cli_env(settings)
    )
    assert res.exit_code == 2, res.output
    assert "empty column" in res.output, res.output
    assert not out.exists()
