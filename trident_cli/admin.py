"""Dataset administration without Dagster: readers (datasets, describe, history, sql, export), the
writer registry (writers, flag, pin), canary migration and the reconciler.

Every command opens the trident from ``TRIDENT_*`` settings (the embedded default when none is set)
and goes through the client, so what it shows is exactly what a pipeline would read.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import click
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.text import Text

from trident_resources import FlagNotFoundError, InvalidFilterError, PinNotFoundError, Trident
from trident_resources.control.router import SINK_NAMES, WRITERS
from trident_resources.core.settings import settings_from_env

from .home import announce_new_home, where
from .launch import SERVER_VARIABLE
from .options import JSON_OPTION, limit_option
from .render import console, entry_json, json_block, new_table, plain, print_json, print_table, when, write_rows
from .txn import resolve_staged

_warm: list[Trident] = []  # the client a warm sql server keeps open across its requests (``warm``)


@contextmanager
def warm(t: Trident) -> Iterator[None]:
    """Commands run inside this block use ``t`` (open, not closed by them) instead of opening
    their own: the warm sql server's requests (``sql_server.py``)."""
    _warm.append(t)
    try:
        yield
    finally:
        _warm.remove(t)


@contextmanager
def open_trident() -> Iterator[Trident]:
    """The ``Trident`` of this command's environment, closed when the command ends (every
    command module opens it the same way). A command that creates the home says so, with where
    it was found, on stderr (stdout may be a script's JSON)."""
    if _warm:
        yield _warm[-1]
        return
    settings = settings_from_env()
    fresh = where(settings) if settings.pg_dsn is None and not settings.home.exists() else None
    with Trident(settings) as t:
        if fresh is not None:
            announce_new_home(fresh)
        yield t


def _progress(*, disable: bool = False) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("rows"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
        disable=disable,
    )


def _kv(title: str, rows: list[tuple[str, Any]]) -> None:
    """A two-column table. Values are data, so their brackets are escaped; a value that is meant
    to be styled is passed as a rich ``Text`` (escaping markup would print it literally)."""
    out = new_table(title, show_header=False)
    out.add_column("field", style="bold")
    out.add_column("value", overflow="fold")
    for k, v in rows:
        shown = when(v) if isinstance(v, datetime) else v
        out.add_row(k, shown if isinstance(shown, Text) else "" if shown is None else escape(str(shown)))
    console.print(out)


def _where_error(where: str, exc: InvalidFilterError) -> InvalidFilterError | None:
    """One clear line for a ``--where`` that does not parse. The filter parser (pyparsing, under
    pyiceberg) reports a failure as its whole grammar, which tells a CLI user nothing; other filter
    errors (an unknown column...) are already one readable line: None, and the caller re-raises."""
    from pyparsing import ParseBaseException

    cause: BaseException | None = exc
    seen: set[int] = set()
    while cause is not None and not isinstance(cause, ParseBaseException) and id(cause) not in seen:
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    if not isinstance(cause, ParseBaseException):
        return None
    near = where[cause.loc : cause.loc + 30]
    return InvalidFilterError(
        f"invalid --where {where!r}: it does not parse at column {cause.col} (near {near!r}); write comparisons "
        'such as "amount > 100", "region = \'eu\'", "note is null" or "id in (1, 2)", joined by and / or / not'
    )


SQL_TABLE_ROWS = 50  # `trident sql` prints this many rows in a table unless told --limit


# -- readers --------------------------------------------------------------------------------------
@click.command("datasets")
@JSON_OPTION
def datasets(as_json: bool) -> None:
    """List this workspace's datasets: sink, rows, schema version, last commit."""
    with open_trident() as t:
        found = t.datasets()
        if as_json:
            print_json(
                [
                    {
                        "key": d.key,
                        "dataset_id": d.dataset_id,
                        "sink": d.sink,
                        "row_count": d.row_count,
                        "schema_version": d.schema_version,
                        "snapshot_id": d.snapshot_id,
                        "last_txn_id": d.last_txn_id,
                        "committed_at": d.committed_at,
                        "iceberg_identifier": d.iceberg_identifier,
                    }
                    for d in found
                ]
            )
        else:
            out = new_table(f"datasets in workspace {t.workspace!r}")
            # a key or id is never cut: in a narrow terminal it folds onto the next line instead
            for col in ("key", "sink", "rows", "schema v", "committed at", "last txn"):
                out.add_column(col, justify="right" if col in ("rows", "schema v") else "left", overflow="fold")
            for d in found:
                out.add_row(d.key, d.sink, f"{d.row_count:,}", str(d.schema_version), when(d.committed_at), str(d.last_txn_id))
            console.print(out)
        if not found:  # say where it looked: an empty table from the wrong home looks like data loss
            click.echo(f"no datasets in workspace {t.workspace!r} ({where(t.settings)})", err=as_json)


