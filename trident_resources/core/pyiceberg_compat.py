"""Every pyiceberg internal Trident relies on, in ONE place.

pyiceberg 0.12 has no public API for these; each is used exactly as pyiceberg uses it itself.
``tests/trident_resources/test_architecture.py`` fails with a clear message if an upgrade removes one,
so the fix is here and nowhere else.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime
from functools import lru_cache
from typing import Any, cast

import pyarrow as pa
from fsspec import AbstractFileSystem
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.catalog.sql import IcebergTables, SqlCatalog
from pyiceberg.io import FileIO
from pyiceberg.io.fsspec import FsspecFileIO
from pyiceberg.io.pyarrow import PyArrowFileIO, _ConvertToIcebergWithoutIDs, _get_parquet_writer_kwargs, visit_pyarrow
from pyiceberg.manifest import DataFile, ManifestContent, ManifestEntry, ManifestEntryStatus, ManifestFile
from pyiceberg.schema import Schema
from pyiceberg.table import CommitTableResponse, CreateTableTransaction, DataScan, FileScanTask, Table, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Operation, Summary
from pyiceberg.typedef import EMPTY_DICT, Properties
from requests import Session
from sqlalchemy import select

from .recent import Recent

__all__ = [
    "ACCESS_DELEGATION_HEADER",
    "FsspecFileIOBase",
    "RestCatalogWithExplicitDelegation",
    "SqlCatalogReusingMetadata",
    "added_manifests_in_groups",
    "arrow_to_iceberg_without_ids",
    "create_branch_in",
    "fresh_pyarrow_filesystems",
    "is_sql_catalog",
    "name_commit_files",
    "overwrite_as",
    "parquet_writer_kwargs",
    "plan_live_files",
    "register_fsspec_scheme",
    "transaction",
    "transaction_io",
    "transaction_table",
]

ACCESS_DELEGATION_HEADER = "X-Iceberg-Access-Delegation"
FsspecFileIOBase = FsspecFileIO


def arrow_to_iceberg_without_ids(schema: pa.Schema) -> Schema:
    """An Arrow schema without field ids as an Iceberg schema (ids to be assigned by the caller);
    the conversion pyiceberg's catalogs apply to ``create_table(schema=<arrow>)``."""
    return cast(Schema, visit_pyarrow(schema, _ConvertToIcebergWithoutIDs()))


def parquet_writer_kwargs(table_properties: dict[str, str]) -> dict[str, Any]:
    """pyarrow ``ParquetWriter`` options (compression, page sizes...) from the table's
    ``write.parquet.*`` properties, exactly as pyiceberg's own writer derives them."""
    return _get_parquet_writer_kwargs(table_properties)


def is_sql_catalog(catalog: Any) -> bool:
    """Is ``catalog`` pyiceberg's SQL catalog (whose current metadata file one small query names)?"""
    return isinstance(catalog, SqlCatalog)


def sql_catalog_metadata_location(catalog: Any, identifier: tuple[str, ...]) -> str | None:
    """The metadata file a pyiceberg SQL catalog names for ``identifier`` now (``None``: no such
    table, or not a SQL catalog), read with one small query on the catalog's own engine, without
    parsing the metadata file as ``load_table`` does. Every commit writes a new metadata file, so
    an unchanged location means an unchanged table."""
    if not isinstance(catalog, SqlCatalog):
        return None
    namespace = Catalog.namespace_to_string(Catalog.namespace_from(identifier))
    name = Catalog.table_name_from(identifier)
    stmt = select(IcebergTables.metadata_location).where(
        IcebergTables.catalog_name == catalog.name,
        IcebergTables.table_namespace == namespace,
        IcebergTables.table_name == name,
    )
    with catalog.engine.connect() as conn:
        return conn.execute(stmt).scalar()


