"""A transaction group's Iceberg refs on a REST catalog: with ``transactions/commit`` (served by the
test's catalog proxy, since lakana 0.20 lacks it) every table's ``main`` moves in ONE catalog call
carrying the group id as its ``Idempotency-Key``, asserted on the wire; without it the tables move
one by one. Either way another engine reading the tables through the catalog sees the group."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.table import CommitTableRequest

from tests.conftest import make_settings
from tests.support.catalog_proxy import CatalogProxy, catalog_proxy
from tests.support.s3_gate import S3Gate, s3_gate
from trident_resources import Trident
from trident_resources.sinks.iceberg.refs import call_key

if TYPE_CHECKING:
    from tests.support.rest_catalog import RestCatalogServer
    from tests.support.s3_server import S3Server

KEYS = ["grp/orders", "grp/customers", "grp/revenue"]


@pytest.fixture
def gate(s3: S3Server) -> Iterator[S3Gate]:
    with s3_gate(s3.endpoint) as g:
        yield g


def _trident(trident_home: Path, pg_dsn: str, s3: S3Server, rest: RestCatalogServer, proxy: CatalogProxy) -> Trident:
    return Trident(
        make_settings(
            trident_home,
            pg_dsn,
            s3_endpoint=s3.endpoint,
            s3_bucket=s3.bucket,
            s3_region=s3.region,
            s3_access_key_id=s3.access_key_id,
            s3_secret_access_key=s3.secret_access_key,
            s3_prefix=f"wh-{uuid.uuid4().hex[:8]}",
            catalog_uri=proxy.uri,
            catalog_warehouse=rest.warehouse,
            catalog_token=rest.token,
            catalog_properties={"prefix": rest.warehouse},
            namespace_root="bronze",
        )
    )


def _external_rows(t: Trident, rest: RestCatalogServer, s3: S3Server, key: str) -> list[int]:
    """What another engine reads: the table loaded straight from lakana (not through the proxy,
    not through Trident), its current snapshot scanned by pyiceberg."""
    catalog = load_catalog(
        "external",
        type="rest",
        uri=rest.uri,
        token=rest.token,
        prefix=rest.warehouse,
        warehouse=rest.warehouse,
        **{
            "s3.endpoint": s3.endpoint,
            "s3.access-key-id": s3.access_key_id,
            "s3.secret-access-key": s3.secret_access_key,
            "s3.region": s3.region,
        },
    )
    ident = t.describe(key, storage=False).iceberg_identifier
    assert ident is not None
    return sorted(catalog.load_table(ident).scan().to_arrow().column("v").to_pylist())


def _table_posts(requests: list[tuple[str, str, dict[str, str]]]) -> list[str]:
    """Single-table commits (``POST .../namespaces/{ns}/tables/{table}``) among ``requests``."""
    return [p for m, p, _ in requests if m == "POST" and "/tables/" in p]


def test_rest_transactions_commit_moves_every_main_in_one_call(
    trident_home: Path, pg_dsn: str, s3: S3Server, rest_catalog: RestCatalogServer, gate: S3Gate
) -> None:
    with catalog_proxy(rest_catalog.uri, gate, region=s3.region, token=rest_catalog.token, multi_commit=True) as proxy:
        t = _trident(trident_home, pg_dsn, s3, rest_catalog, proxy)
        try:
            for k in KEYS:
                t.write(k, pa.table({"v": [1]}))
            tx = t.transaction().open()
            for k in KEYS:
                tx.write(k, pa.table({"v": [2, 2]}))
            assert [_external_rows(t, rest_catalog, s3, k) for k in KEYS] == [[1]] * 3  # staged: nobody sees it
            before = len(proxy.requests)
            done = tx.publish()
            during = proxy.requests[before:]
            assert done.refs_moved
            calls = [c for c in proxy.multi_commits if not c["replay"]]
            assert len(calls) == 1, calls
            call = calls[0]
            changes = call["body"]["table-changes"]
            # the Idempotency-Key header: derived from the group id and exactly these changes
            requests = [CommitTableRequest.model_validate(c) for c in changes]
            assert call["key"] == call_key(str(tx.group_id), requests)
            assert sorted(c["identifier"]["name"] for c in changes) == sorted(k.split("/")[-1] for k in KEYS)
            for change in changes:
                actions = [u["action"] for u in change["updates"]]
                assert actions == ["set-snapshot-ref", "remove-snapshot-ref"], change
                assert change["updates"][0]["ref-name"] == "main"
                assert {r["type"] for r in change["requirements"]} == {"assert-table-uuid", "assert-ref-snapshot-id"}
            # no table was committed on its own during the publish: the one call moved them all
            assert _table_posts(during) == [], _table_posts(during)
            assert [m for m, p, _ in during if p.endswith("/transactions/commit")] == ["POST"]
            # another engine reading through the catalog sees the whole group
            assert [_external_rows(t, rest_catalog, s3, k) for k in KEYS] == [[2, 2]] * 3
            assert [sorted(t.read(k).column("v").to_pylist()) for k in KEYS] == [[2, 2]] * 3
            for k in KEYS:
                assert not t.history(k)[0].ref_pending
        finally:
            t.close()


def test_without_transactions_commit_the_tables_move_one_by_one(
    trident_home: Path, pg_dsn: str, s3: S3Server, rest_catalog: RestCatalogServer, gate: S3Gate
) -> None:
    with catalog_proxy(rest_catalog.uri, gate, region=s3.region, token=rest_catalog.token) as proxy:
        t = _trident(trident_home, pg_dsn, s3, rest_catalog, proxy)
        try:
            for k in KEYS:
                t.write(k, pa.table({"v": [1]}))
            tx: Any = t.transaction().open()
            for k in KEYS:
                tx.write(k, pa.table({"v": [3]}))
            before = len(proxy.requests)
            assert tx.publish().refs_moved
            during = proxy.requests[before:]
            assert proxy.multi_commits == []
            assert len(_table_posts(during)) == len(KEYS)  # one commit per table
            assert [_external_rows(t, rest_catalog, s3, k) for k in KEYS] == [[3]] * 3
        finally:
            t.close()