@click.command("describe")
@click.argument("key")
@limit_option(100, "Partitions to list (a daily dataset over years has thousands)")
@JSON_OPTION
def describe(key: str, limit: int, as_json: bool) -> None:
    """Show a dataset: sink, rows, schema, snapshot, provenance, and its partitions (key, rows,
    files, last txn) when it is partitioned."""
    with open_trident() as t:
        d = t.describe(key)
        pin_sink = t.router.pins().get(key)
        if as_json:
            out = d.as_dict()
            out["pin"] = pin_sink
            out["partition_count"] = len(d.partitions)
            if limit > 0:
                out["partitions"] = d.partitions[:limit]
            print_json(out)
            return
        _kv(
            d.key,
            [
                ("workspace", d.workspace),
                ("dataset id", d.dataset_id),
                ("sink", d.sink),
                ("rows", f"{d.row_count:,}"),
                *([("inlined rows (not in Iceberg yet)", f"{d.inlined_rows:,}")] if d.inlined_rows else []),
                ("schema version", d.schema_version),
                ("snapshot", d.snapshot_id),
                ("last txn", d.last_txn_id),
                ("committed at", d.committed_at),
                ("updated at", d.updated_at),
                ("iceberg identifier", d.iceberg_identifier),
                ("metadata location", d.metadata_location),
                ("pin", pin_sink),
                ("provenance", "below" if d.provenance else None),
                ("partitioning", ", ".join(d.partitioning) if d.partitioning else "none"),
            ],
        )
        schema = new_table("schema")
        for col in ("column", "type", "nullable"):
            schema.add_column(col)
        for f in d.schema:
            schema.add_row(escape(f["name"]), escape(f["type"]), str(f["nullable"]))
        console.print(schema)
        if d.partitions:
            _partitions(d.partitions, limit)
        if d.provenance:
            console.print("provenance", style="bold")
            json_block(d.provenance)


def _partitions(parts: list[dict[str, Any]], limit: int) -> None:
    """One row per partition: its key (one column per partition field), rows, data files and the
    transaction that last wrote it. ``limit`` rows at most (0: all), and says how many it left out."""
    fields = list(parts[0]["partition"])
    shown = parts if limit <= 0 else parts[:limit]
    out = new_table(f"partitions ({len(parts):,})")
    for col in fields:
        out.add_column(escape(col), overflow="fold")
    for col in ("rows", "files"):
        out.add_column(col, justify="right")
    out.add_column("last txn", overflow="fold")
    for p in shown:
        out.add_row(
            *(escape(str(p["partition"].get(c))) for c in fields),
            f"{p['row_count']:,}",
            str(p["files"]),
            str(p["last_txn_id"] or ""),
        )
    console.print(out)
    if len(shown) < len(parts):
        console.print(f"{len(parts) - len(shown):,} more partition(s) not shown (--limit 0 lists all)")


@click.command("history")
@click.argument("key")
@limit_option(20, "Newest transactions to show")
@JSON_OPTION
def history(key: str, limit: int, as_json: bool) -> None:
    """The ledger of a dataset, newest first (committed, aborted and open transactions)."""
    with open_trident() as t:
        entries = t.history(key, limit or None)
        if as_json:
            print_json([{"key": key, **entry_json(e)} for e in entries])
            return
        out = new_table(f"history of {key}")
        for col in ("started", "status", "mode", "writer", "sink", "route", "written", "rows", "txn", "error"):
            out.add_column(col, overflow="fold")
        colour = {"committed": "green", "aborted": "red", "open": "yellow", "staged": "cyan", "rejected": "red"}
        for e in entries:
            route = (e.route_reason or "") + (f" (clamped from {e.requested_sink})" if e.clamped else "")
            status = f"[{colour[e.status]}]{e.status}" if e.status in colour else escape(e.status)
            out.add_row(
                when(e.started_at),
                status,
                e.mode,
                e.writer,
                e.sink,
                route,
                "" if e.rows_written is None else f"{e.rows_written:,}",
                "" if e.row_count is None else f"{e.row_count:,}",
                str(e.txn_id),
                escape((e.error or "")[:120]),
            )
        console.print(out)


