"""Many first writes into one new key folder at once (issue 8, item 7).

Dagster materialises the assets of a group concurrently; each first write creates the folder's
Iceberg namespace check-then-insert, and the losers of that race got a raw sqlalchemy
IntegrityError. A namespace someone else just created is success.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import backend_settings
from tests.support.helpers import table
from trident_resources import Trident, TridentSettings

WRITERS = 16


@pytest.fixture(params=["local", "rest"])
def shared_settings(request: pytest.FixtureRequest, trident_home: Path, pg_dsn: str) -> Iterator[TridentSettings]:
    yield backend_settings(request, request.param, trident_home, pg_dsn, writer_wait_seconds=30)


def test_concurrent_first_writes_under_one_new_folder(shared_settings: TridentSettings) -> None:
    """One Trident per thread (as separate runs would have), warmed up (connections and catalog
    open, so nothing staggers the threads), then released together by a barrier, twice."""
    tridents = [Trident(shared_settings) for _ in range(WRITERS)]
    try:
        for i, t in enumerate(tridents):
            t.write(f"warm/d{i}", table(k=[i]))
        for folder in ("fresh/group", "fresh/other"):
            barrier = threading.Barrier(WRITERS)
            errors: list[BaseException] = []

            def run(
                i: int, barrier: threading.Barrier = barrier, folder: str = folder, errors: list[BaseException] = errors
            ) -> None:
                try:
                    barrier.wait(timeout=60)
                    tridents[i].write(f"{folder}/d{i}", table(k=[i, i + 1]))
                except BaseException as exc:
                    errors.append(exc)

            threads = [threading.Thread(target=run, args=(i,)) for i in range(WRITERS)]
            for th in threads:
                th.start()
            for th in threads:
                th.join(timeout=180)
            assert not errors, [f"{type(e).__module__}.{type(e).__name__}: {e}" for e in errors]
            t = tridents[0]
            assert sorted(d.key for d in t.datasets() if d.key.startswith(folder)) == sorted(
                f"{folder}/d{i}" for i in range(WRITERS)
            )
            for i in range(WRITERS):
                assert t.read(f"{folder}/d{i}").num_rows == 2
    finally:
        for t in tridents:
            t.close()
