"""Partition range locks: a writer of a slice of a dataset conflicts only with writers whose
slices overlap it, however wide either slice is.

Why not one lock per partition: a 90-day backfill would hold 90 locks, and past a cap (64) it
locked the whole dataset instead, so a one-day run of a partition outside the backfill waited and
failed with ``ConcurrentWriteError`` at the default wait. Only the commit must be serialised
(the dataset's commit lock does that); the writes need only exclude overlapping writes.

How: the partition values of a time transform (days, hours or months since the epoch) are the
leaves of a fixed binary tree. A range ``[lo, hi)`` is cut into its canonical aligned blocks (at
most two per level), each held EXCLUSIVE, and every strict ancestor of those blocks is held SHARED
(multi-granularity locking). Two ranges overlap iff a block of one equals or contains a block of
the other; then one holds that node exclusive and the other holds it too (exclusive or shared),
so they conflict. Disjoint ranges meet only on shared ancestors, which never conflict. A one-day
write holds 18 locks, a 90-day write 30, ten years 43 — a count that grows with the log of the
width, never a cliff — taken in one round trip (``queries.TRY_PARTITION_LOCKS``).

The locks are Postgres session advisory locks on the writer's lock session (see
``ControlPlane.partition_lock``), so they live exactly as long as the writer's process, like the
per-partition locks before them: a SIGKILLed writer's locks end with its session, with no row to
clean up, and its open ledger row is settled by ``reconcile`` or the next whole-dataset writer as
before.

Dimensions: identity values are flat (one exact key per value); the first time dimension by
column name (the same for every writer, since writers of one dataset share its partition spec) is
the tree; another time dimension is flattened to one key per partition when it is narrow. A lock
key is a combination of flat keys plus a tree node, so two multi-dimensional slices (static x
daily) conflict iff they share a value on every flat dimension and their ranges overlap. A slice
that cannot be named this way (an identity range, a second wide time dimension, too many value
combinations) has no claim, and its writer locks the whole dataset, as whole-dataset writers do.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, NamedTuple

import pyarrow as pa

from ..core.errors import PartitionError

if TYPE_CHECKING:
    from ..core.partitions import BoundPartition

MAX_FLAT_UNITS = 64  # partitions a second time dimension may span and still be locked one by one
MAX_LOCK_ITEMS = 512  # advisory locks one writer may hold (they share Postgres' lock table)
# Tree height per transform: the unit axis is [-2^(H-1), 2^(H-1)) around the epoch (months: years
# 1800-2140, days: 1790-2149, hours: 1731-2209). Units outside are clamped onto the edge leaves,
# which only makes far-out ranges conflict more, never less.
_HEIGHT = {"month": 12, "day": 17, "hour": 22}


class LockItem(NamedTuple):
    """One advisory lock a partition writer holds: its name within the dataset and its mode."""

    key: str
    shared: bool


def claim(bound: BoundPartition) -> list[LockItem] | None:
    """The locks a writer of ``bound`` holds, in the order every writer takes them (sorted by
    key, so two writers never wait on each other in a cycle). ``None``: the slice cannot be
    locked by parts, so its writer locks the whole dataset."""
    dims = sorted(bound.dims, key=lambda d: d.column)
    tree = next((d for d in dims if d.transform != "identity"), None)
    flat: list[list[str]] = []
    for d in dims:
        if d is tree:
            continue
        units = d.units(limit=MAX_FLAT_UNITS)
        if units is None:
            return None
        flat.append(units)
    combos = ["/".join(c) for c in itertools.product(*flat)]
    if tree is None:
        items = [LockItem(c, False) for c in combos]
    else:
        lo, hi = tree.touched_units()  # type: ignore[misc]
        exclusive, shared = _tree_nodes(tree.transform, lo, hi)
        prefix = f"{tree.transform}({tree.column})"
        items = [
            LockItem(f"{c}|{prefix}@{level}.{index}", is_shared)
            for c in combos
            for nodes, is_shared in ((exclusive, False), (shared, True))
            for level, index in nodes
        ]
    if len(items) > MAX_LOCK_ITEMS:
        return None
    return sorted(items)


def _tree_nodes(transform: str, lo: int, hi: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(blocks held exclusive, their strict ancestors held shared) of unit range ``[lo, hi)``,
    each node as (level, index): level 0 is one partition, level H the whole axis."""
    height = _HEIGHT[transform]
    size = 1 << height
    lo = min(max(lo + size // 2, 0), size - 1)
    hi = max(min(hi + size // 2, size), lo + 1)
    blocks: list[tuple[int, int]] = []
    while lo < hi:
        level = 0
        while level < height and lo % (2 << level) == 0 and lo + (2 << level) <= hi:
            level += 1
        blocks.append((level, lo >> level))
        lo += 1 << level
    ancestors = {(up, index >> (up - level)) for level, index in blocks for up in range(level + 1, height + 1)}
    return blocks, sorted(ancestors)


def overlaps(bound: BoundPartition, partition_meta: dict[str, object] | None) -> bool:
    """Does an open transaction whose ledger records ``partition_meta`` (None: a whole-dataset
    write) write rows of ``bound``? For naming the writer a partition writer waits for."""
    from ..core.partitions import PartitionFilter

    if not partition_meta:
        return True
    schema = pa.schema([(d.column, d.arrow_type) for d in bound.dims])
    try:
        other = PartitionFilter.from_metadata(partition_meta).bind(schema)
    except (PartitionError, KeyError, TypeError):
        return True  # another partitioning, or a record this code cannot read: it may overlap
    return not bound.disjoint(other)