@click.command("sql")
@click.argument("query")
@limit_option(None, "Rows to print (default: 50 in a table, all as csv or json; a table says how many it left out)")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "csv", "json"]),
    default="table",
    show_default=True,
    help="table for people; csv (a header, then rows) or json (an array of row objects) for scripts, nothing else on stdout.",
)
@click.option(
    "--staged",
    "staged",
    multiple=True,
    metavar="KEY=TXN",
    help="Read KEY's staged version TXN (a unique prefix will do); repeatable.",
)
def sql(query: str, limit: int | None, fmt: str, staged: tuple[str, ...]) -> None:
    """Run read-only SQL (DuckDB) over datasets named by key, e.g. 'select count(*) from "sales/orders"'.

    Writes, DDL, COPY, ATTACH, INSTALL/LOAD and reading files or URLs are refused."""
    pairs = []
    for item in staged:
        key, sep, txn = item.partition("=")
        if not sep or not key or not txn:
            raise click.BadParameter(f"{item!r}: expected KEY=TXN", param_hint="--staged")
        pairs.append((key, txn))
    with open_trident() as t:
        versions = {key: str(resolve_staged(t, key, txn)) for key, txn in pairs}
        result = t.sql(query, staged=versions)
        if fmt == "table":
            print_table(result, limit=SQL_TABLE_ROWS if limit is None else limit)
        else:
            write_rows(result, fmt, limit=limit or 0)
    if not _warm and os.environ.get(SERVER_VARIABLE, "").lower() == "auto":
        from .sql_server import start_detached

        start_detached(wait=False)  # the next `trident sql` of this context is answered warm


@click.command("export")
@click.argument("key")
@click.option("--format", "fmt", type=click.Choice(["csv", "parquet"]), required=True)
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), required=True, help="File to write.")
@click.option("--columns", default=None, help="Comma-separated columns (default: all, identity included).")
@click.option("--where", default=None, help='Row filter, e.g. "amount > 100".')
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
def export(key: str, fmt: str, out: Path, columns: str | None, where: str | None, force: bool) -> None:
    """Stream a dataset to a CSV or Parquet file in bounded memory, with a progress bar.

    The file appears only when complete (written beside it, then renamed)."""
    if out.exists() and not force:
        raise click.UsageError(f"{out} exists; pass --force to overwrite")
    if not out.parent.is_dir():
        raise click.UsageError(f"{out.parent} is not a directory; create it first")
    cols = [c.strip() for c in columns.split(",")] if columns else None
    if cols is not None and not all(cols):  # "a,,b" or ",": one message, not "unknown column ''" / "lists [''] more than once"
        raise click.BadParameter(
            f"{columns!r} names an empty column (two commas in a row, or one at an end)", param_hint="--columns"
        )
    with open_trident() as t:
        total = t.describe(key).row_count
        try:
            reader = t.stream(key, columns=cols, row_filter=where)
        except InvalidFilterError as exc:
            if (clear := _where_error(where or "", exc)) is None:
                raise
            raise clear from exc
        if fmt == "csv" and (nested := [f.name for f in reader.schema if pa.types.is_nested(f.type)]):
            raise click.UsageError(
                f"CSV cannot hold the nested column(s) {nested} of {key}; export --format parquet, "
                "or leave them out with --columns"
            )
        tmp = out.with_name(f".{out.name}.partial-{os.getpid()}")
        done = 0
        try:
            with _progress() as bar:
                task = bar.add_task(f"export {key}", total=total if where is None else None)
                writer: Any = (
                    pq.ParquetWriter(str(tmp), reader.schema, compression="zstd")
                    if fmt == "parquet"
                    else pacsv.CSVWriter(str(tmp), reader.schema)
                )
                with writer:
                    for batch in reader:
                        writer.write_batch(batch)
                        done += batch.num_rows
                        bar.update(task, advance=batch.num_rows)
            os.replace(tmp, out)
        except OSError as exc:  # the output side (disk full, no permission); the dataset side raises named errors
            raise click.FileError(str(out), hint=str(exc)) from exc
        finally:
            tmp.unlink(missing_ok=True)
        console.print(f"wrote {done:,} rows of {key} to {out} ({fmt})")


