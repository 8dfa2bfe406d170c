"""The documentation says what the code does: the configuration page lists every setting with
its default, the README's first asset runs as printed, and every module, file and dotted name the
docs cite exists in the tree."""

from __future__ import annotations

import importlib
import re
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.support.dagster_helpers import step_errors
from trident_resources import Trident, TridentSettings

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").glob("*.md"))
# read by Dagster from dagster.yaml, and by the console script (trident_cli/launch.py), not by TridentSettings
NOT_SETTINGS = {"TRIDENT_DAGSTER_PG_URL", "TRIDENT_SQL_SERVER"}


def _configuration_rows() -> dict[str, str]:
    """variable -> its default cell, from every table row of docs/configuration.md."""
    rows: dict[str, str] = {}
    for line in (ROOT / "docs" / "configuration.md").read_text().splitlines():
        m = re.match(r"\| `(TRIDENT_[A-Z0-9_]+)` \|([^|]*)\|", line)
        if m:
            assert m.group(1) not in rows, f"{m.group(1)} is listed twice"
            rows[m.group(1)] = m.group(2).strip()
    return rows


def _shown(default: Any) -> str | None:
    """How the page writes a default, for the defaults short enough to write literally."""
    if isinstance(default, bool):
        return f"`{str(default).lower()}`"
    if isinstance(default, float) and default.is_integer():
        default = int(default)
    if (isinstance(default, int) and abs(default) < 1_000_000) or isinstance(default, (str, Path)):
        return f"`{default}`"
    if default == {}:
        return "`{}`"
    return None


def test_the_configuration_page_lists_every_setting_and_its_default() -> None:
    rows = _configuration_rows()
    fields = TridentSettings.model_fields
    expected = {f"TRIDENT_{name.upper()}" for name in fields} | NOT_SETTINGS
    assert set(rows) == expected, (
        f"docs/configuration.md misses {sorted(expected - set(rows))} and lists unknown {sorted(set(rows) - expected)}"
    )
    wrong = []
    for name, info in fields.items():
        if info.default_factory not in (None, dict):  # computed where it runs (TRIDENT_HOME: the project's folder)
            continue
        shown = _shown(info.get_default(call_default_factory=True))
        cell = rows[f"TRIDENT_{name.upper()}"]
        if shown is not None and shown != cell:
            wrong.append(f"TRIDENT_{name.upper()}: the page says {cell!r}, the settings {shown!r}")
    assert not wrong, "docs/configuration.md states defaults the settings do not have:\n" + "\n".join(wrong)


def _first_asset_code() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## Your first asset\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert blocks, "README.md's 'Your first asset' has no python block"
    return blocks[0]