class SqlCatalogReusingMetadata(SqlCatalog):
    """pyiceberg's SQL catalog, except that a metadata file it has parsed (or written, by a
    commit) is not read and parsed again: every ``load_table`` still asks the catalog which file
    is current (the query pyiceberg's own load runs, so another process's commit is seen at once), but
    turns a file it knows into a table without opening it.

    Why: a write-audit-publish write loaded its table six times (write, stage commit, checks,
    publish, publish commit, describe), and each load read and parsed the whole metadata JSON,
    which grows with the table's history. A metadata file is never rewritten in place
    (every commit writes a new one, and ``commit_table`` swaps the catalog's pointer only if it
    still names the file the commit started from), so a file's parsed models stay right; they
    are frozen pydantic models that pyiceberg copies, never mutates. Kept for the most recently
    used ``METADATA_CACHED`` files."""

    METADATA_CACHED = 64

    def __init__(self, name: str, **properties: str) -> None:
        super().__init__(name, **properties)
        # Autocommit: every statement this catalog issues for Trident is a whole change on its own
        # (a commit is ONE ``UPDATE ... WHERE metadata_location = <the file it started from>``,
        # a table or namespace creation one INSERT, a drop one DELETE), and the rest are reads.
        # In a transaction each catalog call would be BEGIN, the statement, and COMMIT or ROLLBACK
        # on return to the pool: three round trips to Postgres for one.
        self.engine = self.engine.execution_options(isolation_level="AUTOCOMMIT")
        self._parsed: Recent[str, TableMetadata] = Recent(self.METADATA_CACHED)

    def _convert_orm_to_iceberg(self, orm_table: IcebergTables) -> Table:
        location, namespace, name = orm_table.metadata_location, orm_table.table_namespace, orm_table.table_name
        metadata = self._parsed.get(location) if location else None
        if metadata is None or location is None or not namespace or not name:
            table = super()._convert_orm_to_iceberg(orm_table)  # reads and parses the file (or names what is missing)
            self._parsed.put(table.metadata_location, table.metadata)
            return table
        return Table(
            identifier=(*Catalog.identifier_to_tuple(namespace), name),
            metadata=metadata,
            metadata_location=location,
            io=self._load_file_io(metadata.properties, location),
            catalog=self,
        )

    def _update_and_stage_table(
        self, current_table: Table | None, table_identifier: Any, requirements: tuple[Any, ...], updates: tuple[Any, ...]
    ) -> Any:
        """pyiceberg's, without the deep copy of the whole new metadata (``_staged_metadata``) for
        a change of an existing table; a creation is pyiceberg's own (it validates the result)."""
        if current_table is None:
            return super()._update_and_stage_table(current_table, table_identifier, requirements, updates)
        from pyiceberg.table import StagedTable
        from pyiceberg.table.locations import load_location_provider

        for requirement in requirements:
            requirement.validate(current_table.metadata)
        metadata = _staged_metadata(current_table.metadata, updates, current_table.metadata_location)
        version = self._parse_metadata_version(current_table.metadata_location) + 1
        location = load_location_provider(metadata.location, metadata.properties).new_table_metadata_file_location(version)
        return StagedTable(
            identifier=table_identifier,
            metadata=metadata,
            metadata_location=location,
            io=self._load_file_io(properties=metadata.properties, location=location),
            catalog=self,
        )

    def commit_table(self, table: Table, requirements: tuple[Any, ...], updates: tuple[Any, ...]) -> CommitTableResponse:
        """pyiceberg's commit; the metadata it wrote is remembered as the file's parsed content."""
        response = super().commit_table(table, requirements, updates)
        self._parsed.put(response.metadata_location, response.metadata)
        return response

    def commit_tables(self, changes: list[tuple[Table, tuple[Any, ...], tuple[Any, ...]]]) -> list[Table]:
        """Several tables' changes (each: the table as just loaded, requirements, updates) in ONE
        Postgres transaction: every new metadata file is written first, then every table's pointer
        swaps in one transaction, each only if it still names the file its change started from, so
        a reader of the catalog sees all of the changes or none (what the REST catalog's
        ``transactions/commit`` gives; pyiceberg's SQL catalog has no multi-table commit). Returns
        the tables as committed, in the order of ``changes`` (unchanged ones as given).

        Raises:
            CommitFailedException: a requirement does not hold, or a table changed meanwhile
                (nothing is committed; the metadata files written are left unreferenced).
        """
        from pyiceberg.exceptions import CommitFailedException
        from sqlalchemy import bindparam, update

        done: list[Table] = []
        swaps: list[tuple[int, Table, Any]] = []  # (position, the table as loaded, pyiceberg's StagedTable of its change)
        for table, requirements, updates in changes:
            staged = self._update_and_stage_table(table, table.name(), requirements, updates)
            done.append(table)
            if staged.metadata != table.metadata:
                self._write_metadata(metadata=staged.metadata, io=staged.io, metadata_path=staged.metadata_location)
                swaps.append((len(done) - 1, table, staged))
        if swaps:
            # the catalog's engine autocommits each statement: this connection runs one transaction,
            # its swaps sent as one batch (psycopg pipelines an executemany)
            rows = [
                {
                    "b_ns": Catalog.namespace_to_string(Catalog.namespace_from(current.name())),
                    "b_name": Catalog.table_name_from(current.name()),
                    "b_old": current.metadata_location,
                    "b_new": staged.metadata_location,
                }
                for _, current, staged in swaps
            ]
            swap = (
                update(IcebergTables)
                .where(
                    IcebergTables.catalog_name == self.name,
                    IcebergTables.table_namespace == bindparam("b_ns"),
                    IcebergTables.table_name == bindparam("b_name"),
                    IcebergTables.metadata_location == bindparam("b_old"),
                )
                .values(metadata_location=bindparam("b_new"), previous_metadata_location=bindparam("b_old"))
            )
            with self.engine.connect() as conn, conn.execution_options(isolation_level="READ COMMITTED").begin():
                if self.engine.dialect.supports_sane_multi_rowcount:
                    result: Any = conn.execute(swap, rows)
                    swapped = result.rowcount
                else:
                    swapped = sum(conn.execute(swap, row).rowcount for row in rows)
                if swapped < len(rows):  # leaving the block rolls every swap back
                    raise CommitFailedException(
                        f"{len(rows) - swapped} of {len(rows)} tables were updated by another process meanwhile"
                    )
        for at, _, new in swaps:
            self._parsed.put(new.metadata_location, new.metadata)
            done[at] = Table(
                identifier=new.name(), metadata=new.metadata, metadata_location=new.metadata_location, io=new.io, catalog=self
            )
        return done


