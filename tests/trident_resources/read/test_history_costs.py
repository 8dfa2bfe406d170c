"""Issue 12: what a table's history costs a read after compaction, and an append.

1,000 appends then ``maintain`` read at 1.8x a table written in one go although the data files
were alike: each read parsed the metadata file (one entry per kept snapshot) and decoded the
compaction's manifest of 1,000 removed files, only to discard every entry. And each append
deep-copied the whole metadata (every snapshot) about fifteen times, because pyiceberg
recomputes ``Transaction.table_metadata`` on every access: appends slowed as history grew.
These tests count the work (manifests opened, tables loaded, metadata recomputed), not time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg import table as pyiceberg_table
from pyiceberg.manifest import ManifestFile

from tests.support.helpers import counted_table_loads
from trident_resources import Trident


def _appends(t: Trident, key: str, n: int) -> None:
    t.write(key, pa.table({"id": [0], "v": ["x0"]}))
    for i in range(1, n):
        t.write(key, pa.table({"id": [i], "v": [f"x{i}"]}), mode="append")


def _metadata_recomputes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every recomputation of a transaction's metadata from here on (the number of updates each
    replayed): pyiceberg's ``Transaction.table_metadata`` calls ``update_table_metadata``, which
    ends in a deep copy of the whole history."""
    calls: list[int] = []
    real = pyiceberg_table.update_table_metadata

    def counting(base: Any, updates: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(len(updates))
        return real(base, updates, *args, **kwargs)

    monkeypatch.setattr(pyiceberg_table, "update_table_metadata", counting)
    return calls


def _opened_manifests(monkeypatch: pytest.MonkeyPatch) -> list[ManifestFile]:
    """Every manifest whose entries are decoded from now on (pyiceberg's own method, wrapped)."""
    opened: list[ManifestFile] = []
    real = ManifestFile.fetch_manifest_entry

    def recording(self: ManifestFile, *args: Any, **kwargs: Any) -> Any:
        opened.append(self)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(ManifestFile, "fetch_manifest_entry", recording)
    return opened


@pytest.mark.usefixtures("iceberg_writes")  # each append its own small file, for compaction to remove
def test_a_compacted_table_reads_without_opening_the_manifest_of_removed_files(
    trident: Trident, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = trident
    _appends(t, "h/many", 12)
    expected = sorted(t.read("h/many").to_pylist(), key=lambda r: r["__row_index"])
    assert t.maintain("h/many").compacted_files == 12

    sink = t.driver.sinks["iceberg_native"]
    table = sink.tables.existing_table(t.dataset_record("h/many"))  # type: ignore[attr-defined]
    manifests = table.current_snapshot().manifests(table.io)
    removed_only = [m.manifest_path for m in manifests if not (m.has_added_files() or m.has_existing_files())]
    assert len(manifests) == 2 and len(removed_only) == 1  # the compaction's record of the 12 removed files

    opened = _opened_manifests(monkeypatch)
    got = t.read("h/many")
    filtered = t.read("h/many", row_filter="id >= 6")
    streamed = t.stream("h/many", row_filter="id < 3").read_all()
    assert sorted(got.to_pylist(), key=lambda r: r["__row_index"]) == expected  # nothing visible changed
    assert sorted(filtered.column("id").to_pylist()) == list(range(6, 12))
    assert sorted(streamed.column("id").to_pylist()) == [0, 1, 2]
    assert t.describe("h/many").row_count == 12
    assert opened, "the reads planned no manifest at all"
    assert [m.manifest_path for m in opened if m.manifest_path in removed_only] == []


def test_a_read_of_an_unchanged_dataset_reuses_its_table_and_file_list_and_sees_the_next_commit(
    trident: Trident, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = trident
    _appends(t, "h/again", 3)
    assert t.read("h/again").num_rows == 3  # the first read loads and plans
    loads = counted_table_loads(t, monkeypatch)
    opened = _opened_manifests(monkeypatch)
    for _ in range(3):
        assert sorted(t.read("h/again").column("id").to_pylist()) == [0, 1, 2]
    assert sum(b.num_rows for b in t.stream("h/again")) == 3
    assert loads == []  # the metadata file is parsed once per version, not once per read
    assert opened == []  # a version's file list is planned once (a filtered read still prunes)
    assert t.read("h/again", columns=["id"], row_filter="id > 0").num_rows == 2

    t.write("h/again", pa.table({"id": [3], "v": ["x3"]}), mode="append")
    assert sorted(t.read("h/again").column("id").to_pylist()) == [0, 1, 2, 3]  # a new version is read at once


def test_an_append_computes_the_transaction_metadata_once_whatever_the_history(
    trident: Trident, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = trident
    _appends(t, "h/grow", 20)
    calls = _metadata_recomputes(monkeypatch)
    t.write("h/grow", pa.table({"id": [20], "v": ["x20"]}), mode="append")
    # once with the new snapshot staged; pyiceberg recomputed it ~15 times per append before
    assert len(calls) <= 2, f"Transaction.table_metadata recomputed {len(calls)} times for one append"
    assert t.describe("h/grow").row_count == 21
    assert sorted(t.read("h/grow").column("id").to_pylist()) == list(range(21))


def test_a_first_write_computes_the_new_tables_metadata_once(trident: Trident, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new dataset's first write creates its table in the same commit as its data (a staged
    creation). pyiceberg's ``CreateTableTransaction`` replayed its updates and deep-copied the
    result at every ``table_metadata`` access: 16 times per first write, i.e. per dataset of a
    pipeline's first run."""
    t = trident
    calls = _metadata_recomputes(monkeypatch)
    t.write("h/new", pa.table({"id": [1, 2], "v": ["a", "b"]}))
    assert len(calls) <= 2, f"the new table's metadata was recomputed {len(calls)} times for one write"
    assert t.describe("h/new").row_count == 2
    assert sorted(t.read("h/new").column("id").to_pylist()) == [1, 2]


def test_a_publish_computes_the_tables_metadata_at_most_once(trident: Trident, monkeypatch: pytest.MonkeyPatch) -> None:
    """Publishing moves main to the staged snapshot and drops its audit branch in one commit.
    pyiceberg's ``Table.manage_snapshots()`` runs on a plain ``Transaction``, whose metadata was
    replayed and deep-copied, history and all, at each of four reads per publish."""
    t = trident
    _appends(t, "h/pub", 5)
    staged = t.write("h/pub", pa.table({"id": [5], "v": ["x5"]}), mode="append", stage=True)
    calls = _metadata_recomputes(monkeypatch)
    t.publish("h/pub", staged.txn_id)
    assert len(calls) <= 1, f"the table's metadata was recomputed {len(calls)} times for one publish"
    assert sorted(t.read("h/pub").column("id").to_pylist()) == list(range(6))


def test_dropping_a_table_of_many_appends_reads_each_manifest_once_and_leaves_no_file(
    trident: Trident, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pyiceberg's purge read every snapshot's whole manifest list, so a table of n appends (each
    carrying the earlier manifests forward) decoded ~n^2/2 manifests: 1,000 appends took minutes
    to drop. Each manifest is now decoded once, and the table's folder is left empty."""
    t = trident
    _appends(t, "h/dropped", 30)
    sink = t.driver.sinks["iceberg_native"]
    table = sink.tables.existing_table(t.dataset_record("h/dropped"))  # type: ignore[attr-defined]
    distinct = {m.manifest_path for s in table.snapshots() for m in s.manifests(table.io)}
    folder = Path(table.location().removeprefix("file://"))
    assert any(p.is_file() for p in folder.rglob("*"))

    opened = _opened_manifests(monkeypatch)
    t.drop("h/dropped")
    assert not t.exists("h/dropped")
    assert len(opened) <= len(distinct)  # pyiceberg's purge: 465 here
    assert [p for p in folder.rglob("*") if p.is_file()] == []  # data, manifests, lists, metadata
