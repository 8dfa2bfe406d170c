"""Storage access modes against a REST catalog on loopback (lakana behind a thin vending/signing
proxy) and an S3 server (moto behind a gate that refuses unsigned, unknown and expired keys).

Nothing here is mocked: the proxy and the gate are real HTTP servers, the catalog is lakana, the
bytes land in moto, and every assertion about headers is about what crossed the wire.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest

from tests.conftest import make_settings
from tests.support.catalog_proxy import SIGNER_KEY, CatalogProxy, catalog_proxy
from tests.support.s3_gate import S3Gate, s3_gate
from trident_resources import Trident, TridentSettings
from trident_resources.core.errors import CatalogAuthenticationError, StorageCredentialsError
from trident_resources.core.failpoints import InjectedFault, armed

pytestmark = pytest.mark.usefixtures("iceberg_writes")  # about Iceberg storage access at each commit

if TYPE_CHECKING:
    from tests.support.rest_catalog import RestCatalogServer
    from tests.support.s3_server import S3Server

DELEGATION = "x-iceberg-access-delegation"


@pytest.fixture
def gate(s3: S3Server) -> Iterator[S3Gate]:
    with s3_gate(s3.endpoint) as g:
        yield g


def _proxy(rest: RestCatalogServer, gate: S3Gate, s3: S3Server, mode: str, **kw: Any) -> Any:
    return catalog_proxy(rest.uri, gate, region=s3.region, token=rest.token, mode=mode, **kw)


def _settings(
    home: Path, dsn: str, s3: S3Server, gate: S3Gate, proxy: CatalogProxy, rest: RestCatalogServer, **overrides: Any
) -> TridentSettings:
    values: dict[str, Any] = {
        "s3_endpoint": gate.endpoint,
        "s3_bucket": s3.bucket,
        "s3_region": s3.region,
        "s3_access_key_id": s3.access_key_id,
        "s3_secret_access_key": s3.secret_access_key,
        "catalog_uri": proxy.uri,
        "catalog_warehouse": rest.warehouse,
        "catalog_token": rest.token,
        "catalog_properties": {"prefix": rest.warehouse},
        "namespace_root": "bronze",
    }
    return make_settings(home, dsn, **(values | overrides))


def _signing_only(
    home: Path, dsn: str, s3: S3Server, gate: S3Gate, proxy: CatalogProxy, rest: RestCatalogServer
) -> TridentSettings:
    """Remote signing with no static keys at all: every request must carry the catalog's signature."""
    return _settings(
        home, dsn, s3, gate, proxy, rest, s3_credentials="remote-signing", s3_access_key_id=None, s3_secret_access_key=None
    )


def _rows(n: int, start: int = 0) -> pa.Table:
    return pa.table({"k": pa.array(range(start, start + n), pa.int64()), "v": [f"v{i}" for i in range(start, start + n)]})


def _refused(gate: S3Gate) -> list[Any]:
    return [s for s in gate.requests() if s.status in (400, 403)]


def test_static_sends_no_delegation_header_and_signs_with_its_own_keys(
    trident_home: Path, pg_dsn: str, s3: S3Server, gate: S3Gate, rest_catalog: RestCatalogServer
) -> None:
    gate.allow(s3.access_key_id)
    with _proxy(rest_catalog, gate, s3, "none") as proxy:
        with Trident(_settings(trident_home, pg_dsn, s3, gate, proxy, rest_catalog, s3_credentials="static")) as t:
            t.write("static/a", _rows(10))
            assert t.read("static/a").num_rows == 10
        assert proxy.requests and not [r for r in proxy.requests if DELEGATION in r[2]], (
            "static mode must not ask the catalog for delegated access"
        )
    assert gate.requests("PUT") and not _refused(gate)
    assert {s.key for s in gate.requests()} == {s3.access_key_id}


def test_vended_uses_the_catalogs_credentials_never_the_static_keys(
    trident_home: Path, pg_dsn: str, s3: S3Server, gate: S3Gate, rest_catalog: RestCatalogServer
) -> None:
    with _proxy(rest_catalog, gate, s3, "vend") as proxy:
        settings = _settings(trident_home, pg_dsn, s3, gate, proxy, rest_catalog, s3_credentials="vended")
        with Trident(settings) as t:
            t.write("vend/a", _rows(10))
            t.write("vend/a", _rows(5, 10), mode="append")
            assert t.read("vend/a").num_rows == 15
        assert {r[2].get(DELEGATION) for r in proxy.requests if "/tables" in r[1]} == {"vended-credentials"}
    assert gate.requests("PUT") and not _refused(gate)
    assert {s.key for s in gate.requests()} <= set(proxy.vended)


