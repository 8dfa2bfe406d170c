"""Which data files table maintenance may delete: only files the table's OWN metadata once
referenced and no retained snapshot still reads.

Deleting "every file in the table's folder that my snapshots don't use" is how a dataset that
shared a folder with another (a key with a trailing newline) lost all its files: a folder
is not a table. A table's metadata is: its snapshots, and the snapshots of the metadata files in
its ``metadata_log`` (which remember snapshots expired by an earlier run that died before it
deleted their files). The log is bounded by ``write.metadata.previous-versions-max``; files of
snapshots expired longer ago than that and never deleted are left alone rather than guessed at.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import pyarrow.fs as pafs
from pyiceberg.io import FileIO
from pyiceberg.serializers import FromInputFile
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot

from .files import delete_paths, filesystem_for

log = logging.getLogger("trident")


def logged_metadata(table: Table) -> list[TableMetadata]:
    """The table's current metadata and every earlier version its metadata log still names
    (earlier versions whose files are gone are skipped: they cannot be read, so not trusted)."""
    out = [table.metadata]
    for entry in table.metadata.metadata_log:
        try:
            out.append(FromInputFile.table_metadata(table.io.new_input(entry.metadata_file)))
        except FileNotFoundError:
            continue
        except OSError as exc:  # unreadable: its files are simply not candidates this time
            log.warning("maintenance skipped metadata file %s (%s)", entry.metadata_file, exc)
    return out


def data_files_of(io: FileIO, snapshots: Iterable[Snapshot], *, live_only: bool) -> set[str]:
    """Paths of the data files the snapshots' manifests list; ``live_only`` skips entries that
    record a deletion (what a snapshot reads), else every file the manifests ever named.
    Manifests shared by several snapshots are read once. For history (not ``live_only``), a
    snapshot whose manifests are gone (a discarded staged version, an expired snapshot whose
    files were removed) contributes nothing: its data files were removed with it."""
    return _referenced(io, snapshots, live_only=live_only)[1]


def _referenced(io: FileIO, snapshots: Iterable[Snapshot], *, live_only: bool) -> tuple[set[str], set[str]]:
    """(manifest paths, data file paths) of ``data_files_of``: each manifest read once."""
    paths: set[str] = set()
    seen: set[str] = set()
    for snap in snapshots:
        try:
            manifests = snap.manifests(io)
        except FileNotFoundError:
            if live_only:
                raise
            continue
        for manifest in manifests:
            if manifest.manifest_path in seen:
                continue
            seen.add(manifest.manifest_path)
            try:
                entries = manifest.fetch_manifest_entry(io, discard_deleted=live_only)
            except FileNotFoundError:
                if live_only:
                    raise
                continue
            for entry in entries:
                paths.add(entry.data_file.file_path)
    return seen, paths


def purge_files(table: Table) -> None:
    """Delete every file of a dropped table: data files, manifests, manifest lists and metadata
    files (current and logged).

    pyiceberg's ``purge_table`` reads every snapshot's whole manifest list again, and a table
    grown by appends carries its earlier manifests forward, so after n appends it read ~n^2/2
    manifests (1,000 appends: minutes). Here each manifest is read once. As with pyiceberg, a
    file that cannot be deleted is logged and left: the table is already gone from the catalog."""
    snapshots = table.metadata.snapshots
    manifests, data = _referenced(table.io, snapshots, live_only=False)
    lists = {s.manifest_list for s in snapshots}
    metadata = {e.metadata_file for e in table.metadata.metadata_log} | {table.metadata_location}
    delete_paths(table.io, [*data, *manifests, *lists, *metadata], best_effort=True)


def once_referenced(table: Table) -> set[str]:
    """Every data file any snapshot in the table's metadata (current or logged) ever listed."""
    snapshots: dict[int, Snapshot] = {}
    for meta in logged_metadata(table):
        for snap in meta.snapshots:
            snapshots.setdefault(snap.snapshot_id, snap)
    return data_files_of(table.io, snapshots.values(), live_only=False)


def existing_under(table: Table, paths: set[str]) -> list[str]:
    """The ``paths`` that exist under the table's own data folder: one listing instead of a
    request per file, so a file deleted by an earlier run is not counted (or deleted) again, and a
    path outside the table's folder is never touched."""
    if not paths:
        return []
    data_dir = f"{table.location().rstrip('/')}/data"
    fs, path = filesystem_for(table.io, data_dir)
    scheme = data_dir.split("://", 1)[0] if "://" in data_dir else "file"
    listed = {
        f"{scheme}://{info.path}"
        for info in fs.get_file_info(pafs.FileSelector(path, allow_not_found=True, recursive=True))
        if info.type == pafs.FileType.File
    }
    return sorted(paths & listed)
