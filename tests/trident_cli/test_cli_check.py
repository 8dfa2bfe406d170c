"""``trident check`` on a user's own project (issue 9 item 6): ``-f``, ``-m`` and ``-w`` find the
Definitions without a hand-set PYTHONPATH, and a blocking failure prints the table and its reasons,
with Dagster's ERROR blocks and stack traces only behind ``--verbose``.

The project is a real directory of Python files run by the real ``trident`` console script (so
``sys.path[0]`` is the script's directory, as for a user), against this test's workspace."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

from tests.support.helpers import cli_env
from trident_resources import Trident, TridentSettings

REPO = Path(__file__).resolve().parents[2]
TRIDENT = Path(sys.executable).with_name("trident")

USER_DEFS = '''
import dagster as dg

from trident_assets import expectations as ex
from trident_assets.factories import transform_asset
from trident_resources.dagster import TridentIOManager, TridentResource

from shop_rules import MAX_AMOUNT  # a sibling module: needs the file's directory on sys.path


@dg.asset(key=["shop", "orders"])
def orders() -> None:
    """Written by the test directly; here only so the checks have an asset."""


@dg.asset_check(asset=orders, blocking=True)
def ids_unique(trident: TridentResource) -> dg.AssetCheckResult:
    t = trident.get_client()
    dupes = t.sql('select count(*) - count(distinct id) from "shop/orders"').column(0)[0].as_py()
    return dg.AssetCheckResult(passed=dupes == 0, description=f"{dupes} duplicate id(s)")


@dg.asset_check(asset=orders, blocking=True)
def amounts_known(trident: TridentResource) -> dg.AssetCheckResult:
    t = trident.get_client()
    return dg.AssetCheckResult(passed=True, description=str(t.describe("shop/no_such_dataset").row_count))


@dg.asset_check(asset=orders, blocking=False)
def amounts_small(trident: TridentResource) -> dg.AssetCheckResult:
    t = trident.get_client()
    big = t.sql(f'select count(*) from "shop/orders" where amount > {MAX_AMOUNT}').column(0)[0].as_py()
    return dg.AssetCheckResult(passed=big == 0, description=f"{big} amount(s) over {MAX_AMOUNT}")


trident = TridentResource()  # TRIDENT_* from the environment
defs = dg.Definitions(
    assets=[orders], asset_checks=[ids_unique, amounts_known, amounts_small],
    resources={"trident": trident, "io_manager": TridentIOManager(trident=trident)},
)
'''


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "my_project"
    root.mkdir()
    (root / "shop_defs.py").write_text(textwrap.dedent(USER_DEFS))
    (root / "shop_rules.py").write_text("MAX_AMOUNT = 100\n")
    (root / "workspace.yaml").write_text("load_from:\n  - python_file: shop_defs.py\n")
    (tmp_path / "elsewhere").mkdir()
    return root


def _console_script() -> str:
    """``scripts/test.sh`` installs the project, so a missing ``trident`` script is a broken
    install that must fail the run, not a reason to skip the CLI's tests."""
    assert TRIDENT.exists(), f"the trident console script is missing at {TRIDENT}: install the project (pip install -e .)"
    return str(TRIDENT)


