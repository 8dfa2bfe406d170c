"""Prober 2: identity partition values that are equal but written differently (an instant at
another UTC offset, -0.0 and 0.0) name ONE partition (the write of one
replaces the other's rows: ``BoundPartition.disjoint`` says they overlap), but their range-lock
keys were their text as given, so the two writers took different locks and ran at once: lost
isolation. The keys now name the partition, not the spelling (a negative decimal zero was
already one name: kept as a regression case)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pyarrow as pa

from trident_resources.control.range_locks import claim
from trident_resources.core.partitions import PartitionFilter

SCHEMA = pa.schema([("ts", pa.timestamp("us", tz="UTC")), ("f", pa.float64()), ("dec", pa.decimal128(10, 2))])


def _conflict(a: PartitionFilter, b: PartitionFilter) -> bool:
    ca, cb = claim(a.bind(SCHEMA)), claim(b.bind(SCHEMA))
    assert ca is not None and cb is not None
    held = {i.key: i.shared for i in ca}
    return any(i.key in held and not (i.shared and held[i.key]) for i in cb)


def test_equal_identity_values_spelt_differently_take_the_same_lock() -> None:
    noon = datetime(2024, 1, 1, 12, tzinfo=UTC)
    pairs: list[tuple[str, Any, Any]] = [
        ("ts", noon, noon.astimezone(timezone(timedelta(hours=5, minutes=30)))),
        ("ts", noon, noon.astimezone(timezone(timedelta(hours=-8)))),
        ("f", 0.0, -0.0),
        ("dec", Decimal("0.00"), Decimal("-0.00")),
    ]
    for column, a, b in pairs:
        fa, fb = PartitionFilter.of_values(column, a), PartitionFilter.of_values(column, b)
        assert not fa.bind(SCHEMA).disjoint(fb.bind(SCHEMA))  # one partition
        assert _conflict(fa, fb), (column, a, b)
        # and with a daily dimension beside it, on overlapping days
        day = PartitionFilter.time_window("ts", noon, noon + timedelta(days=1), "day")
        other = PartitionFilter.of_values(column, b)
        if column != "ts":
            assert _conflict(fa & day, other & day), (column, a, b)
    # different values still do not conflict
    assert not _conflict(PartitionFilter.of_values("f", 0.0), PartitionFilter.of_values("f", 1.0))
    assert not _conflict(PartitionFilter.of_values("ts", noon), PartitionFilter.of_values("ts", noon + timedelta(microseconds=1)))
