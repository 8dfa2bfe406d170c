"""Helpers for the Dagster-layer tests: resources on a test's own workspace, and a materialize
that returns the result without raising so tests can assert on failures."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import dagster as dg
from dagster._core.execution.plan.objects import StepFailureData
from dagster_shared.error import SerializableErrorInfo

from trident_assets import Node
from trident_resources import TridentSettings
from trident_resources.dagster import TridentIOManager, TridentResource


def resources_for(settings: TridentSettings) -> dict[str, Any]:
    r = TridentResource.from_settings(settings)
    return {"trident": r, "io_manager": TridentIOManager(trident=r)}


def materialize_nodes(settings: TridentSettings, nodes: Sequence[Node], *, selection: Any = None) -> dg.ExecuteInProcessResult:
    assets: list[Any] = []
    for n in nodes:
        assets.append(n.assets_def)
        assets.extend(n.checks)
    return dg.materialize(assets, resources=resources_for(settings), selection=selection, raise_on_error=False)


def succeeded(result: dg.ExecuteInProcessResult) -> dg.ExecuteInProcessResult:
    """``result``, after asserting that the run succeeded (with the step errors if not)."""
    assert result.success, step_errors(result)
    return result


def materialized(result: dg.ExecuteInProcessResult, instance: dg.DagsterInstance | None = None) -> dict[str, dict[str, Any]]:
    """asset key -> its materialization metadata (plain values). ``instance``: read them from the
    run's event log there, where a run that publishes once (``trident/publish: run``) records
    them at its end (they are not among the steps' own events)."""
    if instance is not None:
        found = [
            r.dagster_event.event_specific_data.materialization  # type: ignore[union-attr]
            for r in instance.all_logs(result.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION)
        ]
    else:
        found = [event.materialization for event in result.get_asset_materialization_events()]
    return {m.asset_key.to_user_string(): {k: getattr(v, "value", v) for k, v in m.metadata.items()} for m in found}


def step_errors(result: dg.ExecuteInProcessResult) -> list[str]:
    """Each failed step's error, with the user exception Dagster wraps it in."""
    out: list[str] = []
    for e in result.all_events:
        if e.is_step_failure and isinstance(e.event_specific_data, StepFailureData) and e.event_specific_data.error:
            err: SerializableErrorInfo | None
            err, text = e.event_specific_data.error, []
            while err is not None:
                text.append(err.message)
                err = err.cause
            out.append("\n".join(text))
    return out


def cli_env(settings: TridentSettings, repo: Path) -> dict[str, str]:
    """The environment of a ``dagster`` CLI child: this test's Trident home, control plane and
    workspace, the repo on ``PYTHONPATH``, and nothing else of ours (no TRIDENT_WRITER_WAIT_SECONDS:
    the default wait)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRIDENT_", "DAGSTER_"))}
    return env | {
        "TRIDENT_HOME": str(settings.home),
        "TRIDENT_PG_DSN": settings.pg_dsn.get_secret_value() if settings.pg_dsn else "",
        "TRIDENT_WORKSPACE": settings.workspace,
        "PYTHONPATH": str(repo),
    }


def ledger_sensor_tick(
    instance: dg.DagsterInstance, settings: TridentSettings, cursor: str | None = None, defs: dg.Definitions | None = None
) -> dg.SensorResult:
    """One tick of the ledger sensor as the daemon runs it: evaluate it, then store its asset events."""
    from trident_sensors.commits import trident_commits

    with dg.build_sensor_context(
        instance=instance, cursor=cursor, definitions=defs, resources={"trident": TridentResource.from_settings(settings)}
    ) as context:
        result = trident_commits(context)
    assert isinstance(result, dg.SensorResult)
    for event in result.asset_events:
        instance.report_runless_asset_event(event)
    return result