def transaction_table(txn: Transaction) -> Table:
    """The table a transaction writes: for a table created in the same transaction (staged
    creation) only the transaction knows it, with the catalog's per-table storage access."""
    return txn._table


def transaction_io(txn: Transaction) -> FileIO:
    """The FileIO of the table a transaction writes (see ``transaction_table``)."""
    return transaction_table(txn).io


class _MemoTransaction(Transaction):
    """pyiceberg's ``Transaction`` whose ``table_metadata`` is computed once per staged state.

    pyiceberg 0.12 recomputes the property on every access: it replays the staged updates and
    ends in ``model_copy(deep=True)`` of the whole metadata, every snapshot included, and its
    snapshot producers read it ~15 times per commit. The cost of a one-row append therefore grew
    with the table's history (append #200 cost 4x append #10, most of it deep copies).
    The result depends only on the table's metadata and the staged updates, both replaced (never
    mutated) when they change, so it is remembered keyed on their identity; upstream's fix
    (apache/iceberg-python#3302, #3784) does the same. With nothing staged it IS the table's
    metadata (pyiceberg would return a deep copy of it). The models are frozen and pyiceberg
    derives new metadata by copying, never by mutating what it read."""

    _memo: tuple[TableMetadata, tuple[Any, ...], TableMetadata] | None = None

    @property
    def table_metadata(self) -> TableMetadata:
        if not self._updates:
            return self._table.metadata
        memo = self._memo
        if memo is not None and memo[0] is self._table.metadata and memo[1] is self._updates:
            return memo[2]
        computed = _staged_metadata(self._table.metadata, self._updates)
        self._memo = (self._table.metadata, self._updates, computed)
        return computed


class _MemoCreateTableTransaction(_MemoTransaction, CreateTableTransaction):
    """A staged table creation with ``_MemoTransaction``'s once-per-state metadata: its updates are
    never empty (the creation itself), so pyiceberg's own deep-copied the new table's metadata
    ~16 times per first write (every write of a new dataset, e.g. each dataset of a
    pipeline's first run, 0.1 s of its run)."""