def test_vended_without_credentials_from_the_catalog_fails_by_name(
    trident_home: Path, pg_dsn: str, s3: S3Server, gate: S3Gate, rest_catalog: RestCatalogServer
) -> None:
    gate.allow(s3.access_key_id)  # static keys would work: they must not be used
    with _proxy(rest_catalog, gate, s3, "none") as proxy:
        with Trident(_settings(trident_home, pg_dsn, s3, gate, proxy, rest_catalog, s3_credentials="vended")) as t:
            with pytest.raises(StorageCredentialsError, match="vended no storage credentials"):
                t.write("vend/none", _rows(3))
            assert not t.exists("vend/none")
    assert not gate.requests("PUT"), "nothing may be written with keys the mode did not choose"


def test_vended_credentials_expiring_mid_stream_are_refreshed_and_the_write_lands(
    trident_home: Path, pg_dsn: str, s3: S3Server, gate: S3Gate, rest_catalog: RestCatalogServer
) -> None:
    with _proxy(rest_catalog, gate, s3, "vend", ttl_seconds=4.0) as proxy:
        settings = _settings(
            trident_home,
            pg_dsn,
            s3,
            gate,
            proxy,
            rest_catalog,
            s3_credentials="vended",
            s3_credential_refresh_seconds=2.0,
            row_group_bytes=4096,
        )
        with Trident(settings) as t:
            t.write("vend/stream", _rows(1))  # the table exists; the stream is a long append
            loads_before = len(proxy.vended)
            with t.ingest_stream("vend/stream", mode="append") as stream:
                deadline = time.monotonic() + 7.0
                start = 1
                while time.monotonic() < deadline:
                    stream.append(_rows(500, start))
                    start += 500
                    time.sleep(0.25)
            assert stream.result is not None and stream.result.rows_written == start - 1
            assert t.read("vend/stream").num_rows == start
        assert len(proxy.vended) - loads_before >= 3, f"credentials were not reloaded: {proxy.vended}"
    assert not _refused(gate), [(s.method, s.path, s.status) for s in _refused(gate)][:5]
    used = {s.key for s in gate.requests("PUT")}
    assert len(used) >= 3, f"every upload used the same credential: {used}"


def test_remote_signing_signs_every_request_through_the_catalog(
    trident_home: Path, pg_dsn: str, s3: S3Server, gate: S3Gate, rest_catalog: RestCatalogServer
) -> None:
    with _proxy(rest_catalog, gate, s3, "sign") as proxy:
        settings = _settings(trident_home, pg_dsn, s3, gate, proxy, rest_catalog, s3_credentials="remote-signing")
        with Trident(settings) as t:
            t.write("sign/a", _rows(20))
            t.write("sign/a", _rows(5, 20), mode="append")
            t.write("sign/a", _rows(3), mode="upsert", keys=["k"])  # copy-on-write: reads + rewrites
            assert t.read("sign/a").num_rows == 25
            with armed("write.before_commit"), pytest.raises(InjectedFault):  # abort: its files listed and deleted
                t.write("sign/a", _rows(7, 100), mode="append")
            assert t.read("sign/a", columns=["k"]).num_rows == 25
        assert {r[2].get(DELEGATION) for r in proxy.requests if "/tables" in r[1]} == {"remote-signing"}
        assert proxy.sign_requests
        methods = {b["method"] for b in proxy.sign_requests}
        assert {"PUT", "GET"} <= methods, methods
    assert gate.requests() and not _refused(gate)
    assert gate.requests("DELETE") and [s for s in gate.requests("GET") if "list-type=2" in s.path]
    assert {s.key for s in gate.requests()} == {SIGNER_KEY}, "a request reached S3 without the catalog's signature"


def test_remote_signing_without_a_signer_from_the_catalog_fails_by_name(
    trident_home: Path, pg_dsn: str, s3: S3Server, gate: S3Gate, rest_catalog: RestCatalogServer
) -> None:
    with _proxy(rest_catalog, gate, s3, "none") as proxy:
        settings = _settings(trident_home, pg_dsn, s3, gate, proxy, rest_catalog, s3_credentials="remote-signing")
        with Trident(settings) as t:
            with pytest.raises(StorageCredentialsError, match="did not enable remote signing"):
                t.write("sign/none", _rows(3))
    assert not gate.requests("PUT")


