"""The Postgres control plane: a connection pool, versioned migrations, and the dataset and ledger
records every sink shares. All control-plane SQL is in ``migrations/`` (DDL) and ``queries.py`` (DML)."""

from __future__ import annotations

import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from importlib import resources
from typing import Any, cast

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import DictRow, dict_row
from psycopg_pool import ConnectionPool

from ..core.errors import (
    ConcurrentWriteError,
    ControlPlaneUnavailableError,
    SchemaMismatchError,
    StagedVersionConflictError,
    StorageUnavailableError,
    TridentClosedError,
    WriterLockLostError,
)
from . import queries as q

log = logging.getLogger("trident")

MIGRATION_LOCK = 0x7472_6964_656E_7401  # 'trident\x01': serialises migrations across processes
# One watermark a COMMIT records: (source dataset, output partition key ('' = whole output), mark, source txn)
WatermarkRow = tuple[uuid.UUID, str, datetime, "uuid.UUID | None"]
# Ledger metadata of a flush of the inlined tail: the last tail block (``seq``) it moves into
# Iceberg. Its COMMIT (the writer's, or the reconciler's roll-forward) marks exactly those flushed.
INLINE_FLUSH_META = "trident.inline-flush"


@dataclass(frozen=True)
class DatasetRecord:
    dataset_id: uuid.UUID
    workspace: str
    key: str
    sink: str
    iceberg_identifier: str | None
    row_count: int
    next_row_index: int
    schema: list[dict[str, Any]] | None
    schema_version: int
    snapshot_id: int | None
    last_txn_id: uuid.UUID | None
    committed_at: datetime | None
    created_at: datetime
    updated_at: datetime
    # set when this record is an environment's version of the dataset (``ControlPlane.environment``'s
    # head, read instead of production's): its sinks read and write that environment's branch
    environment: str | None = None
    # the inlined tail this record names: blocks with inline_flushed < seq <= inline_through
    # (migrations/0011_inline_bounds.sql); equal: no tail
    inline_through: int = 0
    inline_flushed: int = 0

    @property
    def exists(self) -> bool:
        """A dataset exists once a transaction has committed; an aborted first write leaves none."""
        return self.last_txn_id is not None


@dataclass
class LedgerEntry:
    txn_id: uuid.UUID
    dataset_id: uuid.UUID
    status: str
    mode: str
    writer: str
    sink: str
    started_at: datetime
    requested_sink: str | None = None
    clamped: bool = False
    route_reason: str | None = None
    committed_at: datetime | None = None
    ended_at: datetime | None = None
    rows_written: int | None = None
    row_count: int | None = None
    skipped: int | None = None
    preserved: int | None = None
    snapshot_id: int | None = None
    schema_version: int | None = None
    source_refs: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    location: str | None = None
    pid: int | None = None
    host: str | None = None
    base_snapshot_id: int | None = None  # a staged version's base: the published snapshot it was staged on
    staged_at: datetime | None = None
    cleanup_pending: bool = False  # aborted, and its storage leftovers are not removed yet
    group_id: uuid.UUID | None = None  # the transaction group it publishes with (set when it stages)
    staged_outcome: dict[str, Any] | None = None  # what its COMMIT records beyond the ledger's columns
    ref_pending: bool = False  # committed by a group publish; its table's main not moved yet


@dataclass(frozen=True)
class Outcome:
    """What a sink's WRITE step produced; the COMMIT step records exactly this."""

    rows_written: int
    row_count: int
    next_row_index: int
    snapshot_id: int | None
    schema: list[dict[str, Any]]
    skipped: int = 0
    preserved: int = 0
    deleted: int = 0
    # when the change became visible to readers: the instant the table's snapshot log gives its
    # snapshot (Iceberg); None where the sink has no such log, and COMMIT's clock is taken
    visible_at: datetime | None = None


@dataclass(frozen=True)
class EnvHead:
    """An environment's version of one dataset (``trident_env_heads``): where it forked from
    production and what the environment's readers read."""

    workspace: str
    environment: str
    dataset_id: uuid.UUID
    born_in_env: bool
    fork_txn_id: uuid.UUID | None
    fork_snapshot_id: int | None
    fork_row_count: int | None
    fork_next_row_index: int | None
    row_count: int
    next_row_index: int
    schema: list[dict[str, Any]] | None
    schema_version: int
    snapshot_id: int | None
    last_txn_id: uuid.UUID
    committed_at: datetime | None
    created_at: datetime
    updated_at: datetime
    promoted_at: datetime | None = None  # promoted: production's version now; kept until the drop
    watermarks: dict[str, Any] = field(default_factory=dict)  # "<source id>|<part>" -> [mark, source txn]

    def over(self, ds: DatasetRecord) -> DatasetRecord:
        """``ds`` (production's record) as this environment sees it."""
        return replace(
            ds,
            row_count=self.row_count,
            next_row_index=self.next_row_index,
            schema=self.schema,
            schema_version=self.schema_version,
            snapshot_id=self.snapshot_id,
            last_txn_id=self.last_txn_id,
            committed_at=self.committed_at,
            environment=self.environment,
        )


@dataclass(frozen=True)
class EnvironmentRecord:
    workspace: str
    name: str
    created_at: datetime
    last_used_at: datetime
    datasets: int  # how many datasets it wrote


PRODUCTION = "main"
ENV_LEDGER_META = q.ENV_LEDGER_META  # ledger metadata: the environment a write was made in
ENV_FORK_META = "trident.env-fork"  # ledger metadata of an environment write: production's version it forks
ENV_PROMOTED_META = "trident.promoted-from"  # a promotion's production ledger rows: the environment they came from


def entry_environment(entry: LedgerEntry) -> str:
    """The environment ``entry`` was written in (``PRODUCTION`` for production's writes): what
    hides an environment's transactions, staged or committed, from production and from every
    other environment."""
    return str((entry.metadata or {}).get(ENV_LEDGER_META) or PRODUCTION)


@dataclass(frozen=True)
class InlineBlock:
    """One inlined commit's rows, stamped with their identity and encoded (an Arrow IPC stream):
    what an inlined write stores in the control plane with its ledger COMMIT."""

    first_row_index: int
    n_rows: int
    ipc: bytes


@dataclass(frozen=True)
class InlineState:
    """A dataset's inlined tail as a writer sees it (``ControlPlane.inline_state``)."""

    rows: int  # rows inlined and not flushed yet
    staged: bool  # a staged version waits for publish
    age_s: float | None = None  # seconds since the oldest unflushed block was inlined


@dataclass(frozen=True)
class PgAppendRows:
    """The rows of a one-call pg append (``ControlPlane.commit_pg_append``): their generation,
    whether settled history may need purging, their row ids (text) and user columns (one jsonb
    array's text) in row order, their row block, and the Arrow user schema the commit marker
    records."""

    gen: int
    purge: bool  # False: nothing of an older generation or undo log can be left (see pg_append)
    ids: list[str]
    data: str
    block: bytes | None
    schema: bytes


@dataclass(frozen=True)
class PgAppend:
    """What ``ControlPlane.commit_pg_append`` did (the answers of ``InlineCommit``), and the new
    commit's seq (the dataset's snapshot id)."""

    outcome: str
    entry: LedgerEntry | None = None
    seq: int | None = None


