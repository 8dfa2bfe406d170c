"""A loopback TCP proxy that a test can cut, take down and bring back: real network faults in front
of a real server (the S3 API server), without touching the server or mocking a client.

- ``cut()`` resets every open connection (a dropped network mid-request) and keeps accepting;
- ``down()`` also stops listening, so new connections are refused (the server is unreachable);
- ``up()`` listens again on the same port, so clients configured with the endpoint come back.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from types import TracebackType


class TcpProxy:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self._listener: socket.socket | None = None
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._accepting = threading.Event()
        self._thread: threading.Thread | None = None
        self.connections = 0  # accepted so far, so a test can tell traffic went through
        self.received = 0  # bytes the upstream server sent through the proxy, so a test can tell what a client fetched

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> TcpProxy:
        self.up()
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.down()

    def up(self) -> None:
        """Listen (again, on the same port once one was chosen)."""
        if self._listener is not None:
            return
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", self.port))
        s.listen(64)
        s.settimeout(0.05)
        self.port = s.getsockname()[1]
        self._listener = s
        self._accepting.set()
        self._thread = threading.Thread(target=self._accept_loop, args=(s,), daemon=True, name="tcp-proxy-accept")
        self._thread.start()

    def down(self) -> None:
        """Refuse new connections and reset the open ones."""
        self._accepting.clear()
        listener, self._listener = self._listener, None
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
        if listener is not None:
            listener.close()
        self.cut()

    def cut(self) -> None:
        """Reset every open connection (RST, as a dropped link or a killed peer would)."""
        with self._lock:
            conns, self._conns = self._conns, set()
        for c in conns:
            _reset(c)

    def _accept_loop(self, listener: socket.socket) -> None:
        while self._accepting.is_set():
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                _reset(client)
                continue
            client.settimeout(None)
            server.settimeout(None)
            with self._lock:
                if not self._accepting.is_set():
                    _reset(client)
                    _reset(server)
                    return
                self._conns |= {client, server}
                self.connections += 1
            for a, b, count in ((client, server, False), (server, client, True)):
                threading.Thread(target=self._pump, args=(a, b, count), daemon=True, name="tcp-proxy-pump").start()

    def _pump(self, src: socket.socket, dst: socket.socket, count: bool) -> None:
        try:
            while chunk := src.recv(65536):
                dst.sendall(chunk)
                if count:
                    with self._lock:
                        self.received += len(chunk)
        except OSError:
            pass
        finally:
            with self._lock:
                gone = src in self._conns
                self._conns.discard(src)
                self._conns.discard(dst)
            if gone:
                _reset(src)
                _reset(dst)


def _reset(sock: socket.socket) -> None:
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    with contextlib.suppress(OSError):
        sock.close()
