"""The ``trident`` console script's first step: ``trident sql`` answered by a warm SQL server of
this user and this settings context when one runs (``trident sql-server start``,
docs/cli.md#a-warm-sql-server), everything else by the full CLI (``trident_cli.main``).

A fresh ``trident sql`` spends ~1.5 s importing pyiceberg, Dagster's neighbours and pydantic
before DuckDB plans anything; this module imports only the standard library, so a command the
server answers costs a Python start-up and one local socket round trip on top of the query.

The server is found by a socket path derived from everything that decides the settings (every
``TRIDENT_*`` variable) in a folder only this user can use; it answers only its own user (the
peer's uid, checked by the kernel), and only a request whose settings context (the variables, the
current folder, which can decide the home) and code (the installed sources' stamp) are its own.
Anything else, and any failure to reach it, falls back to running the command here: the server
can make ``trident sql`` faster, never different.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import stat
import struct
import sys
from collections.abc import Mapping, Sequence
from importlib.util import find_spec
from pathlib import Path
from typing import Any

SERVER_VARIABLE = "TRIDENT_SQL_SERVER"  # "auto": start a server after a command it could have answered; "off": never use one
_SOURCES = ("trident_resources", "trident_cli")
_MAX_HEADER = 1 << 20


def context(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """What decides a command's settings: every ``TRIDENT_*`` variable (the server switch aside)."""
    env = os.environ if environ is None else environ
    return {k: v for k, v in sorted(env.items()) if k.startswith("TRIDENT_") and k != SERVER_VARIABLE}


def socket_dir(environ: Mapping[str, str] | None = None) -> Path:
    """This user's folder of server sockets: under ``$XDG_RUNTIME_DIR``, else under the system's
    temporary folder, named for the uid."""
    env = os.environ if environ is None else environ
    runtime = env.get("XDG_RUNTIME_DIR")
    base = Path(runtime) if runtime else Path(env.get("TMPDIR", "/tmp"))
    return base / f"trident-{os.getuid()}"


def socket_path(ctx: Mapping[str, str], environ: Mapping[str, str] | None = None) -> Path:
    """The socket of the server for settings context ``ctx`` (short: a socket path has ~100 bytes)."""
    digest = hashlib.sha256(json.dumps(dict(ctx), sort_keys=True).encode()).hexdigest()[:20]
    return socket_dir(environ) / f"sql-{digest}.sock"


def code_stamp() -> str:
    """The installed sources' stamp (every module file's path, size and mtime): a server started
    before the code changed answers no request (the client runs the command itself)."""
    h = hashlib.sha256()
    for name in _SOURCES:
        spec = find_spec(name)
        for root in (spec.submodule_search_locations or []) if spec is not None else []:
            for folder, dirs, files in os.walk(root):
                dirs[:] = sorted(d for d in dirs if d != "__pycache__")
                for f in sorted(files):
                    if f.endswith((".py", ".sql")):
                        st = os.stat(os.path.join(folder, f))
                        h.update(f"{folder}/{f}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def private_dir(path: Path, *, create: bool) -> bool:
    """Is ``path`` a folder of this user's that nobody else may enter (made so when ``create``)?
    Another user's socket there could answer our queries with anything."""
    if create:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) & 0o077 == 0


def send(conn: socket.socket, message: Mapping[str, Any], body: bytes = b"") -> None:
    """One message: a length-prefixed JSON header, then ``body`` (its length in the header)."""
    header = json.dumps({**message, "body": len(body)}).encode()
    conn.sendall(struct.pack("!I", len(header)) + header + body)


def receive(conn: socket.socket) -> tuple[dict[str, Any], bytes]:
    """The next message ``send`` sent (ConnectionError when the peer went away mid-message)."""
    (size,) = struct.unpack("!I", _exactly(conn, 4))
    if size > _MAX_HEADER:
        raise ConnectionError(f"a {size}-byte header is no message of ours")
    header = json.loads(_exactly(conn, size))
    return header, _exactly(conn, int(header.get("body", 0)))


def _exactly(conn: socket.socket, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = conn.recv(min(left, 1 << 20))
        if not chunk:
            raise ConnectionError("the peer closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def request(argv: Sequence[str]) -> dict[str, Any]:
    """What the server needs to run ``argv`` exactly as this process would."""
    out = sys.stdout
    width = None
    if out.isatty():
        try:
            width = os.get_terminal_size(out.fileno()).columns
        except OSError:
            width = None
    return {
        "argv": list(argv),
        "context": context(),
        "cwd": os.getcwd(),
        "stamp": code_stamp(),
        "terminal": out.isatty(),
        "width": width,
        "columns": os.environ.get("COLUMNS"),
        "no_color": os.environ.get("NO_COLOR"),
    }


def answered(argv: Sequence[str]) -> int | None:
    """The exit status of ``argv`` as the warm server ran it, its output written here; ``None``
    when no server of this context answered (nothing was written: run the command here)."""
    if os.environ.get(SERVER_VARIABLE, "").lower() == "off":
        return None
    path = socket_path(context())
    if not private_dir(path.parent, create=False) or not path.exists():
        return None
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(5.0)
            conn.connect(str(path))
            conn.settimeout(None)  # a query may run long; the server ends it or answers
            send(conn, request(argv))
            header, body = receive(conn)
            if header.get("status") != "done":
                return None  # another context or code, or busy elsewhere: the command runs here
            out, err = body[: header["stdout"]], body[header["stdout"] :]
    except (OSError, ValueError, KeyError):
        return None
    sys.stdout.buffer.write(out)
    sys.stdout.flush()
    sys.stderr.buffer.write(err)
    sys.stderr.flush()
    return int(header.get("code", 0))


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] == ["sql"]:
        code = answered(argv)
        if code is not None:
            sys.exit(code)
    from .main import main as full

    full()
