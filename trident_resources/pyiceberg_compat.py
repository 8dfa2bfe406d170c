"""Every pyiceberg internal Trident relies on, in ONE place.

pyiceberg 0.12 has no public API for these; each is used exactly as pyiceberg uses it itself.
``tests/engine/test_pyiceberg_compat.py`` fails with a clear message if an upgrade removes one,
so the fix is here and nowhere else.
"""

from __future__ import annotations

import uuid
from typing import Any

import pyarrow as pa
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import _ConvertToIcebergWithoutIDs, _get_parquet_writer_kwargs, visit_pyarrow
from pyiceberg.schema import Schema
from pyiceberg.table import Transaction

__all__ = ["arrow_to_iceberg_without_ids", "name_commit_files", "parquet_writer_kwargs", "transaction_io"]


def arrow_to_iceberg_without_ids(schema: pa.Schema) -> Schema:
    """An Arrow schema without field ids as an Iceberg schema (ids to be assigned by the caller);
    the conversion pyiceberg's catalogs apply to ``create_table(schema=<arrow>)``."""
    return visit_pyarrow(schema, _ConvertToIcebergWithoutIDs())


def parquet_writer_kwargs(table_properties: dict[str, str]) -> dict[str, Any]:
    """pyarrow ``ParquetWriter`` options (compression, page sizes...) from the table's
    ``write.parquet.*`` properties, exactly as pyiceberg's own writer derives them."""
    return _get_parquet_writer_kwargs(table_properties)


def transaction_io(txn: Transaction) -> FileIO:
    """The FileIO of the table a transaction writes: for a table created in the same transaction
    (staged creation) only the transaction knows it, with the catalog's per-table credentials."""
    return txn._table.io


def name_commit_files(producer: Any, commit_uuid: uuid.UUID) -> None:
    """Name the manifests and the manifest list a snapshot producer writes after ``commit_uuid``
    (``<uuid>-m<n>.avro``, ``snap-<snapshot id>-<attempt>-<uuid>.avro``) instead of a random uuid,
    so that the files of a commit that never landed can be found and removed. Only
    ``overwrite()`` takes it as an argument; pyiceberg's own conflict retry draws a random one."""
    if not hasattr(producer, "commit_uuid"):
        raise RuntimeError("pyiceberg's snapshot producer has no commit_uuid any more: see pyiceberg_compat.py")
    producer.commit_uuid = commit_uuid
