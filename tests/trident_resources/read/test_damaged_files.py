"""A data file that is missing, truncated or corrupt is a named error on every read path, and the
versions that do not use it stay readable (found by damaging real files in a real warehouse)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.helpers import table
from trident_resources import Trident, TridentError, UnreadableDataError, WriteFailedError


def _damage(t: Trident, key: str, how: str) -> None:
    files = [Path(f.removeprefix("file://")) for f in t.scan_plan(key).files]
    assert files
    for f in files:
        if how == "missing":
            f.unlink()
        else:
            f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])


@pytest.mark.parametrize("how", ["missing", "truncated"])
def test_a_damaged_data_file_is_named_on_every_read_path(trident: Trident, how: str) -> None:
    t = trident
    first = t.write("dmg/a", table(k=[1, 2], v=["a", "b"]))
    t.write("dmg/a", table(k=list(range(100)), v=[str(i) for i in range(100)]))
    _damage(t, "dmg/a", how)

    reads: dict[str, Callable[[], object]] = {
        "read": lambda: t.read("dmg/a"),
        "read columns": lambda: t.read("dmg/a", columns=["k"]),
        "stream": lambda: t.stream("dmg/a").read_all(),
    }
    for what, op in reads.items():
        with pytest.raises(UnreadableDataError, match="dmg/a") as err:
            op()
        assert err.value.__cause__ is not None, what
    # missing or truncated, the file fails when the view is made (its footer is read to decide
    # whether the view needs the field-id map), named for the dataset
    with pytest.raises(UnreadableDataError, match="dmg/a") as serr:
        t.sql('select sum(k) from "dmg/a"')
    assert serr.value.__cause__ is not None
    with pytest.raises(WriteFailedError) as werr:
        t.write("dmg/a", table(k=[1], v=["x"]), mode="upsert", keys=["k"])
    assert isinstance(werr.value, TridentError) and t.history("dmg/a")[0].status == "aborted"
    # the version before the damage did not use those files: still whole
    assert sorted(t.read("dmg/a", as_of=first.txn_id).column("k").to_pylist()) == [1, 2]


@pytest.mark.usefixtures("iceberg_writes")  # each append its own small file, for compaction to read
def test_compacting_a_damaged_small_file_is_named_and_changes_nothing(trident: Trident) -> None:
    t = trident
    for i in range(8):  # eight one-row appends: small files that maintain compacts
        t.write("dmg/small", table(k=[i], v=[str(i)]), mode="append")
    before = t.describe("dmg/small").snapshot_id
    _damage_one(t, "dmg/small")
    with pytest.raises(UnreadableDataError, match="dmg/small") as err:
        t.maintain("dmg/small")
    assert err.value.__cause__ is not None
    assert t.describe("dmg/small").snapshot_id == before


def _damage_one(t: Trident, key: str) -> None:
    f = Path(t.scan_plan(key).files[0].removeprefix("file://"))
    f.write_bytes(f.read_bytes()[:20])
