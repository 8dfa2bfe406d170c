"""Smoke-test both test servers end to end with pyiceberg.

Run from the repo root: `/work/venv/bin/python -m tests.support.smoke_catalogs`.
Exits non-zero on the first failure; prints timings and snapshot summaries.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from pathlib import Path

import pyarrow as pa
from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import NamespaceAlreadyExistsError

from tests.support.rest_catalog import ensure_lakana_venv, rest_catalog_server
from tests.support.s3_server import s3_server

SCHEMA = pa.schema(
    [
        pa.field("order_id", pa.int64(), nullable=False),
        pa.field("customer", pa.string()),
        pa.field("amount", pa.float64()),
    ]
)
ROWS = pa.table(
    {"order_id": [1, 2, 3], "customer": ["a", "b", "c"], "amount": [1.5, 2.5, 3.5]},
    schema=SCHEMA,
)


def create_namespaces(catalog: Catalog, namespace: tuple[str, ...]) -> None:
    """Create every level of `namespace`; a level that exists is fine."""
    for depth in range(1, len(namespace) + 1):
        with contextlib.suppress(NamespaceAlreadyExistsError):
            catalog.create_namespace(namespace[:depth])


def write_and_read(catalog: Catalog, namespace: tuple[str, ...], name: str) -> None:
    """Create a table, append in one transaction with a txn-id, read it back."""
    create_namespaces(catalog, namespace)
    table = catalog.create_table((*namespace, name), schema=SCHEMA)
    with table.transaction() as txn:
        txn.append(ROWS, snapshot_properties={"trident.txn-id": "x"})
    table = catalog.load_table((*namespace, name))
    got = table.scan().to_arrow().sort_by("order_id")
    assert got.num_rows == 3 and got.column("amount").to_pylist() == [1.5, 2.5, 3.5], got
    snapshot = table.current_snapshot()
    assert snapshot is not None and snapshot.summary is not None
    summary = snapshot.summary.model_dump()
    assert summary.get("trident.txn-id") == "x", summary
    print(f"  {'.'.join((*namespace, name))} @ {table.metadata_location}")
    print(f"  snapshot {snapshot.snapshot_id} summary: {summary}")


def smoke_rest(workdir: Path) -> None:
    """(a) pyiceberg against lakana-server: nested namespace, append, read."""
    start = time.monotonic()
    ensure_lakana_venv()
    print(f"[rest] lakana venv ready in {time.monotonic() - start:.1f}s")
    start = time.monotonic()
    with rest_catalog_server(workdir / "rest") as server:
        print(f"[rest] server up at {server.uri} in {time.monotonic() - start:.1f}s")
        catalog = load_catalog("rest", **server.properties)
        write_and_read(catalog, ("bronze", "default", "sales"), "orders")
        print(f"[rest] namespaces: {catalog.list_namespaces()}")
    with s3_server() as s3, rest_catalog_server(workdir / "rest-s3", s3=s3) as server:
        catalog = load_catalog("rest", **server.properties)
        write_and_read(catalog, ("silver", "default"), "orders")
        print(f"[rest+s3] data under {server.storage_root}")


def smoke_sql_on_s3(workdir: Path) -> None:
    """(b) pyiceberg SqlCatalog (sqlite) with table data in moto S3."""
    with s3_server() as s3:
        catalog = SqlCatalog(
            "sql",
            uri=f"sqlite:///{workdir / 'catalog.db'}",
            warehouse=f"s3://{s3.bucket}/wh",
            **s3.pyiceberg_properties(),
        )
        write_and_read(catalog, ("bronze", "default", "sales"), "orders")
        keys = [o["Key"] for o in s3.boto3_client().list_objects_v2(Bucket=s3.bucket)["Contents"]]
        print(f"[sql+s3] {len(keys)} objects in s3://{s3.bucket}, e.g. {keys[0]}")


def main() -> None:
    """Run both smokes in a throwaway directory."""
    with tempfile.TemporaryDirectory(prefix="trident-smoke-") as tmp:
        smoke_rest(Path(tmp))
        smoke_sql_on_s3(Path(tmp))
    print("OK")


if __name__ == "__main__":
    main()
