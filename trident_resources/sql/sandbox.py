"""The DuckDB sandbox SQL and node compute run in.

DuckDB's own sandbox: external access disabled (no files, URLs, ATTACH, INSTALL or LOAD) except
exactly the data files of the datasets a query names, the configuration locked so the query
cannot turn it back on. Datasets are exposed by key (``"sales/orders"``) as their scan plan says:
on a local warehouse a view over DuckDB's own ``read_parquet`` of the version's files, elsewhere
the sink's Arrow source. Here too: the databases opened ahead (``SPARES``), the sandboxes kept for
repeated queries (``SandboxCache``), and the statement timeout and result caps
(``bounded_result``).
"""

from __future__ import annotations

import heapq
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import duckdb
import pyarrow as pa

from ..core import read_faults
from ..core.errors import SqlResultTooLargeError, SqlTimeoutError
from ..core.recent import Recent
from ..core.settings import TridentSettings
from ..sinks.contract import ScanPlan

RESULT_BATCH_ROWS = 65_536
log = logging.getLogger(__name__)
PLAIN_CHECK_MAX_FILES = 500  # beyond this many files a view keeps the field-id map (see _files_match_schema)

_parsers = threading.local()
PARSER_DATABASE = ("64MB", 1)  # memory limit, threads of a parser's database: it never reads data


def parser() -> duckdb.DuckDBPyConnection:
    """This thread's DuckDB connection for ``sql/guard.py``'s parse of a query (a connection is not
    shared between threads; it runs only ``json_serialize_sql``, never the query)."""
    con: duckdb.DuckDBPyConnection | None = getattr(_parsers, "con", None)
    if con is None:
        con = _parsers.con = sandbox(*PARSER_DATABASE)
        con.execute("SET lock_configuration = true")
    return con


