"""Issue 28 item 7: after expiry nothing is left that no retained snapshot, ref or the metadata log
uses (manifests, manifest lists, old metadata files, data files), on every storage backend, and
nothing a branch or a staged version needs is deleted."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from pyiceberg.table import Table

from tests.conftest import backend_settings
from tests.support.helpers import iceberg_table
from trident_resources import PartitionFilter, Trident
from trident_resources.sinks.iceberg.files import filesystem_for

pytestmark = pytest.mark.usefixtures("iceberg_writes")  # about what each Iceberg commit leaves


def stored(table: Table) -> set[str]:
    """Every file under the table's location, as the table's metadata names them."""
    location = table.location().rstrip("/")
    fs, path = filesystem_for(table.io, location)
    scheme = location.split("://", 1)[0] if "://" in location else "file"
    return {
        f"{scheme}://{info.path}"
        for info in fs.get_file_info(pafs.FileSelector(path, allow_not_found=True, recursive=True))
        if info.type == pafs.FileType.File
    }


def referenced(table: Table) -> set[str]:
    """What the table uses now: its metadata file and those of its log, and every retained
    snapshot's (main's, branches', unreferenced staged ones') manifest list, manifests and live
    data files."""
    out = {table.metadata_location} | {e.metadata_file for e in table.metadata.metadata_log}
    for snap in table.snapshots():
        out.add(snap.manifest_list)
        for manifest in snap.manifests(table.io):
            out.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                out.add(entry.data_file.file_path)
    return out


def _kinds(files: set[str]) -> dict[str, int]:
    return {
        "metadata.json": sum(f.endswith(".metadata.json") for f in files),
        "avro": sum(f.endswith(".avro") for f in files),
        "parquet": sum(f.endswith(".parquet") for f in files),
    }


@pytest.fixture(params=["local", "s3"])
def backend(request: pytest.FixtureRequest, trident_home: Path, pg_dsn: str) -> Iterator[Trident]:
    """Local and S3 storage (SQL catalog). The REST catalog of tests/support refuses snapshot
    removal by clients (its own maintenance expires), so expiry is not Trident's there."""
    t = Trident(backend_settings(request, request.param, trident_home, pg_dsn))
    yield t
    t.close()


def _small_writes(t: Trident, key: str, n: int) -> None:
    t.write(key, pa.table({"k": [0]}))
    for i in range(1, n):
        t.write(key, pa.table({"k": [i]}), mode="append")


def test_expiry_leaves_only_referenced_files(backend: Trident) -> None:
    t = backend
    key = "exp/leak"
    _small_writes(t, key, 20)
    before = stored(iceberg_table(t, key))
    report = t.maintain(key, older_than=timedelta(0), retain_last=2)
    table = iceberg_table(t, key)
    after, uses = stored(table), referenced(table)
    print("\nfiles before", _kinds(before), "after", _kinds(after), report)
    assert after - uses == set(), "files nothing references any more"
    assert uses - after == set(), "files the table references are gone"
    assert len(table.snapshots()) == 2
    assert _kinds(after)["metadata.json"] <= 11  # the current one and the log's ten
    assert _kinds(after)["avro"] < _kinds(before)["avro"]
    assert sorted(t.read(key).column("k").to_pylist()) == list(range(20))
    t.write(key, pa.table({"k": [20]}), mode="append")  # and the table goes on
    assert sorted(t.read(key).column("k").to_pylist()) == list(range(21))


def test_expiry_keeps_what_a_staged_version_needs_and_it_publishes(backend: Trident) -> None:
    t = backend
    key = "exp/staged"
    _small_writes(t, key, 20)
    staged = t.write(key, pa.table({"k": [100]}), mode="append", stage=True)
    t.maintain(key, older_than=timedelta(0), retain_last=1)
    table = iceberg_table(t, key)
    assert stored(table) == referenced(table)
    assert sorted(t.read(key, staged=staged.txn_id).column("k").to_pylist()) == [*range(20), 100]
    t.publish(key, staged.txn_id)  # the staged version's branch and files survived
    assert sorted(t.read(key).column("k").to_pylist()) == [*range(20), 100]
    t.maintain(key, older_than=timedelta(0), retain_last=1)
    table = iceberg_table(t, key)
    assert stored(table) == referenced(table)
    assert sorted(t.read(key).column("k").to_pylist()) == [*range(20), 100]


def test_a_table_from_before_the_metadata_properties_loses_its_old_metadata_files(trident: Trident) -> None:
    """A table written before maintenance deleted metadata: maintain sets the properties and
    follows the log back to the old metadata files, which it deletes."""
    t = trident
    key = "exp/legacy"
    t.write(key, pa.table({"k": [0]}))
    table = iceberg_table(t, key)
    with table.transaction() as txn:
        txn.remove_properties("write.metadata.delete-after-commit.enabled", "write.metadata.previous-versions-max")
    for i in range(1, 15):
        t.write(key, pa.table({"k": [i]}), mode="append")
    assert _kinds(stored(iceberg_table(t, key)))["metadata.json"] >= 16
    t.maintain(key, older_than=timedelta(0), retain_last=1)
    table = iceberg_table(t, key)
    assert stored(table) == referenced(table)
    assert table.properties["write.metadata.delete-after-commit.enabled"] == "true"
    assert sorted(t.read(key).column("k").to_pylist()) == list(range(15))


D0, D1 = date(2024, 1, 1), date(2024, 1, 2)


def _on(d: date) -> PartitionFilter:
    return PartitionFilter.time_window("d", d, d + timedelta(days=1), "day")


def test_a_staged_partition_publishes_after_expiry_of_everything_old(trident: Trident) -> None:
    """A staged partition's publish reads the snapshot it forked from and main's chain since: expiry keeps them."""
    t = trident
    key = "exp/part"
    t.write(key, pa.table({"d": [D0], "k": [0]}), partition=_on(D0))
    t.write(key, pa.table({"d": [D1], "k": [10]}), partition=_on(D1))
    staged = t.write(key, pa.table({"d": [D0], "k": [5]}), partition=_on(D0), stage=True)
    for i in range(11, 15):
        t.write(key, pa.table({"d": [D1], "k": [i]}), mode="append", partition=_on(D1))
    t.maintain(key, older_than=timedelta(0), retain_last=1)
    table = iceberg_table(t, key)
    assert stored(table) == referenced(table)
    t.publish(key, staged.txn_id)
    assert sorted(t.read(key).column("k").to_pylist()) == [5, 10, 11, 12, 13, 14]
    t.maintain(key, older_than=timedelta(0), retain_last=1)
    table = iceberg_table(t, key)
    assert stored(table) == referenced(table)
