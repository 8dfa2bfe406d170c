"""A Dagster asset that writes a few rows to an Iceberg dataset: the write is inlined (no Iceberg
snapshot), its materialization says how many of the dataset's rows are not in Iceberg yet
(``trident/inlined_rows``), and a downstream asset loads them with the rest."""

from __future__ import annotations

import dagster as dg
import pyarrow as pa

from tests.support.dagster_helpers import materialized, resources_for, step_errors
from trident_resources import Trident, TridentSettings
from trident_resources.dagster import TridentOutput
from trident_resources.transaction.inline import INLINE_META

SEEN: dict[str, list[int]] = {}


@dg.asset(key=["inl", "events"])
def events() -> TridentOutput:
    return TridentOutput(pa.table({"n": [101, 102, 103]}), mode="append")


@dg.asset(key=["inl", "summary"], ins={"events": dg.AssetIn(key=["inl", "events"])})
def summary(events: pa.Table) -> pa.Table:
    SEEN["events"] = sorted(events.column("n").to_pylist())
    return pa.table({"rows": [events.num_rows], "total": [sum(events.column("n").to_pylist())]})


def test_a_small_asset_write_is_inlined_reported_and_loaded_downstream(settings: TridentSettings, trident: Trident) -> None:
    assert settings.inline_max_rows == 1000  # the default: nothing here turns inlining on
    seeded = trident.write("inl/events", pa.table({"n": list(range(10))}))  # creates the Iceberg table
    SEEN.clear()

    result = dg.materialize([events, summary], resources=resources_for(settings), raise_on_error=False)

    assert result.success, step_errors(result)
    shown = materialized(result)
    meta = shown["inl/events"]
    assert meta["trident/inlined_rows"] == 3
    assert meta["dagster/row_count"] == 13
    assert meta["trident/snapshot_id"] == str(seeded.snapshot_id)  # no Iceberg snapshot of its own
    assert meta["trident/write"]["mode"] == "append" and meta["trident/write"]["sink"] == "iceberg_native"
    [entry] = [e for e in trident.history("inl/events") if e.metadata.get(INLINE_META)]
    assert str(entry.txn_id) == meta["trident/txn_id"] and entry.rows_written == 3
    assert trident.describe("inl/events").inlined_rows == 3

    assert SEEN["events"] == [*range(10), 101, 102, 103]  # the downstream load read the inlined rows too
    assert trident.read("inl/summary", columns=["rows", "total"]).to_pylist() == [{"rows": 13, "total": 45 + 306}]
    assert shown["inl/summary"]["trident/inlined_rows"] == 0  # a replace is an Iceberg snapshot

    trident.flush("inl/events")
    assert trident.describe("inl/events").inlined_rows == 0
    assert sorted(trident.read("inl/events").column("n").to_pylist()) == [*range(10), 101, 102, 103]