# -- writers, flags, pins -------------------------------------------------------------------------
@click.command("writers")
def writers() -> None:
    """The writer registry: tier, default and max mode, and where each writer routes now."""
    with open_trident() as t:
        flags = t.router.flags()
        out = new_table("writers")
        for col in ("writer", "tier", "default_mode", "max_mode", "flag", "routes new datasets to"):
            out.add_column(col)
        for w in WRITERS.values():
            route = t.router.resolve(w.name, "__registry_probe__", None)
            out.add_row(w.name, str(w.tier), w.default_mode, w.max_mode, flags.get(w.name, ""), route.describe())
        console.print(out)


@click.group("flag")
def flag() -> None:
    """Per-writer sink flags (seen by every process within 10 s; clamped to the writer's max_mode)."""


@flag.command("set")
@click.argument("writer", type=click.Choice(sorted(WRITERS)))
@click.argument("sink", type=click.Choice(SINK_NAMES))
def flag_set(writer: str, sink: str) -> None:
    """Route WRITER to SINK."""
    with open_trident() as t:
        d = t.router.set_flag(writer, sink)
        msg = f"flag {writer} -> {sink}"
        if d.clamped:
            msg += f" [yellow](clamped: {writer} can go no further than {d.sink}; the flag has no effect)"
        console.print(msg)


@flag.command("clear")
@click.argument("writer", type=click.Choice(sorted(WRITERS)))
def flag_clear(writer: str) -> None:
    """Remove WRITER's flag (back to its default). Clearing a flag that is not set succeeds, with a
    note: the state asked for is the state there is (a script may run it twice)."""
    with open_trident() as t:
        try:
            t.router.clear_flag(writer)
        except FlagNotFoundError as exc:
            console.print(f"[yellow]note:[/] {escape(str(exc))}", highlight=False)
            return
        console.print(f"flag of {writer} cleared")


@click.group("pin")
def pin() -> None:
    """Per-dataset sink pins (win over flags; still clamped to the writer's max_mode)."""


@pin.command("set")
@click.argument("key")
@click.argument("sink", type=click.Choice(SINK_NAMES))
@click.option(
    "--force",
    is_flag=True,
    help="Pin even though the dataset lives in another sink (its writes are then refused until it is moved).",
)
def pin_set(key: str, sink: str, force: bool) -> None:
    """Pin dataset KEY to SINK. Refused when KEY lives in another sink (every write of it would be
    refused until a canary moves it) unless --force."""
    with open_trident() as t:
        lives = t.describe(key, storage=False).sink if t.exists(key) else None
        if lives is not None and lives != sink:
            refusal = t.move_refusal(key, sink)
            then = (
                f"{refusal}: the pin cannot move it"
                if refusal is not None
                else f"writes would be refused until it is moved (`trident canary {key} --to {sink}`, which needs no pin)"
            )
            if not force:
                raise click.UsageError(f"{key} lives in {lives}, not {sink}; {then}. Pass --force to pin it anyway")
            console.print(f"[yellow]{escape(key)} lives in {lives}: {escape(then)}[/]", highlight=False)
        t.router.set_pin(key, sink)
        console.print(f"pin {key} -> {sink}")


@pin.command("clear")
@click.argument("key")
def pin_clear(key: str) -> None:
    """Remove KEY's pin. Clearing a pin that is not there succeeds, with a note naming the pins
    that are (a typo'd key is visible, and a script may run it twice)."""
    with open_trident() as t:
        try:
            t.router.clear_pin(key)
        except PinNotFoundError as exc:
            console.print(f"[yellow]note:[/] {escape(str(exc))}", highlight=False)
            return
        console.print(f"pin of {key} cleared")