@dataclass(frozen=True)
class InlineCommit:
    """What ``ControlPlane.commit_inline`` did: ``committed`` (``entry``, the tail after it, the
    block's seq), or why nothing was written: ``busy`` (another writer holds the lock), ``stale``
    (the dataset moved since the record the rows were stamped from), ``waiting`` (an open, staged
    or ref-pending transaction), ``exists`` (the txn id is taken)."""

    outcome: str
    entry: LedgerEntry | None = None
    tail: InlineState | None = None
    block_seq: int | None = None


@dataclass(frozen=True)
class InlineTail:
    """The unflushed blocks of a version and the Iceberg snapshot they sit on top of."""

    snapshot_id: int | None
    blocks: list[tuple[int, bytes]]  # (n_rows, ipc), in commit order
    last_seq: int | None = None

    @property
    def rows(self) -> int:
        return sum(n for n, _ in self.blocks)


_AUTH_FAILURES = ("authentication failed", "no pg_hba.conf entry", "role ", "password")


def probe_connection(dsn: str, timeout_s: int = 10) -> None:
    """Connect once, directly, before the pool does: a fault is then named at once, with its reason.

    The pool retries a failing connection in the background until its 30 s timeout, then reports a
    PoolTimeout that hides why (a wrong password looked like an unreachable server, 30 s later).
    The server's reason is kept (it never contains the password, which is also masked here, in
    case a driver message ever echoed the DSN) and the driver's error is chained as the cause.
    """
    try:
        psycopg.connect(dsn, connect_timeout=timeout_s).close()
    except psycopg.OperationalError as exc:
        reason = _masked(" ".join(str(exc).split()), dsn)  # libpq's hint is on a line of its own: one line here
        if any(marker in reason for marker in _AUTH_FAILURES):
            raise ControlPlaneUnavailableError(
                f"authentication failed for the control-plane Postgres: {reason}. Check the user and "
                "password in TRIDENT_PG_DSN (and the server's pg_hba.conf)"
            ) from exc
        raise ControlPlaneUnavailableError(
            f"cannot reach the control-plane Postgres: {reason}. Check TRIDENT_PG_DSN (host, port, "
            "database) and that the server is running"
        ) from exc
    except psycopg.ProgrammingError:  # a malformed DSN: its text may hold the password, so not shown
        raise ControlPlaneUnavailableError(
            "the control-plane DSN (TRIDENT_PG_DSN) is malformed; use postgresql://user:password@host:port/db"
        ) from None


def _masked(text: str, dsn: str) -> str:
    try:
        password = conninfo_to_dict(dsn).get("password")
    except psycopg.Error:
        return text
    return text.replace(str(password), "***") if password else text


def migration_files() -> list[tuple[int, str, str]]:
    """The versioned migrations shipped in ``trident_resources/control/migrations``, in order:
    ``(version, file name, SQL)``."""
    files = sorted(
        (p for p in resources.files("trident_resources.control.migrations").iterdir() if p.name.endswith(".sql")),
        key=lambda p: p.name,
    )
    return [(int(p.name.split("_", 1)[0]), p.name, p.read_text()) for p in files]


class _Pool(ConnectionPool[psycopg.Connection[DictRow]]):
    """The control plane's pool; a connection asked of it after ``close()`` is a named error
    (``TridentClosedError``, not psycopg_pool's raw ``PoolClosed``)."""

    @contextmanager
    def connection(self, timeout: float | None = None) -> Iterator[psycopg.Connection[DictRow]]:
        if self.closed:
            raise TridentClosedError(
                "this Trident was closed (close(), or the end of its with-block); open a new one, e.g. Trident.from_env()"
            )
        with super().connection(timeout) as conn:
            yield conn


@contextmanager
def _named_faults() -> Iterator[None]:
    """A psycopg error (a Postgres restarted or unreachable after the pool opened, the pool's wait
    for a connection run out) raised as ``ControlPlaneUnavailableError`` with psycopg's error
    chained, so a caller catches every control-plane fault as a ``TridentError``."""
    try:
        yield
    except psycopg.Error as exc:
        raise ControlPlaneUnavailableError(
            f"the control-plane Postgres failed: {type(exc).__name__}: {' '.join(str(exc).split())}. "
            "Check that it is running and reachable (TRIDENT_PG_DSN); the Trident reconnects once it is back"
        ) from exc


