"""Named errors. Each says what went wrong and what to do, because a data platform's users
read error messages in run logs long after the write that failed."""

from __future__ import annotations


class TridentError(Exception):
    """Base class of every error Trident raises on purpose."""


class InvalidDatasetKeyError(TridentError, ValueError):
    def __init__(self, key: object) -> None:
        super().__init__(
            f"invalid dataset key {key!r}: use '/'-separated lowercase words of [a-z0-9_], "
            "e.g. 'sales/orders' (no dots, quotes, spaces or empty segments)"
        )


class InvalidWriteError(TridentError, ValueError):
    """The call itself is malformed (unknown mode, keys missing where a mode needs them...)."""


class InvalidReadError(TridentError, ValueError):
    """A read that names a version the dataset does not have (``as_of``)."""


class InvalidArgumentError(TridentError, ValueError):
    """An argument of an operation that is neither a read nor a write (maintenance) is out of range."""


class InvalidFilterError(TridentError, ValueError):
    """A row_filter that does not parse or names unknown columns (pyiceberg filter syntax)."""


class ReservedColumnError(TridentError, ValueError):
    def __init__(self, columns: list[str]) -> None:
        super().__init__(
            f"input carries reserved column(s) {columns}: names starting with '__' belong to the engine "
            "(it stamps __row_index, __row_id and __created_at itself); drop or rename them"
        )


class SchemaMismatchError(TridentError, ValueError):
    """The input's schema cannot be written into the dataset's schema in this mode."""


class EmptyInputError(TridentError, ValueError):
    """The input has no schema at all (an empty iterable of batches)."""


class NullKeyError(TridentError, ValueError):
    def __init__(self, column: str, count: int) -> None:
        super().__init__(
            f"key column {column!r} has {count} null value(s) in the input: every row needs a key "
            "in this mode; fill or drop those rows"
        )


class DuplicateKeyError(TridentError, ValueError):
    def __init__(self, keys: list[str], examples: list[tuple[object, ...]], where: str = "input") -> None:
        shown = ", ".join(repr(e if len(e) > 1 else e[0]) for e in examples)
        super().__init__(
            f"duplicate key(s) {keys} in the {where}, e.g. {shown}: each key may appear once; deduplicate before writing"
        )


class ConcurrentWriteError(TridentError):
    """Another transaction holds the dataset longer than this writer was willing to wait."""


class DatasetNotFoundError(TridentError, LookupError):
    def __init__(self, key: str, workspace: str) -> None:
        super().__init__(f"dataset {key!r} does not exist in workspace {workspace!r}; write it first, or check TRIDENT_WORKSPACE")


class StorageUnavailableError(TridentError):
    """Object storage, the catalog or Postgres could not be reached; nothing was changed."""


class UnreadableDataError(TridentError):
    """A data file of the version being read is missing, truncated or corrupt; the ledger and the
    other versions are intact. The engine's error is the cause."""


class ResourceLimitError(TridentError):
    """The write's merge ran out of its DuckDB memory limit (``TRIDENT_DUCKDB_MEMORY_LIMIT``), and
    spilling could not make room; nothing was committed. The DuckDB error is the cause."""


class WriteFailedError(TridentError):
    """DuckDB or Arrow refused something inside the write that no earlier check caught; nothing was
    committed, and the engine's error is the cause (its class and first line are in the message)."""


class MaintenanceFailedError(TridentError):
    """Compacting or expiring a dataset's versions failed inside the table library in a way no
    earlier check names; nothing changed (compaction commits one snapshot or none), and the
    library's error is the cause (its class and first line are in the message)."""


class WriterLockLostError(ConcurrentWriteError):
    """The session holding this writer's dataset lock died, so another writer may own the dataset
    now: the write stops before its commit instead of racing it."""


class StagedVersionConflictError(TridentError):
    """A staged version cannot be published: the dataset's published version moved since it was
    staged, and publishing would silently drop that change."""


class ChecksFailedError(TridentError):
    """Blocking checks failed on a staged version: it was not published (readers still see the
    previous version); the staged txn id is kept for inspection, then publish or discard."""


class TransactionGroupError(TridentError):
    """A multi-dataset transaction (a group) refused a write or an operation: a partition write, a
    second write of one dataset, a write after it published or was discarded, a group id that names
    no group, or a single publish or discard of one of its members (the group decides them all)."""


class TransactionConflictError(TridentError):
    """The Iceberg commit kept conflicting with concurrent commits after every retry."""


class SqlNotAllowedError(TridentError, ValueError):
    """A read-only SQL query tried to write, attach, install or read outside the datasets."""


class UnknownSqlTableError(SqlNotAllowedError):
    """A read-only SQL query names a table that is not one of its datasets; ``name`` is the name as
    the query wrote it (dotted when qualified), so the message can point at the key it meant."""

    def __init__(self, message: str, *, name: str) -> None:
        super().__init__(message)
        self.name = name


