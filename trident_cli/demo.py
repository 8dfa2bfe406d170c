"""``trident demo``: the README's main job. Materializes the whole example pipeline (TPC-H, generated
on first run) on the configured trident (default: everything embedded) through Dagster, exactly as
the UI would, then prints what each dataset holds, how it was written, and its checks."""

from __future__ import annotations

import json
import re
import sys
import time
from typing import TYPE_CHECKING, Any

import click
from rich.markup import escape

from trident_resources import Trident
from trident_resources.core.settings import settings_from_env

from .check import QUIET
from .home import where
from .instance import command_instance
from .render import console, new_table

if TYPE_CHECKING:
    from dagster_shared.error import SerializableErrorInfo


DEMO_DAYS = ("1995-03-15", "1995-03-21")  # the week of TPC-H Q3's date, for the partitioned datasets


def _scale(value: str | None) -> str | None:
    """The settings' own rule for TRIDENT_TPCH_SCALE, checked here, so a bad --scale is a usage
    error naming the option rather than pydantic's ValidationError traceback when the pipeline's
    settings are first read."""
    if value is not None and (re.fullmatch(r"[0-9]+(\.[0-9]+)?", value) is None or float(value) == 0):
        raise click.BadParameter(f"{value!r} is not a positive scale factor such as 0.01 or 1", param_hint="--scale")
    return value


@click.command("demo")
@click.option(
    "--scale",
    default=None,
    callback=lambda _ctx, _param, v: _scale(v),
    help="TPC-H scale factor (default TRIDENT_TPCH_SCALE or 0.01).",
)
def demo(scale: str | None) -> None:
    """Materialize the example pipeline (raw TPC-H, transform, Q3 join, split, model, delta) and its checks,
    then one week of its daily-partitioned datasets."""
    import os

    if scale:
        os.environ["TRIDENT_TPCH_SCALE"] = scale
    from dagster._core.execution.plan.objects import StepFailureData
    from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

    from trident_assets.definitions import defs
    from trident_assets.example.schedules import PIPELINE_JOB, daily_job

    with command_instance(settings_from_env()) as (instance, which):
        console.print(f"{escape(where(settings_from_env()))}; runs recorded in {escape(which)}", highlight=False)
        console.print(f"materializing [bold]{PIPELINE_JOB}[/] (TPC-H sf{os.environ.get('TRIDENT_TPCH_SCALE', '0.01')}) ...")
        started = time.monotonic()
        pipeline = defs.resolve_job_def(PIPELINE_JOB)
        runs = [pipeline.execute_in_process(run_config=QUIET, raise_on_error=False, instance=instance)]
        if runs[0].success:  # the partitioned part: one week of ship days, as ONE single-run backfill
            first, last = DEMO_DAYS
            console.print(f"materializing [bold]{daily_job.name}[/] for ship days {first} .. {last} (one run, one snapshot) ...")
            tags = {ASSET_PARTITION_RANGE_START_TAG: first, ASSET_PARTITION_RANGE_END_TAG: last}
            daily = defs.resolve_job_def(daily_job.name)
            runs.append(daily.execute_in_process(run_config=QUIET, tags=tags, raise_on_error=False, instance=instance))
        elapsed = time.monotonic() - started

    table = new_table(f"datasets ({elapsed:.1f}s)")
    for col in ("dataset", "rows", "written", "mode", "plan", "sink", "txn"):
        table.add_column(col, overflow="fold")
    shown: set[tuple[str, str]] = set()
    for event in (e for r in runs for e in r.get_asset_materialization_events()):
        m = event.materialization
        meta: dict[str, Any] = {k: getattr(v, "value", v) for k, v in m.metadata.items()}
        write: dict[str, Any] = meta[
            "trident/write"
        ]  # the write's details, one JSON entry (trident_resources/dagster/metadata.py)
        written = (m.asset_key.to_user_string(), str(meta["trident/txn_id"]))
        if written in shown:  # a range of partitions is one write, reported once per partition by Dagster
            continue
        shown.add(written)
        table.add_row(
            m.asset_key.to_user_string(),
            f"{write.get('dataset_row_count', meta['dagster/row_count']):,}",
            f"{write['rows_written']:,}",
            str(write["mode"]),
            str(write.get("plan", "ingest")),
            str(write["sink"]),
            str(meta["trident/txn_id"])[:8],
        )
    console.print(table)

    evaluations = [e for r in runs for e in r.get_asset_check_evaluations()]
    failed = [e for e in evaluations if not e.passed]
    console.print(f"checks: {len(evaluations) - len(failed)} passed, {len(failed)} failed")
    for e in failed:
        console.print(f"  [red]failed[/] {e.asset_key.to_user_string()}:{e.check_name} {e.description or ''}")

    with Trident.from_env() as t:
        if t.exists("sales/q3_revenue"):
            top = t.sql(
                'SELECT l_orderkey, revenue, o_orderdate FROM "sales/q3_revenue" ORDER BY revenue DESC, o_orderdate LIMIT 5'
            )
            console.print("\nTPC-H Q3 top 5 (sales/q3_revenue):")
            for row in top.to_pylist():
                console.print(f"  order {row['l_orderkey']}: revenue {row['revenue']} ({row['o_orderdate']})")
            prov = t.describe("sales/q3_revenue").provenance
            console.print("\nprovenance of sales/q3_revenue (merged from its sources):")
            console.print(json.dumps({k: prov[k] for k in prov if k != "lineage"}, indent=2, default=str))
    if not all(r.success for r in runs):
        for event in (e for r in runs for e in r.all_events):
            if (
                event.is_step_failure
                and isinstance(event.event_specific_data, StepFailureData)
                and event.event_specific_data.error
            ):
                err: SerializableErrorInfo | None
                err, lines = event.event_specific_data.error, []
                while err is not None:  # Dagster wraps the user's exception: show the whole chain
                    lines.append(err.message.strip())
                    err = err.cause
                console.print(f"[red]{event.step_key} failed:[/] " + "\n  caused by: ".join(lines))
        sys.exit(1)
    console.print("\nsee its runs, materializations and partitions in the UI: trident ui (the same instance)")


COMMANDS = [demo]