def test_modes_other_than_static_need_a_rest_catalog(trident_home: Path, pg_dsn: str) -> None:
    with pytest.raises(ValueError, match="needs a REST catalog"):
        make_settings(trident_home, pg_dsn, s3_credentials="vended")


def test_oauth2_token_comes_from_the_configured_identity_provider(
    trident_home: Path, pg_dsn: str, s3: S3Server, gate: S3Gate, rest_catalog: RestCatalogServer
) -> None:
    with _proxy(rest_catalog, gate, s3, "none") as proxy:
        settings = _settings(
            trident_home,
            pg_dsn,
            s3,
            gate,
            proxy,
            rest_catalog,
            catalog_token=None,
            catalog_credential="trident-client:s3cret",
            catalog_scope="lakekeeper",
            catalog_oauth2_server_uri=f"{proxy.uri}/oauth/token",
            catalog_audience="lakekeeper-api",
            catalog_resource="https://lakekeeper.example/catalog",
        )
        with Trident(settings) as t:
            t.write("oauth/a", _rows(4))
            assert t.read("oauth/a").num_rows == 4
        assert proxy.token_requests, "no token request reached the configured oauth2-server-uri"
        form = proxy.token_requests[0]
        assert form["grant_type"] == ["client_credentials"]
        assert form["client_id"] == ["trident-client"] and form["client_secret"] == ["s3cret"]
        assert form["scope"] == ["lakekeeper"]
        assert form["audience"] == ["lakekeeper-api"]
        assert form["resource"] == ["https://lakekeeper.example/catalog"]
        assert not [r for r in proxy.requests if r[1].startswith("/v1/oauth/tokens")]
        catalog_calls = [r for r in proxy.requests if r[1].startswith("/v1/")]
        assert catalog_calls and all(r[2].get("authorization") == f"Bearer {rest_catalog.token}" for r in catalog_calls)


def test_a_refused_oauth2_credential_is_a_named_error_at_startup(
    trident_home: Path, pg_dsn: str, s3: S3Server, gate: S3Gate, rest_catalog: RestCatalogServer
) -> None:
    with _proxy(rest_catalog, gate, s3, "none") as proxy:
        settings = _settings(
            trident_home,
            pg_dsn,
            s3,
            gate,
            proxy,
            rest_catalog,
            catalog_token=None,
            catalog_credential="revoked:s3cret",
            catalog_oauth2_server_uri=f"{proxy.uri}/oauth/token",
        )
        with pytest.raises(CatalogAuthenticationError) as info:
            Trident(settings)
        assert info.value.__cause__ is not None


def test_default_checksum_policy_sends_plain_signed_puts(trident_home: Path, pg_dsn: str, s3: S3Server, gate: S3Gate) -> None:
    """The headers on the wire: no aws-chunked body, no CRC trailer, no checksum-mode on GETs."""
    settings = make_settings(
        trident_home,
        pg_dsn,
        s3_endpoint=gate.endpoint,
        s3_bucket=s3.bucket,
        s3_region=s3.region,
        s3_access_key_id=s3.access_key_id,
        s3_secret_access_key=s3.secret_access_key,
        s3_prefix=f"wh-{uuid.uuid4().hex[:8]}",
    )
    assert settings.s3_checksum == "when_required"
    with Trident(settings) as t:
        t.write("checksum/a", _rows(1000))
        assert t.read("checksum/a").num_rows == 1000
    puts = gate.requests("PUT") + gate.requests("POST")
    assert puts
    for seen in puts:
        h = seen.headers
        assert "aws-chunked" not in h.get("content-encoding", ""), (seen.path, h)
        assert "x-amz-trailer" not in h and not any(k.startswith("x-amz-checksum-") for k in h), (seen.path, h)
    assert not [s for s in gate.requests("GET") if "x-amz-checksum-mode" in s.headers]


