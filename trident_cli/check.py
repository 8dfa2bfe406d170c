"""``trident check``: run the asset checks (expectations) against the current data, for CI.

The checks run exactly as Dagster runs them (an in-process run of a checks-only job over the
user's Definitions, on the instance ``trident ui`` shows), but nothing is materialized. The exit
status is 1 when a blocking check failed or could not run (or, with ``--fail-on-staged``, a
staged version waits), 2 when nothing could be checked (Definitions that do not load, asset keys
that are not dataset keys, a selection that matches no check), 0 otherwise; non-blocking failures
are shown as warnings. ``--json`` and ``--junit-xml`` give the same results to scripts and CI.

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
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.markup import escape

from trident_resources import TridentError
from trident_resources.core.settings import settings_from_env

from .instance import command_instance
from .options import JSON_OPTION, definitions_options
from .render import console, new_table, print_json, when

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


def _detail(spec: dg.AssetCheckSpec, description: str | None, meta: dict[str, Any]) -> str:
    """What a check's failure line says: the check's own description (its spec's), the evaluation's
    description, and every metadata entry it reported (Trident's expectations report violations,
    row counts and samples; a user's own check whatever it chose)."""
    parts = [p for p in (description, spec.description) if p]
    shown = {k: v for k, v in meta.items() if k != "missing" and not k.startswith("dagster/")}
    if shown:
        parts.append(", ".join(f"{k}={_short(v)}" for k, v in shown.items()))
    return "; ".join(dict.fromkeys(parts))


def _short(value: Any, limit: int = 200) -> str:
    text = json.dumps(value, default=str) if isinstance(value, (dict, list)) else str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def run_checks(
    defs: dg.Definitions,
    patterns: tuple[str, ...] = (),
    *,
    verbose: bool = False,
    instance: dg.DagsterInstance | None = None,
) -> list[CheckOutcome]:
    """Run the selected checks in-process (on ``instance``, so the UI shows the run and its
    results; None: an ephemeral one) and say how each went. Dagster's own log (ERROR blocks with
    stack traces) is shown only when ``verbose``; the outcomes carry the reasons."""
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
        .execute_in_process(run_config=QUIET if verbose else SILENT, raise_on_error=False, instance=instance)
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
        detail = _detail(spec, ev.description, meta)
        status = "passed" if ev.passed else "missing" if meta.get("missing") else "error" if "error" in meta else "failed"
        outcomes.append(CheckOutcome(key.asset_key.to_user_string(), key.name, spec.blocking, status, detail))
    return outcomes


def print_outcomes(outcomes: list[CheckOutcome], title: str = "trident check") -> None:
    console.print(escape(title), style="bold", soft_wrap=True)  # a heading line: rich wraps table titles to the table
    table = new_table(show_lines=False)
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


@dataclass(frozen=True)
class WaitingVersion:
    """A staged version of a checked asset that nobody published or discarded: one its blocking
    checks rejected (readers still see the previous version) or one staged for review."""

    asset: str
    txn_id: str
    staged_at: str
    rows: int | None
    run_id: str | None


def waiting_versions(assets: set[str]) -> list[WaitingVersion]:
    """Staged versions of ``assets`` waiting for ``trident publish`` / ``trident discard``."""
    from trident_resources.dagster import RUN_ID

    from .admin import open_trident

    with open_trident() as t:
        return [
            WaitingVersion(k, str(e.txn_id), when(e.staged_at), e.row_count, (e.metadata or {}).get(RUN_ID))
            for k, e in t.staged()
            if k in assets
        ]


def junit_xml(outcomes: list[CheckOutcome], waiting: list[WaitingVersion], fail_on_staged: bool, title: str) -> bytes:
    """The outcomes as a JUnit XML report (one testcase per check, classname the asset): what CI
    systems show as test results. A blocking failure is a <failure>, a check that could not run an
    <error>; a non-blocking failure passes with its warning in <system-out>; a waiting staged
    version is a failing testcase of its own under --fail-on-staged, else a note."""
    import xml.etree.ElementTree as ET

    suite = ET.Element("testsuite", name=title, tests=str(len(outcomes)))
    failures = errors = 0
    for o in outcomes:
        case = ET.SubElement(suite, "testcase", classname=o.asset, name=o.check)
        if o.status == "passed":
            continue
        if not o.blocking:
            ET.SubElement(case, "system-out").text = f"WARNING (not blocking) {o.status}: {o.detail}"
        elif o.status == "failed":
            failures += 1
            ET.SubElement(case, "failure", message=o.detail or "failed", type="blocking check failed").text = o.detail
        else:
            errors += 1
            ET.SubElement(case, "error", message=o.detail or o.status, type=f"check {o.status}").text = o.detail
    for w in waiting:
        case = ET.SubElement(suite, "testcase", classname=w.asset, name=f"staged version {w.txn_id}")
        text = f"staged version {w.txn_id} of {w.asset} (staged at {w.staged_at}) waits for publish or discard"
        if fail_on_staged:
            failures += 1
            ET.SubElement(case, "failure", message=text, type="staged version waits").text = text
        else:
            ET.SubElement(case, "system-out").text = text
    suite.set("tests", str(len(outcomes) + len(waiting)))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    return bytes(ET.tostring(suite, encoding="utf-8", xml_declaration=True))


@click.command("check")
@click.option(
    "--select",
    "select",
    multiple=True,
    metavar="PATTERN",
    help="Asset key glob or prefix (tpch/*, sales), or asset:check; repeatable. Default: every check.",
)
@definitions_options
@click.option(
    "-v", "--verbose", is_flag=True, help="Show what happens: Dagster's log (each failure's ERROR block) and the trident's."
)
@JSON_OPTION
@click.option(
    "--junit-xml",
    "junit",
    type=click.Path(path_type=Path, dir_okay=False, writable=True),
    default=None,
    help="Also write the results as a JUnit XML report to this file (for CI test reports).",
)
@click.option(
    "--fail-on-staged",
    is_flag=True,
    help="Exit 1 when a checked asset has a staged version waiting for publish or discard (default: a warning).",
)
@click.pass_context
def check(
    ctx: click.Context,
    select: tuple[str, ...],
    workspaces: tuple[Path, ...],
    files: tuple[Path, ...],
    modules: tuple[str, ...],
    attribute: str | None,
    verbose: bool,
    as_json: bool,
    junit: Path | None,
    fail_on_staged: bool,
) -> None:
    """Run asset checks against the current data; exit 1 when a blocking check fails (or, with
    --fail-on-staged, a staged version waits), 2 when nothing could be checked.

    Definitions come from -w/-f/-m as with `dagster`; with none, ./workspace.yaml, else the example
    pipeline. Their resources must include `trident` (TridentResource) for trident expectations,
    and `io_manager` (TridentIOManager) so assets load through the trident. The run is recorded in
    the instance `trident ui` shows (DAGSTER_HOME's when set)."""
    import logging

    from trident_resources.dagster import validate_asset_keys

    verbose = verbose or bool((ctx.find_root().params or {}).get("verbose"))
    if verbose:
        logging.getLogger().setLevel(logging.INFO)
    outcomes: list[CheckOutcome] = []
    labels = []
    targets = resolve_targets(workspaces, files, modules, attribute)
    loaded = [(target, validate_asset_keys(_definitions(target))) for target in targets]
    with command_instance(settings_from_env()) as (instance, _which):
        for target, defs in loaded:
            outcomes += run_checks(defs, select, verbose=verbose, instance=instance)
            labels.append(target.label)
    if not outcomes:
        what = f"match {list(select)}" if select else "are defined"
        raise click.UsageError(f"no asset checks {what} in {', '.join(labels)}")
    title = f"trident check: {', '.join(labels)}"
    waiting = waiting_versions({o.asset for o in outcomes})
    bad = [o for o in outcomes if o.blocking and o.status != "passed"]
    warned = [o for o in outcomes if not o.blocking and o.status != "passed"]
    passed = sum(o.status == "passed" for o in outcomes)
    failing = bool(bad) or (fail_on_staged and bool(waiting))
    if junit is not None:
        try:
            junit.write_bytes(junit_xml(outcomes, waiting, fail_on_staged, title))
        except OSError as exc:
            raise click.FileError(str(junit), hint=str(exc)) from exc
    if as_json:
        print_json(
            {
                "definitions": labels,
                "checks": outcomes,
                "staged_waiting": waiting,
                "passed": passed,
                "blocking_failures": len(bad),
                "warnings": len(warned),
                "exit_code": 1 if failing else 0,
            }
        )
    else:
        print_outcomes(outcomes, title)
        for o in bad + warned:  # one greppable line per problem: tables fold long reasons
            console.print(
                f"{'FAILED' if o.blocking else 'WARNING'} {escape(o.asset)}:{escape(o.check)} ({o.status}): {escape(o.detail)}",
                highlight=False,
            )
        for w in waiting:
            console.print(
                f"{'FAILED' if fail_on_staged else 'WARNING'} {escape(w.asset)}: staged version {w.txn_id} "
                f"(staged at {w.staged_at}, {w.rows} rows) waits: its blocking checks rejected it or it awaits review; "
                f"readers still see the published version (`trident publish {escape(w.asset)} {w.txn_id[:8]}` "
                f"or `trident discard ...`)",
                highlight=False,
            )
        console.print(
            f"{passed} passed, {len(bad)} blocking failure(s), {len(warned)} warning(s), {len(outcomes)} checks"
            + (f", {len(waiting)} staged version(s) waiting" if waiting else "")
        )
    if failing:
        sys.exit(1)


COMMANDS = [check]
