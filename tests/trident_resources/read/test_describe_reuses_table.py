"""Issue 12: ``describe`` of an unchanged Iceberg dataset reuses the parsed table metadata.

The example pipeline describes every source of a node three times while the node starts (plan,
stability check, provenance); each ``describe`` loaded and parsed the table's metadata file twice
(partitioning, partition statistics). It now reuses the table ``scan_plan`` keeps while the
catalog still names the same metadata file, and sees a new commit at once."""

from __future__ import annotations

from datetime import date
from typing import Any

import pyarrow as pa
import pytest

from tests.support.helpers import counted_table_loads
from trident_resources import PartitionFilter, Trident

D0, D2, D3 = date(2024, 1, 1), date(2024, 1, 3), date(2024, 1, 4)


def test_describe_of_an_unchanged_dataset_loads_no_table_and_sees_the_next_commit(
    trident: Trident, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = trident
    days = PartitionFilter.time_window("d", D0, D2, "day")
    t.write("d/parts", pa.table({"d": [D0, date(2024, 1, 2)], "v": [1, 2]}), partition=days)
    first = t.describe("d/parts")
    assert first.partitioning and len(first.partitions) == 2
    loads = counted_table_loads(t, monkeypatch)
    for _ in range(3):
        again = t.describe("d/parts")
        assert (again.partitioning, again.partitions) == (first.partitioning, first.partitions)
    assert loads == []

    t.write("d/parts", pa.table({"d": [D2], "v": [3]}), partition=PartitionFilter.time_window("d", D2, D3, "day"))
    after = t.describe("d/parts")
    assert after.row_count == 3 and len(after.partitions) == 3 and after.partitioning == first.partitioning
    assert sum(p["row_count"] for p in after.partitions) == 3


def test_describe_looks_the_table_up_once_and_provenance_not_at_all(trident: Trident, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 12: ``describe`` reads partitioning and partition statistics from ONE look-up of the
    table (each look-up is a catalog query even when the parsed table is reused), and
    ``provenance`` (what node factories merge at every step) reads only the control plane."""
    from trident_resources.core.errors import DatasetNotFoundError
    from trident_resources.sinks.iceberg import tables

    t = trident
    days = PartitionFilter.time_window("d", D0, D2, "day")
    t.write("d/once", pa.table({"d": [D0, date(2024, 1, 2)], "v": [1, 2]}), partition=days)
    t.set_provenance("d/once", {"counterparty": "acme"})
    t.describe("d/once")
    lookups: list[Any] = []
    real = tables.sql_catalog_metadata_location

    def counting(catalog: Any, identifier: Any) -> Any:
        lookups.append(identifier)
        return real(catalog, identifier)

    monkeypatch.setattr(tables, "sql_catalog_metadata_location", counting)
    described = t.describe("d/once")
    assert described.partitioning == ["day(d)"] and len(described.partitions) == 2
    assert len(lookups) == 1
    lookups.clear()
    assert t.provenance("d/once") == described.provenance == {"counterparty": "acme"}
    assert lookups == []
    with pytest.raises(DatasetNotFoundError):
        t.provenance("d/nothing")
