"""Issue 12: loading the Definitions root freezes what it imported and built (``gc.freeze``), so
full collections during a run skip those long-lived objects instead of walking them again."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_importing_the_definitions_root_freezes_its_objects() -> None:
    code = (
        "import gc; assert gc.get_freeze_count() == 0; "
        "import trident_assets.definitions as d; assert d.defs is not None; "
        "print(gc.get_freeze_count())"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.strip().splitlines()[-1]) > 100_000  # the imports and the Definitions
