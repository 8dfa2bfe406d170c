"""A writer SIGKILLed (``os._exit``, no cleanup) at every step of an inlined commit and of a flush:
afterwards, and after ``reconcile``, the dataset holds every row exactly once, as Trident reads
it and as the Iceberg table itself holds it after a flush."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from tests.support.helpers import iceberg_table, settings_env
from trident_resources import Trident, TridentSettings

REPO = Path(__file__).resolve().parents[3]
INLINE_STEPS = ["intent.after", "commit.before_ledger", "inline.committed"]
FLUSH_STEPS = [
    "intent.after",
    "write.file_flushed",
    "write.before_commit",
    "commit.before_catalog",
    "commit.before_ledger",
    "flush.committed",
]


def _child(settings: TridentSettings, failpoint: str, code: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIDENT_")}
    env |= settings_env(settings) | {"TRIDENT_FAILPOINTS": failpoint, "PYTHONPATH": str(REPO)}
    prog = "import pyarrow as pa\nfrom trident_resources import Trident\nt = Trident.from_env()\n" + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", prog], env=env, capture_output=True, text=True, timeout=120)


def _ids(t: Trident, key: str) -> list[int]:
    return sorted(t.read(key, columns=["id"]).column("id").to_pylist())


def _rows(lo: int, hi: int) -> pa.Table:
    return pa.table({"id": pa.array(range(lo, hi), pa.int64())})


@pytest.fixture
def t(settings: TridentSettings) -> Iterator[Trident]:
    tr = Trident(settings.model_copy(update={"inline_max_rows": 100}))
    yield tr
    tr.close()


@pytest.mark.parametrize("given_id", [False, True], ids=["one-statement", "intent-then-commit"])
@pytest.mark.parametrize("step", INLINE_STEPS)
def test_killed_inlined_commit_holds_every_row_once(t: Trident, step: str, given_id: bool) -> None:
    """A write with a txn id of its own is born committed in one statement; one given a txn id
    (which may be a retry) takes INTENT, then COMMIT: both are killed at every step."""
    t.write("c/a", _rows(0, 20), mode="replace")
    t.write("c/a", _rows(20, 25), mode="append")
    txn = uuid.uuid4()
    given = f", txn_id='{txn}'" if given_id else ""
    code = f"t.write('c/a', pa.table({{'id': pa.array(range(25, 30), pa.int64())}}), mode='append'{given})"
    child = _child(t.settings, f"{step}=exit", code)
    assert child.returncode == 137, child.stderr
    t.reconcile()
    committed = step == "inline.committed"
    want = list(range(30 if committed else 25))
    assert _ids(t, "c/a") == want
    d = t.describe("c/a")
    assert d.row_count == len(want) and d.inlined_rows == len(want) - 20
    latest = t.history("c/a")[0]
    if committed:
        assert latest.status == "committed" and latest.rows_written == 5 and latest.metadata.get("trident.inlined")
    elif given_id:
        assert (latest.txn_id, latest.status) == (txn, "aborted")  # its INTENT row, aborted by the reconciler
    assert [e.status for e in t.history("c/a") if e.status != "aborted"] == ["committed"] * (3 if committed else 2)
    # the next write continues the identity, then a flush puts every row in Iceberg once
    t.write("c/a", _rows(100, 102), mode="append")
    got = t.read("c/a")
    assert sorted(got.column("__row_index").to_pylist()) == list(range(len(want) + 2))
    assert t.flush("c/a") is not None
    assert sorted(iceberg_table(t, "c/a").scan().to_arrow().column("id").to_pylist()) == [*want, 100, 101]


@pytest.mark.parametrize("step", FLUSH_STEPS)
def test_killed_flush_holds_every_row_once(t: Trident, step: str) -> None:
    t.write("c/f", _rows(0, 20), mode="replace")
    for lo in range(20, 60, 10):
        t.write("c/f", _rows(lo, lo + 10), mode="append")
    before = t.read("c/f").sort_by("__row_index")
    child = _child(t.settings, f"{step}=exit", "t.flush('c/f')")
    assert child.returncode == 137, child.stderr
    # before reconcile: the reader sees every row once, whatever the flush left
    assert _ids(t, "c/f") == list(range(60))
    assert t.sql('select count(*) as n, count(distinct id) as d from "c/f"').to_pylist() == [{"n": 60, "d": 60}]
    t.reconcile()
    assert t.read("c/f").sort_by("__row_index").equals(before)
    t.flush("c/f")  # a second flush finishes (or finds nothing left)
    assert t.describe("c/f").inlined_rows == 0
    assert t.read("c/f").sort_by("__row_index").equals(before)
    assert sorted(iceberg_table(t, "c/f").scan().to_arrow().column("id").to_pylist()) == list(range(60))