def sandbox(memory_limit: str, threads: int, allowed_paths: Iterable[str] = ()) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection that can read exactly ``allowed_paths`` (the data files of the
    datasets a query or node names) and no other file, URL or database.

    DuckDB only accepts ``allowed_paths`` while external access is still on, so it is set first
    and external access is switched off right after, before any caller SQL runs; the caller
    then registers its views and locks the configuration (``lock``). The database itself is
    usually one ``SPARES`` opened ahead of time: fresh and never used, so configuring it here is
    configuring a new one."""
    con = SPARES.take(memory_limit, threads)
    try:
        paths = sorted(set(allowed_paths))
        if paths:
            con.execute("SET allowed_paths = ?", [paths])
            # a kept sandbox re-binds its views at every query: without the cache each bind
            # re-reads every file's footer (the setting needs the built-in parquet reader loaded)
            con.execute("LOAD parquet")
            con.execute("SET parquet_metadata_cache = true")
        # a bare name the query uses must never resolve to a Python variable of the caller's frame
        con.execute("SET python_enable_replacements = false")
        con.execute("SET enable_external_access = false")
        con.execute("SET TimeZone = 'UTC'")
    except BaseException:
        con.close()
        raise
    return con


def _connect(memory_limit: str, threads: int) -> duckdb.DuckDBPyConnection:
    return duckdb.connect(
        config={
            "autoinstall_known_extensions": False,
            "autoload_known_extensions": False,
            "memory_limit": memory_limit,
            "threads": threads,
        }
    )


class SpareDatabases:
    """One fresh DuckDB database per (memory limit, threads), opened ahead on a helper thread.

    Why: opening a DuckDB database costs ~15-20 ms, and every sandbox needs a new one (its
    allowed files are fixed for its life): 13 of them in the example pipeline, one per node and
    per dataset whose checks query it, cost ~0.25 s of its run on the critical path.
    ``duckdb.connect`` releases the GIL, so opening the next database on a helper thread while
    the step writes costs the step nothing. A spare is untouched until taken (no setting, no
    query), so the sandbox configured on it is exactly a newly opened one; it belongs to the
    process that opened it (a forked child opens its own)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spares: dict[tuple[str, int], duckdb.DuckDBPyConnection] = {}
        self._filling: set[tuple[str, int]] = set()
        self._pid = os.getpid()

    def take(self, memory_limit: str, threads: int) -> duckdb.DuckDBPyConnection:
        """A fresh database: the spare when one is ready (another is then opened behind it),
        otherwise opened here."""
        key = (memory_limit, threads)
        with self._lock:
            if self._pid != os.getpid():  # forked: the parent's databases are not ours to use
                self._spares, self._filling, self._pid = {}, set(), os.getpid()
            con = self._spares.pop(key, None)
            fill = key not in self._filling
            if fill:
                self._filling.add(key)
        if fill:
            self._start(key)
        return con if con is not None else _connect(memory_limit, threads)

    def prepare(self, memory_limit: str, threads: int) -> None:
        """Open a spare ahead of the first sandbox (a ``Trident`` opening will need one soon)."""
        key = (memory_limit, threads)
        with self._lock:
            if self._pid != os.getpid():
                self._spares, self._filling, self._pid = {}, set(), os.getpid()
            if key in self._spares or key in self._filling:
                return
            self._filling.add(key)
        self._start(key)

    def _start(self, key: tuple[str, int]) -> None:
        """Open a spare on a helper thread. Not a daemon: the interpreter waits for it at exit
        (~20 ms at most), because a daemon thread cut off inside ``duckdb.connect`` while the
        interpreter finalises aborts the process (SIGABRT)."""
        try:
            threading.Thread(target=self._fill, args=(key,), name="trident-duckdb-spare", daemon=False).start()
        except RuntimeError:  # interpreter shutting down: no spare, the caller opens its own
            with self._lock:
                self._filling.discard(key)

    def _fill(self, key: tuple[str, int]) -> None:
        pid = os.getpid()
        try:
            con = _connect(*key)
        except Exception:  # the caller's own connect will say what is wrong
            log.debug("opening a spare DuckDB database failed", exc_info=True)
            with self._lock:
                self._filling.discard(key)
            return
        with self._lock:
            self._filling.discard(key)
            if self._pid == pid and key not in self._spares:
                self._spares[key] = con
                return
        con.close()

    def forget(self) -> None:
        """In a forked child: drop (never use, never close) what the parent opened."""
        self._lock = threading.Lock()
        self._spares, self._filling, self._pid = {}, set(), os.getpid()


def close_soon(con: duckdb.DuckDBPyConnection) -> None:
    """Close a DuckDB database the caller is done with on a helper thread. Closing frees the
    database's buffers and joins its worker threads (5-10 ms; a pipeline run closed ~15, on the
    critical path of its steps); nothing waits for it, as nothing waits for a spare
    being opened. Only for a database that nobody uses any more and that holds no file to be
    removed after it. Not a daemon thread, like ``SpareDatabases._start``: the interpreter waits
    for it at exit instead of cutting DuckDB off mid-close."""
    try:
        threading.Thread(target=con.close, name="trident-duckdb-close", daemon=False).start()
    except RuntimeError:  # interpreter shutting down: close here
        con.close()


SPARES = SpareDatabases()
# a fork while a helper thread held the lock (or was opening a spare) must not leave the child
# waiting on a lock no thread of its own will release
os.register_at_fork(after_in_child=SPARES.forget)


def prepare_spares(memory_limit: str, threads: int) -> None:
    """Open ahead what a ``Trident`` with these DuckDB settings needs first: its sandboxes'
    database and this process's query parser's."""
    SPARES.prepare(memory_limit, threads)
    if getattr(_parsers, "con", None) is None:
        SPARES.prepare(*PARSER_DATABASE)


def native_paths(plans: Iterable[ScanPlan]) -> list[str]:
    """Every file the sandbox must allow for these plans (native ones only)."""
    return [f for p in plans if p.path == "native" for f in p.files]


