"""A REST catalog that expires snapshots only by its own maintenance (lakana answers 403 to a
commit removing one): discarding a staged version, writing one again under the same transaction
id (a Dagster step redelivered after its worker died) and ``maintain`` still work. The discarded
snapshot stays unreferenced with its files (deleting them would break a snapshot the catalog
still lists) until the catalog's maintenance expires it."""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from tests.conftest import backend_settings
from trident_resources import Trident


def _ids(t: Trident, key: str, **kw: object) -> list[int]:
    return sorted(t.read(key, columns=["id"], **kw).column("id").to_pylist())  # type: ignore[arg-type]


def test_a_staged_version_is_replaced_and_discarded_on_a_catalog_that_keeps_snapshots(
    request: pytest.FixtureRequest, trident_home: Path, pg_dsn: str
) -> None:
    with Trident(backend_settings(request, "rest", trident_home, pg_dsn, inline_max_rows=0)) as t:
        t.write("keep/a", pa.table({"id": [1, 2]}), mode="replace")
        txn = uuid.uuid4()
        first = t.write("keep/a", pa.table({"id": [3]}), mode="append", stage=True, txn_id=txn)
        again = t.write("keep/a", pa.table({"id": [4, 5]}), mode="append", stage=True, txn_id=txn)
        assert first.txn_id == again.txn_id == txn
        assert [e.txn_id for _, e in t.staged("keep/a")] == [txn]
        assert _ids(t, "keep/a", staged=txn) == [1, 2, 4, 5]  # the newer attempt replaced the first
        assert _ids(t, "keep/a") == [1, 2]
        t.discard("keep/a", txn)
        assert t.staged("keep/a") == [] and _ids(t, "keep/a") == [1, 2]
        other = t.write("keep/a", pa.table({"id": [6]}), mode="append", stage=True)
        t.publish("keep/a", other.txn_id)
        assert _ids(t, "keep/a") == [1, 2, 6]
        assert t.reconcile().aborted == []

        done = t.maintain("keep/a", older_than=timedelta(0), retain_last=1)
        assert done.expiry_refused is not None and "refused" in done.expiry_refused
        assert done.expired_snapshots == 0
        # nothing a kept snapshot uses was deleted: every committed version still reads whole
        versions = [e.txn_id for e in t.history("keep/a") if e.status == "committed"]
        assert [_ids(t, "keep/a", as_of=v) for v in versions] == [[1, 2, 6], [1, 2]]