@click.command("pins")
@JSON_OPTION
def pins(as_json: bool) -> None:
    """List flags and pins in force."""
    with open_trident() as t:
        flags, pinned = sorted(t.router.flags().items()), sorted(t.router.pins().items())
        if as_json:
            print_json({"flags": dict(flags), "pins": dict(pinned)})
            return
        out = new_table("flags and pins")
        for col in ("kind", "name", "sink"):
            out.add_column(col)
        for w, s in flags:
            out.add_row("flag", w, s)
        for k, s in pinned:
            out.add_row("pin", k, s)
        console.print(out)


# -- canary and reconcile -------------------------------------------------------------------------
@click.command("canary")
@click.argument("key")
@click.option("--to", "to_sink", type=click.Choice(SINK_NAMES), default="iceberg_native", show_default=True)
def canary(key: str, to_sink: str) -> None:
    """Move dataset KEY to another sink: copy with identity, compare checksums, flip only on parity.

    Exit status 0 when flipped, 1 when the copies differed and the move was reverted."""
    with open_trident() as t:
        total = t.describe(key).row_count
        with _progress() as bar:
            tasks = {"copy": bar.add_task(f"copy {key}", total=total), "verify": bar.add_task("verify copy", total=total)}

            def progress(phase: str, done: int, _total: int) -> None:
                bar.update(tasks[phase], completed=done)

            report = t.migrate(key, to_sink, progress=progress)
        _kv(
            f"canary {key}: {report.from_sink} -> {report.to_sink}",
            [
                ("txn", report.txn_id),
                ("ledger rows", f"{report.ledger_rows:,}"),
                ("source rows", f"{report.source_rows:,}"),
                ("copy rows", f"{report.target_rows:,}"),
                ("source checksum", report.source_checksum),
                ("copy checksum", report.target_checksum),
                ("schema equal", report.schema_equal),
                ("copy", f"{report.copy_seconds:.1f}s"),
                ("verify", f"{report.verify_seconds:.1f}s"),
                ("result", Text("FLIPPED", style="green") if report.flipped else Text("REVERTED", style="red")),
                ("detail", report.message),
            ],
        )
        if not report.flipped:
            sys.exit(1)


@click.command("reconcile")
def reconcile() -> None:
    """Repair transactions left open by crashed writers (live writers are left alone)."""
    with open_trident() as t:
        r = t.reconcile()
        _kv(
            "reconcile",
            [
                ("rolled forward", len(r.rolled_forward)),
                ("aborted", len(r.aborted)),
                ("still running", len(r.still_running)),
                ("cleaned up", len(r.cleaned_up)),
                ("cleanup pending", len(r.cleanup_pending)),
                ("files deleted", r.deleted_files),
                ("incomplete uploads aborted", r.aborted_uploads),
            ],
        )
        for label, ids in (("rolled forward", r.rolled_forward), ("aborted", r.aborted)):
            for txn in ids:
                console.print(f"  {label}: {txn}")


MAX_AGE_DAYS = 1_000_000  # ~2,700 years: "keep everything"; more overflowed timedelta/datetime as a traceback


def _finite(value: float, name: str) -> float:
    """click's FloatRange lets NaN through (every comparison with it is false)."""
    if math.isnan(value):
        raise click.BadParameter("must be a number, not nan", param_hint=name)
    return value


