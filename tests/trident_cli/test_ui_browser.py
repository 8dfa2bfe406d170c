"""The Dagster UI, end to end, in a real browser: ``trident ui`` on a fresh TRIDENT_HOME (embedded
Postgres for the control plane and the Dagster instance), Debian's Chromium driven by selenium,
``trident demo`` run first (outside the UI: its runs, materializations and the daily datasets'
partitions are then shown by the UI, which serves the same persistent instance), "Materialize all"
clicked on the ``tpch_pipeline`` job's asset graph (the global graph also holds
the daily-partitioned part, where the button asks for partitions first), the run watched until it succeeds, and the checks,
row count and provenance read off the asset pages. The rebuild schedule is switched on; then the UI
is stopped and started again on the same home, and the run and the schedule's state are still
there (the instance lives in the embedded Postgres, not in a temporary folder).

Browser: ``/usr/bin/chromium`` + ``/usr/bin/chromedriver`` (``apt-get install chromium
chromium-driver``; ``.ci/run`` installs them). Nothing is downloaded at run time. Without them the
test skips with the reason, except when ``CI_REQUIRE_BROWSER=1`` (set by ``.ci/run`` once it has
installed them): then a missing browser fails the test.

On failure, screenshots, the page text and the ``trident ui`` log are saved under
``test-artifacts/test_ui_browser/`` (the path is in the failure message).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from trident_cli.demo import DEMO_DAYS
from trident_resources import Trident, TridentSettings
from trident_resources.control.embedded_pg import stop_embedded_postgres

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "test_ui_browser"
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1600,1000",
)
SCALE = os.environ.get("UI_TEST_TPCH_SCALE", "0.001")  # the test scale; larger ones to measure the run time
RUN_TIMEOUT_S = 300.0
ASSET = "sales/q3_revenue"
ASSET_CHECKS = ("not_null_l_orderkey_revenue", "unique_l_orderkey", "row_count_between", "revenue_positive")
NODE_STEPS = (
    "tpch__customer",
    "tpch__orders",
    "tpch__lineitem",
    "sales__building_customers",
    "sales__q3_revenue",
    "split_sales__urgent_orders",
    "ml__lineitem_scores",
    "sales__lineitem_revenue",
)
TIMINGS = ROOT / "test-artifacts" / "ui_run_seconds.jsonl"  # the measured "Materialize all" wall times


def _browser_or_skip() -> None:
    """Skip, loudly and with the reason, only when no browser is installed and CI did not demand one."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("the selenium package (pip install -e '.[test]')")
    if not missing:
        return
    reason = f"browser test cannot run: missing {', '.join(missing)} (apt-get install -y chromium chromium-driver)"
    if os.environ.get("CI_REQUIRE_BROWSER") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, timeout: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return bytes(r.read())