class ControlPlane:
    """Owns the pool. Short transactions only: nothing here holds a lock across a data write,
    except the per-dataset writer lock, which lives on its own dedicated connection.

    Every connection it hands out or uses names its faults (``_named_faults``); the raw ``pool``
    is for a sink that names its own (the pg sink's writes and range reads)."""

    def __init__(self, dsn: str, *, pool_max: int = 8) -> None:
        self._dsn = dsn
        # the environment whose versions the read-side look-ups return (``_seen``): production's
        # records, overlaid by the environment's heads where it wrote one (set by the Engine)
        self.environment = PRODUCTION
        probe_connection(dsn)
        try:
            self.pool: ConnectionPool[psycopg.Connection[DictRow]] = _Pool(
                dsn,
                connection_class=psycopg.Connection[DictRow],
                min_size=1,
                max_size=pool_max,
                open=True,
                timeout=30,
                kwargs={"autocommit": True, "row_factory": dict_row},
                name="trident",
            )
            self.pool.wait(timeout=30)
        except Exception as exc:  # psycopg_pool.PoolTimeout, OperationalError
            raise StorageUnavailableError(f"cannot reach the control-plane Postgres: {type(exc).__name__}") from exc
        self.migrate()

    def close(self) -> None:
        self.pool.close()

    @contextmanager
    def _tx_on(self, conn: psycopg.Connection[Any] | None) -> Iterator[psycopg.Connection[Any]]:
        if conn is None:
            with self.tx() as pooled:
                yield pooled
            return
        with _named_faults():
            try:
                with conn.transaction():
                    yield conn
            except psycopg.OperationalError as exc:
                raise _lock_lost(exc) from exc

    @contextmanager
    def _single_on(self, conn: psycopg.Connection[Any] | None) -> Iterator[psycopg.Connection[Any]]:
        """A connection for ONE statement that is a whole change by itself (autocommit: atomic
        on its own): ``_tx_on`` without BEGIN and COMMIT, two round trips less."""
        if conn is None:
            with self.connection() as pooled:
                yield pooled
            return
        with _named_faults():
            try:
                yield conn
            except psycopg.OperationalError as exc:
                raise _lock_lost(exc) from exc

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection (autocommit); a psycopg error raised getting it or inside the block
        is ``ControlPlaneUnavailableError``."""
        with _named_faults(), self.pool.connection() as conn:
            yield conn

    @contextmanager
    def tx(self) -> Iterator[psycopg.Connection[Any]]:
        """One short Postgres transaction; a psycopg error is ``ControlPlaneUnavailableError``."""
        with _named_faults(), self.pool.connection() as conn, conn.transaction():
            yield conn

    def migrate(self) -> list[str]:
        """Apply pending migration files in order; a second process waits on the lock, then finds
        nothing left to do, so concurrent starts are harmless."""
        applied: list[str] = []
        with self.tx() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            conn.execute(q.CREATE_MIGRATIONS_TABLE)
            done = {r["version"] for r in conn.execute(q.APPLIED_MIGRATIONS)}
            for version, name, sql in migration_files():
                if version in done:
                    continue
                conn.execute(sql)
                conn.execute(q.RECORD_MIGRATION, (version, name))
                applied.append(name)
        return applied

    # -- datasets ---------------------------------------------------------------------------
    def dataset(self, workspace: str, key: str) -> DatasetRecord | None:
        """The record of ``key`` as this plane's environment sees it (``_seen``)."""
        with self.connection() as conn:
            row = conn.execute(q.GET_DATASET, (workspace, key)).fetchone()
        return self._seen_one(DatasetRecord(**row)) if row else None

    # -- environments ---------------------------------------------------------------------------
    def _seen(self, records: list[DatasetRecord]) -> list[DatasetRecord]:
        """``records`` as this plane's environment sees them: in production exactly as stored; in
        an environment each dataset it wrote is its head there (one more query), the rest
        production's."""
        if self.environment == PRODUCTION or not records:
            return records
        heads = self.env_heads(records[0].workspace, self.environment, [r.dataset_id for r in records])
        return [heads[r.dataset_id].over(r) if r.dataset_id in heads else r for r in records]

    def _seen_one(self, ds: DatasetRecord) -> DatasetRecord:
        return self._seen([ds])[0]

    def env_heads(
        self,
        workspace: str,
        environment: str,
        dataset_ids: Sequence[uuid.UUID] | None = None,
        *,
        promoted: bool = False,
    ) -> dict[uuid.UUID, EnvHead]:
        """``environment``'s live heads (of ``dataset_ids``, or all; ``promoted``: all of them
        also the promoted ones), by dataset id."""
        with self.connection() as conn:
            if dataset_ids is None:
                rows = conn.execute(q.ENV_HEADS, (workspace, environment, promoted)).fetchall()
            else:
                rows = conn.execute(q.ENV_HEADS_OF, (workspace, environment, list(dataset_ids))).fetchall()
        return {r["dataset_id"]: EnvHead(**r) for r in rows}

    def heads_of_dataset(self, dataset_id: uuid.UUID) -> list[EnvHead]:
        """Every environment's head of one dataset (what maintenance and drops must keep)."""
        with self.connection() as conn:
            return [EnvHead(**r) for r in conn.execute(q.ALL_ENV_HEADS_OF, (dataset_id,))]

    def environments(self, workspace: str) -> list[EnvironmentRecord]:
        with self.connection() as conn:
            return [EnvironmentRecord(**r) for r in conn.execute(q.LIST_ENVIRONMENTS, (workspace,))]

    def environment_record(self, workspace: str, name: str) -> EnvironmentRecord | None:
        with self.connection() as conn:
            row = conn.execute(q.GET_ENVIRONMENT, (workspace, name)).fetchone()
        return EnvironmentRecord(**row) if row else None

    def move_env_head_snapshot(self, ds: DatasetRecord, from_snapshot_id: int, to_snapshot_id: int) -> bool:
        """The environment's head of ``ds`` (its version, ``ds.environment`` set) moved to
        ``to_snapshot_id``, a compaction of ``from_snapshot_id`` on its branch (same rows). False
        when the head is no longer at ``from_snapshot_id``.

        Raises:
            ControlPlaneUnavailableError: the control-plane Postgres went away.
        """
        with self.tx() as conn:
            cur = conn.execute(
                q.MOVE_ENV_HEAD_SNAPSHOT, (to_snapshot_id, ds.workspace, ds.environment, ds.dataset_id, from_snapshot_id)
            )
            return cur.rowcount == 1

    def forget_env_heads(self, workspace: str, environment: str, dataset_ids: Sequence[uuid.UUID]) -> None:
        with self.connection() as conn:
            conn.execute(q.DELETE_ENV_HEADS, (workspace, environment, list(dataset_ids)))

    def mark_promoted(self, workspace: str, environment: str, dataset_ids: Sequence[uuid.UUID]) -> None:
        with self.connection() as conn:
            conn.execute(q.MARK_HEADS_PROMOTED, (workspace, environment, list(dataset_ids)))

    def forget_environment(self, workspace: str, environment: str) -> None:
        """The environment's record and (cascading) every head of it."""
        with self.connection() as conn:
            conn.execute(q.DELETE_ENVIRONMENT, (workspace, environment))

    def all_datasets(self, workspace: str) -> list[DatasetRecord]:
        """Every record of the workspace as stored (production's), also of datasets never
        committed there (born in an environment, or an aborted first write)."""
        with self.connection() as conn:
            return [DatasetRecord(**r) for r in conn.execute(q.LIST_ALL_DATASETS, (workspace,))]

    def insert_staged(
        self, entry: LedgerEntry, staged: dict[str, Any], conn: psycopg.Connection[Any] | None = None
    ) -> LedgerEntry:
        """Record a staged version whose snapshot is already on its table (an environment's head
        being promoted): the ledger row is born ``staged``, as a staged write leaves it."""
        with self._single_on(conn) as c:
            row = c.execute(
                q.INSERT_STAGED_LEDGER,
                (
                    entry.txn_id,
                    entry.dataset_id,
                    entry.mode,
                    entry.writer,
                    entry.sink,
                    entry.requested_sink or entry.sink,
                    entry.route_reason,
                    entry.rows_written,
                    entry.row_count,
                    entry.snapshot_id,
                    entry.base_snapshot_id,
                    json.dumps(staged, default=str),
                    entry.group_id,
                    json.dumps(entry.metadata, default=str),
                    os.getpid(),
                    socket.gethostname(),
                ),
            ).fetchone()
        assert row is not None
        return LedgerEntry(**row)

    def _commit_env(
        self,
        conn: psycopg.Connection[Any],
        entry: LedgerEntry,
        outcome: Outcome,
        environment: str,
        watermarks: Sequence[WatermarkRow] = (),
    ) -> LedgerEntry:
        """An environment write's COMMIT (inside ``commit_txn``'s transaction): the ledger row,
        and the write's version as the environment's head of the dataset; production's record,
        sync log (the Dagster sensor's events), watermarks and schema versions stay untouched."""
        ds = conn.execute(q.GET_DATASET_BY_ID_FOR_UPDATE, (entry.dataset_id,)).fetchone()
        assert ds is not None
        fork = entry.metadata.get(ENV_FORK_META) or {}
        if fork:  # a new fork: a promoted head of the dataset is replaced by this one
            conn.execute(q.DROP_PROMOTED_HEAD, (ds["workspace"], environment, entry.dataset_id))
        prev = conn.execute(q.ENV_HEADS_OF, (ds["workspace"], environment, [entry.dataset_id])).fetchone()
        base_schema, version = (
            (prev["schema"], prev["schema_version"]) if prev else (fork.get("schema"), int(fork.get("schema_version") or 0))
        )
        if base_schema != outcome.schema:
            version += 1
        if prev is not None:
            marks: dict[str, Any] = dict(prev["watermarks"] or {})
        else:  # a fork starts from production's watermarks of the dataset
            marks = {
                f"{r['source_dataset_id']}|{r['partition_key']}": [
                    r["watermark"].isoformat(),
                    str(r["source_txn_id"]) if r["source_txn_id"] else None,
                ]
                for r in conn.execute(q.ALL_WATERMARKS, (entry.dataset_id,))
            }
        if watermarks:  # as production's (commit_txn): a partition write's marks replace the whole
            # dataset's, a whole-dataset write's replace every partition's
            partitioned = any(part for _, part, _, _ in watermarks)
            marks = {k: v for k, v in marks.items() if k.endswith("|") != partitioned}
            for source_id, part, mark, source_txn in watermarks:
                marks[f"{source_id}|{part}"] = [mark.isoformat(), str(source_txn) if source_txn else None]
        row = _commit_ledger(conn, entry, outcome, version)
        conn.execute(q.TOUCH_ENVIRONMENT, (ds["workspace"], environment))
        conn.execute(
            q.UPSERT_ENV_HEAD,
            (
                ds["workspace"],
                environment,
                entry.dataset_id,
                bool(fork.get("born", False)),
                fork.get("txn_id"),
                fork.get("snapshot_id"),
                fork.get("row_count"),
                fork.get("next_row_index"),
                outcome.row_count,
                outcome.next_row_index,
                json.dumps(outcome.schema),
                version,
                outcome.snapshot_id,
                entry.txn_id,
                row["committed_at"],
                json.dumps(marks),
            ),
        )
        return LedgerEntry(**row)

    def dataset_by_id(self, dataset_id: uuid.UUID) -> DatasetRecord | None:
        with self.connection() as conn:
            row = conn.execute(q.GET_DATASET_BY_ID, (dataset_id,)).fetchone()
        return DatasetRecord(**row) if row else None

    def dataset_if_settled(self, dataset_id: uuid.UUID) -> tuple[DatasetRecord | None, bool]:
        """``dataset_by_id`` and whether the dataset has an open transaction, in ONE query: what a
        writer that just took the lock asks (the open entries are read only when there are some)."""
        with self.connection() as conn:
            row = conn.execute(q.GET_DATASET_BY_ID_OPEN, (dataset_id,)).fetchone()
        if row is None:
            return None, True  # no record: let the caller look for open entries
        has_open = bool(row.pop("has_open"))
        return DatasetRecord(**row), has_open

    def dataset_with_provenance(self, workspace: str, key: str) -> tuple[DatasetRecord | None, dict[str, Any]]:
        """``dataset(workspace, key)`` and its ``provenance`` in ONE query ({} when none is set)."""
        with self.connection() as conn:
            row = conn.execute(q.GET_DATASET_WITH_PROVENANCE, (workspace, key)).fetchone()
        if row is None:
            return None, {}
        provenance = row.pop("p_provenance")
        return self._seen_one(DatasetRecord(**row)), provenance or {}

    def datasets_by_keys(self, workspace: str, keys: Iterable[str]) -> dict[str, DatasetRecord]:
        """The records of several keys in one query (a key with no record is absent)."""
        with self.connection() as conn:
            rows = conn.execute(q.GET_DATASETS_BY_KEYS, (workspace, list(keys))).fetchall()
        return {d.key: d for d in self._seen([DatasetRecord(**r) for r in rows])}

    def dataset_and_entry(self, workspace: str, key: str, txn_id: uuid.UUID) -> tuple[DatasetRecord | None, LedgerEntry | None]:
        """``dataset(workspace, key)`` and ``ledger_entry(txn_id)`` in ONE query (the entry may be
        another dataset's: the caller checks). What naming a staged version read in two."""
        with self.connection() as conn:
            row = conn.execute(q.GET_DATASET_AND_LEDGER, (txn_id, workspace, key)).fetchone()
        if row is None:
            return None, None
        n = len(q.LEDGER_ENTRY_PREFIX)
        entry = {k[n:]: v for k, v in row.items() if k.startswith(q.LEDGER_ENTRY_PREFIX)}
        ds = self._seen_one(DatasetRecord(**{k: v for k, v in row.items() if not k.startswith(q.LEDGER_ENTRY_PREFIX)}))
        return ds, LedgerEntry(**entry) if entry["txn_id"] is not None else None

    def history_by_key(self, workspace: str, key: str, limit: int | None = None) -> list[LedgerEntry] | None:
        """``history`` of the dataset ``key`` names, ``None`` when there is no such dataset: one
        query when it has entries (every dataset written once has), two otherwise."""
        with self.connection() as conn:
            rows = conn.execute(q.HISTORY_BY_KEY, (workspace, key, self.environment, limit)).fetchall()
        if rows:
            return [LedgerEntry(**r) for r in rows]
        ds = self.dataset(workspace, key)
        return None if ds is None else self.history(ds.dataset_id, limit)

    def datasets(self, workspace: str) -> list[DatasetRecord]:
        """The workspace's existing datasets as this plane's environment sees them (in an
        environment also those born there; production never lists those)."""
        if self.environment == PRODUCTION:
            with self.connection() as conn:
                return [DatasetRecord(**r) for r in conn.execute(q.LIST_DATASETS, (workspace,))]
        return [d for d in self._seen(self.all_datasets(workspace)) if d.exists]

    def ensure_dataset(self, workspace: str, key: str, sink: str, identifier: str | None) -> DatasetRecord:
        with self.connection() as conn:  # the inserted row comes back; someone else's only on a lost race
            row = conn.execute(q.INSERT_DATASET, (uuid.uuid4(), workspace, key, sink, identifier)).fetchone()
            if row is None:
                row = conn.execute(q.GET_DATASET, (workspace, key)).fetchone()
        assert row is not None
        return DatasetRecord(**row)

    def set_dataset_sink(self, dataset_id: uuid.UUID, sink: str, identifier: str | None) -> None:
        with self.tx() as conn:
            conn.execute(q.SET_DATASET_SINK, (sink, identifier, dataset_id))

    def provenance(self, dataset_id: uuid.UUID) -> dict[str, Any]:
        with self.connection() as conn:
            row = conn.execute(q.GET_PROVENANCE, (dataset_id,)).fetchone()
        return row["provenance"] if row else {}

    def set_provenance(self, dataset_id: uuid.UUID, provenance: dict[str, Any]) -> None:
        with self.tx() as conn:
            conn.execute(q.UPSERT_PROVENANCE, (dataset_id, json.dumps(provenance, default=str)))

    # -- ledger -----------------------------------------------------------------------------
    def ledger_entry(self, txn_id: uuid.UUID) -> LedgerEntry | None:
        with self.connection() as conn:
            row = conn.execute(q.GET_LEDGER, (txn_id,)).fetchone()
        return LedgerEntry(**row) if row else None

    def history(self, dataset_id: uuid.UUID, limit: int | None = None) -> list[LedgerEntry]:
        """The dataset's ledger as this plane's environment sees it, newest first: production's
        entries, and in an environment also its own (never another environment's)."""
        return self.history_in(dataset_id, self.environment, limit)

    def history_in(self, dataset_id: uuid.UUID, environment: str, limit: int | None = None) -> list[LedgerEntry]:
        """``history`` as ``environment`` sees it."""
        with self.connection() as conn:
            return [LedgerEntry(**r) for r in conn.execute(q.HISTORY, (dataset_id, environment, limit))]

    def open_entries(self, dataset_id: uuid.UUID | None = None) -> list[LedgerEntry]:
        with self.connection() as conn:
            return [LedgerEntry(**r) for r in conn.execute(q.OPEN_LEDGER, (dataset_id, dataset_id))]

    @contextmanager
    def writer_lock(self, dataset: DatasetRecord, wait_s: float) -> Iterator[psycopg.Connection[Any]]:
        """Hold the dataset's writer lock (a session advisory lock) for the life of a write.

        The lock dies with the process's connection, which is how the reconciler tells an open
        transaction whose writer crashed from one still running.
        """
        with self.connection() as conn:
            began = time.monotonic()
            deadline = began + wait_s
            delay = 0.02
            while not cast(DictRow, conn.execute(q.TRY_WRITER_LOCK, (str(dataset.dataset_id),)).fetchone())["locked"]:
                if time.monotonic() >= deadline:
                    holder = self.open_entries(dataset.dataset_id)
                    who = (
                        f"transaction {holder[0].txn_id} (writer {holder[0].writer}, pid {holder[0].pid} on "
                        f"{holder[0].host}, open since {holder[0].started_at:%Y-%m-%d %H:%M:%S%z})"
                        if holder
                        else "another writer"
                    )
                    raise ConcurrentWriteError(
                        f"dataset {dataset.key!r} is being written by {who}; waited {wait_s:.0f}s. "
                        "Retry when it finishes, or raise TRIDENT_WRITER_WAIT_SECONDS"
                    )
                time.sleep(delay)
                delay = min(delay * 2, 0.5)
            _note_wait(dataset, "its writer lock", began, delay != 0.02)
            try:
                yield conn
            finally:
                try:
                    conn.execute(q.WRITER_UNLOCK, (str(dataset.dataset_id),))
                except psycopg.Error as exc:  # the session died, and its lock with it
                    log.warning("writer lock of %s was already gone at release: %s", dataset.key, exc)

    @contextmanager
    def staged_decision_lock(self, txn_id: uuid.UUID) -> Iterator[None]:
        """Wait for, then hold until the block ends, the one decision lock of staged transaction
        ``txn_id`` (a transaction-level advisory lock: released by the commit, or by the
        session's death if the process dies holding it)."""
        with self.connection() as conn, conn.transaction():
            conn.execute(q.STAGED_DECISION_LOCK, (str(txn_id),))
            yield

    @contextmanager
    def partition_lock(
        self,
        dataset: DatasetRecord,
        items: Sequence[tuple[str, bool]],
        wait_s: float,
        *,
        what: str = "its partitions",
        overlapping: Callable[[LedgerEntry], bool] | None = None,
    ) -> Iterator[psycopg.Connection[Any]]:
        """Hold the dataset's writer lock SHARED plus the range locks ``items`` ((key, shared) in
        the order every writer takes them, see ``range_locks``), on one session that dies with the
        process.

        Writers of non-overlapping slices proceed side by side; a writer of an overlapping slice
        waits, and so does a whole-dataset writer (it takes the dataset lock exclusive). While
        waiting, the locks already taken are kept: all writers take them in one order, so no two
        wait on each other. ``overlapping`` picks, for the timeout's message, the open
        transactions that may be the ones in the way."""
        ds_key = str(dataset.dataset_id)
        keys = [f"{ds_key}|{key}" for key, _ in items]
        modes = [shared for _, shared in items]
        taken = 0
        with self.connection() as conn:
            deadline = time.monotonic() + wait_s
            shared_held = False
            try:
                self._acquire(conn, q.TRY_WRITER_LOCK_SHARED, ds_key, deadline, dataset, wait_s, "the whole dataset")
                shared_held = True
                delay, began = 0.02, time.monotonic()
                while True:
                    row = conn.execute(q.TRY_PARTITION_LOCKS, {"start": taken + 1, "keys": keys, "shared": modes}).fetchone()
                    taken += int(cast(DictRow, row)["taken"])
                    if taken >= len(keys):
                        _note_wait(dataset, what, began, delay != 0.02)
                        break
                    if time.monotonic() >= deadline:
                        raise ConcurrentWriteError(
                            f"dataset {dataset.key!r}: {what} overlap a write in progress by "
                            f"{self._holders(dataset, overlapping)}; waited {wait_s:.0f}s. "
                            "Retry when it finishes, or raise TRIDENT_WRITER_WAIT_SECONDS"
                        )
                    time.sleep(delay)
                    delay = min(delay * 2, 0.25)
                yield conn
            finally:
                try:
                    if taken:
                        conn.execute(q.PARTITION_UNLOCKS, (keys[:taken], modes[:taken]))
                    if shared_held:
                        conn.execute(q.WRITER_UNLOCK_SHARED, (ds_key,))
                except psycopg.Error as exc:  # the session died, and its locks with it
                    log.warning("partition locks of %s were already gone at release: %s", dataset.key, exc)

    def _holders(self, dataset: DatasetRecord, overlapping: Callable[[LedgerEntry], bool] | None) -> str:
        entries = [e for e in self.open_entries(dataset.dataset_id) if overlapping is None or overlapping(e)]
        return ", ".join(f"{e.txn_id} ({e.writer}, pid {e.pid} on {e.host})" for e in entries) or "another writer"

    def _acquire(
        self, conn: psycopg.Connection[Any], sql: str, key: str, deadline: float, dataset: DatasetRecord, wait_s: float, what: str
    ) -> None:
        delay, began = 0.02, time.monotonic()
        while not cast(DictRow, conn.execute(sql, (key,)).fetchone())["locked"]:
            if time.monotonic() >= deadline:
                raise ConcurrentWriteError(
                    f"dataset {dataset.key!r}: {what} is being written by another writer ({self._holders(dataset, None)}); "
                    f"waited {wait_s:.0f}s. Retry when it finishes, or raise TRIDENT_WRITER_WAIT_SECONDS"
                )
            time.sleep(delay)
            delay = min(delay * 2, 0.25)
        _note_wait(dataset, what, began, delay != 0.02)

    def acquire_commit_lock(self, conn: psycopg.Connection[Any], dataset: DatasetRecord, wait_s: float) -> None:
        """The dataset's commit lock, on the writer's lock session: partition writers serialise
        their Iceberg commit and ledger COMMIT under it (never their writes)."""
        with _named_faults():
            self._acquire(
                conn, q.TRY_COMMIT_LOCK, str(dataset.dataset_id), time.monotonic() + wait_s, dataset, wait_s, "its commit"
            )

    def release_commit_lock(self, conn: psycopg.Connection[Any], dataset: DatasetRecord) -> None:
        try:
            conn.execute(q.COMMIT_UNLOCK, (str(dataset.dataset_id),))
        except psycopg.Error as exc:  # the session died, and the lock with it
            log.warning("commit lock of %s was already gone at release: %s", dataset.key, exc)

    def reserve_row_indexes(self, dataset_id: uuid.UUID, n: int) -> int:
        """Reserve ``n`` consecutive ``__row_index`` values; returns the first."""
        with self.tx() as conn:
            row = conn.execute(q.RESERVE_ROW_INDEX, (n, dataset_id, n)).fetchone()
        assert row is not None
        return int(row["first"])

    def reserve_env_row_indexes(self, ds: DatasetRecord, n: int) -> int:
        """Reserve ``n`` consecutive ``__row_index`` values in the head of environment
        ``ds.environment`` (the writer's version of the dataset there); returns the first.

        Raises:
            StagedVersionConflictError: the environment has no live head of the dataset any more.
        """
        with self.tx() as conn:
            row = conn.execute(q.RESERVE_ENV_ROW_INDEX, (n, ds.workspace, ds.environment, ds.dataset_id, n)).fetchone()
        if row is None:
            raise StagedVersionConflictError(
                f"environment {ds.environment!r} no longer has a version of {ds.key!r} (promoted or dropped meanwhile): write again"
            )
        return int(row["first"])

    def check_lock(self, lock: psycopg.Connection[Any], dataset: DatasetRecord) -> None:
        """Fence: the lock's session must still be alive (a session lock lives exactly as long)."""
        try:
            lock.execute("SELECT 1")
        except psycopg.Error as exc:
            raise WriterLockLostError(
                f"the writer lock of {dataset.key!r} was lost (its Postgres session ended: {exc}); "
                "nothing was committed, and another writer may own the dataset now. Retry the write"
            ) from exc

    def open_txn(self, entry: LedgerEntry) -> LedgerEntry | None:
        """INTENT: record the open transaction and take its timestamp τ from Postgres' clock.

        A retry of an aborted transaction id reopens it; ``None`` means the id already committed.
        One statement (an upsert returning the row), so no transaction around it.
        """
        with self.connection() as conn:
            row = conn.execute(
                q.INSERT_OPEN_LEDGER,
                (
                    entry.txn_id,
                    entry.dataset_id,
                    entry.mode,
                    entry.writer,
                    entry.sink,
                    entry.requested_sink,
                    entry.clamped,
                    entry.route_reason,
                    json.dumps(entry.source_refs),
                    json.dumps(entry.metadata, default=str),
                    os.getpid(),
                    socket.gethostname(),
                ),
            ).fetchone()
        return LedgerEntry(**row) if row else None

    def commit_txn(
        self,
        entry: LedgerEntry,
        outcome: Outcome,
        *,
        watermarks: list[WatermarkRow] = (),  # type: ignore[assignment]
        provenance: dict[str, Any] | None = None,
        flip_to: str | None = None,
        conn: psycopg.Connection[Any] | None = None,
        reserved_indexes: bool = False,
        inline: InlineBlock | None = None,
    ) -> LedgerEntry:
        """COMMIT: ledger, dataset stats, schema version, sync log, watermarks and provenance in
        one Postgres transaction, so the control plane never half-records a write. ``flip_to``
        moves the dataset to another sink in the same transaction (a canary's flip), so a canary
        is committed exactly when its dataset lives where its copy is. ``conn`` is the writer
        lock's session: committing on it fences a writer whose lock died (the commit fails).
        ``reserved_indexes``: the write reserved its ``__row_index`` range (a partition write), so
        ``next_row_index`` only ever grows here (other partition writers reserve past it).
        ``inline``: the rows of an inlined write, stored in this same transaction (no sink change);
        a flush's COMMIT (``INLINE_FLUSH_META`` in its metadata) takes the blocks it moved out of
        the current version, in this same transaction too."""
        environment = entry.metadata.get(ENV_LEDGER_META)
        if environment:  # an environment's write: its head moves, production's record does not
            with self._tx_on(conn) as conn:
                return self._commit_env(conn, entry, outcome, str(environment), list(watermarks))
        with self._tx_on(conn) as conn:
            ds = conn.execute(q.GET_DATASET_BY_ID_FOR_UPDATE, (entry.dataset_id,)).fetchone()
            assert ds is not None
            if flip_to is not None:
                conn.execute(q.SET_DATASET_SINK, (flip_to, ds["iceberg_identifier"], entry.dataset_id))
            version = ds["schema_version"]
            if ds["schema"] != outcome.schema:
                version += 1
                conn.execute(q.INSERT_SCHEMA_VERSION, (entry.dataset_id, version, json.dumps(outcome.schema), entry.txn_id))
            row = _commit_ledger(conn, entry, outcome, version)
            conn.execute(
                q.UPDATE_DATASET_STATS_PARTITION if reserved_indexes else q.UPDATE_DATASET_STATS,
                (
                    outcome.row_count,
                    outcome.next_row_index,
                    json.dumps(outcome.schema),
                    version,
                    outcome.snapshot_id,
                    entry.txn_id,
                    row["committed_at"],
                    entry.dataset_id,
                ),
            )
            conn.execute(
                q.INSERT_SYNC_LOG,
                (entry.dataset_id, entry.txn_id, entry.sink, outcome.snapshot_id, True, outcome.rows_written, outcome.row_count),
            )
            if watermarks:
                partitioned = any(part for _, part, _, _ in watermarks)
                conn.execute(q.DROP_WHOLE_WATERMARKS if partitioned else q.DROP_PARTITION_WATERMARKS, (entry.dataset_id,))
            for source_id, part, watermark, source_txn in watermarks:
                conn.execute(q.UPSERT_WATERMARK, (entry.dataset_id, source_id, part, watermark, source_txn, entry.txn_id))
            if provenance is not None:
                conn.execute(q.UPSERT_PROVENANCE, (entry.dataset_id, json.dumps(provenance, default=str)))
            if inline is not None:
                block = conn.execute(
                    q.INSERT_INLINE_BLOCK, (entry.dataset_id, entry.txn_id, inline.first_row_index, inline.n_rows, inline.ipc)
                ).fetchone()
                assert block is not None
                conn.execute(q.SET_INLINE_THROUGH, (block["seq"], entry.dataset_id))
            through = entry.metadata.get(INLINE_FLUSH_META)
            if through is not None:
                conn.execute(q.MARK_INLINE_FLUSHED, {"flush": entry.txn_id, "ds": entry.dataset_id, "through": int(through)})
                conn.execute(q.SET_INLINE_FLUSHED, (int(through), entry.dataset_id))
        return LedgerEntry(**row)

    # -- the inlined tail -------------------------------------------------------------------
    def inline_state(self, dataset_id: uuid.UUID) -> InlineState:
        """The tail's unflushed rows and age, and whether a staged version waits."""
        with self.connection() as conn:
            row = cast(DictRow, conn.execute(q.INLINE_STATE, {"ds": dataset_id}).fetchone())
        return InlineState(rows=int(row["rows"]), staged=bool(row["staged"]), age_s=row["age_s"])

    def inline_rows(self, dataset_id: uuid.UUID) -> int:
        """How many rows are inlined and not flushed (counted block by block: what ``describe`` shows)."""
        with self.connection() as conn:
            return int(cast(DictRow, conn.execute(q.INLINE_ROWS, (dataset_id,)).fetchone())["rows"])

    def commit_inline(
        self,
        entry: LedgerEntry,
        outcome: Outcome,
        block: InlineBlock | None,
        expect: DatasetRecord,
        conn: psycopg.Connection[Any] | None = None,
    ) -> InlineCommit:
        """An inlined write in ONE call: its ledger row born ``committed`` with ``entry``'s τ, the
        dataset's stats, the sync log and the rows (``block``), provided the dataset is still as
        ``expect`` (the record its rows were stamped from) and no other writer holds its lock.
        ``conn``: the session of a writer lock this process holds (the call then proceeds under
        it, and committing on it fences a writer whose lock died); without one, the call takes
        the lock for its own transaction. ``InlineCommit.outcome`` says what happened.

        Raises:
            ControlPlaneUnavailableError: the control plane failed.
            WriterLockLostError: ``conn``'s session died (and the lock with it).
        """
        params = {
            **_small_commit_params(entry, outcome, expect),
            "n": outcome.rows_written,
            "sink": entry.sink,
            "next": outcome.next_row_index,
            "snapshot": outcome.snapshot_id,
            "first": None if block is None else block.first_row_index,
            "ipc": None if block is None else block.ipc,
        }
        with self._single_on(conn) as c:
            row = cast(DictRow, c.execute(q.INLINE_COMMIT, params).fetchone())
        if row["outcome"] != "committed":
            return InlineCommit(row["outcome"])
        done = _small_committed(entry, outcome, row["committed_at"], outcome.snapshot_id)
        tail = InlineState(rows=int(row["tail_rows"]), staged=False, age_s=row["tail_age_s"])
        return InlineCommit("committed", done, tail, row["block_seq"])

    def commit_pg_append(self, entry: LedgerEntry, outcome: Outcome, expect: DatasetRecord, rows: PgAppendRows) -> PgAppend:
        """A small append to a pg-sink dataset in ONE call (migrations/0014_pg_append.sql): its
        rows into the dataset's generation, their row block, the commit marker, the ledger row
        born ``committed``, the stats and the sync log, provided the dataset is still as ``expect``
        (the record the rows were stamped from, its latest commit at ``expect.snapshot_id``) and no
        other writer holds its lock. The call takes the lock for its own transaction.
        ``PgAppend.outcome`` says what happened (``InlineCommit``'s answers).

        Raises:
            SchemaMismatchError: Postgres refused a value (jsonb cannot hold it).
            ControlPlaneUnavailableError: the control plane failed.
        """
        params = {
            **_small_commit_params(entry, outcome, expect),
            "rows": outcome.row_count,
            "gen": rows.gen,
            "purge": rows.purge,
            "ids": "{" + ",".join(rows.ids) + "}",  # uuids: an array literal needs no quoting (a list's dumper escapes each)
            "data": rows.data,
            "block": rows.block,
            "schema": rows.schema,
            "outcome": json.dumps(outcome.__dict__),
        }
        try:
            with self.connection() as c:
                row = cast(DictRow, c.execute(q.PG_APPEND, params).fetchone())
        except ControlPlaneUnavailableError as exc:
            if isinstance(exc.__cause__, (psycopg.errors.DataError, psycopg.errors.UntranslatableCharacter)):
                raise SchemaMismatchError(f"Postgres refused a value of the input: {exc.__cause__}") from exc.__cause__
            raise
        if row["outcome"] != "committed":
            return PgAppend(row["outcome"])
        seq = int(row["seq"])
        return PgAppend("committed", _small_committed(entry, replace(outcome, snapshot_id=seq), row["committed_at"], seq), seq)

    def inline_tail(self, dataset_id: uuid.UUID) -> InlineTail:
        """The current version's tail and the snapshot it sits on, read in ONE statement, so a
        flush committing meanwhile is seen entirely or not at all (never a row twice or lost)."""
        with self.pool.connection() as conn:
            rows = conn.execute(q.INLINE_TAIL, (dataset_id,)).fetchall()
        blocks = [(int(r["n_rows"]), bytes(r["ipc"])) for r in rows if r["seq"] is not None]
        last = max((r["seq"] for r in rows if r["seq"] is not None), default=None)
        return InlineTail(rows[0]["snapshot_id"] if rows else None, blocks, last)

    def inline_tail_of(self, ds: DatasetRecord) -> InlineTail:
        """The tail ``ds`` names (its ``inline_flushed < seq <= inline_through``) on top of the
        snapshot it records: the version of the moment the record was read, however much later
        this runs (blocks committed since have a higher seq, blocks flushed since are still
        stored), so every dataset of a read resolved in one statement is read as of one moment."""
        if ds.inline_through <= ds.inline_flushed:
            return InlineTail(ds.snapshot_id, [], None)
        with self.pool.connection() as conn:
            rows = conn.execute(
                q.INLINE_TAIL_RANGE, {"ds": ds.dataset_id, "after": ds.inline_flushed, "through": ds.inline_through}
            ).fetchall()
        last = max((r["seq"] for r in rows), default=None)
        return InlineTail(ds.snapshot_id, [(int(r["n_rows"]), bytes(r["ipc"])) for r in rows], last)

    def inline_tail_at(self, dataset_id: uuid.UUID, snapshot_id: int | None, visible_at: datetime) -> InlineTail:
        """The tail of the version that became visible at ``visible_at`` (a committed
        transaction's ``committed_at``) on top of ``snapshot_id``."""
        with self.pool.connection() as conn:
            rows = conn.execute(q.INLINE_TAIL_AT, (dataset_id, visible_at, visible_at)).fetchall()
        last = max((r["seq"] for r in rows), default=None)
        return InlineTail(snapshot_id, [(int(r["n_rows"]), bytes(r["ipc"])) for r in rows], last)

    def purge_flushed_inline(self, dataset_id: uuid.UUID, before: datetime) -> int:
        """Delete tail blocks flushed before ``before`` (kept until then for time travel)."""
        with self.pool.connection() as conn:
            return conn.execute(q.PURGE_FLUSHED_INLINE, (dataset_id, before)).rowcount

    def stage_txn(
        self, entry: LedgerEntry, outcome: Outcome, base_snapshot_id: int | None, conn: psycopg.Connection[Any] | None = None
    ) -> LedgerEntry:
        """The write is durable on an audit branch, not published: the ledger says ``staged`` and
        the dataset's stats (what readers see) do not change. One statement: no transaction."""
        with self._single_on(conn) as c:
            row = c.execute(
                q.STAGE_LEDGER,
                (*_staged_values(outcome, base_snapshot_id), group_of(entry), entry.txn_id),
            ).fetchone()
        if row is None:
            raise StorageUnavailableError(f"ledger row {entry.txn_id} was not open when staging")
        return LedgerEntry(**row)

    def restage_txn(self, entry: LedgerEntry, outcome: Outcome, base_snapshot_id: int | None) -> LedgerEntry:
        """A staged version re-based onto its dataset's current version (``Sink.rebase_staged``):
        its new version, counts and base. One statement.

        Raises:
            StagedVersionConflictError: the version is no longer staged (published or discarded meanwhile).
        """
        with self.connection() as conn:
            row = conn.execute(
                q.RESTAGE_LEDGER,
                (*_staged_values(outcome, base_snapshot_id), entry.txn_id),
            ).fetchone()
        if row is None:
            raise StagedVersionConflictError(f"transaction {entry.txn_id} is no longer staged: it cannot be re-based")
        return LedgerEntry(**row)

    def reject_txn(self, txn_id: uuid.UUID, reason: str) -> None:
        with self.tx() as conn:
            conn.execute(q.REJECT_LEDGER, (reason[:4000], txn_id))

    def staged_entries_by_key(self, workspace: str, key: str) -> list[LedgerEntry] | None:
        """``staged_entries`` of the dataset ``key`` names, ``None`` when there is no such
        dataset: one query when it has some, two when it has none."""
        with self.connection() as conn:
            rows = conn.execute(q.STAGED_LEDGER_BY_KEY, (workspace, key)).fetchall()
        if rows:
            return [LedgerEntry(**r) for r in rows]
        return None if self.dataset(workspace, key) is None else []

    def staged_entries(self, dataset_id: uuid.UUID | None = None) -> list[LedgerEntry]:
        with self.connection() as conn:
            return [LedgerEntry(**r) for r in conn.execute(q.STAGED_LEDGER, (dataset_id, dataset_id))]

    def set_txn_location(self, txn_id: uuid.UUID, location: str) -> None:
        with self.connection() as conn:  # one statement: no transaction
            conn.execute(q.SET_LEDGER_LOCATION, (location, txn_id))

    def abort_txn(self, txn_id: uuid.UUID, error: str) -> None:
        """Mark the transaction aborted, owing a storage cleanup until ``cleanup_done``."""
        with self.tx() as conn:
            conn.execute(q.ABORT_LEDGER, (error[:4000], txn_id))

    def cleanup_done(self, txn_id: uuid.UUID) -> None:
        with self.tx() as conn:
            conn.execute(q.CLEANUP_DONE, (txn_id,))

    def pending_cleanups(self, workspace: str, dataset_id: uuid.UUID | None = None) -> list[LedgerEntry]:
        """Aborted transactions whose storage leftovers could not be removed yet, oldest first."""
        with self.connection() as conn:
            return [LedgerEntry(**r) for r in conn.execute(q.PENDING_CLEANUPS, (workspace, dataset_id, dataset_id))]

    def delete_dataset(self, dataset_id: uuid.UUID) -> None:
        """Forget a dataset: its record and everything keyed by it (the caller dropped its storage)."""
        self.execute(q.DELETE_DATASET, (dataset_id,))

    def commits_since(self, workspace: str, after: int, limit: int) -> list[tuple[int, str, LedgerEntry]]:
        """``workspace``'s committed transactions after commit sequence ``after``, in commit order:
        ``(sequence, dataset key, ledger entry)``, at most ``limit``."""
        rows = self.execute(q.COMMITS_SINCE, (workspace, after, limit))
        return [(r.pop("seq"), r.pop("dataset_key"), LedgerEntry(**r)) for r in rows]

    # -- watermarks, flags, pins --------------------------------------------------------------
    def watermarks(self, output_id: uuid.UUID, partition_keys: Sequence[str] = ("",)) -> dict[tuple[uuid.UUID, str], datetime]:
        """(source, output partition key) -> watermark, for the given partition keys of the
        output ('' is the whole output)."""
        with self.connection() as conn:
            if self.environment != PRODUCTION:  # the environment's own, where it wrote the output
                head = conn.execute(q.ENV_HEAD_WATERMARKS, (self.environment, output_id)).fetchone()
                if head is not None:
                    out = {}
                    for k, (mark, _txn) in (head["watermarks"] or {}).items():
                        source, part = k.split("|", 1)
                        if part in partition_keys:
                            out[(uuid.UUID(source), part)] = datetime.fromisoformat(mark)
                    return out
            rows = conn.execute(q.GET_WATERMARKS, (output_id, list(partition_keys)))
            return {(r["source_dataset_id"], r["partition_key"]): r["watermark"] for r in rows}

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        """Run one named query from ``queries`` (used by the router and the pg sink)."""
        with self.tx() as conn:
            cur = conn.execute(sql, params)
            return list(cur.fetchall()) if cur.description else []