def _staged_metadata(base: TableMetadata, updates: tuple[Any, ...], metadata_location: str | None = None) -> TableMetadata:
    """pyiceberg's ``update_table_metadata(base, updates, metadata_location=...)`` (no
    validation: as a ``Transaction`` calls it, and a catalog commit on an existing table)
    without its closing deep copy of the result. Each update derives new metadata by
    ``model_copy(update=...)`` of frozen models with new lists and dicts, so nothing of ``base``
    is shared mutably; the copy cost one whole-history copy per commit (a third of a one-row
    append's time after 1,000 snapshots), and a catalog commit made it twice."""
    from pyiceberg.table.update import _apply_table_update, _TableMetadataUpdateContext, _update_table_metadata_log
    from pyiceberg.utils.datetime import datetime_to_millis

    context = _TableMetadataUpdateContext()
    new = base
    for update in updates:
        new = _apply_table_update(update, new, context)
    if context.has_changes() and metadata_location:
        new = _update_table_metadata_log(new, metadata_location, base.last_updated_ms)
    if context.has_changes() and base.last_updated_ms == new.last_updated_ms:
        new = new.model_copy(update={"last_updated_ms": datetime_to_millis(datetime.now().astimezone())})
    new.spec().check_compatible(new.schema())
    new.sort_order().check_compatible(new.schema())
    return new


def transaction(table: Table) -> Transaction:
    """``table.transaction()``, with its metadata computed once per staged state (``_MemoTransaction``)."""
    return _MemoTransaction(table)


def memoized_creation(txn: CreateTableTransaction) -> Transaction:
    """The staged creation a catalog's ``create_table_transaction`` returned, as the same
    creation with its metadata computed once per staged state (``_MemoCreateTableTransaction``):
    built on the same staged table, it stages exactly the same initial updates."""
    return _MemoCreateTableTransaction(cast(Any, txn)._table)


def plan_live_files(scan: DataScan) -> list[FileScanTask]:
    """``scan.plan_files()`` without opening data manifests that hold no live file.

    An overwrite (a compaction, a keyed write, a delete) records the files it removes as DELETED
    entries in a manifest of its own, which stays in that snapshot's manifest list until the
    next commit drops it; pyiceberg's planner decodes it on every scan only to discard every
    entry. After compacting 1,000 small appends that manifest holds 1,000 entries, most of a
    read's planning time. The manifest list says how many files each manifest adds and keeps
    (a count it omits counts as "maybe"), so such a manifest is skipped unread. Server-side
    planning (a REST catalog that offers it) is left to pyiceberg."""
    if scan._should_use_server_side_planning():
        return list(scan.plan_files())
    snapshot = scan.snapshot()
    if snapshot is None:
        return []
    manifests = [
        m
        for m in snapshot.manifests(scan.io)
        if m.content != ManifestContent.DATA or m.has_added_files() or m.has_existing_files()
    ]
    return list(scan._manifest_planner.plan_files(manifests))


class RestCatalogWithExplicitDelegation(RestCatalog):
    """pyiceberg's REST catalog, except that ``X-Iceberg-Access-Delegation`` is sent only when the
    properties ask for it (``header.X-Iceberg-Access-Delegation``). pyiceberg's
    ``_config_headers`` adds ``vended-credentials`` with ``setdefault``, so a client that wants
    none (static keys) cannot say so through properties; this override removes the default."""

    def _config_headers(self, session: Session) -> None:
        super()._config_headers(session)
        if f"header.{ACCESS_DELEGATION_HEADER}" not in self.properties:
            session.headers.pop(ACCESS_DELEGATION_HEADER, None)


MULTI_TABLE_COMMIT = "POST /v1/{prefix}/transactions/commit"


def commits_tables_at_once(catalog: Any) -> bool:
    """Does ``catalog`` serve the Iceberg REST ``transactions/commit`` endpoint (changes of several
    tables in ONE atomic call)? Known from the endpoints its ``/v1/config`` listed, which
    pyiceberg keeps in ``_supported_endpoints`` (a server that lists none is taken to lack it)."""
    from pyiceberg.catalog.rest import Endpoint

    return isinstance(catalog, RestCatalog) and Endpoint.from_string(MULTI_TABLE_COMMIT) in catalog._supported_endpoints


