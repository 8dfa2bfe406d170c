"""Which files table maintenance may delete: only files the table's OWN metadata once referenced
(data files, manifests, manifest lists, metadata files) and nothing it keeps still uses.

Deleting "every file in the table's folder that my snapshots don't use" is how a dataset that
shared a folder with another (a key with a trailing newline) lost all its files: a folder
is not a table. A table's metadata is: its snapshots, and the snapshots of the metadata files in
its ``metadata_log``, followed back as far as those files exist (they remember snapshots
expired by an earlier run that died before it deleted their files). Tables delete a metadata file
when it leaves the log (``write.metadata.delete-after-commit.enabled``), so the log bounds that
memory (``write.metadata.previous-versions-max``); files of snapshots expired longer ago than
that and never deleted are left alone rather than guessed at.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import pyarrow.fs as pafs
from pyiceberg.io import FileIO
from pyiceberg.serializers import FromInputFile
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import MAIN_BRANCH
from pyiceberg.table.snapshots import Snapshot

from .files import delete_paths, filesystem_for
from .snapshots import ENV_BRANCH_PREFIX

log = logging.getLogger("trident")


def metadata_chain(table: Table) -> list[tuple[str, TableMetadata]]:
    """(location, metadata) of the current metadata file and of every earlier one reachable
    through metadata logs: the log of the oldest one still readable names older ones, which a
    table created before its metadata files were deleted after commit still has. Each is the
    table's own (its metadata named it), whichever folder it shares."""
    out = [(table.metadata_location, table.metadata)]
    seen = {table.metadata_location}
    queue = [e.metadata_file for e in reversed(table.metadata.metadata_log)]
    while queue:
        location = queue.pop(0)
        if location in seen:
            continue
        seen.add(location)
        try:
            meta = FromInputFile.table_metadata(table.io.new_input(location))
        except FileNotFoundError:
            continue
        except OSError as exc:  # unreadable: its files are simply not candidates this time
            log.warning("maintenance skipped metadata file %s (%s)", location, exc)
            continue
        out.append((location, meta))
        queue += [e.metadata_file for e in reversed(meta.metadata_log) if e.metadata_file not in seen]
    return out


def still_needed(table: Table) -> set[int]:
    """Snapshots expiry must keep whatever their age: the head of every ref (main, audit branches,
    tags), and for every other branch the snapshot it forked from and main's chain back to it (a
    staged partition version's publish compares its partition's files there); every snapshot of a
    table with no published version (its staged first write is an unreferenced snapshot)."""
    snapshots = {s.snapshot_id: s for s in table.snapshots()}
    current = table.current_snapshot()
    if current is None:
        return set(snapshots)
    needed = {ref.snapshot_id for ref in table.metadata.refs.values()}
    main_chain: list[int] = []
    snap: Snapshot | None = current
    while snap is not None and snap.snapshot_id not in main_chain:
        main_chain.append(snap.snapshot_id)
        snap = snapshots.get(snap.parent_snapshot_id) if snap.parent_snapshot_id is not None else None
    for name, ref in table.metadata.refs.items():
        head = snapshots.get(ref.snapshot_id)
        if name.startswith(ENV_BRANCH_PREFIX):
            # an environment's branch: its whole chain back to where it forked from main (its
            # fork is what `trident env diff` and a promotion compare against), and main's chain
            # from the current version back to that fork
            snap = head
            while snap is not None and snap.snapshot_id not in main_chain:
                needed.add(snap.snapshot_id)
                snap = snapshots.get(snap.parent_snapshot_id) if snap.parent_snapshot_id is not None else None
            if snap is not None:
                needed.update(main_chain[: main_chain.index(snap.snapshot_id) + 1])
            continue
        if name == MAIN_BRANCH or head is None or head.parent_snapshot_id is None:
            continue
        needed.add(head.parent_snapshot_id)
        if head.parent_snapshot_id in main_chain:
            needed.update(main_chain[: main_chain.index(head.parent_snapshot_id)])
    return needed


def unreferenced_files(table: Table) -> tuple[list[str], list[str]]:
    """Files this table's own metadata (current or logged) once referenced that nothing it keeps
    uses: data files no retained snapshot reads, manifests and manifest lists of no retained
    snapshot, metadata files that are neither current nor in the metadata log. Only files that
    exist under the table's own data and metadata folders are returned (one listing each):
    (data files, the others)."""
    chain = metadata_chain(table)
    known: dict[int, Snapshot] = {}
    for _, meta in chain:
        for snap in meta.snapshots:
            known.setdefault(snap.snapshot_id, snap)
    retained = table.snapshots()
    once_manifests, once_data = _referenced(table.io, known.values(), live_only=False)
    kept_manifests, kept_data = _referenced(table.io, retained, live_only=True)
    lists = {s.manifest_list for s in known.values()} - {s.manifest_list for s in retained}
    logged = {e.metadata_file for e in table.metadata.metadata_log} | {table.metadata_location}
    metadata = {loc for loc, _ in chain} | {e.metadata_file for _, meta in chain for e in meta.metadata_log}
    return existing_under(table, once_data - kept_data), existing_under(
        table, (once_manifests - kept_manifests) | lists | (metadata - logged), folder=_metadata_folder(table)
    )


def _metadata_folder(table: Table) -> str:
    return table.metadata_location.rsplit("/", 1)[0]


def _referenced(io: FileIO, snapshots: Iterable[Snapshot], *, live_only: bool) -> tuple[set[str], set[str]]:
    """(manifest paths, data file paths) the snapshots' manifests list, each manifest read once
    (manifests shared by several snapshots are). ``live_only`` skips entries that record a
    deletion (what a snapshot reads), else every file the manifests ever named; for history (not
    ``live_only``), a snapshot whose manifests are gone (a discarded staged version, an expired
    snapshot whose files were removed) contributes nothing: its files were removed with it."""
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


def existing_under(table: Table, paths: set[str], folder: str | None = None) -> list[str]:
    """The ``paths`` that exist under ``folder`` (the table's own data folder by default): one
    listing instead of a request per file, so a file deleted by an earlier run is not counted (or
    deleted) again, and a path outside the folder is never touched."""
    if not paths:
        return []
    where = folder or f"{table.location().rstrip('/')}/data"
    fs, path = filesystem_for(table.io, where)
    scheme = where.split("://", 1)[0] if "://" in where else "file"
    listed = {
        f"{scheme}://{info.path}"
        for info in fs.get_file_info(pafs.FileSelector(path, allow_not_found=True, recursive=True))
        if info.type == pafs.FileType.File
    }
    return sorted(paths & listed)