GROUP_META = "trident.group"  # ledger metadata at INTENT: the transaction group a write stages for
PARTITION_META = "partition"  # ledger metadata of a partition write (what it replaced)


def group_of(entry: LedgerEntry) -> uuid.UUID | None:
    """The transaction group ``entry`` was written for (its INTENT metadata says), if any."""
    group = entry.metadata.get(GROUP_META)
    return uuid.UUID(str(group)) if group else None


def staged_outcome(outcome: Outcome) -> dict[str, Any]:
    """What a staged version's COMMIT records that the ledger's columns do not hold: a group
    publishes from the ledger alone, without opening a table."""
    return {"next_row_index": outcome.next_row_index, "schema": outcome.schema, "deleted": outcome.deleted}


def outcome_of_staged(entry: LedgerEntry, visible_at: datetime | None) -> Outcome:
    """The ``Outcome`` publishing staged ``entry`` records (see ``staged_outcome``)."""
    saved = entry.staged_outcome or {}
    return Outcome(
        rows_written=entry.rows_written or 0,
        row_count=entry.row_count or 0,
        next_row_index=int(saved.get("next_row_index") or 0),
        snapshot_id=entry.snapshot_id,
        schema=list(saved.get("schema") or []),
        skipped=entry.skipped or 0,
        preserved=entry.preserved or 0,
        deleted=int(saved.get("deleted") or 0),
        visible_at=visible_at,
    )