def test_the_readme_first_asset_runs_as_printed(
    tmp_path: Path, trident_home: Path, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The block is saved as first_asset.py and loaded as Dagster would load ``-f
    first_asset.py``, on the environment the README's reader has (only ``TRIDENT_*``, here
    pointed at the test's Postgres and a workspace of its own); then every asset is materialized."""
    workspace = f"t_{uuid.uuid4().hex[:12]}"
    monkeypatch.setenv("TRIDENT_HOME", str(trident_home))
    monkeypatch.setenv("TRIDENT_PG_DSN", pg_dsn)
    monkeypatch.setenv("TRIDENT_WORKSPACE", workspace)
    (tmp_path / "first_asset.py").write_text(_first_asset_code())
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("first_asset")
    try:
        result = module.defs.resolve_implicit_global_asset_job_def().execute_in_process(raise_on_error=False)
        assert result.success, step_errors(result)
        checks = result.get_asset_check_evaluations()
        assert sorted(c.check_name for c in checks) == ["not_null_amount", "unique_order_id"]
        assert all(c.passed for c in checks)
        with Trident(TridentSettings(home=trident_home, pg_dsn=pg_dsn, workspace=workspace)) as t:
            rows = t.read("shop/big_orders", columns=["order_id", "amount"]).sort_by("order_id").to_pylist()
            assert rows == [{"order_id": 2, "amount": 120.0}, {"order_id": 3, "amount": 42.25}]
            assert t.describe("shop/big_orders").provenance["counterparty"] == "web shop"
    finally:
        del importlib.import_module("sys").modules["first_asset"]


PATH = re.compile(
    r"`((?:trident_resources|trident_assets|trident_sensors|trident_cli|tests|bench|deploy|scripts|docs)/[\w./-]*)`"
)
FILE = re.compile(r"`([a-z_0-9]+\.py)`")
DOTTED = re.compile(r"`((?:trident_resources|trident_assets|trident_sensors|trident_cli)(?:\.[A-Za-z_]\w*)+)`")


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


def _in_tree(path: Path) -> bool:
    """A file, or a folder holding something besides bytecode (a moved package leaves its
    ``__pycache__`` behind in a working copy)."""
    return path.is_file() or (path.is_dir() and any(p.name != "__pycache__" for p in path.iterdir()))


def test_every_path_and_module_the_docs_cite_exists() -> None:
    ours = {
        p.name
        for d in ("trident_resources", "trident_assets", "trident_sensors", "trident_cli", "bench", "tests")
        for p in (ROOT / d).rglob("*.py")
    }
    missing: list[str] = []
    for doc in [ROOT / "README.md", *DOCS]:
        text = doc.read_text()
        for path in PATH.findall(text):
            if not _in_tree(ROOT / path.rstrip("/")):
                missing.append(f"{doc.name}: {path}")
        missing += [f"{doc.name}: {f}" for f in FILE.findall(text) if f not in ours and not (ROOT / f).exists()]
        missing += [f"{doc.name}: {d}" for d in DOTTED.findall(text) if not _resolves(d)]
    assert not missing, "the docs cite what the tree does not have:\n" + "\n".join(sorted(set(missing)))


def test_every_path_the_tool_configuration_names_exists() -> None:
    """mypy refuses to start on a missing path in `files` (CI failed exactly so once a folder was
    removed), and ruff's first-party list silently misclassifies a renamed package."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]
    named = {
        "mypy files": config["mypy"]["files"],
        "ruff first-party": config["ruff"]["lint"]["isort"]["known-first-party"],
        "setuptools packages": [p.rstrip("*").rstrip(".") for p in config["setuptools"]["packages"]["find"]["include"]],
    }
    missing = [f"{what}: {p}" for what, paths in named.items() for p in paths if p and not (ROOT / p).exists()]
    assert not missing, "pyproject.toml names paths the tree does not have:\n" + "\n".join(missing)


def test_public_methods_of_the_client_and_the_dagster_adapter_document_raises() -> None:
    """The public door (``Trident``) and the Dagster adapter's IO manager and resource say in each
    public method's docstring what it raises (a ``Raises:`` section), so a caller knows which
    named errors to catch without reading the engine."""
    import inspect

    from trident_resources.dagster import TridentIOManager, TridentResource

    missing = []
    for cls in (Trident, TridentIOManager, TridentResource):
        for name, attr in vars(cls).items():
            if (name.startswith("_") and name != "__init__") or isinstance(attr, property):
                continue
            fn = getattr(attr, "__func__", attr)
            if callable(fn) and fn.__qualname__.startswith(cls.__name__) and "Raises:" not in (inspect.getdoc(fn) or ""):
                missing.append(f"{cls.__name__}.{name}")
    assert not missing, "public methods without a Raises: section: " + ", ".join(missing)


def test_the_code_cites_no_issue_numbers() -> None:
    """Comments and docstrings say the contract and why; which issue asked for a change is history,
    and history lives in the commit messages."""
    cited = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for pkg in ("trident_resources", "trident_assets", "trident_sensors", "trident_cli")
        for path in sorted((ROOT / pkg).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\bissues? \d+\b", line, re.IGNORECASE)
    ]
    assert not cited, "issue numbers in the code (say why instead):\n" + "\n".join(cited)