def register_dataset(con: duckdb.DuckDBPyConnection, name: str, plan: ScanPlan, arrow_source: Callable[[], Any]) -> None:
    """Expose one dataset version to DuckDB as ``name``.

    Native: a view over ``read_parquet`` of exactly the plan's files, columns matched by Iceberg
    field id (``schema=MAP{id: {name, type, default_value}}``, as DuckDB's own Iceberg reader
    does), so a column added after a file was written reads NULL there, and DuckDB's parallel
    reader pushes projections and filters into the Parquet files. Arrow: ``arrow_source()`` (the
    sink's re-scannable pyarrow source) is registered instead."""
    if plan.path == "native" and plan.tail is not None:
        _register_with_tail(con, name, plan)
    elif plan.path == "native" and plan.files:
        try:
            con.execute(f"CREATE VIEW {_ident(name)} AS SELECT * FROM {READ_PARQUET_SQL.get(con, plan)}")
        except duckdb.Error as exc:  # DuckDB opens the files here: one missing or corrupt fails the view
            raise read_faults.named(exc, plan.key) from exc
    elif plan.path == "native":  # a version with no rows has no files: an empty relation of the right shape
        con.register(name, pa.Table.from_batches([], schema=plan.schema))
    else:
        con.register(name, arrow_source())


def _register_with_tail(con: duckdb.DuckDBPyConnection, name: str, plan: ScanPlan) -> None:
    """A native plan whose version has inlined rows: the view is the files' rows followed by the
    tail's (registered under a name user SQL cannot read: the guard allows only dataset views)."""
    assert plan.tail is not None
    tail = f"__trident_tail_{abs(hash(name))}"
    con.register(tail, plan.tail.select(plan.schema.names))
    if not plan.files:
        con.execute(f"CREATE VIEW {_ident(name)} AS SELECT * FROM {_ident(tail)}")
        return
    try:
        con.execute(
            f"CREATE VIEW {_ident(name)} AS SELECT * FROM {READ_PARQUET_SQL.get(con, plan)} "
            f"UNION ALL BY NAME SELECT * FROM {_ident(tail)}"
        )
    except duckdb.Error as exc:
        raise read_faults.named(exc, plan.key) from exc


class _ReadParquetSql:
    """The ``read_parquet`` expression of each dataset version registered in this process.

    Why: the expression depends only on the version's data files (immutable: a path is never
    rewritten) and its schema and field ids, yet working it out for every sandbox takes
    a read of every file's schema (``_files_match_schema``): 3-15 ms per dataset, paid again by
    each node and each step's checks that read the same version (the example pipeline opens
    ``tpch/lineitem`` in three nodes and ``tpch/orders`` in three). Bounded; keyed by
    everything the expression is made of, so a new version (new files, a new schema) is never
    served an old answer."""

    def __init__(self, size: int = 256) -> None:
        self._known: Recent[tuple[Any, ...], str] = Recent(size)

    def get(self, con: duckdb.DuckDBPyConnection, plan: ScanPlan) -> str:
        key = (plan.files, plan.field_ids, plan.schema.to_string(show_field_metadata=False))
        sql = self._known.get(key)
        if sql is None:
            sql = _read_parquet_sql(con, plan)
            self._known.put(key, sql)
        return sql


READ_PARQUET_SQL = _ReadParquetSql()


def _read_parquet_sql(con: duckdb.DuckDBPyConnection, plan: ScanPlan) -> str:
    types = [str(t) for t in con.from_arrow(pa.Table.from_batches([], schema=plan.schema)).types]
    files = ", ".join(_lit(f) for f in plan.files)
    plain = f"read_parquet([{files}], hive_partitioning = false)"
    if _files_match_schema(con, plan, plain, types):
        return plain
    cols = ", ".join(
        f"{fid}: {{name: {_lit(f.name)}, type: {_lit(t)}, default_value: NULL}}"
        for fid, f, t in zip(plan.field_ids, plan.schema, types, strict=True)
    )
    return f"read_parquet([{files}], schema = MAP {{{cols}}})"


