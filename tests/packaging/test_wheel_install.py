"""The wheel a non-editable ``pip install .`` builds, installed into a fresh virtual environment:
the project's own files come from the wheel alone, and there the CLI starts, a write and a read
work on the embedded default (its own TRIDENT_HOME) and the Definitions load.

Every other test runs on the editable install, which reads the source tree and so hides a package
or data file the wheel leaves out. Dependencies are not the point here: the new environment sees
the test environment's site-packages through a ``.pth`` line (a plain path, so that folder's own
``.pth`` files, the editable install's hook among them, are not run), and the wheel is installed
with ``--no-deps``; so nothing is downloaded except the build backend pip fetches for the isolated
build, as any ``pip install .`` does."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
ROOTS = ("trident_resources", "trident_assets", "trident_sensors", "trident_cli")

WRITE_AND_READ = textwrap.dedent(
    """
    import json
    import pyarrow as pa
    import trident_resources
    from trident_resources import Trident

    t = Trident()
    try:
        t.write("release/check", pa.table({"a": [3, 1, 2]}))
        got = t.read("release/check")
        print(json.dumps({"file": trident_resources.__file__, "a": sorted(got["a"].to_pylist())}))
    finally:
        t.close()
    """
)

LOAD_DEFINITIONS = textwrap.dedent(
    """
    import importlib, json, sys
    import dagster as dg

    module = importlib.import_module(sys.argv[1])
    defs = module.defs
    assert isinstance(defs, dg.Definitions), type(defs)
    repo = defs.get_repository_def()  # resolves every asset, check, job, schedule and sensor
    print(json.dumps({"file": module.__file__, "jobs": sorted(j.name for j in repo.get_all_jobs())}))
    """
)


def _source_files() -> set[str]:
    """Every file of the four packages in the source tree, as a wheel names it."""
    return {
        p.relative_to(ROOT).as_posix()
        for root in ROOTS
        for p in (ROOT / root).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from a copy of the project (so no build/ or egg-info lands in the tree)."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    for root in ROOTS:
        shutil.copytree(ROOT / root, src / root, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(src)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    [built] = out.glob("trident-*.whl")
    return built


def test_wheel_holds_every_module_and_data_file(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = {n for n in z.namelist() if not n.startswith("trident-")}
    missing = _source_files() - names
    assert not missing, f"the wheel leaves out {sorted(missing)}"
    assert any("/migrations/" in n and n.endswith(".sql") for n in names)  # the control plane's DDL


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    env = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, timeout=300)
    python = env / "bin" / "python"
    new_site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    # the dependencies, from the test environment's site-packages, after the new one's own
    (new_site / "_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index", str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return env


def _run(venv: Path, args: list[str], home: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("TRIDENT_", "PYTHON", "DAGSTER_"))}
    environ.update({"TRIDENT_HOME": str(home), "PATH": f"{venv / 'bin'}{os.pathsep}{environ.get('PATH', '')}"})
    return subprocess.run(args, capture_output=True, text=True, cwd=cwd, env=environ, timeout=600)


def test_installed_wheel_runs_the_cli_a_write_a_read_and_the_definitions(venv: Path, tmp_path: Path) -> None:
    home, cwd = tmp_path / "home", tmp_path / "cwd"  # cwd: the source tree must not be on sys.path
    cwd.mkdir()
    python = str(venv / "bin" / "python")

    where = _run(venv, [python, "-c", "import trident_resources; print(trident_resources.__file__)"], home, cwd)
    assert where.returncode == 0, where.stderr[-3000:]
    assert Path(where.stdout.strip()).is_relative_to(venv), where.stdout

    helped = _run(venv, [str(venv / "bin" / "trident"), "--help"], home, cwd)
    assert helped.returncode == 0, helped.stderr[-3000:]
    assert "Usage" in helped.stdout and "check" in helped.stdout

    try:
        wrote = _run(venv, [python, "-c", WRITE_AND_READ], home, cwd)
        assert wrote.returncode == 0, wrote.stderr[-4000:]
        result = json.loads(wrote.stdout.strip().splitlines()[-1])
        assert Path(result["file"]).is_relative_to(venv)
        assert result["a"] == [1, 2, 3]
        assert (home / "pg").is_dir()  # the embedded default, started under this home

        module = PYPROJECT["tool"]["dagster"]["module_name"]
        loaded = _run(venv, [python, "-c", LOAD_DEFINITIONS, module], home, cwd)
        assert loaded.returncode == 0, loaded.stderr[-4000:]
        defs = json.loads(loaded.stdout.strip().splitlines()[-1])
        assert Path(defs["file"]).is_relative_to(venv)
        assert "tpch_pipeline" in defs["jobs"]
    finally:
        stopped = _run(venv, [str(venv / "bin" / "trident"), "pg", "stop"], home, cwd)
        assert stopped.returncode == 0, stopped.stderr[-3000:]
