"""A loopback gate in front of the moto S3 server: records what crosses the wire and refuses
requests the way a real store would.

moto's server accepts any request, signed or not, with any key, so by itself a test could never
see "unsigned request" or "expired credential" fail. The gate forwards each request byte for byte
to moto and, first, applies a policy on the ``Authorization`` header's access key: unsigned ->
403 ``AccessDenied``; unknown key -> 403 ``InvalidAccessKeyId``; a key past its expiry -> 400
``ExpiredToken``. It also keeps every request's method, path and headers for assertions on the
wire (checksum headers, who signed what).
"""

from __future__ import annotations

import http.client
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

_KEY = re.compile(r"Credential=([^/,\s]+)/")


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    status: int = 0
    key: str | None = None
    at: float = field(default_factory=time.time)


@dataclass
class S3Gate:
    endpoint: str
    upstream: str
    keys: dict[str, float | None] = field(default_factory=dict)
    """Accepted access key ids -> expiry (epoch seconds) or None; empty = accept anything."""
    enforce: bool = False
    seen: list[Seen] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def allow(self, key: str, expires_at: float | None = None) -> None:
        with self.lock:
            self.keys[key] = expires_at
            self.enforce = True

    def refusal(self, headers: dict[str, str]) -> tuple[int, str] | None:
        if not self.enforce:
            return None
        auth = headers.get("authorization", "")
        match = _KEY.search(auth)
        if not auth or not match:
            return 403, "AccessDenied"
        with self.lock:
            if match.group(1) not in self.keys:
                return 403, "InvalidAccessKeyId"
            expiry = self.keys[match.group(1)]
        if expiry is not None and time.time() > expiry:
            return 400, "ExpiredToken"
        return None

    def requests(self, method: str | None = None) -> list[Seen]:
        with self.lock:
            return [s for s in self.seen if method is None or s.method == method]


def _read_body(handler: BaseHTTPRequestHandler) -> bytes:
    if handler.headers.get("Transfer-Encoding", "").lower() == "chunked":
        raw = bytearray()
        while True:
            line = handler.rfile.readline()
            raw += line
            size = int(line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while True:  # trailers, up to the blank line
                    trailer = handler.rfile.readline()
                    raw += trailer
                    if trailer in (b"\r\n", b"\n", b""):
                        return bytes(raw)
            raw += handler.rfile.read(size + 2)
    length = int(handler.headers.get("Content-Length") or 0)
    return handler.rfile.read(length) if length else b""


def _handler(gate: S3Gate) -> type[BaseHTTPRequestHandler]:
    up = urlsplit(gate.upstream)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _any(self) -> None:
            headers = {k.lower(): v for k, v in self.headers.items()}
            body = _read_body(self)
            match = _KEY.search(headers.get("authorization", ""))
            seen = Seen(self.command, self.path, headers, key=match.group(1) if match else None)
            with gate.lock:
                gate.seen.append(seen)
            refused = gate.refusal(headers)
            if refused is not None:
                status, code = refused
                payload = (
                    f"<?xml version='1.0'?><Error><Code>{code}</Code><Message>refused by the test gate</Message></Error>".encode()
                )
                seen.status = status
                self.send_response(status)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload if self.command != "HEAD" else b"")
                return
            assert up.hostname is not None
            conn = http.client.HTTPConnection(up.hostname, up.port, timeout=60)
            try:
                conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                for k, v in self.headers.items():
                    if k.lower() not in ("expect", "connection"):
                        conn.putheader(k, v)
                conn.endheaders()
                if body:
                    conn.send(body)
                response = conn.getresponse()
                data = response.read()
                seen.status = response.status
                self.send_response(response.status)
                for k, v in response.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length", "server", "date"):
                        self.send_header(k, v)
                # HEAD: the object's length, as upstream reported it (there is no body to count)
                length = response.getheader("Content-Length") if self.command == "HEAD" else None
                self.send_header("Content-Length", length or str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
            finally:
                conn.close()

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any

    return Handler


@contextmanager
def s3_gate(upstream: str) -> Iterator[S3Gate]:
    """Run a gate on 127.0.0.1 forwarding to ``upstream`` (the moto endpoint)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(S3Gate("", upstream)))
    gate = S3Gate(f"http://127.0.0.1:{server.server_address[1]}", upstream)
    server.RequestHandlerClass = _handler(gate)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="s3-gate", daemon=True)
    thread.start()
    try:
        yield gate
    finally:
        server.shutdown()
        server.server_close()
