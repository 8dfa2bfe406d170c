"""``trident check``: run the asset checks (expectations) against the current data, for CI.

The checks run exactly as Dagster runs them (an in-process run of a checks-only job over the
Definitions ``workspace.yaml`` loads), but nothing is materialized. The exit status is 1 when a
blocking check failed or could not run, 0 otherwise; non-blocking failures are shown as warnings.
"""

from __future__ import annotations

import fnmatch
import importlib
import sys
from dataclasses import dataclass

import click
import dagster as dg
from rich.table import Table

from .render import console

DEFAULT_MODULE = "trident_sensors.definitions"
CHECK_JOB = "__trident_check"
QUIET = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}  # the summary table is the output


@dataclass(frozen=True)
class CheckOutcome:
    asset: str
    check: str
    blocking: bool
    status: str  # passed | failed | error
    detail: str


def _load(module: str) -> dg.Definitions:
    mod = importlib.import_module(module)
    defs = getattr(mod, "defs", None)
    if not isinstance(defs, dg.Definitions):
        raise click.ClickException(f"module {module!r} has no `defs` Definitions object")
    return defs


def _specs(defs: dg.Definitions) -> dict[dg.AssetCheckKey, dg.AssetCheckSpec]:
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
        if any(fnmatch.fnmatchcase(asset, p) or asset.startswith(p.rstrip("/") + "/") or fnmatch.fnmatchcase(f"{asset}:{key.name}", p) for p in patterns):
            keep.append(key)
    return keep


def run_checks(defs: dg.Definitions, patterns: tuple[str, ...] = ()) -> list[CheckOutcome]:
    """Run the selected checks in-process and say how each went."""
    specs = _specs(defs)
    keys = _selected(specs, patterns)
    if not keys:
        return []
    job = dg.define_asset_job(CHECK_JOB, selection=dg.AssetSelection.checks(*keys))
    result = dg.Definitions.merge(defs, dg.Definitions(jobs=[job])).resolve_job_def(CHECK_JOB).execute_in_process(
        run_config=QUIET, raise_on_error=False
    )
    evaluated = {e.asset_check_key: e for e in result.get_asset_check_evaluations()}
    errors = {e.step_key: (e.event_specific_data.error.message if e.event_specific_data and e.event_specific_data.error else e.message)
              for e in result.all_events if e.is_step_failure}
    outcomes = []
    for key in sorted(keys, key=lambda k: (k.asset_key.to_user_string(), k.name)):
        spec = specs[key]
        ev = evaluated.get(key)
        if ev is None:
            detail = "; ".join(str(m).strip().splitlines()[0] for m in errors.values() if m) or "the check did not run"
            outcomes.append(CheckOutcome(key.asset_key.to_user_string(), key.name, spec.blocking, "error", detail))
            continue
        meta = {k: getattr(v, "value", v) for k, v in ev.metadata.items()}
        detail = ev.description or ", ".join(f"{k}={v}" for k, v in meta.items() if k in ("violations", "row_count", "error"))
        outcomes.append(CheckOutcome(key.asset_key.to_user_string(), key.name, spec.blocking, "passed" if ev.passed else "failed", detail))
    return outcomes


def print_outcomes(outcomes: list[CheckOutcome]) -> None:
    table = Table(title="trident check", show_lines=False)
    for col in ("asset", "check", "blocking", "result", "detail"):
        table.add_column(col, overflow="fold")
    style = {"passed": "green", "failed": "red", "error": "red"}
    for o in outcomes:
        status = o.status if o.status == "passed" or o.blocking else f"{o.status} (warn)"
        table.add_row(o.asset, o.check, "yes" if o.blocking else "no", f"[{style[o.status] if o.blocking or o.status == 'passed' else 'yellow'}]{status}[/]", o.detail)
    console.print(table)


@click.command("check")
@click.option("--select", "select", multiple=True, metavar="PATTERN",
              help="Asset key glob or prefix (tpch/*, sales), or asset:check; repeatable. Default: every check.")
@click.option("--module", default=DEFAULT_MODULE, show_default=True, help="Python module whose `defs` holds the checks.")
def check(select: tuple[str, ...], module: str) -> None:
    """Run asset checks against the current data; exit 1 when a blocking check fails."""
    defs = _load(module)
    outcomes = run_checks(defs, select)
    if not outcomes:
        raise click.ClickException(f"no asset checks match {list(select) or 'anything'} in {module}")
    print_outcomes(outcomes)
    bad = [o for o in outcomes if o.blocking and o.status != "passed"]
    warned = [o for o in outcomes if not o.blocking and o.status != "passed"]
    passed = sum(o.status == "passed" for o in outcomes)
    console.print(f"{passed} passed, {len(bad)} blocking failure(s), {len(warned)} warning(s), {len(outcomes)} checks")
    if bad:
        sys.exit(1)


COMMANDS = [check]