def _files_match_schema(con: duckdb.DuckDBPyConnection, plan: ScanPlan, plain: str, types: list[str]) -> bool:
    """Whether every file holds exactly the version's columns, in order, with the same field ids,
    and a plain ``read_parquet`` binds them to the same types: then matching by name IS matching
    by field id, and the view can skip the field-id schema map (which cost a few ms on every
    query). Nested columns keep the map (their inner field ids are not compared here);
    so does any file written before a column was added, dropped or re-typed."""
    if len(plan.files) > PLAIN_CHECK_MAX_FILES or any(pa.types.is_nested(f.type) for f in plan.schema):
        return False  # (thousands of files: reading every footer up front would cost more than the map)
    want = [(f.name, fid) for f, fid in zip(plan.schema, plan.field_ids, strict=True)]
    rows = con.execute(
        f"SELECT file_name, name, field_id FROM parquet_schema([{', '.join(_lit(f) for f in plan.files)}]) "
        "WHERE num_children IS NULL OR num_children = 0"
    ).fetchall()
    per_file: dict[str, list[tuple[str, int | None]]] = {f: [] for f in plan.files}
    for file_name, name, field_id in rows:
        per_file.setdefault(file_name, []).append((name, field_id))
    if any(cols != want for cols in per_file.values()):
        return False
    bound = con.sql(f"SELECT * FROM {plain}")
    return bound.columns == plan.schema.names and [str(t) for t in bound.types] == types


def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class SandboxCache:
    """Locked sandbox connections kept for the next query over the SAME dataset versions.

    Building a sandbox (a fresh DuckDB database, its views, then tearing it down) is most of a
    small query's fixed cost (40-170 ms a call). A connection is reused only for a
    query whose datasets, names, snapshots, files, schemas and settings are exactly those it was
    built for (``sandbox_key``), so it allows exactly the files a fresh one would; its
    configuration is locked, and the queries it runs are single SELECTs, which cannot create,
    attach or set anything. A connection is checked out while in use (one query at a time), is
    not returned after an error or an interrupt, and only all-native plans are cached (an Arrow
    source can go stale, e.g. the pg sink's spill file)."""

    def __init__(self, size: int = 4) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._idle: dict[tuple[Any, ...], duckdb.DuckDBPyConnection] = {}

    def take(self, key: tuple[Any, ...]) -> duckdb.DuckDBPyConnection | None:
        with self._lock:
            return self._idle.pop(key, None)

    def give(self, key: tuple[Any, ...], con: duckdb.DuckDBPyConnection) -> None:
        with self._lock:
            if key in self._idle:
                evicted = [con]
            else:
                self._idle[key] = con
                evicted = [self._idle.pop(k) for k in list(self._idle)[: max(0, len(self._idle) - self.size)]]
        for old in evicted:
            close_soon(old)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = list(self._idle.values()), {}
        for con in idle:
            con.close()


def sandbox_key(plans: Mapping[str, ScanPlan], settings: TridentSettings) -> tuple[Any, ...] | None:
    """What a sandbox is built from; ``None`` when it must not be reused (an Arrow-path plan)."""
    if any(p.path != "native" or p.tail is not None for p in plans.values()):
        return None  # (an inlined tail changes without a new snapshot)
    return (
        settings.duckdb_memory_limit,
        settings.duckdb_threads,
        tuple(
            (name, p.snapshot_id, p.files, p.field_ids, p.schema.to_string(show_field_metadata=False))
            for name, p in sorted(plans.items())
        ),
    )


