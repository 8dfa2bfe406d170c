"""``trident check``: run the asset checks (expectations) against the current data, for CI.

The checks run exactly as Dagster runs them (an in-process run of a checks-only job over the
user's Definitions), but nothing is materialized. The exit status is 1 when a blocking check failed
or could not run, 0 otherwise; non-blocking failures are shown as warnings.

Which Definitions: ``-w workspace.yaml``, ``-f file.py`` or ``-m module`` as in Dagster's own CLI
(``-f`` puts the file's directory on ``sys.path``, ``-m`` the current directory, a workspace its own
directory), so a user's project needs no hand-set PYTHONPATH. With none given, ``workspace.yaml``
in the current directory, else the example pipeline (``trident_assets.definitions``).

Dagster is imported only when the command runs: registering the ``trident`` command (and
``trident --help``) must not pay for it.
"""

from __future__ import annotations

import fnmatch
import importlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.markup import escape
from rich.table import Table

from trident_resources import TridentError

from .render import console

if TYPE_CHECKING:
    import dagster as dg

DEFAULT_MODULE = "trident_assets.definitions"
DEFAULT_WORKSPACE = "workspace.yaml"
CHECK_JOB = "__trident_check"
QUIET = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}  # Dagster's errors, with their traces
SILENT = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}  # the summary table is the output


class DefinitionsLoadError(TridentError):
    """The Definitions to check could not be found or imported: exit 2 with one line, so CI tells
    "the checks could not even load" (2) from "a blocking check failed" (1)."""


@dataclass(frozen=True)
class CheckOutcome:
    asset: str
    check: str
    blocking: bool
    status: str  # passed | failed | error | missing (the dataset was never built)
    detail: str


@dataclass(frozen=True)
class Target:
    """One code location to check: where it comes from, and what to put on ``sys.path`` first."""

    label: str
    module: str | None = None
    file: Path | None = None
    attribute: str | None = None
    path: Path | None = None


# -- loading the user's Definitions ----------------------------------------------------------------
def _on_path(directory: Path | None) -> None:
    if directory is not None and str(directory) not in sys.path:
        sys.path.insert(0, str(directory))


def _import(target: Target) -> Any:
    _on_path(target.path)
    try:
        if target.module is not None:
            return importlib.import_module(target.module)
        assert target.file is not None
        if not target.file.is_file():
            raise DefinitionsLoadError(f"{target.file} does not exist")
        name = target.file.stem
        spec = importlib.util.spec_from_file_location(name, target.file)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module
    except (ImportError, SyntaxError) as exc:
        raise DefinitionsLoadError(
            f"cannot import {target.label}: {exc} (sys.path has {target.path} first; "
            "use -f for a file, or run from the directory that holds the module)"
        ) from exc


def _definitions(target: Target) -> dg.Definitions:
    """The module's Definitions, found as Dagster finds them: the named attribute, else the one
    ``Definitions`` object at module scope (or the one ``@dg.definitions`` function)."""
    import dagster as dg
    from dagster.components.definitions import LazyDefinitions

    module = _import(target)
    if target.attribute is not None:
        if not hasattr(module, target.attribute):
            raise DefinitionsLoadError(f"{target.label} has no attribute {target.attribute!r}")
        candidates = {target.attribute: getattr(module, target.attribute)}
    else:
        candidates = {k: v for k, v in vars(module).items() if isinstance(v, (dg.Definitions, LazyDefinitions))}
        eager = {k: v for k, v in candidates.items() if isinstance(v, dg.Definitions)}
        candidates = eager or candidates
    if len(candidates) != 1:
        found = ", ".join(sorted(candidates)) or "none"
        raise DefinitionsLoadError(
            f"{target.label} must hold exactly one Definitions object at module scope (found: {found}); "
            "name it with -a/--attribute"
        )
    ((name, value),) = candidates.items()
    if isinstance(value, LazyDefinitions) and not value.has_context_arg:
        value = value()
    if not isinstance(value, dg.Definitions):
        raise DefinitionsLoadError(f"{target.label}:{name} is a {type(value).__name__}, not a dagster Definitions")
    return value