def _graphql(base: str, query: str) -> dict[str, Any]:
    req = urllib.request.Request(
        base + "/graphql", data=json.dumps({"query": query}).encode(), headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return dict(json.loads(r.read())["data"])


def _run_status(base: str, run_id: str) -> dict[str, Any]:
    data = _graphql(base, f'{{ runOrError(runId: "{run_id}") {{ ... on Run {{ status startTime endTime creationTime }} }} }}')
    return dict(data["runOrError"])


class UI:
    """A ``trident ui`` process (its own session, so the whole tree can be signalled)."""

    def __init__(self, home: Path, port: int, log: Path) -> None:
        self.base = f"http://127.0.0.1:{port}"
        self.log = log
        env = {**os.environ, "PYTHONPATH": str(ROOT), "TRIDENT_HOME": str(home), "TRIDENT_TPCH_SCALE": SCALE}
        env.pop("DAGSTER_HOME", None)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "trident_cli.main",
                "ui",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "-m",
                "trident_assets.definitions",
            ],
            cwd=ROOT,
            env=env,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def wait_ready(self, timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"trident ui exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                _get(self.base + "/server_info")
                # the code location must be loaded too, not only the webserver up
                data = _graphql(self.base, "{ workspaceOrError { ... on Workspace { locationEntries { loadStatus } } } }")
                entries = data["workspaceOrError"]["locationEntries"]
                if entries and all(e["loadStatus"] == "LOADED" for e in entries):
                    return
            except OSError:
                pass
            time.sleep(1.0)
        raise AssertionError(f"the UI did not come up in {timeout:.0f} s:\n{self.log.read_text()[-3000:]}")

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM to ``trident ui`` (it passes SIGINT on to dagster dev); SIGKILL to the session if stuck."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        return int(self.proc.returncode)


@pytest.fixture
def driver(tmp_path: Path) -> Iterator[Any]:
    _browser_or_skip()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        opts.add_argument(flag)
    d = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    d.set_page_load_timeout(60)
    try:
        yield d
    finally:
        d.quit()


def _wait(what: str, predicate: Callable[[], Any], timeout: float, poll: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def test_materialize_all_from_the_ui(driver: Any, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    home = tmp_path / "home"
    home.mkdir()
    log = tmp_path / "trident-ui.log"
    shots: list[tuple[str, bytes, str]] = []

    def snap(name: str) -> None:
        shots.append((name, driver.get_screenshot_as_png(), driver.find_element(By.TAG_NAME, "body").text))

    def body() -> str:
        return str(driver.find_element(By.TAG_NAME, "body").text)

    def button(text: str, timeout: float = 60) -> Any:
        return WebDriverWait(driver, timeout).until(
            ec.element_to_be_clickable((By.XPATH, f"//button[normalize-space(.)='{text}']"))
        )

    demo = _demo(home, tmp_path / "demo.log")  # the README's demo first, outside the UI
    ui = UI(home, _free_port(), log)
    try:
        ui.wait_ready()
        driver.get(ui.base + "/jobs")
        with contextlib.suppress(Exception):  # the first visit of a fresh instance asks to join the community
            button("Skip", 20).click()
        # the demo's runs are this instance's: its materializations and partitions are in the UI
        demo_runs = _graphql(ui.base, "{ runsOrError { ... on Runs { results { runId jobName status } } } }")
        jobs = {r["jobName"]: r["status"] for r in demo_runs["runsOrError"]["results"]}
        assert jobs == {"tpch_pipeline": "SUCCESS", "tpch_daily": "SUCCESS"}, (jobs, demo[-2000:])
        driver.get(f"{ui.base}/assets/{ASSET}")
        _wait("the demo's materialization on the asset page", lambda: "Latest materialization" in body(), 60)
        _wait("the asset page to be loaded", lambda: "Row count" in body(), 60)
        snap("00-demo-asset")
        assert "Never materialized" not in body(), body()
        driver.get(f"{ui.base}/assets/daily/lineitem?view=partitions")
        days = (date.fromisoformat(DEMO_DAYS[1]) - date.fromisoformat(DEMO_DAYS[0])).days + 1
        _wait(f"the demo's {days} partitions of daily/lineitem", lambda: f"Materialized ({days})" in body(), 60)
        snap("00-demo-partitions")
        driver.get(ui.base + "/jobs")
        # the unpartitioned example's job, as a user finds it in the Jobs list
        WebDriverWait(driver, 60).until(ec.element_to_be_clickable((By.XPATH, "//a[normalize-space(.)='tpch_pipeline']"))).click()
        materialize = button("Materialize all")
        snap("01-asset-graph")
        materialize.click()
        clicked = time.monotonic()
        link = WebDriverWait(driver, 60).until(ec.presence_of_element_located((By.XPATH, "//a[contains(@href, '/runs/')]")))
        run_url = str(link.get_attribute("href"))
        run_id = run_url.rstrip("/").rsplit("/", 1)[-1]
        driver.get(run_url)

        def finished() -> dict[str, Any] | None:
            status = _run_status(ui.base, run_id)
            return status if status["status"] in ("SUCCESS", "FAILURE", "CANCELED") else None

        status = _wait(f"run {run_id} to finish", finished, RUN_TIMEOUT_S, poll=2.0)
        wall = time.monotonic() - clicked
        driver.refresh()
        _wait("the run page to say Success", lambda: "Success" in body(), 60)
        snap("02-run")
        assert status["status"] == "SUCCESS", f"run {run_id}: {status}"
        run_s = float(status["endTime"]) - float(status["creationTime"])
        TIMINGS.parent.mkdir(parents=True, exist_ok=True)
        with TIMINGS.open("a") as f:
            f.write(
                json.dumps(
                    {
                        "at": time.strftime("%Y-%m-%dT%H:%M:%S"),
                        "scale": SCALE,
                        "click_to_success_s": round(wall, 1),
                        "run_s": round(run_s, 1),
                        "commit": _head(),
                    }
                )
                + "\n"
            )
        print(f"'Materialize all' at sf{SCALE}: {wall:.1f} s from the click to success (run {run_s:.1f} s)")
        steps = _graphql(
            ui.base, f'{{ runOrError(runId: "{run_id}") {{ ... on Run {{ stepStats {{ stepKey startTime endTime }} }} }} }}'
        )
        spans = [(s["startTime"], s["endTime"], s["stepKey"]) for s in steps["runOrError"]["stepStats"]]
        # one step per node, its checks inside it (no separate check steps) ...
        assert sorted(k for _, _, k in spans) == sorted(NODE_STEPS), spans
        # ... and independent nodes in parallel (the default executor): some two steps overlap
        assert any(a[0] < b[1] and b[0] < a[1] for i, a in enumerate(spans) for b in spans[i + 1 :]), spans

        # the asset's checks: every one passed, as the asset's Checks tab shows
        driver.get(f"{ui.base}/assets/{ASSET}?view=checks")
        _wait("the checks tab to list the checks", lambda: all(c in body() for c in ASSET_CHECKS), 60)
        _wait("every check to show Succeeded", lambda: body().count("Succeeded") >= len(ASSET_CHECKS), 60)
        snap("03-checks")
        assert "Failed" not in body(), body()

        # the asset's page: its row count (what the control plane recorded) and its provenance
        with Trident(TridentSettings(home=home)) as t:
            rows = t.describe(ASSET).row_count
        assert rows > 0
        driver.get(f"{ui.base}/assets/{ASSET}")
        _wait("the asset page to show the row count", lambda: "Row count" in body() and f"{rows:,}" in body(), 60)
        snap("04-asset")
        driver.get(f"{ui.base}/assets/{ASSET}?view=events")
        _wait(
            "the materialization to show its provenance",
            lambda: "trident/provenance" in body() and "Transaction Processing Performance Council" in body(),
            60,
        )
        snap("05-provenance")
        # switch the rebuild schedule on (as the Automation page's toggle does), to see it survive
        assert _schedule(ui.base, "startSchedule") == "RUNNING"
    except BaseException:
        _save_artifacts(request.node.name, shots, driver, log)
        raise
    finally:
        rc = ui.stop()
    assert rc == 0, f"trident ui exited with {rc}:\n{log.read_text()[-3000:]}"

    # a restart on the same home: the run and the schedule's state are still there
    log2 = tmp_path / "trident-ui-restarted.log"
    ui = UI(home, _free_port(), log2)
    try:
        ui.wait_ready()
        driver.get(ui.base + "/runs")
        _wait("the earlier run to be listed after the restart", lambda: run_id[:8] in body(), 60)
        snap("06-runs-after-restart")
        assert _run_status(ui.base, run_id)["status"] == "SUCCESS"
        assert _schedule(ui.base, "scheduleOrError") == "RUNNING"
    except BaseException:
        _save_artifacts(request.node.name, shots, driver, log2)
        raise
    finally:
        rc = ui.stop()
        stop_embedded_postgres(home / "pg")
    assert rc == 0, f"trident ui exited with {rc}:\n{log2.read_text()[-3000:]}"


def _demo(home: Path, log: Path) -> str:
    """``trident demo`` (what ``scripts/demo.sh`` runs once the project is installed) on ``home``,
    at the test's small scale, with no DAGSTER_HOME: it must find the instance ``trident ui`` serves."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRIDENT_HOME": str(home)}
    env.pop("DAGSTER_HOME", None)
    done = subprocess.run(
        [sys.executable, "-m", "trident_cli.main", "demo", "--scale", SCALE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    log.write_text(done.stdout + done.stderr)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return done.stdout


def _schedule(base: str, field: str, name: str = "tpch_pipeline_rebuild") -> str:
    """Start the schedule (``startSchedule``) or read its state (``scheduleOrError``) over GraphQL."""
    [location] = _graphql(base, "{ workspaceOrError { ... on Workspace { locationEntries { name } } } }")["workspaceOrError"][
        "locationEntries"
    ]
    selector = f'{{repositoryLocationName: "{location["name"]}", repositoryName: "__repository__", scheduleName: "{name}"}}'
    if field == "startSchedule":
        query = f"mutation {{ startSchedule(scheduleSelector: {selector}) {{ __typename ... on ScheduleStateResult {{ scheduleState {{ status }} }} ... on PythonError {{ message }} }} }}"
        result = dict(_graphql(base, query)["startSchedule"])
        return str(result.get("scheduleState", {}).get("status") or result)
    query = (
        f"{{ scheduleOrError(scheduleSelector: {selector}) {{ __typename ... on Schedule {{ scheduleState {{ status }} }} }} }}"
    )
    result = dict(_graphql(base, query)["scheduleOrError"])
    return str(result.get("scheduleState", {}).get("status") or result)


def _head() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False)
    return done.stdout.strip()


def _save_artifacts(test: str, shots: list[tuple[str, bytes, str]], driver: Any, log: Path) -> None:
    """Screenshots (each step's, and the page at the failure), page text and the UI's log."""
    folder = ARTIFACTS / test
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    try:
        shots.append(("99-at-failure", driver.get_screenshot_as_png(), driver.page_source))
    except Exception as exc:  # the browser itself may be what failed
        (folder / "browser-error.txt").write_text(repr(exc))
    for name, png, text in shots:
        (folder / f"{name}.png").write_bytes(png)
        (folder / f"{name}.txt").write_text(text)
    if log.exists():
        shutil.copy(log, folder / "trident-ui.log")
    print(f"browser test artifacts (screenshots, page text, trident ui log): {folder}", file=sys.stderr)


PLATFORM_AUTOMATION = ("trident_reconciler", "trident_ledger_commits", "table_maintenance_job_schedule")


def test_column_lineage_and_the_platforms_automation_in_the_ui(
    driver: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The example project is built as a user's is (its Definitions merged with
    ``platform_definitions``): the UI lists the platform's sensors and schedule; after a run of the
    pipeline, the materialization of ``sales/q3_revenue`` shows where its columns come from
    (``dagster/column_lineage``; the Lineage tab's column graph is a Dagster+ feature)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    home = tmp_path / "home"
    home.mkdir()
    log = tmp_path / "trident-ui.log"
    shots: list[tuple[str, bytes, str]] = []

    def snap(name: str) -> None:
        shots.append((name, driver.get_screenshot_as_png(), driver.find_element(By.TAG_NAME, "body").text))

    def body() -> str:
        return str(driver.find_element(By.TAG_NAME, "body").text)

    ui = UI(home, _free_port(), log)
    try:
        ui.wait_ready()
        driver.get(ui.base + "/automation")
        _wait(
            "the platform's sensors and schedule on the Automation page",
            lambda: all(n in body() for n in PLATFORM_AUTOMATION),
            90,
        )
        snap("01-automation")

        run_id = _launch(ui.base, "tpch_pipeline")

        def finished() -> dict[str, Any] | None:
            state = _run_status(ui.base, run_id)
            return state if state["status"] in ("SUCCESS", "FAILURE", "CANCELED") else None

        status = _wait(f"run {run_id} to finish", finished, RUN_TIMEOUT_S, poll=2.0)
        assert status["status"] == "SUCCESS", f"run {run_id}: {status}"

        # the materialization carries Dagster's column lineage (what Dagster+ draws as the Lineage
        # tab's column graph; open source Dagster keeps the entry without showing it) ...
        lineage = _column_lineage(ui.base, ASSET)
        assert sorted(lineage["revenue"]) == [("tpch/lineitem", "l_discount"), ("tpch/lineitem", "l_extendedprice")], lineage
        assert lineage["o_orderdate"] == [("tpch/orders", "o_orderdate")], lineage
        # ... and the UI shows it, per column, as the materialization's trident/column_lineage
        driver.get(f"{ui.base}/assets/{ASSET}?view=events")
        with contextlib.suppress(Exception):  # the first visit of a fresh instance asks to join the community
            WebDriverWait(driver, 10).until(ec.element_to_be_clickable((By.XPATH, "//button[normalize-space(.)='Skip']"))).click()
        _wait("the materialization's trident/column_lineage entry", lambda: "trident/column_lineage" in body(), 90)
        with contextlib.suppress(Exception):  # a long JSON value is folded behind a link
            show = driver.find_element(
                By.XPATH, "//tr[td[normalize-space(.)='trident/column_lineage']]//*[normalize-space(text())='[Show JSON]']"
            )
            driver.execute_script("arguments[0].click()", show)
        _wait(
            "the column lineage to show revenue's source columns",
            lambda: all(c in body() for c in ("l_extendedprice", "l_discount", "o_orderdate", "tpch/lineitem")),
            60,
        )
        snap("02-column-lineage")
    except BaseException:
        _save_artifacts(request.node.name, shots, driver, log)
        raise
    finally:
        rc = ui.stop()
        stop_embedded_postgres(home / "pg")
    assert rc == 0, f"trident ui exited with {rc}:\n{log.read_text()[-3000:]}"


def _column_lineage(base: str, asset: str) -> dict[str, list[tuple[str, str]]]:
    """The latest materialization's ``dagster/column_lineage`` as the UI's GraphQL serves it:
    column -> [(asset key, column)]."""
    path = json.dumps(asset.split("/"))
    query = (
        f"{{ assetOrError(assetKey: {{path: {path}}}) {{ ... on Asset {{ assetMaterializations(limit: 1) {{ metadataEntries {{ "
        "label ... on TableColumnLineageMetadataEntry { lineage { columnName columnDeps { assetKey { path } columnName } } } "
        "} } } } }"
    )
    [materialization] = _graphql(base, query)["assetOrError"]["assetMaterializations"]
    [entry] = [e for e in materialization["metadataEntries"] if e["label"] == "dagster/column_lineage"]
    return {
        c["columnName"]: [("/".join(d["assetKey"]["path"]), d["columnName"]) for d in c["columnDeps"]] for c in entry["lineage"]
    }


def _launch(base: str, job: str) -> str:
    """Launch ``job`` over GraphQL (what the Launchpad's button does); the run id."""
    [location] = _graphql(base, "{ workspaceOrError { ... on Workspace { locationEntries { name } } } }")["workspaceOrError"][
        "locationEntries"
    ]
    selector = f'{{repositoryLocationName: "{location["name"]}", repositoryName: "__repository__", jobName: "{job}"}}'
    query = (
        f'mutation {{ launchRun(executionParams: {{selector: {selector}, mode: "default"}}) {{ __typename '
        "... on LaunchRunSuccess { run { runId } } ... on PythonError { message } ... on InvalidSubsetError { message } "
        "... on RunConfigValidationInvalid { errors { message } } }"
        " }"
    )
    result = dict(_graphql(base, query)["launchRun"])
    assert result["__typename"] == "LaunchRunSuccess", result
    return str(result["run"]["runId"])