def commit_tables(catalog: RestCatalog, changes: list[Any], idempotency_key: str) -> None:
    """``POST /v1/{prefix}/transactions/commit`` with ``changes`` (pyiceberg ``CommitTableRequest``s)
    and an ``Idempotency-Key``, on the catalog's own authenticated session, exactly as pyiceberg's
    ``commit_table`` posts one table's change; pyiceberg 0.12 has no client for it. Raises
    pyiceberg's ``CommitFailedException`` on 409 (a requirement no longer holds: nothing changed)
    and ``CommitStateUnknownException`` on a 5xx (it may or may not have been applied)."""
    from pyiceberg.catalog.rest import _handle_non_200_response
    from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException
    from requests import HTTPError

    body = "{" + '"table-changes": [' + ", ".join(c.model_dump_json() for c in changes) + "]}"
    response = catalog._session.post(
        catalog.url("transactions/commit", prefixed=True),
        data=body.encode("utf-8"),
        headers={"Idempotency-Key": idempotency_key, "Content-Type": "application/json"},
    )
    try:
        response.raise_for_status()
    except HTTPError as exc:
        _handle_non_200_response(
            exc,
            {
                409: CommitFailedException,
                500: CommitStateUnknownException,
                502: CommitStateUnknownException,
                504: CommitStateUnknownException,
            },
        )


def register_fsspec_scheme(io: FsspecFileIO, scheme: str, factory: Callable[[Properties], AbstractFileSystem]) -> None:
    """Make an ``FsspecFileIO`` build ``scheme``'s filesystem with ``factory`` (its per-instance
    ``_scheme_to_fs`` table, which pyiceberg copies from ``SCHEME_TO_FS`` for each FileIO)."""
    io._scheme_to_fs[scheme] = factory


def fresh_pyarrow_filesystems(io: PyArrowFileIO) -> Callable[[str, str | None], Any]:
    """A new filesystem cache for a ``PyArrowFileIO`` whose properties changed (new credentials):
    pyiceberg caches one pyarrow filesystem per scheme built by ``_initialize_fs`` from the
    properties at first use, exactly as its ``__setstate__`` rebuilds it."""
    return lru_cache(io._initialize_fs)


def added_manifests_in_groups(producer: Any, groups: Callable[[list[DataFile]], list[list[DataFile]]]) -> None:
    """Write the data files a snapshot producer adds into one manifest per group of ``groups``
    (pyiceberg writes them all into ONE manifest, of the table's default partition spec). A
    backfill of thousands of partitions then leaves manifests that each cover a narrow range of
    partitions, so that the manifest list's partition summaries let a one-partition scan or
    overwrite read (and rewrite) one small manifest instead of every entry. Every file of a group
    must share one partition spec, and the group's manifest is of that spec: compaction re-adds
    files of a partition written under an older spec, which pyiceberg's own added manifest (of the
    default spec) cannot hold. The producer writes each group exactly as it writes its own added
    manifest (same writer, entries, snapshot and naming), on every commit attempt."""
    if not (hasattr(producer, "_manifests") and hasattr(producer, "_added_data_files") and hasattr(producer, "spec")):
        raise RuntimeError("pyiceberg's snapshot producer changed shape: see pyiceberg_compat.added_manifests_in_groups")
    own = producer._manifests

    def manifests() -> list[ManifestFile]:
        added: list[DataFile] = producer._added_data_files
        parts = groups(added)
        default = producer._transaction.table_metadata.default_spec_id
        if len(parts) <= 1 and all(_spec_of(f, default) == default for f in added):
            return cast(list[ManifestFile], own())
        last_is_default = bool(parts) and _spec_of(parts[-1][0], default) == default
        mine = parts[:-1] if last_is_default else parts  # pyiceberg writes a last default-spec group itself
        written = []
        for part in mine:
            with producer.new_manifest_writer(spec=producer.spec(_spec_of(part[0], default))) as writer:
                for data_file in part:
                    writer.add(
                        ManifestEntry.from_args(
                            status=ManifestEntryStatus.ADDED,
                            snapshot_id=producer.snapshot_id,
                            sequence_number=None,
                            file_sequence_number=None,
                            data_file=data_file,
                        )
                    )
            written.append(writer.to_manifest_file())
        producer._added_data_files = parts[-1] if last_is_default else []
        try:
            return written + cast(list[ManifestFile], own())
        finally:
            producer._added_data_files = added  # the snapshot summary counts every added file

    producer._manifests = manifests


def _spec_of(data_file: DataFile, default: int) -> int:
    """A data file's partition spec id: pyiceberg sets it on files read from a manifest, not on
    ones built with ``DataFile.from_args``, whose spec is the table's default."""
    spec = getattr(data_file, "_spec_id", None)
    return default if spec is None else int(spec)


