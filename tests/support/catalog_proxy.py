"""A thin loopback REST catalog in front of lakana that adds what lakana lacks: credential vending,
the Iceberg REST spec's S3 signer endpoint, and an OAuth2 token endpoint.

lakana sends ``config={}`` with every table, so alone it can only test static keys. This proxy
forwards every catalog request to lakana unchanged and, by ``mode``:

- ``vend``: injects into each table load/create response the ``config`` a vending catalog sends
  (``s3.access-key-id``/``secret``/``session-token`` minted fresh per load, with
  ``s3.session-token-expires-at-ms``), and registers the key with the S3 gate until that expiry;
- ``sign``: injects ``s3.remote-signing-enabled``/``s3.signer.uri``/``s3.signer.endpoint`` and
  serves ``POST /v1/aws/s3/sign``, signing with a key only it knows (the gate accepts that key);
- ``none``: passes lakana's empty config through (a catalog that provides nothing).

``POST /oauth/token`` answers a client-credentials grant with lakana's token and records the form.
Every request's headers are kept, so tests can assert what went over the wire.

With ``multi_commit``, the proxy also serves what lakana 0.20 lacks: the Iceberg REST
``POST /v1/{prefix}/transactions/commit`` (several tables' changes in one call, with an
``Idempotency-Key``), and lists it among the ``endpoints`` of ``/v1/config`` (lakana lists none).
It checks every table's requirements first and answers 409 without changing anything when one
fails; then it applies the changes to lakana one table at a time, under one lock, so no other
request through the proxy runs in between (lakana itself has no multi-table commit). A key seen
before is answered 204 without applying anything again. Every call is kept in ``multi_commits``.
"""

from __future__ import annotations

import http.client
import itertools
import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from pyiceberg.catalog.rest import DEFAULT_ENDPOINTS

from tests.support.s3_gate import S3Gate
from trident_resources.core.pyiceberg_compat import MULTI_TABLE_COMMIT

SIGNER_KEY = "signer-only-key"
_TABLE = re.compile(r"^/v1/[^/]+/namespaces/[^/]+/tables(/[^/?]+)?/?(\?.*)?$")


class _UnsignedPayload(S3SigV4Auth):
    """Sign headers only (the signer never sees the body), as remote signers do for uploads."""

    def payload(self, request: AWSRequest) -> str:
        return "UNSIGNED-PAYLOAD"


@dataclass
class CatalogProxy:
    uri: str
    upstream: str
    gate: S3Gate
    region: str
    mode: str = "none"
    ttl_seconds: float = 3600.0
    token: str = ""
    requests: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    token_requests: list[dict[str, list[str]]] = field(default_factory=list)
    sign_requests: list[dict[str, Any]] = field(default_factory=list)
    vended: list[str] = field(default_factory=list)
    multi_commit: bool = False
    multi_commits: list[dict[str, Any]] = field(default_factory=list)
    commit_lock: threading.Lock = field(default_factory=threading.Lock)
    _counter: Iterator[int] = field(default_factory=itertools.count)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def table_config(self) -> dict[str, str]:
        base = {"s3.endpoint": self.gate.endpoint, "s3.region": self.region, "s3.force-virtual-addressing": "false"}
        if self.mode == "vend":
            key = f"vended-{next(self._counter)}"
            expires = time.time() + self.ttl_seconds
            self.gate.allow(key, expires)
            with self.lock:
                self.vended.append(key)
            return base | {
                "s3.access-key-id": key,
                "s3.secret-access-key": "testing",
                "s3.session-token": f"session-{key}",
                "s3.session-token-expires-at-ms": str(int(expires * 1000)),
            }
        if self.mode == "sign":
            self.gate.allow(SIGNER_KEY)
            return base | {
                "s3.remote-signing-enabled": "true",
                "s3.signer.uri": self.uri,
                "s3.signer.endpoint": "v1/aws/s3/sign",
            }
        return {}

    def sign(self, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.sign_requests.append(body)
        headers = {k: ", ".join(v) for k, v in body["headers"].items()}
        request = AWSRequest(method=body["method"], url=body["uri"], headers=headers)
        _UnsignedPayload(Credentials(SIGNER_KEY, "testing"), "s3", body["region"]).add_auth(request)
        signed = {
            k: [v] for k, v in request.headers.items() if k.lower() in ("authorization", "x-amz-date", "x-amz-content-sha256")
        }
        return {"uri": body["uri"], "headers": signed}


def _handler(proxy: CatalogProxy) -> type[BaseHTTPRequestHandler]:
    up = urlsplit(proxy.upstream)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _reply(self, status: int, payload: bytes, content_type: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def _any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            with proxy.lock:
                proxy.requests.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()}))
            path = urlsplit(self.path).path
            if path == "/oauth/token" and self.command == "POST":
                form = parse_qs(body.decode())
                with proxy.lock:
                    proxy.token_requests.append(form)
                if form.get("client_id") == ["revoked"]:
                    return self._reply(401, b'{"error": "invalid_client", "error_description": "unknown client"}')
                token = json.dumps(
                    {
                        "access_token": proxy.token,
                        "token_type": "Bearer",
                        "expires_in": 3600,
                        "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
                    }
                )
                return self._reply(200, token.encode())
            if proxy.multi_commit and self.command == "POST" and path.endswith("/transactions/commit"):
                status, payload = _multi_commit(proxy, path, body, {k: v for k, v in self.headers.items()})
                return self._reply(status, payload)
            if path == "/v1/aws/s3/sign" and self.command == "POST":
                if proxy.mode != "sign":
                    return self._reply(
                        403, b'{"error": {"message": "signing disabled", "type": "ForbiddenException", "code": 403}}'
                    )
                return self._reply(200, json.dumps(proxy.sign(json.loads(body))).encode())
            assert up.hostname is not None
            conn = http.client.HTTPConnection(up.hostname, up.port, timeout=60)
            try:
                conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                for k, v in self.headers.items():
                    if k.lower() not in ("connection", "accept-encoding", "host", "x-iceberg-access-delegation"):
                        conn.putheader(k, v)
                conn.putheader("Host", f"{up.hostname}:{up.port}")
                conn.endheaders()
                if body:
                    conn.send(body)
                response = conn.getresponse()
                data = response.read()
                status = response.status
                content_type = response.getheader("Content-Type") or "application/json"
            finally:
                conn.close()
            loads_table = _TABLE.match(self.path) and (
                (self.command == "GET" and _TABLE.match(self.path).group(1))  # type: ignore[union-attr]
                or (self.command == "POST" and not _TABLE.match(self.path).group(1))  # type: ignore[union-attr]
            )
            if proxy.multi_commit and path == "/v1/config" and status == 200:
                doc = json.loads(data)
                doc["endpoints"] = [str(e) for e in DEFAULT_ENDPOINTS] + [MULTI_TABLE_COMMIT]
                data = json.dumps(doc).encode()
            if loads_table and status == 200:
                doc = json.loads(data)
                doc["config"] = {**doc.get("config", {}), **proxy.table_config()}
                data = json.dumps(doc).encode()
            self._reply(status, data, content_type)

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any

    return Handler