def _workspace_targets(workspace: Path) -> list[Target]:
    """The code locations of a Dagster ``workspace.yaml`` (python_module, python_package and
    python_file entries, short or long form; paths are relative to the file, as in Dagster)."""
    import yaml

    if not workspace.is_file():
        raise DefinitionsLoadError(f"{workspace} does not exist")
    base = workspace.resolve().parent
    try:
        doc = yaml.safe_load(workspace.read_text()) or {}
    except yaml.YAMLError as exc:
        raise DefinitionsLoadError(f"{workspace} is not valid YAML: {exc}") from exc
    if not isinstance(doc, dict):  # e.g. -w pointed at some other file (a string, a list)
        raise DefinitionsLoadError(f"{workspace} is not a Dagster workspace.yaml (a mapping with a load_from list)")
    targets: list[Target] = []
    for entry in doc.get("load_from") or []:
        if not isinstance(entry, dict) or len(entry) != 1:
            raise DefinitionsLoadError(f"{workspace}: each load_from entry names one python_module or python_file")
        ((kind, spec),) = entry.items()
        conf: dict[str, Any] = spec if isinstance(spec, dict) else {}
        workdir = base / conf["working_directory"] if conf.get("working_directory") else base
        if kind in ("python_module", "python_package"):
            module = spec if isinstance(spec, str) else conf.get("module_name") or conf.get("package_name")
            targets.append(Target(f"{module} ({workspace})", module=module, attribute=conf.get("attribute"), path=workdir))
        elif kind == "python_file":
            rel = spec if isinstance(spec, str) else conf.get("relative_path")
            file = (base / str(rel)).resolve()
            targets.append(Target(f"{file} ({workspace})", file=file, attribute=conf.get("attribute"), path=workdir))
        else:
            raise DefinitionsLoadError(
                f"{workspace}: trident check cannot load {kind!r} entries (use python_module or python_file)"
            )
    if not targets:
        raise DefinitionsLoadError(f"{workspace} has no load_from entries")
    return targets


def resolve_targets(
    workspaces: tuple[Path, ...], files: tuple[Path, ...], modules: tuple[str, ...], attribute: str | None
) -> list[Target]:
    """What ``-w/-f/-m`` name, or the default (``./workspace.yaml``, else the example pipeline)."""
    targets = [t for w in workspaces for t in _workspace_targets(w)]
    targets += [Target(str(f), file=f.resolve(), attribute=attribute, path=f.resolve().parent) for f in files]
    targets += [Target(m, module=m, attribute=attribute, path=Path.cwd()) for m in modules]
    if targets:
        return targets
    if Path(DEFAULT_WORKSPACE).is_file():
        return _workspace_targets(Path(DEFAULT_WORKSPACE))
    return [Target(DEFAULT_MODULE, module=DEFAULT_MODULE, attribute=attribute, path=Path.cwd())]


# -- running the checks ---------------------------------------------------------------------------
def _specs(defs: dg.Definitions) -> dict[dg.AssetCheckKey, dg.AssetCheckSpec]:
    import dagster as dg

    specs: dict[dg.AssetCheckKey, dg.AssetCheckSpec] = {}
    for checks_def in list(defs.asset_checks or []) + [a for a in defs.assets or [] if isinstance(a, dg.AssetsDefinition)]:
        for spec in checks_def.check_specs:
            specs[spec.key] = spec
    return specs


def _selected(specs: dict[dg.AssetCheckKey, dg.AssetCheckSpec], patterns: tuple[str, ...]) -> list[dg.AssetCheckKey]:
    if not patterns:
        return list(specs)
    keep = []
    for key in specs:
        asset = key.asset_key.to_user_string()
        if any(
            fnmatch.fnmatchcase(asset, p)
            or asset.startswith(p.rstrip("/") + "/")
            or fnmatch.fnmatchcase(f"{asset}:{key.name}", p)
            for p in patterns
        ):
            keep.append(key)
    return keep


def _reason(error: Any) -> str:
    """The innermost cause of a Dagster error (the user's exception, not Dagster's wrapper), one line."""
    while getattr(error, "cause", None) is not None:
        error = error.cause
    lines = str(getattr(error, "message", error)).strip().splitlines()
    return lines[0] if lines else ""


