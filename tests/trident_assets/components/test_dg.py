"""``dg`` on Trident projects: ``dg check defs``, ``dg list defs`` and ``dg launch --assets`` on the
example project (this checkout, ``[tool.dg]`` in pyproject.toml) and on a user's project whose node
is declared in a ``defs.yaml`` (a Component, with expectations, partitions and automation), and
``dg scaffold defs`` creating a Trident node. Real ``dg`` processes against this test's workspace."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.support.helpers import settings_env
from trident_resources import Trident, TridentSettings

REPO = Path(__file__).resolve().parents[3]
DG = Path(sys.executable).with_name("dg")

PYPROJECT = """
[project]
name = "shopco"
version = "0.1.0"

[tool.dg]
directory_type = "project"

[tool.dg.project]
root_module = "shopco"
registry_modules = ["trident_assets.components"]
"""

DEFINITIONS = """
from pathlib import Path
from typing import Any

import dagster as dg

from trident_assets import iceberg_kinds, platform_definitions


@dg.definitions
def defs() -> dg.Definitions:
    mine = dg.load_from_defs_folder(path_within_project=Path(__file__).parent)
    return iceberg_kinds(dg.Definitions.merge(mine, platform_definitions()))
"""

ORDERS = """
import datetime as dt

import dagster as dg
import pyarrow as pa


@dg.asset(key=["shop", "orders"])
def orders() -> pa.Table:
    days = [dt.date(2024, 1, 1), dt.date(2024, 1, 1), dt.date(2024, 1, 2)]
    return pa.table({"id": [1, 2, 3], "amount": [50.0, 500.0, 700.0], "day": days})
"""

BIG_ORDERS = """
type: trident_assets.components.TransformNode
attributes:
  key: shop/big_orders
  source: shop/orders
  sql: SELECT id, amount * 2 AS doubled, day FROM source WHERE amount > 100
  expectations:
    - {type: not_null, columns: id}
    - {type: unique, columns: id}
  partitions_def: {type: daily, start_date: "2024-01-01", end_date: "2024-01-10"}
  partition_expr: day
  automation_condition: "{{ dg.AutomationCondition.eager() }}"
  owners: [team:shop]
"""


def _dg(args: list[str], cwd: Path, settings: TridentSettings, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    if not DG.exists():
        pytest.fail(f"{DG} is missing: dagster-dg-cli is a dependency of trident (pip install -e .)")
    env = {
        **os.environ,
        **settings_env(settings),
        "VIRTUAL_ENV": str(Path(sys.executable).parents[1]),  # the venv dg runs the project's code in
        "DAGSTER_HOME": str(tmp_path / "dagster_home"),
        "PATH": f"{DG.parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    (tmp_path / "dagster_home").mkdir(exist_ok=True)
    return subprocess.run([str(DG), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False)


def _ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, (done.args, done.stdout[-3000:], done.stderr[-3000:])
    return done.stdout


def _listed(stdout: str) -> dict[str, dict[str, Any]]:
    """``dg list defs --json``'s assets by key."""
    return {a["asset_key"]: a for a in json.loads(stdout[stdout.index("{") :])["assets"]}


@pytest.fixture
def shopco(tmp_path: Path) -> Path:
    root = tmp_path / "shopco"
    pkg = root / "shopco"
    (pkg / "defs" / "big_orders").mkdir(parents=True)
    (root / "pyproject.toml").write_text(textwrap.dedent(PYPROJECT))
    (pkg / "__init__.py").write_text("")
    (pkg / "defs" / "__init__.py").write_text("")
    (pkg / "definitions.py").write_text(textwrap.dedent(DEFINITIONS))
    (pkg / "defs" / "orders.py").write_text(textwrap.dedent(ORDERS))
    (pkg / "defs" / "big_orders" / "defs.yaml").write_text(textwrap.dedent(BIG_ORDERS))
    return root


def test_dg_on_the_example_project(settings: TridentSettings, trident: Trident, tmp_path: Path) -> None:
    assert "All definitions loaded successfully" in _ok(_dg(["check", "defs"], REPO, settings, tmp_path))
    assets = _listed(_ok(_dg(["list", "defs", "--json"], REPO, settings, tmp_path)))
    assert {"sales/q3_revenue", "sales/lineitem_revenue", "daily/shipments"} <= set(assets)
    # the YAML-declared nodes (trident_assets/example/defs) are there with their Dagster fields
    assert assets["sales/lineitem_revenue"]["owners"] == [{"team": "sales"}]
    assert assets["daily/shipments"]["group_name"] == "tpch_daily"
    _ok(_dg(["launch", "--assets", "tpch/customer"], REPO, settings, tmp_path))
    assert trident.describe("tpch/customer").row_count == 1_500  # TPC-H customer at the default scale 0.01


def test_dg_on_a_components_declared_node(shopco: Path, settings: TridentSettings, trident: Trident, tmp_path: Path) -> None:
    assert "All component YAML validated successfully" in _ok(_dg(["check", "defs"], shopco, settings, tmp_path))
    assets = _listed(_ok(_dg(["list", "defs", "--json"], shopco, settings, tmp_path)))
    node = assets["shop/big_orders"]
    assert node["dependency_keys"] == ["shop/orders"] and node["owners"] == [{"team": "shop"}]
    assert node["automation_condition"] is not None and "iceberg" in node["kinds"]
    assert "iceberg" in assets["shop/orders"]["kinds"]  # a plain IO-manager asset, via iceberg_kinds

    _ok(_dg(["launch", "--assets", "shop/orders"], shopco, settings, tmp_path))
    _ok(_dg(["launch", "--assets", "shop/big_orders", "--partition", "2024-01-01"], shopco, settings, tmp_path))
    rows = trident.read("shop/big_orders", columns=["id", "doubled"]).to_pylist()
    assert rows == [{"id": 2, "doubled": 1000.0}]  # only 2024-01-01, only amount > 100
    lineage = trident.provenance("shop/big_orders")["column_lineage"]
    assert lineage["doubled"] == {"sources": [{"key": "shop/orders", "column": "amount"}]}


def test_dg_scaffold_creates_a_trident_node(shopco: Path, settings: TridentSettings, tmp_path: Path) -> None:
    _ok(_dg(["scaffold", "defs", "trident_assets.components.TransformNode", "shop/order_ids"], shopco, settings, tmp_path))
    written = shopco / "shopco" / "defs" / "shop" / "order_ids" / "defs.yaml"
    text = written.read_text()
    assert "type: trident_assets.components.TransformNode" in text and "key: shop/order_ids" in text
    # point the scaffold at this project's dataset and it loads with the rest
    written.write_text(text.replace("tpch/orders", "shop/orders"))
    _ok(_dg(["check", "defs"], shopco, settings, tmp_path))
    assert "shop/order_ids" in _listed(_ok(_dg(["list", "defs", "--json"], shopco, settings, tmp_path)))