class SinkMismatchError(TridentError):
    """A write resolved to a sink other than where the dataset's rows live."""


class DatasetChangedError(TridentError):
    """A pg-sink read found the dataset at another version than the one it was opened on: the pg
    sink keeps only its current version, so rows of the planned one are gone (a replace and a
    later write purge them). Read again; ``read`` and SQL retry on their own."""


class UnsupportedBySinkError(TridentError):
    """The dataset's sink cannot do this (e.g. time travel on the pg sink); the message says which can."""


class MigrationError(TridentError):
    """A canary/migration could not run (wrong source sink, empty dataset...); nothing was changed."""


class StreamClosedError(TridentError):
    """``append`` on an ingest stream that has already committed, aborted or failed."""


class KeyNotFoundError(TridentError, LookupError):
    """A row edit named a key the dataset does not have."""


class PinNotFoundError(TridentError, LookupError):
    """``clear_pin`` of a dataset key that has no pin in this workspace: nothing was cleared (so
    a typo'd key is not reported as "cleared" while the real pin stays in force)."""


class TridentClosedError(TridentError):
    """The ``Trident`` was closed (``close()``, or the end of its ``with`` block) and then used: its
    connection pool is gone. Open a new one; nothing was read or written."""


class FlagNotFoundError(TridentError, LookupError):
    """``clear_flag`` of a writer that has no flag in this workspace: nothing was cleared."""


class SqlTimeoutError(TridentError):
    """A read-only SQL query ran longer than ``TRIDENT_SQL_TIMEOUT_SECONDS`` and was interrupted."""


class SqlResultTooLargeError(TridentError):
    """A read-only SQL query's result exceeded ``TRIDENT_SQL_MAX_ROWS`` or ``TRIDENT_SQL_MAX_BYTES``."""


class ControlPlaneUnavailableError(StorageUnavailableError):
    """The control-plane Postgres refused or could not be reached (authentication failed, no such
    database, nobody listening), or went away during an operation (server stopped, connection
    cut); the message says which, the driver's error is the cause, and a write that met it
    committed nothing."""


class SqlError(TridentError, ValueError):
    """A read-only SQL query that DuckDB could not run (binder, conversion, runtime...); the
    DuckDB error is chained as the cause, and the message is its first line."""


class EmbeddedPostgresBusyError(TridentError):
    """``trident pg stop`` refused: a write holds a dataset's writer lock on the embedded Postgres
    (stopping would abort it); the message names the write and the way out (wait, or ``--force``)."""


class NotEmbeddedPostgresError(TridentError):
    """``trident pg start/stop`` while ``TRIDENT_PG_DSN`` names the control plane: that server is
    not Trident's to start or stop, so nothing was done."""


class PartitionError(TridentError, ValueError):
    """A partitioned write or read the trident cannot honour as asked (an undeclared partition
    column, rows outside the partition being written, a partitioning that differs from the
    dataset's); the message says what to declare. Nothing was written."""


class StorageCredentialsError(TridentError):
    """The storage access mode chosen by ``TRIDENT_S3_CREDENTIALS`` got nothing usable from the
    catalog (no vended credentials, no signer) or the catalog stopped providing it. Nothing falls
    back to static keys or unsigned requests: fix the warehouse's storage profile or the mode."""


class CatalogAuthenticationError(TridentError):
    """The REST catalog (or the OAuth2 identity provider in front of it) refused Trident's
    credential or token; check ``TRIDENT_CATALOG_CREDENTIAL``/``_TOKEN`` and the OAuth2 settings."""


class TableOwnershipError(TridentError):
    """The Iceberg table at a dataset's identifier was not created by this control plane (its
    ``trident.dataset-id`` property is missing or names another dataset); writing to it would stamp
    identity on rows Trident does not own. ``trident adopt KEY`` takes it over deliberately."""


class InvalidSettingsError(TridentError, ValueError):
    """A ``TRIDENT_*`` variable holds a value the settings refuse (a workspace that is not one
    lowercase word, a number that is not a number...); the message names each variable and why,
    and pydantic's error is the cause."""


class InvalidEnvironmentNameError(TridentError, ValueError):
    """A name given for an environment is not one (lowercase letters, digits, '-', '_'; 1-63)."""


class EnvironmentNotFoundError(TridentError, LookupError):
    """No environment of that name exists in this workspace (see `trident env list`)."""


class EnvironmentConflictError(TridentError):
    """Promoting an environment would lose a change production made since the environment
    branched (both changed the same rows, or either side replaced the dataset): nothing is
    promoted. The message names each conflicting dataset and what to do."""


class EnvironmentUnsupportedError(TridentError):
    """A write an environment cannot take (a pg-sink dataset, a staged or partition write, a
    transaction group), refused before anything is written; or an environment operation asked
    of production (``main``)."""