def run_checks(defs: dg.Definitions, patterns: tuple[str, ...] = (), *, verbose: bool = False) -> list[CheckOutcome]:
    """Run the selected checks in-process and say how each went. Dagster's own log (ERROR blocks
    with stack traces) is shown only when ``verbose``; the outcomes carry the reasons."""
    import dagster as dg
    from dagster._core.execution.plan.objects import StepFailureData

    specs = _specs(defs)
    keys = _selected(specs, patterns)
    if not keys:
        return []
    job = dg.define_asset_job(CHECK_JOB, selection=dg.AssetSelection.checks(*keys))
    result = (
        dg.Definitions.merge(defs, dg.Definitions(jobs=[job]))
        .resolve_job_def(CHECK_JOB)
        .execute_in_process(run_config=QUIET if verbose else SILENT, raise_on_error=False)
    )
    evaluated = {e.asset_check_key: e for e in result.get_asset_check_evaluations()}
    errors = {
        e.step_key: _reason(e.event_specific_data.error)
        if isinstance(e.event_specific_data, StepFailureData) and e.event_specific_data.error
        else e.message
        for e in result.all_events
        if e.is_step_failure
    }
    outcomes = []
    for key in sorted(keys, key=lambda k: (k.asset_key.to_user_string(), k.name)):
        spec = specs[key]
        ev = evaluated.get(key)
        if ev is None:
            mine = [m for step, m in errors.items() if m and key.name in (step or "")]  # the step that runs this check
            detail = "; ".join(dict.fromkeys(mine or [m for m in errors.values() if m])) or "the check did not run"
            outcomes.append(CheckOutcome(key.asset_key.to_user_string(), key.name, spec.blocking, "error", detail))
            continue
        meta = {k: getattr(v, "value", v) for k, v in ev.metadata.items()}
        detail = ev.description or ", ".join(f"{k}={v}" for k, v in meta.items() if k in ("violations", "row_count", "error"))
        status = "passed" if ev.passed else "missing" if meta.get("missing") else "error" if "error" in meta else "failed"
        outcomes.append(CheckOutcome(key.asset_key.to_user_string(), key.name, spec.blocking, status, detail))
    return outcomes


def print_outcomes(outcomes: list[CheckOutcome], title: str = "trident check") -> None:
    console.print(escape(title), style="bold", soft_wrap=True)  # a heading line: rich wraps table titles to the table
    table = Table(show_lines=False)
    for col in ("asset", "check", "blocking", "result", "detail"):
        table.add_column(col, overflow="fold")
    style = {"passed": "green", "failed": "red", "error": "red", "missing": "red"}
    for o in outcomes:
        status = o.status if o.status == "passed" or o.blocking else f"{o.status} (warn)"
        table.add_row(
            escape(o.asset),
            escape(o.check),
            "yes" if o.blocking else "no",
            f"[{style[o.status] if o.blocking or o.status == 'passed' else 'yellow'}]{status}[/]",
            escape(o.detail),
        )
    console.print(table)


@click.command("check")
@click.option(
    "--select",
    "select",
    multiple=True,
    metavar="PATTERN",
    help="Asset key glob or prefix (tpch/*, sales), or asset:check; repeatable. Default: every check.",
)
@click.option(
    "-w",
    "--workspace",
    "workspaces",
    multiple=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help="A Dagster workspace.yaml (its python_module / python_file entries); repeatable.",
)
@click.option(
    "-f",
    "--python-file",
    "files",
    multiple=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help="A Python file holding Definitions; its directory goes on sys.path. Repeatable.",
)
@click.option(
    "-m",
    "--module-name",
    "--module",
    "modules",
    multiple=True,
    metavar="MODULE",
    help="A module holding Definitions, imported with the current directory on sys.path. Repeatable.",
)
@click.option("-a", "--attribute", default=None, help="The Definitions' name in the file or module (default: the only one).")
@click.option("-v", "--verbose", is_flag=True, help="Also show Dagster's log: each failure's ERROR block and stack trace.")
@click.pass_context
def check(
    ctx: click.Context,
    select: tuple[str, ...],
    workspaces: tuple[Path, ...],
    files: tuple[Path, ...],
    modules: tuple[str, ...],
    attribute: str | None,
    verbose: bool,
) -> None:
    """Run asset checks against the current data; exit 1 when a blocking check fails.

    Definitions come from -w/-f/-m as with `dagster`; with none, ./workspace.yaml, else the example
    pipeline. Their resources must include `trident` (TridentResource) for trident expectations,
    and `io_manager` (TridentIOManager) so assets load through the trident."""
    verbose = verbose or bool((ctx.find_root().params or {}).get("verbose"))
    outcomes: list[CheckOutcome] = []
    labels = []
    for target in resolve_targets(workspaces, files, modules, attribute):
        outcomes += run_checks(_definitions(target), select, verbose=verbose)
        labels.append(target.label)
    if not outcomes:
        raise click.ClickException(f"no asset checks match {list(select) or 'anything'} in {', '.join(labels)}")
    print_outcomes(outcomes, f"trident check: {', '.join(labels)}")
    bad = [o for o in outcomes if o.blocking and o.status != "passed"]
    warned = [o for o in outcomes if not o.blocking and o.status != "passed"]
    passed = sum(o.status == "passed" for o in outcomes)
    for o in bad + warned:  # one greppable line per problem: tables fold long reasons
        console.print(
            f"{'FAILED' if o.blocking else 'WARNING'} {escape(o.asset)}:{escape(o.check)} ({o.status}): {escape(o.detail)}",
            highlight=False,
        )
    console.print(f"{passed} passed, {len(bad)} blocking failure(s), {len(warned)} warning(s), {len(outcomes)} checks")
    if bad:
        sys.exit(1)


COMMANDS = [check]