def _trident(args: list[str], settings: TridentSettings, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The console script, as a user runs it: PYTHONPATH reaches Trident itself, nothing else."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIDENT_")}
    env.update(cli_env(settings), PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, _console_script(), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def _flat(text: str) -> str:
    return " ".join(text.replace("│", " ").split())


def test_check_loads_a_users_file_module_and_workspace(trident: Trident, settings: TridentSettings, project: Path) -> None:
    trident.write("shop/orders", pa.table({"id": [1, 2, 3], "amount": [5.0, 50.0, 500.0]}))
    elsewhere = project.parent / "elsewhere"
    runs = {
        "-f": _trident(["check", "-f", str(project / "shop_defs.py"), "--select", "shop/orders:ids_unique"], settings, elsewhere),
        "-m": _trident(["check", "-m", "shop_defs", "--select", "shop/orders:ids_unique"], settings, project),
        "-w": _trident(
            ["check", "-w", str(project / "workspace.yaml"), "--select", "shop/orders:ids_unique"], settings, elsewhere
        ),
    }
    for how, done in runs.items():
        assert done.returncode == 0, (how, done.stdout, done.stderr)
        assert "1 passed, 0 blocking failure(s)" in _flat(done.stdout), (how, done.stdout)
    # the default is ./workspace.yaml
    done = _trident(["check", "--select", "shop/orders:ids_unique"], settings, project)
    assert done.returncode == 0 and "shop_defs.py" in done.stdout, done.stdout + done.stderr


def test_blocking_failure_prints_table_and_reasons_traces_only_when_verbose(
    trident: Trident, settings: TridentSettings, project: Path
) -> None:
    trident.write("shop/orders", pa.table({"id": [1, 1, 3], "amount": [5.0, 50.0, 500.0]}))
    done = _trident(["check", "-f", str(project / "shop_defs.py")], settings, project.parent / "elsewhere")
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "Stack Trace" not in out and "dagster - ERROR" not in out and "Traceback" not in out, out
    flat = _flat(done.stdout)
    assert "0 passed, 2 blocking failure(s), 1 warning(s), 3 checks" in flat, out
    lines = done.stdout.splitlines()
    assert any(ln.startswith("FAILED shop/orders:ids_unique (failed): 1 duplicate id(s)") for ln in lines), out
    # a check that raised: the reason is the user's error, not Dagster's wrapper
    assert any(
        ln.startswith("FAILED shop/orders:amounts_known (error):") and "shop/no_such_dataset" in ln and "does not exist" in ln
        for ln in lines
    ), out
    assert any(ln.startswith("WARNING shop/orders:amounts_small (failed): 1 amount(s) over 100") for ln in lines), out

    verbose = _trident(["check", "-f", str(project / "shop_defs.py"), "--verbose"], settings, project)
    assert verbose.returncode == 1
    assert "Stack Trace" in verbose.stdout + verbose.stderr
    assert "0 passed, 2 blocking failure(s)" in _flat(verbose.stdout)


def test_check_says_clearly_when_it_cannot_load(settings: TridentSettings, project: Path) -> None:
    (project / "broken.py").write_text("import no_such_module_anywhere\n")
    done = _trident(["check", "-f", str(project / "broken.py")], settings, project)
    assert done.returncode == 2, done.stdout + done.stderr
    errors = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(errors) == 1 and "no_such_module_anywhere" in errors[0], done.stderr
    done = _trident(["check", "-f", str(project / "shop_rules.py")], settings, project)
    assert done.returncode == 2 and "exactly one Definitions" in done.stderr, done.stderr


def test_check_names_a_bad_setting_of_the_definitions_resource(settings: TridentSettings, project: Path) -> None:
    """``TRIDENT_REBUILD_CRON=garbage`` reached Dagster's ScheduleDefinition (exit 1, a traceback), and
    any value a TridentResource's settings refused was pydantic's multi-line block, not one line."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIDENT_")}
    env.update(cli_env(settings), PYTHONPATH=str(REPO), TRIDENT_REBUILD_CRON="garbage")
    done = subprocess.run(
        [sys.executable, _console_script(), "check", "-m", "trident_assets.definitions"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    errors = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(errors) == 1 and "TRIDENT_REBUILD_CRON" in errors[0] and "cron" in errors[0], done.stderr


def test_check_says_a_never_built_dataset_is_missing(settings: TridentSettings, project: Path) -> None:
    """A check of a dataset nobody has built yet read "failed (observed -1)": -1 is no number."""
    done = _trident(["check", "-m", "trident_assets.definitions", "--select", "tpch/customer"], settings, project)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "observed -1" not in done.stdout, done.stdout
    assert any(
        ln.startswith("FAILED tpch/customer:") and "(missing):" in ln and "'tpch/customer' does not exist yet" in ln
        for ln in lines
    ), done.stdout
