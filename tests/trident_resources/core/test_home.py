"""``TRIDENT_HOME`` found the way tools find their project: from the current folder up to the
``pyproject.toml`` / ``workspace.yaml`` that configures it, else the per-user data folder; and the
CLI says which home it uses when it creates one. It depended on the current folder: ``cd elsewhere
&& trident datasets`` started a second, empty embedded Postgres."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from trident_resources import TridentSettings
from trident_resources.control.embedded_pg import stop_embedded_postgres
from trident_resources.core.errors import InvalidSettingsError
from trident_resources.core.home import find_home

REPO = Path(__file__).resolve().parents[3]


def test_the_nearest_project_folder_up_wins(tmp_path: Path) -> None:
    env = {"XDG_DATA_HOME": str(tmp_path / "xdg")}
    dagster = tmp_path / "dagster_proj"
    (dagster / "pkg" / "sub").mkdir(parents=True)
    (dagster / "pyproject.toml").write_text('[tool.dagster]\nmodule_name = "pkg"\n')
    found = find_home(dagster / "pkg" / "sub", env)
    assert found.path == dagster / ".trident" and "Dagster project" in found.origin

    ws = tmp_path / "ws_proj"
    (ws / "a").mkdir(parents=True)
    (ws / "workspace.yaml").write_text("load_from: []\n")
    (ws / "pyproject.toml").write_text('[project]\nname = "x"\n')  # a pyproject without either tool table: not it
    assert find_home(ws / "a", env).path == ws / ".trident"

    own = tmp_path / "own"
    (own / "deep").mkdir(parents=True)
    (own / "pyproject.toml").write_text('[tool.trident]\nhome = "state/here"\n')
    (own / "deep" / ".trident").mkdir()  # an explicit [tool.trident] above wins over nothing but a nearer folder
    assert find_home(own / "deep", env).path == own / "deep" / ".trident"
    assert find_home(own, env).path == own / "state" / "here"

    nowhere = tmp_path / "nowhere"
    nowhere.mkdir()
    found = find_home(nowhere, env)
    assert found.path == tmp_path / "xdg" / "trident" and "per-user" in found.origin
    assert find_home(nowhere, {**env, "TRIDENT_HOME": str(tmp_path / "set")}).path == tmp_path / "set"


def test_a_broken_pyproject_on_the_way_is_a_named_error(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.trident\n")
    with pytest.raises(InvalidSettingsError, match=r"pyproject\.toml"):
        find_home(tmp_path, {})
    (tmp_path / "pyproject.toml").write_text("[tool.trident]\nhome = 3\n")
    with pytest.raises(InvalidSettingsError, match="home must be a path"):
        find_home(tmp_path, {})


def test_settings_default_home_is_the_projects(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "proj" / "src").mkdir(parents=True)
    (tmp_path / "proj" / "workspace.yaml").write_text("load_from: []\n")
    monkeypatch.delenv("TRIDENT_HOME", raising=False)
    monkeypatch.chdir(tmp_path / "proj" / "src")
    assert TridentSettings().home == tmp_path / "proj" / ".trident"


def _datasets(cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trident_cli.main", "datasets"], cwd=cwd, env=env, capture_output=True, text=True, timeout=180
    )


def test_the_cli_finds_the_project_home_from_a_subfolder_and_says_which(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    (project / "pipelines" / "daily").mkdir(parents=True)
    (project / "pyproject.toml").write_text('[tool.dagster]\nmodule_name = "pipelines"\n')
    outside = tmp_path / "outside"
    outside.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIDENT_")}
    env.update(PYTHONPATH=str(REPO), XDG_DATA_HOME=str(tmp_path / "xdg"), TRIDENT_EMBEDDED_PG_IDLE_MINUTES="0")
    try:
        first = _datasets(project / "pipelines" / "daily", env)
        assert first.returncode == 0, first.stderr
        created = [line for line in first.stderr.splitlines() if "created a new home" in line]
        assert len(created) == 1 and str(project / ".trident") in created[0], first.stderr
        assert f"the Dagster project {project / 'pyproject.toml'}" in created[0]
        assert f"TRIDENT_HOME {project / '.trident'}" in first.stdout  # nothing found: it says where it looked

        again = _datasets(project, env)  # the project's root: the same home, nothing created
        assert again.returncode == 0 and "created a new home" not in again.stderr, again.stderr
        assert f"TRIDENT_HOME {project / '.trident'}, from the existing .trident folder" in again.stdout

        alone = _datasets(outside, env)  # no project up from here: the per-user folder, said so
        assert alone.returncode == 0, alone.stderr
        assert str(tmp_path / "xdg" / "trident") in alone.stderr and "per-user data folder" in alone.stderr
    finally:
        stop_embedded_postgres(project / ".trident" / "pg")
        stop_embedded_postgres(tmp_path / "xdg" / "trident" / "pg")