def bounded_result(
    con: duckdb.DuckDBPyConnection, query: str, settings: TridentSettings, *, interrupted: threading.Event | None = None
) -> pa.Table:
    """Run ``query`` on ``con`` under the statement timeout and the result caps.

    DuckDB has no statement timeout of its own, so the watchdog thread calls ``con.interrupt()`` after
    ``sql_timeout_seconds`` (the query then fails with an InterruptException, named here as
    SqlTimeoutError; ``interrupted`` is set when the timer fired, even after the query ended, so
    that a caller reusing the connection knows). The result is read in batches and refused as soon as it passes
    ``sql_max_rows`` or ``sql_max_bytes``: it is returned as one in-memory table, so a cap is what
    keeps a careless ``select *`` over a cross join from exhausting the caller's memory.
    """
    timeout = settings.sql_timeout_seconds
    fired = interrupted if interrupted is not None else threading.Event()

    def stop() -> None:
        fired.set()
        con.interrupt()

    alarm = WATCHDOG.arm(timeout, stop)
    try:
        reader = con.sql(query).to_arrow_reader(RESULT_BATCH_ROWS)
        batches: list[pa.RecordBatch] = []
        rows = size = 0
        for batch in reader:
            rows += batch.num_rows
            size += batch.nbytes
            _check_caps(rows, size, settings)
            batches.append(batch)
        return pa.Table.from_batches(batches, schema=reader.schema)
    except duckdb.InterruptException as exc:
        if not fired.is_set():
            raise
        raise SqlTimeoutError(
            f"the query ran longer than {timeout:g}s and was interrupted; narrow it (filters, LIMIT, "
            "fewer joins) or raise TRIDENT_SQL_TIMEOUT_SECONDS"
        ) from exc
    finally:
        WATCHDOG.disarm(alarm)


class Watchdog:
    """One daemon thread that fires the statement timeouts of every query in the process.

    A ``threading.Timer`` per query started (and joined the start of) a new thread every time:
    about a millisecond of a small query's fixed cost on a loaded machine. Here arming
    is a heap push under a lock; the thread starts on first use and sleeps until the earliest
    deadline. A callback runs on the watchdog thread, so it must be quick (``con.interrupt()``)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._live: set[int] = set()
        self._seq = 0
        self._thread: threading.Thread | None = None

    def arm(self, seconds: float, callback: Callable[[], None]) -> int:
        with self._cond:
            self._seq += 1
            heapq.heappush(self._heap, (time.monotonic() + seconds, self._seq, callback))
            self._live.add(self._seq)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="trident-sql-watchdog", daemon=True)
                self._thread.start()
            self._cond.notify()
            return self._seq

    def disarm(self, alarm: int) -> None:
        with self._cond:
            self._live.discard(alarm)

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._heap and self._heap[0][1] not in self._live:
                    heapq.heappop(self._heap)  # disarmed: dropped lazily
                if not self._heap:
                    self._cond.wait()
                    continue
                deadline, alarm, callback = self._heap[0]
                wait = deadline - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                heapq.heappop(self._heap)
                self._live.discard(alarm)
            try:
                callback()
            except Exception:  # a closed connection: the query it guarded is over anyway
                log.debug("sql watchdog callback failed", exc_info=True)


WATCHDOG = Watchdog()


def _check_caps(rows: int, size: int, settings: TridentSettings) -> None:
    if settings.sql_max_rows is not None and rows > settings.sql_max_rows:
        raise SqlResultTooLargeError(
            f"the result has more than {settings.sql_max_rows} rows (TRIDENT_SQL_MAX_ROWS); aggregate, "
            "add a LIMIT, or read the dataset with Trident.stream / `trident export` instead"
        )
    if settings.sql_max_bytes is not None and size > settings.sql_max_bytes:
        raise SqlResultTooLargeError(
            f"the result is larger than {settings.sql_max_bytes} bytes (TRIDENT_SQL_MAX_BYTES); select "
            "fewer columns, aggregate or add a LIMIT, or use Trident.stream / `trident export` instead"
        )