def manage_snapshots(table: Table) -> Any:
    """``table.manage_snapshots()`` (its own autocommit transaction) on a ``_MemoTransaction``:
    pyiceberg's read the transaction's metadata four times per publish, each a deep copy of the
    whole history."""
    from pyiceberg.table.update.snapshot import ManageSnapshots

    return ManageSnapshots(transaction=_MemoTransaction(table, autocommit=True))


def remove_branch_in(txn: Transaction, branch: str) -> None:
    """Remove ``branch`` in the same (not yet committed) transaction as its other changes, so a
    publish moves main and drops the audit branch in ONE metadata commit. pyiceberg only offers
    ``Table.manage_snapshots()`` (its own autocommit transaction); ``ManageSnapshots`` bound to
    our transaction stages its ref update there instead."""
    from pyiceberg.table.update.snapshot import ManageSnapshots

    ManageSnapshots(transaction=txn).remove_branch(branch).commit()


def use_schema_in(txn: Transaction, schema_id: int) -> None:
    """Make ``schema_id`` (one of the table's schemas) the current schema inside ``txn``, before the
    write's own schema changes: a table's current schema is shared by its branches, and a write
    builds on the schema of the version it writes onto (an environment's branch may have evolved
    the table's current schema; production's next write must not take those columns)."""
    from pyiceberg.table.update import SetCurrentSchemaUpdate

    txn._apply((SetCurrentSchemaUpdate(schema_id=schema_id),))


def move_branch_in(txn: Transaction, branch: str, snapshot_id: int) -> None:
    """Point ``branch`` at ``snapshot_id`` inside ``txn`` (created when missing), required to still
    be where the transaction's table says it is: pyiceberg's public ``set_current_snapshot`` moves
    only ``main``."""
    from pyiceberg.table.refs import SnapshotRefType

    update, requirement = txn._set_ref_snapshot(snapshot_id=snapshot_id, ref_name=branch, type=SnapshotRefType.BRANCH)
    txn._stage(update, requirement)


def create_branch_in(txn: Transaction, snapshot_id: int, branch: str) -> None:
    """Create ``branch`` at ``snapshot_id`` in the same (not yet committed) transaction as the
    snapshot written onto it, so a staged write is ONE metadata commit (its own catalog load
    and metadata file) instead of two. The commit's requirement is that the branch
    does not exist yet, where a separate branch commit's would be that it still pointed at the
    fork: nobody but this transaction writes its audit branch, so both say the same."""
    from pyiceberg.table.update.snapshot import ManageSnapshots

    ManageSnapshots(transaction=txn).create_branch(snapshot_id, branch).commit()


def overwrite_as(update: Any, operation: Operation) -> Any:
    """pyiceberg's overwrite producer (delete and add data files) of ``update`` (an
    ``UpdateSnapshot``) whose snapshot records ``operation``: ``overwrite()`` records OVERWRITE
    whatever the files say, and its summary code refuses REPLACE (``Operation not implemented``),
    so the totals are worked out as for an overwrite and only the recorded operation differs."""
    from pyiceberg.table.update.snapshot import _OverwriteFiles

    class _Overwrite(_OverwriteFiles):
        def _summary(self, snapshot_properties: dict[str, str] = EMPTY_DICT) -> Summary:
            summary = super()._summary(snapshot_properties)
            return Summary(operation=operation, **summary.additional_properties)

    return _Overwrite(
        operation=Operation.OVERWRITE,
        transaction=update._transaction,
        io=update._io,
        branch=update._branch,
        snapshot_properties=update._snapshot_properties,
    )


def name_commit_files(producer: Any, commit_uuid: uuid.UUID) -> None:
    """Name the manifests and the manifest list a snapshot producer writes after ``commit_uuid``
    (``<uuid>-m<n>.avro``, ``snap-<snapshot id>-<attempt>-<uuid>.avro``) instead of a random uuid,
    so that the files of a commit that never landed can be found and removed. Only
    ``overwrite()`` takes it as an argument; pyiceberg's own conflict retry draws a random one."""
    if not hasattr(producer, "commit_uuid"):
        raise RuntimeError("pyiceberg's snapshot producer has no commit_uuid any more: see pyiceberg_compat.py")
    producer.commit_uuid = commit_uuid
