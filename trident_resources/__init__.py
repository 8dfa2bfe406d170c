"""The trident: settings, control plane, lakehouse, pg sink, router, facade and IO manager."""

from .errors import (
    ConcurrentWriteError,
    DatasetNotFoundError,
    DuplicateKeyError,
    EmptyInputError,
    InvalidDatasetKeyError,
    InvalidFilterError,
    InvalidWriteError,
    NullKeyError,
    ReservedColumnError,
    SchemaMismatchError,
    SinkMismatchError,
    SqlNotAllowedError,
    StorageUnavailableError,
    TransactionConflictError,
    TridentError,
    InvalidReadError,
    KeyNotFoundError,
    MigrationError,
    StreamClosedError,
    UnsupportedBySinkError,
)
from .facade import Trident
from .results import Description, ReconcileReport, WriteResult
from .settings import TridentSettings

__all__ = [
    "InvalidReadError",
    "KeyNotFoundError",
    "MigrationError",
    "StreamClosedError",
    "UnsupportedBySinkError",
    "ConcurrentWriteError",
    "DatasetNotFoundError",
    "Description",
    "DuplicateKeyError",
    "EmptyInputError",
    "InvalidDatasetKeyError",
    "InvalidFilterError",
    "InvalidWriteError",
    "NullKeyError",
    "ReconcileReport",
    "ReservedColumnError",
    "SchemaMismatchError",
    "SinkMismatchError",
    "SqlNotAllowedError",
    "StorageUnavailableError",
    "TransactionConflictError",
    "Trident",
    "TridentSettings",
    "WriteResult",
]
