#!/usr/bin/env python
"""How far a ``replace`` travels inside the engine (not in CI): modules and hops from
``Trident.write`` to the ledger COMMIT.

One ``replace`` of a small table onto an existing ``iceberg_native`` dataset, in an embedded
Postgres and a local warehouse under a temporary home, is followed with ``sys.setprofile``: every
Python function call whose code lives in ``trident_resources`` is attributed to its module. From the
call of ``Trident.write`` until the control plane's ``commit_txn`` is entered it counts

- the distinct engine modules a call lands in;
- hops: calls whose callee lives in another engine module than its caller (a call from pyiceberg or
  pyarrow back into the engine counts from the last engine module on the stack), and of them the
  direct ones, whose immediate caller is engine code;
- calls into and out of the client module (the module that defines ``Trident``): a call out of it
  returns into it, so "out" is how often a write comes back to the hub;
- engine calls outside the client module handed the client itself as an argument (a spoke that
  takes the hub);
- the same three until the transaction's WRITE step starts (``Transaction.write``).

It finds ``Trident`` through the public package and ``commit_txn``/``Transaction.write`` by name, so
it runs unchanged on any layout of the engine's modules. Nothing here asserts: it is a report.

    python bench/replace_path.py            # a table of the numbers
    python bench/replace_path.py --path     # plus the module-to-module hops in order
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import uuid
from pathlib import Path
from types import FrameType
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

PACKAGE = "trident_resources"


class Follower:
    """A ``sys.setprofile`` hook that records engine-module transitions."""

    def __init__(self, client_module: str, client_type: type) -> None:
        self.client_module = client_module
        self.client_type = client_type
        self.handed_client: list[str] = []  # engine functions outside the client called with the client
        self.modules: list[str] = []  # distinct, in first-seen order
        self.hops: list[tuple[str, str]] = []
        self.direct = 0  # hops whose immediate caller is engine code (not pyiceberg calling back)
        self.before_write: tuple[int, ...] | None = None  # each count, when WRITE starts
        self.done = False

    def _module_of(self, frame: FrameType | None) -> str | None:
        while frame is not None:
            name = frame.f_globals.get("__name__", "")
            if name == PACKAGE or name.startswith(PACKAGE + "."):
                return str(name)
            frame = frame.f_back
        return None

    def counts(self) -> tuple[int, ...]:
        return (
            len(self.modules),
            len(self.hops),
            self.direct,
            sum(1 for _, callee in self.hops if callee == self.client_module),
            sum(1 for caller, _ in self.hops if caller == self.client_module),
            len(self.handed_client),
        )

    def _takes_client(self, frame: FrameType) -> bool:
        code = frame.f_code
        n = code.co_argcount + code.co_kwonlyargcount
        return any(isinstance(frame.f_locals.get(name), self.client_type) for name in code.co_varnames[:n])

    def _hop(self, frame: FrameType, callee: str) -> None:
        caller = self._module_of(frame.f_back)
        if caller is not None and caller != callee:
            self.hops.append((caller, callee))
            if frame.f_back is not None and frame.f_back.f_globals.get("__name__") == caller:
                self.direct += 1

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if self.done or event != "call":
            return
        callee = frame.f_globals.get("__name__", "")
        if not (callee == PACKAGE or callee.startswith(PACKAGE + ".")):
            return
        code = frame.f_code
        qualname = getattr(code, "co_qualname", code.co_name)
        if code.co_name == "commit_txn":
            self.done = True
            self._hop(frame, callee)
            if callee not in self.modules:
                self.modules.append(callee)
            return
        if self.before_write is None and qualname == "Transaction.write":
            self.before_write = self.counts()
        if callee != self.client_module and self._takes_client(frame):
            self.handed_client.append(f"{callee}.{qualname}")
        if callee not in self.modules:
            self.modules.append(callee)
        self._hop(frame, callee)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", action="store_true", help="print every hop in order")
    args = parser.parse_args()

    import pyarrow as pa

    from trident_resources import Trident, TridentSettings
    from trident_resources.control.embedded_pg import stop_embedded_postgres

    with tempfile.TemporaryDirectory(prefix="trident-replace-path-") as tmp:
        home = Path(tmp)
        settings = TridentSettings(home=home, workspace=f"b_{uuid.uuid4().hex[:8]}")
        t = Trident(settings)
        try:
            table = pa.table({"k": pa.array(range(100), pa.int64()), "v": pa.array([str(i) for i in range(100)])})
            t.write("bench/path", table, mode="replace", writer="pipeline.output")  # the dataset exists before the one followed
            follower = Follower(Trident.__module__, Trident)
            sys.setprofile(follower)
            try:
                t.write("bench/path", table, mode="replace", writer="pipeline.output")
            finally:
                sys.setprofile(None)
        finally:
            t.close()
            stop_embedded_postgres(home / "pg")
    if not follower.done:
        raise SystemExit("the followed replace never reached the control plane's commit_txn")
    pre, end = follower.before_write or (0,) * 6, follower.counts()
    labels = [
        "distinct engine modules",
        "module-to-module hops",
        "  of them direct (engine -> engine)",
        "calls into the client module",
        "calls out of the client module",
        "engine calls handed the client",
    ]
    print(f"client module: {follower.client_module}")
    print(f"{'':38}{'until WRITE':>12}{'until COMMIT':>14}")
    for label, a, b in zip(labels, pre, end, strict=True):
        print(f"{label:38}{a:>12}{b:>14}")
    print("handed the client:", ", ".join(dict.fromkeys(follower.handed_client)) or "none")
    print("modules:", ", ".join(m.removeprefix(PACKAGE + ".") for m in follower.modules))
    if args.path:
        for i, (src, dst) in enumerate(follower.hops, 1):
            print(f"{i:4} {src.removeprefix(PACKAGE + '.')} -> {dst.removeprefix(PACKAGE + '.')}")


if __name__ == "__main__":
    main()
