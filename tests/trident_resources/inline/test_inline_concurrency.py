"""Many processes inlining small appends into ONE dataset at once, with flushes (by threshold and
by hand) running beside them: afterwards every row is there exactly once, ``__row_index`` is
unique and dense over everything appended, and ``__row_id`` is unique.

Each writer writes for 10 s (30 s would say more, on a machine of its own: this one is shared),
hundreds of commits contending for the one writer lock."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa

from tests.support.helpers import iceberg_table, settings_env
from trident_resources import Trident, TridentSettings

REPO = Path(__file__).resolve().parents[3]
WRITERS = 16
SECONDS = 10.0
BATCH = 10


def _spawn(settings: TridentSettings, code: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIDENT_")}
    env |= settings_env(settings) | {"PYTHONPATH": str(REPO)}
    prog = "import time, pyarrow as pa\nfrom trident_resources import Trident\nt = Trident.from_env()\n" + textwrap.dedent(code)
    return subprocess.Popen([sys.executable, "-c", prog], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_sixteen_writers_and_flushes_lose_and_double_nothing(settings: TridentSettings) -> None:
    s = settings.model_copy(update={"inline_max_rows": 100, "inline_flush_rows": 400, "writer_wait_seconds": 120})
    with Trident(s) as t:
        t.write("conc/x", pa.table({"w": pa.array([-1], pa.int64()), "n": pa.array([0], pa.int64())}), mode="replace")
        writers = [
            _spawn(
                s,
                f"""
                end, n = time.monotonic() + {SECONDS}, 0
                while time.monotonic() < end:
                    t.write("conc/x", pa.table({{"w": pa.array([{w}] * {BATCH}, pa.int64()),
                                                 "n": pa.array(range(n, n + {BATCH}), pa.int64())}}), mode="append")
                    n += {BATCH}
                print(n)
                """,
            )
            for w in range(WRITERS)
        ]
        flusher = _spawn(
            s,
            f"""
            end, k = time.monotonic() + {SECONDS}, 0
            while time.monotonic() < end:
                k += t.flush("conc/x") is not None
                time.sleep(0.5)
            print(k)
            """,
        )
        written = {}
        for w, p in enumerate(writers):
            out, err = p.communicate(timeout=300)
            assert p.returncode == 0, err[-3000:]
            written[w] = int(out.split()[-1])
        out, err = flusher.communicate(timeout=300)
        assert flusher.returncode == 0, err[-3000:]
        assert int(out.split()[-1]) > 0, "the flusher should have flushed while writers wrote"
        report = t.reconcile()
        assert report.aborted == [] and report.still_running == []

        got = t.read("conc/x")
        total = 1 + sum(written.values())
        assert got.num_rows == total and t.describe("conc/x").row_count == total
        pairs = list(zip(got.column("w").to_pylist(), got.column("n").to_pylist(), strict=True))
        want = [(-1, 0)] + [(w, n) for w, k in written.items() for n in range(k)]
        assert sorted(pairs) == sorted(want)  # every appended row, exactly once
        assert sorted(got.column("__row_index").to_pylist()) == list(range(total))
        assert len(set(got.column("__row_id").to_pylist())) == total
        assert sum(1 for e in t.history("conc/x") if e.writer == "inline.flush" and e.status == "committed") > 1

        t.flush("conc/x")
        in_iceberg = iceberg_table(t, "conc/x").scan().to_arrow()
        assert in_iceberg.num_rows == total
        assert sorted(in_iceberg.column("__row_index").to_pylist()) == list(range(total))