def _staged_values(outcome: Outcome, base_snapshot_id: int | None) -> tuple[Any, ...]:
    """What a staged version's ledger row records of it (``STAGE_LEDGER``/``RESTAGE_LEDGER``'s
    leading parameters): its counts, snapshot, base and the outcome its publish records."""
    return (
        outcome.rows_written,
        outcome.row_count,
        outcome.skipped,
        outcome.preserved,
        outcome.snapshot_id,
        base_snapshot_id,
        json.dumps(staged_outcome(outcome)),
    )


def _commit_ledger(conn: psycopg.Connection[Any], entry: LedgerEntry, outcome: Outcome, version: int) -> DictRow:
    """The ledger row's COMMIT (status, instant, counts, snapshot, schema version), inside the
    caller's transaction: what every commit of a version records, in production or an environment.

    Raises:
        StorageUnavailableError: the row was not open (or staged) any more.
    """
    row = conn.execute(
        q.COMMIT_LEDGER,
        (
            outcome.visible_at,
            outcome.rows_written,
            outcome.row_count,
            outcome.skipped,
            outcome.preserved,
            outcome.snapshot_id,
            version,
            entry.txn_id,
        ),
    ).fetchone()
    if row is None:
        raise StorageUnavailableError(f"ledger row {entry.txn_id} was not open at COMMIT")
    return row


