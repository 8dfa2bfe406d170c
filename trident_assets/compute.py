"""DuckDB compute over the sources as ``Trident.scan_plan`` exposes them.

A node opens one ``Session``: its sources are registered as DuckDB views named as the node's SQL
names them (on a local warehouse over DuckDB's own ``read_parquet`` of exactly each source
version's data files, which are all the sandbox lets the node read; elsewhere over Arrow), with the engine's identity columns hidden (a producer may not send them back) and,
for a delta run, only the rows committed after the output's watermark. The session checks that no
source changed while it was being opened, so the rows read and the watermarks recorded describe
the same source versions. Results leave as a ``RecordBatchReader`` that the client drains batch by
batch: the whole output is never held in Python memory.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

import duckdb
import pyarrow as pa

from trident_resources import (
    CREATED_AT,
    IDENTITY_COLUMNS,
    ROW_INDEX,
    PartitionFilter,
    SqlNotAllowedError,
    Trident,
    TridentError,
    check_reads_only,
    close_soon,
    native_paths,
    parser,
    register_dataset,
    sandbox,
)

from .strategies import Plan, Strategy, open_write, plan_output, wait_for_quiet_sources

SOURCE_ROW_INDEX = "__source_row_index__"
DEFAULT_BATCH_ROWS = 65_536


@dataclass
class Session:
    con: duckdb.DuckDBPyConnection
    plan: Plan
    sources: dict[str, str]  # SQL name -> dataset key

    def stream(self, sql: str, batch_rows: int = DEFAULT_BATCH_ROWS) -> pa.RecordBatchReader:
        """Run ``sql`` and stream its result; a bad query fails here, before anything is written.

        The query may read only the views named as the node names its sources: the sandbox
        allows their data files (DuckDB opens them at every bind), so a direct ``read_parquet``
        of one, or the raw ``__trident_src_*`` view, would skip the delta window and show the
        hidden identity columns; ``check_reads_only`` refuses both before anything runs."""
        try:
            check_reads_only(parser(), sql, self.sources.keys())
        except SqlNotAllowedError as exc:
            raise SqlNotAllowedError(f"the node's SQL failed: {exc}\nSQL:\n{sql}") from exc
        try:
            rel = self.con.sql(sql)
        except duckdb.Error as exc:
            raise TridentError(f"the node's SQL failed: {type(exc).__name__}: {exc}\nSQL:\n{sql}") from exc
        if rel is None:
            raise TridentError(f"the node's SQL must be one SELECT query; got:\n{sql}")
        leaked = [c for c in rel.columns if c in IDENTITY_COLUMNS]
        if leaked:
            raise TridentError(f"the node's result has engine identity column(s) {leaked}; rename them (e.g. AS src_row_index)")
        return rel.to_arrow_reader(batch_rows)

    def close(self) -> None:
        close_soon(self.con)


def open_session(
    t: Trident,
    output: str,
    sources: Mapping[str, str],
    strategy: Strategy,
    *,
    source_row_index: bool = False,
    attempts: int = 5,
    partition: PartitionFilter | None = None,
    staged: Mapping[str, uuid.UUID] | None = None,
) -> Session:
    """Plan the run and register its sources; retried while a source commits underneath us.
    ``partition`` (a partitioned node's run): sources that have its column(s) are read only
    within it, pruned to those partitions' files. ``staged``: sources read as a staged version
    (key -> txn: what a run that publishes once staged upstream of this node)."""
    keys = list(dict.fromkeys(sources.values()))
    staged = {k: v for k, v in (staged or {}).items() if k in keys}
    for _ in range(attempts):
        wait_for_quiet_sources(t, [k for k in keys if k not in staged], t.settings.writer_wait_seconds)
        plan = plan_output(t, output, keys, strategy, partition, staged=staged)
        scans = {key: t.scan_plan(key, staged=staged.get(key)) for key in keys}
        con = sandbox(t.settings.duckdb_memory_limit, t.settings.duckdb_threads, native_paths(scans.values()))
        try:
            for i, (name, key) in enumerate(sources.items()):
                raw = f"__trident_src_{i}"
                names = [c["name"] for c in plan.sources[key].schema]
                has = partition is not None and all(c in names for c in partition.columns)
                if has:  # a partitioned run reads only its partitions: pruned Arrow scan of their files
                    con.register(raw, t.arrow_source(key, partition=partition, staged=staged.get(key)))
                else:
                    register_dataset(con, raw, scans[key], lambda key=key: t.arrow_source(key, staged=staged.get(key)))  # type: ignore[misc]
                con.execute(_view_sql(name, raw, plan.since.get(key), source_row_index))
            con.execute("SET lock_configuration = true")  # the node's SQL cannot widen the sandbox
        except BaseException:
            con.close()
            raise
        stable = all(  # a staged version never changes: only the published sources can move
            k in staged or (t.dataset_record(k).last_txn_id == plan.sources[k].last_txn_id and not open_write(t, k)) for k in keys
        )
        if stable:
            return Session(con, plan, dict(sources))
        con.close()
    raise TridentError(f"the sources of {output!r} ({keys}) kept changing while the node started; retry it")


def _view_sql(name: str, raw: str, since: datetime | None, source_row_index: bool) -> str:
    hidden = ", ".join(f'"{c}"' for c in IDENTITY_COLUMNS)
    lineage = f', "{ROW_INDEX}" AS "{SOURCE_ROW_INDEX}"' if source_row_index else ""
    where = f" WHERE \"{CREATED_AT}\" > '{since.isoformat()}'::TIMESTAMPTZ" if since is not None else ""
    return f'CREATE VIEW "{name}" AS SELECT * EXCLUDE ({hidden}){lineage} FROM "{raw}"{where}'