def test_when_supported_checksums_are_visible_on_the_wire(trident_home: Path, pg_dsn: str, s3: S3Server, gate: S3Gate) -> None:
    """The other setting, so the test above is known to be able to see a trailer."""
    settings = make_settings(
        trident_home,
        pg_dsn,
        s3_endpoint=gate.endpoint,
        s3_bucket=s3.bucket,
        s3_region=s3.region,
        s3_access_key_id=s3.access_key_id,
        s3_secret_access_key=s3.secret_access_key,
        s3_prefix=f"wh-{uuid.uuid4().hex[:8]}",
        s3_checksum="when_supported",
    )
    try:
        with Trident(settings) as t:
            t.write("checksum/b", _rows(1000))
        puts = gate.requests("PUT")
        assert any(
            "aws-chunked" in s.headers.get("content-encoding", "")
            or "x-amz-trailer" in s.headers
            or any(k.startswith("x-amz-checksum-") for k in s.headers)
            for s in puts
        ), [s.headers for s in puts][:2]
    finally:
        from trident_resources.sinks.iceberg.credentials import apply_checksum_policy

        apply_checksum_policy(make_settings(trident_home, pg_dsn))  # back to the default for later tests


def test_remote_signing_aborts_incomplete_uploads_through_the_catalog_without_static_keys(
    trident_home: Path, pg_dsn: str, s3: S3Server, gate: S3Gate, rest_catalog: RestCatalogServer
) -> None:
    moto = s3.boto3_client()  # behind the gate: plays the writer that was killed mid-file
    with _proxy(rest_catalog, gate, s3, "sign") as proxy:
        settings = _signing_only(trident_home, pg_dsn, s3, gate, proxy, rest_catalog)
        with Trident(settings) as t:
            t.write("sign/up", _rows(10))
            ds = t.control.dataset(t.workspace, "sign/up")
            table = t.driver.sinks["iceberg_native"].tables.table(ds)  # type: ignore[attr-defined]
            path = table.location().split("://", 1)[1].split("/", 1)[1]
            moto.create_multipart_upload(Bucket=s3.bucket, Key=f"{path}/data/{uuid.uuid4()}-00000.parquet")
            # an aborted write's cleanup (its files, its uploads) runs through the signer too
            with armed("write.before_commit"), pytest.raises(InjectedFault):
                t.write("sign/up", _rows(5, 10), mode="append")
            aborted = t.history("sign/up")[0]
            assert aborted.status == "aborted" and not aborted.cleanup_pending
            report = t.maintain("sign/up", uploads_older_than=timedelta(0))
            assert report.aborted_uploads == 1
    # this table's uploads: the bucket is the session's, and other tests' writers may leave theirs
    assert moto.list_multipart_uploads(Bucket=s3.bucket, Prefix=path).get("Uploads", []) == []
    assert [s for s in gate.requests("GET") if "uploads" in s.path], "the uploads were listed through the gate"
    assert [s for s in gate.requests("DELETE") if "uploadId=" in s.path], "the upload was aborted through the gate"
    assert not _refused(gate)
    assert {s.key for s in gate.requests()} == {SIGNER_KEY}, "a request reached S3 without the catalog's signature"


def test_remote_signing_cleans_up_an_aborted_first_write_through_the_catalog(
    trident_home: Path, pg_dsn: str, s3: S3Server, gate: S3Gate, rest_catalog: RestCatalogServer
) -> None:
    moto = s3.boto3_client()
    with _proxy(rest_catalog, gate, s3, "sign") as proxy:
        settings = _signing_only(trident_home, pg_dsn, s3, gate, proxy, rest_catalog)
        with Trident(settings) as t:
            # lakana has no staged creation, so a first write creates the (empty) table first and its
            # cleanup signs through that table's FileIO before the table is dropped. With a catalog
            # that stages creation (Lakekeeper) no table exists after the abort: see docs/operations.md ("Remote signing and cleanup").
            with armed("write.before_commit"), pytest.raises(InjectedFault):
                t.write("sign/first", _rows(10))
            assert not t.exists("sign/first")
            ds = t.control.dataset(t.workspace, "sign/first")
            assert ds is not None
            entry = t.control.history(ds.dataset_id)[0]
            assert entry.status == "aborted" and not entry.cleanup_pending, "its files were removed, not left pending"
    written = [s.key for s in gate.requests("PUT")]
    assert written and gate.requests("DELETE"), "the first write's data file was written and then deleted"
    leftovers = [o["Key"] for o in moto.list_objects_v2(Bucket=s3.bucket).get("Contents", []) if str(entry.txn_id) in o["Key"]]
    assert leftovers == []
    assert not _refused(gate)
    assert {s.key for s in gate.requests()} == {SIGNER_KEY}
