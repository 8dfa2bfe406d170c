"""Where ``TRIDENT_HOME`` is when it is not set: found the way tools find their project.

The home holds the embedded Postgres, the local warehouse and the Dagster instance, so every
command of one project must agree on it wherever it runs (a home relative to the current folder
would give ``cd elsewhere && trident datasets`` a second, empty Postgres). The search walks up from
the current folder, as git looks for ``.git`` and Dagster for ``pyproject.toml``, and stops at the
first folder that has

1. a ``pyproject.toml`` with a ``[tool.trident]`` table: its ``home`` (relative to that file), else
   ``.trident`` beside it;
2. a ``.trident`` folder (a home made there earlier);
3. a ``pyproject.toml`` with a ``[tool.dagster]`` table, or a ``workspace.yaml`` (a Dagster
   project): ``.trident`` beside it.

With none of them up to the root, the home is the per-user data folder (``$XDG_DATA_HOME/trident``,
default ``~/.local/share/trident``; on macOS ``~/Library/Application Support/trident``; on Windows
``%LOCALAPPDATA%\\trident``), so that a command run from anywhere finds the same state.
"""

from __future__ import annotations

import os
import sys
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import InvalidSettingsError

HOME_FOLDER = ".trident"
HOME_VARIABLE = "TRIDENT_HOME"


@dataclass(frozen=True)
class FoundHome:
    """A home and why it is the one: the variable, a project file, an existing folder, or the
    per-user default (``origin`` is said to the user when a command creates the home or finds
    nothing in it)."""

    path: Path
    origin: str


def user_data_home(environ: Mapping[str, str] | None = None) -> Path:
    """The per-user data folder's ``trident`` (the platform's convention for application data)."""
    env = os.environ if environ is None else environ
    if sys.platform == "win32":
        base = Path(env.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Application Support"
    else:
        base = Path(env.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return (base / "trident").expanduser().resolve()


def _tool_tables(pyproject: Path) -> dict[str, Any]:
    """The ``[tool]`` tables of a pyproject.toml, or InvalidSettingsError when it does not parse
    (a silently skipped broken file would move the home to another folder)."""
    try:
        doc = tomllib.loads(pyproject.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise InvalidSettingsError(
            f"cannot read {pyproject} while looking for the project's {HOME_VARIABLE} ({exc}); fix the file, "
            f"or set {HOME_VARIABLE}"
        ) from exc
    tool = doc.get("tool")
    return tool if isinstance(tool, dict) else {}


def _in_folder(folder: Path) -> FoundHome | None:
    pyproject = folder / "pyproject.toml"
    tool = _tool_tables(pyproject) if pyproject.is_file() else {}
    trident = tool.get("trident")
    if isinstance(trident, dict):
        home = trident.get("home")
        if home is not None and not isinstance(home, str):
            raise InvalidSettingsError(f"{pyproject}: [tool.trident] home must be a path string, not {home!r}")
        path = (folder / (home or HOME_FOLDER)).expanduser().resolve()
        return FoundHome(path, f"[tool.trident] of {pyproject}")
    if (folder / HOME_FOLDER).is_dir():
        return FoundHome((folder / HOME_FOLDER).resolve(), f"the existing {HOME_FOLDER} folder in {folder}")
    if isinstance(tool.get("dagster"), dict):
        return FoundHome((folder / HOME_FOLDER).resolve(), f"the Dagster project {pyproject}")
    if (folder / "workspace.yaml").is_file():
        return FoundHome((folder / HOME_FOLDER).resolve(), f"the Dagster workspace {folder / 'workspace.yaml'}")
    return None


def find_home(start: Path | None = None, environ: Mapping[str, str] | None = None) -> FoundHome:
    """The home a process uses: ``TRIDENT_HOME`` when set, else the first project folder up from
    ``start`` (default: the current folder), else the per-user data folder (module docstring).

    Raises:
        InvalidSettingsError: a ``pyproject.toml`` on the way does not parse, or its
            ``[tool.trident] home`` is not a path.
    """
    env = os.environ if environ is None else environ
    if env.get(HOME_VARIABLE):
        return FoundHome(Path(env[HOME_VARIABLE]).expanduser().resolve(), HOME_VARIABLE)
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        found = _in_folder(folder)
        if found is not None:
            return found
    return FoundHome(user_data_home(env), "the per-user data folder (no project found from the current folder up)")


def default_home() -> Path:
    """The settings' default for ``home`` (``TRIDENT_HOME`` unset)."""
    return find_home(environ={k: v for k, v in os.environ.items() if k != HOME_VARIABLE}).path