def _small_commit_params(entry: LedgerEntry, outcome: Outcome, expect: DatasetRecord) -> dict[str, Any]:
    """The parameters both one-call writes (inlined, pg append) share: the ledger row's, and the
    record the rows were stamped from."""
    return {
        "txn": entry.txn_id,
        "ds": entry.dataset_id,
        "mode": entry.mode,
        "writer": entry.writer,
        "requested": entry.requested_sink,
        "clamped": entry.clamped,
        "reason": entry.route_reason,
        "tau": entry.started_at,
        "rows": outcome.row_count,
        "version": entry.schema_version,
        "refs": json.dumps(entry.source_refs),
        "meta": json.dumps(entry.metadata, default=str),
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "expect_next": expect.next_row_index,
        "expect_last": expect.last_txn_id,
        "snapshot": expect.snapshot_id,
    }


def _small_committed(entry: LedgerEntry, outcome: Outcome, at: datetime, snapshot_id: int | None) -> LedgerEntry:
    """``entry`` as a one-call write committed it at ``at``."""
    return replace(
        entry,
        committed_at=at,
        ended_at=at,
        rows_written=outcome.rows_written,
        row_count=outcome.row_count,
        skipped=0,
        preserved=0,
        snapshot_id=snapshot_id,
        pid=os.getpid(),
        host=socket.gethostname(),
    )


def _lock_lost(exc: psycopg.OperationalError) -> WriterLockLostError:
    return WriterLockLostError(
        f"the writer lock's Postgres session ended before COMMIT could be recorded ({exc}); the "
        "change may already be in its sink: `trident reconcile` (or the next write of the dataset) "
        "rolls it forward if so, else aborts it. Check `trident history` before retrying"
    )


LOCK_WAIT_LOG = "trident lock wait: dataset %r waited %.3f s for %s"


def _note_wait(dataset: DatasetRecord, what: str, began: float, waited: bool) -> None:
    """Log (INFO, logger ``trident``) a lock this writer had to wait for, and how long: how an
    operator sees writers of one dataset queue behind each other (bench/celery_load_bench.py
    counts these lines)."""
    if waited:
        log.info(LOCK_WAIT_LOG, dataset.key, time.monotonic() - began, what)