@click.command("maintain")
@click.argument("keys", nargs=-1)
@click.option(
    "--older-than-days",
    type=click.FloatRange(min=0, max=MAX_AGE_DAYS),
    callback=lambda _ctx, _param, v: _finite(v, "--older-than-days"),
    default=7.0,
    show_default=True,
    help="Expire snapshots older than this.",
)
@click.option(
    "--retain-last", type=click.IntRange(min=1), default=5, show_default=True, help="Always keep this many newest snapshots."
)
@click.option(
    "--drop-stale",
    is_flag=True,
    help="Drop environments not written for TRIDENT_ENVIRONMENT_MAX_AGE_DAYS (default: only reported).",
)
@JSON_OPTION
def maintain(keys: tuple[str, ...], older_than_days: float, retain_last: int, drop_stale: bool, as_json: bool) -> None:
    """Table maintenance: compact small data files, expire old snapshots and delete the files only
    they used; for a pg dataset, rebuild the row blocks its keyed writes dropped (default: every
    dataset). Time travel to expired versions ends here. Every environment's branch, its fork and
    every staged version keep their files; each environment is reported, and stale ones dropped
    with --drop-stale."""
    with open_trident() as t:
        sinks = {d.key: d.sink for d in t.datasets()}
        targets = list(keys) or sorted(set(sinks) | set(t.pending_cleanup_keys()))
        rows = []
        reports = []
        with _progress(disable=as_json) as bar:
            task = bar.add_task("maintain", total=len(targets))
            for key in targets:
                r = t.maintain(key, older_than=timedelta(days=older_than_days), retain_last=retain_last)
                reports.append({"key": key, "sink": sinks.get(key), **plain(r)})
                if r.skipped:
                    rows.append((key, f"skipped: {r.skipped}"))
                    bar.advance(task)
                    continue
                if sinks.get(key) == "pg":  # rows in Postgres: no files or snapshots, only its read cache
                    rows.append((key, f"{r.rebuilt_blocks} row blocks rebuilt (pg sink)"))
                    bar.advance(task)
                    continue
                rows.append(
                    (
                        key,
                        (f"{r.flushed_rows} inlined rows flushed, " if r.flushed_rows else "")
                        + f"{r.compacted_files} small files compacted into {r.compaction_files_written}, "
                        f"{r.repaired_files} files with lossy bounds rewritten, "
                        + (f"{r.reencoded_files} files re-encoded for other readers, " if r.reencoded_files else "")
                        + f"{r.expired_snapshots} snapshots expired, {r.deleted_files} files deleted, "
                        f"{r.deleted_metadata_files} metadata files deleted, "
                        f"{r.aborted_uploads} incomplete uploads aborted"
                        + (f", {r.cleanup_pending} cleanups still pending" if r.cleanup_pending else "")
                        + (f"; {r.expiry_refused}" if r.expiry_refused else "")
                        + "".join(
                            f"; {n} small files of environment {e} compacted on its branch"
                            for e, n in sorted(r.environment_compacted_files.items())
                        ),
                    )
                )
                bar.advance(task)
        stale = {e.name for e in t.environments.stale()}
        envs = []
        for e in t.environments.list():
            dropped = drop_stale and e.name in stale
            if dropped:
                t.environments.drop(e.name)
            envs.append(
                {
                    "environment": e.name,
                    "datasets": e.dataset_count,
                    "idle_days": round(e.idle_days, 2),
                    "stale": e.name in stale,
                    "dropped": dropped,
                }
            )
            state = (
                "dropped (stale)"
                if dropped
                else "stale: `trident env drop` it, or run with --drop-stale"
                if e.name in stale
                else "kept"
            )
            rows.append(
                (
                    f"environment {e.name}",
                    f"{e.dataset_count} dataset branch(es) kept with their files, idle {e.idle_days:.1f} days; {state}",
                )
            )
        if as_json:
            print_json(reports + envs if envs else reports)
            return
        _kv("maintain", rows or [("datasets", "none")])


@click.command("flush")
@click.argument("key")
def flush(key: str) -> None:
    """Move KEY's inlined rows (small appends kept in the control plane, TRIDENT_INLINE_MAX_ROWS)
    into ONE Iceberg snapshot, so that other Iceberg engines see them. Trident readers see the same
    rows before and after."""
    with open_trident() as t:
        inlined = t.describe(key, storage=False).inlined_rows
        entry = t.flush(key)
        if entry is None:
            _kv("flush", [("key", key), ("inlined rows", "none: nothing to flush")])
            return
        _kv("flushed", [("key", key), ("rows", inlined), ("txn", str(entry.txn_id)), ("snapshot", entry.snapshot_id)])


@click.command("adopt")
@click.argument("key")
def adopt(key: str) -> None:
    """Take over the existing Iceberg table at KEY's identifier (one this control plane did not
    create, e.g. after rebuilding the control plane). It must carry Trident's identity columns and
    no other dataset's id; __row_index continues from its max + 1."""
    with open_trident() as t:
        d = t.adopt(key)
        _kv("adopted", [("key", d.key), ("dataset id", str(d.dataset_id)), ("rows", d.row_count)])


COMMANDS = [datasets, describe, history, sql, export, writers, flag, pin, pins, canary, reconcile, maintain, flush, adopt]