def _upstream(proxy: CatalogProxy, method: str, path: str, headers: dict[str, str], body: bytes = b"") -> tuple[int, bytes]:
    up = urlsplit(proxy.upstream)
    assert up.hostname is not None
    conn = http.client.HTTPConnection(up.hostname, up.port, timeout=60)
    try:
        sent = {"Content-Type": "application/json", "Host": f"{up.hostname}:{up.port}"}
        if "Authorization" in headers:
            sent["Authorization"] = headers["Authorization"]
        conn.request(method, path, body=body or None, headers=sent)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def _multi_commit(proxy: CatalogProxy, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    """``transactions/commit``: every table's requirements checked, then every change applied."""
    prefix = path[len("/v1/") : -len("/transactions/commit")].strip("/")
    doc = json.loads(body)
    key = next((v for k, v in headers.items() if k.lower() == "idempotency-key"), None)
    with proxy.commit_lock:
        replay = key is not None and any(c["key"] == key for c in proxy.multi_commits)
        proxy.multi_commits.append({"key": key, "headers": headers, "body": doc, "replay": replay})
        if replay:
            return 204, b""
        paths = []
        for change in doc["table-changes"]:
            ident = change["identifier"]
            namespace = "%1F".join(quote(part, safe="") for part in ident["namespace"])
            table_path = f"/v1/{prefix}/namespaces/{namespace}/tables/{quote(ident['name'], safe='')}"
            status, data = _upstream(proxy, "GET", table_path, headers)
            if status != 200:
                return status, data
            metadata = json.loads(data)["metadata"]
            for req in change.get("requirements", []):
                if req["type"] == "assert-ref-snapshot-id":
                    ref = metadata.get("refs", {}).get(req["ref"])
                    if (ref["snapshot-id"] if ref else None) != req.get("snapshot-id"):
                        return 409, _conflict(f"{ident['name']}: ref {req['ref']} moved")
                if req["type"] == "assert-table-uuid" and metadata["table-uuid"] != req["uuid"]:
                    return 409, _conflict(f"{ident['name']}: table uuid changed")
            paths.append(table_path)
        for change, table_path in zip(doc["table-changes"], paths, strict=True):
            status, data = _upstream(proxy, "POST", table_path, headers, json.dumps(change).encode())
            if status != 200:
                return status, data
    return 204, b""


def _conflict(message: str) -> bytes:
    return json.dumps({"error": {"message": message, "type": "CommitFailedException", "code": 409}}).encode()


@contextmanager
def catalog_proxy(
    upstream: str,
    gate: S3Gate,
    *,
    region: str,
    token: str,
    mode: str = "none",
    ttl_seconds: float = 3600.0,
    multi_commit: bool = False,
) -> Iterator[CatalogProxy]:
    """Run the proxy on 127.0.0.1 in front of the REST catalog at ``upstream``."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    proxy = CatalogProxy(f"http://127.0.0.1:{server.server_address[1]}", upstream, gate, region, mode, ttl_seconds, token)
    proxy.multi_commit = multi_commit
    server.RequestHandlerClass = _handler(proxy)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="catalog-proxy", daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        server.shutdown()
        server.server_close()
