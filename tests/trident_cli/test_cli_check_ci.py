"""``trident check`` in CI: ``--json`` and ``--junit-xml`` carry the same results as the table, the
failure line carries the user's own check's description and metadata, exit 2 means "nothing could
be checked" (no check matches, asset keys that are not dataset keys, found when the Definitions
load), 1 only "a check failed", and a staged version that waits is a warning, or a failure with
``--fail-on-staged``. The check's run is recorded in the persistent instance ``trident ui`` shows.

The real ``trident`` console script on a user's project directory, against this test's workspace."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pyarrow as pa
import pytest

from tests.support.helpers import cli_env
from trident_resources import Trident, TridentSettings

REPO = Path(__file__).resolve().parents[2]
TRIDENT = Path(sys.executable).with_name("trident")

USER_DEFS = '''
import dagster as dg

from trident_resources.dagster import TridentIOManager, TridentResource


@dg.asset(key=["ci", "orders"])
def orders() -> None:
    """Written by the test directly."""


@dg.asset_check(asset=orders, blocking=True, description="every order has an amount under the limit")
def amounts_under_limit(trident: TridentResource) -> dg.AssetCheckResult:
    t = trident.get_client()
    big = t.sql('select count(*) from "ci/orders" where amount > 100').column(0)[0].as_py()
    return dg.AssetCheckResult(passed=big == 0, description=f"{big} order(s) over 100", metadata={"worst_amount": 500.0})


@dg.asset_check(asset=orders, blocking=False)
def ids_positive(trident: TridentResource) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(passed=True)


trident = TridentResource()
defs = dg.Definitions(
    assets=[orders], asset_checks=[amounts_under_limit, ids_positive],
    resources={"trident": trident, "io_manager": TridentIOManager(trident=trident)},
)
'''

BAD_KEY_DEFS = """
import dagster as dg

from trident_resources.dagster import TridentIOManager, TridentResource


@dg.asset(key=["CI", "Orders"])
def orders() -> int:
    raise AssertionError("never runs: the key is refused when the Definitions load")


@dg.asset_check(asset=orders)
def fine() -> dg.AssetCheckResult:
    return dg.AssetCheckResult(passed=True)


trident = TridentResource()
defs = dg.Definitions(assets=[orders], asset_checks=[fine], resources={"io_manager": TridentIOManager(trident=trident)})
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "ci_project"
    root.mkdir()
    (root / "ci_defs.py").write_text(textwrap.dedent(USER_DEFS))
    (root / "bad_defs.py").write_text(textwrap.dedent(BAD_KEY_DEFS))
    return root


def _trident(args: list[str], settings: TridentSettings, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert TRIDENT.exists(), f"the trident console script is missing at {TRIDENT}: pip install -e ."
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRIDENT_", "DAGSTER_HOME"))}
    env.update(cli_env(settings), PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, str(TRIDENT), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_check_for_ci_json_junit_and_the_users_own_words(trident: Trident, settings: TridentSettings, project: Path) -> None:
    trident.write("ci/orders", pa.table({"id": [1, 2], "amount": [5.0, 500.0]}))
    report = project / "junit.xml"
    done = _trident(["check", "-f", "ci_defs.py", "--junit-xml", str(report)], settings, project)
    assert done.returncode == 1, (done.stdout, done.stderr)  # 1: a blocking check failed
    failed = [line for line in done.stdout.splitlines() if line.startswith("FAILED")]
    assert len(failed) == 1, done.stdout
    # the user's own description (the evaluation's and the check's) and metadata, on the one line
    assert "1 order(s) over 100" in failed[0] and "every order has an amount under the limit" in failed[0], failed
    assert "worst_amount=500.0" in failed[0], failed

    suite = ET.parse(report).getroot()
    assert suite.tag == "testsuite" and suite.get("tests") == "2" and suite.get("failures") == "1", ET.tostring(suite)
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert set(cases) == {"amounts_under_limit", "ids_positive"} and cases["ids_positive"].get("classname") == "ci/orders"
    failure = cases["amounts_under_limit"].find("failure")
    assert failure is not None and "1 order(s) over 100" in (failure.get("message") or "")
    assert cases["ids_positive"].find("failure") is None

    js = _trident(["check", "-f", "ci_defs.py", "--json"], settings, project)
    assert js.returncode == 1, js.stderr
    out = json.loads(js.stdout)  # nothing but the JSON on stdout
    assert out["blocking_failures"] == 1 and out["passed"] == 1 and out["exit_code"] == 1
    by_check = {c["check"]: c for c in out["checks"]}
    assert by_check["amounts_under_limit"]["status"] == "failed" and by_check["ids_positive"]["status"] == "passed"

    # the checks' runs are in the persistent instance `trident ui` serves, not a throwaway one
    import dagster as dg

    from trident_cli.instance import command_instance

    with command_instance(settings) as (instance, _):
        records = instance.get_run_records(dg.RunsFilter(job_name="__trident_check"))
    assert len(records) >= 2


def test_check_exit_2_when_nothing_can_be_checked(trident: Trident, settings: TridentSettings, project: Path) -> None:
    trident.write("ci/orders", pa.table({"id": [1], "amount": [5.0]}))
    none = _trident(["check", "-f", "ci_defs.py", "--select", "no/such"], settings, project)
    assert none.returncode == 2 and "no asset checks match" in none.stderr, (none.stdout, none.stderr)
    bad = _trident(["check", "-f", "bad_defs.py"], settings, project)
    assert bad.returncode == 2, (bad.stdout, bad.stderr)
    assert "CI/Orders" in bad.stderr and "not a valid dataset key" in bad.stderr and "Traceback" not in bad.stderr
    assert "never runs" not in bad.stdout + bad.stderr  # refused at load, before any step ran
    ok = _trident(["check", "-f", "ci_defs.py", "--select", "ci/orders:ids_positive"], settings, project)
    assert ok.returncode == 0, (ok.stdout, ok.stderr)


def test_a_staged_version_that_waits_is_a_warning_or_a_failure(
    trident: Trident, settings: TridentSettings, project: Path
) -> None:
    trident.write("ci/orders", pa.table({"id": [1], "amount": [5.0]}))
    waiting = trident.write("ci/orders", pa.table({"id": [2], "amount": [7.0]}), mode="append", stage=True)
    warned = _trident(["check", "-f", "ci_defs.py"], settings, project)
    assert warned.returncode == 0, (warned.stdout, warned.stderr)
    line = next(x for x in warned.stdout.splitlines() if x.startswith("WARNING ci/orders: staged version"))
    assert str(waiting.txn_id) in line and "trident publish" in line
    strict = _trident(["check", "-f", "ci_defs.py", "--fail-on-staged", "--json"], settings, project)
    assert strict.returncode == 1, (strict.stdout, strict.stderr)
    out = json.loads(strict.stdout)
    assert [w["txn_id"] for w in out["staged_waiting"]] == [str(waiting.txn_id)] and out["blocking_failures"] == 0
