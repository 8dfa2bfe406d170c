"""Write-audit-publish in Dagster (issue 11): a node with a blocking check writes a staged version,
its checks audit that version, and only a passing one is published; a failing one leaves the
previous version current for every reader, fails the step naming the check and the staged txn,
and waits for an operator's publish or discard."""

from __future__ import annotations

import pyarrow as pa

from tests.dagster_support import materialize_nodes, materialized, step_errors
from tests.trident_resources.test_transactions import _txn_files
from trident_assets import expectations as ex
from trident_assets.factories import transform_asset
from trident_resources import Trident, TridentSettings


def _ks(t: Trident, key: str, **kw: object) -> list[int]:
    return sorted(t.read(key, **kw).column("k").to_pylist())  # type: ignore[arg-type]


def test_a_failing_blocking_check_never_reaches_readers(settings: TridentSettings, trident: Trident) -> None:
    t = trident
    t.write("wap/src", pa.table({"k": [1, 2, 3]}))
    node = transform_asset("wap/out", "wap/src", "SELECT k FROM source", expectations=[ex.unique("k")])
    downstream = transform_asset("wap/down", "wap/out", "SELECT k FROM source")

    ok = materialize_nodes(settings, [node])
    assert ok.success, step_errors(ok)
    shown = materialized(ok)["wap/out"]  # what the UI shows: the published version's numbers
    assert shown["dagster/row_count"] == 3 and "dagster/column_schema" in shown
    published = t.history("wap/out")[0]
    assert published.status == "committed" and _ks(t, "wap/out") == [1, 2, 3]
    assert t.describe("wap/out").snapshot_id == published.snapshot_id  # exactly the audited snapshot
    assert t.staged("wap/out") == []

    t.write("wap/src", pa.table({"k": [3]}), mode="append")  # a duplicate key upstream
    bad = materialize_nodes(settings, [node, downstream])
    assert not bad.success
    errors = "\n".join(step_errors(bad))
    assert "ChecksFailedError" in errors or "unique_k" in errors, errors
    assert "unique_k" in errors
    # every reader still sees the previous version
    assert _ks(t, "wap/out") == [1, 2, 3]
    assert t.sql('select count(*) as n from "wap/out"').column("n").to_pylist() == [3]
    assert not t.exists("wap/down")  # downstream did not run
    # the check result was recorded in Dagster, failed
    evals = [e for e in bad.get_asset_check_evaluations() if e.check_name == "unique_k"]
    assert evals and not evals[0].passed
    # the staged version holds the bad rows; an operator can publish it
    [(key, staged)] = t.staged("wap/out")
    assert key == "wap/out" and _ks(t, "wap/out", staged=staged.txn_id) == [1, 2, 3, 3]
    t.publish("wap/out", staged.txn_id)
    assert _ks(t, "wap/out") == [1, 2, 3, 3]


def test_a_discarded_staged_version_leaves_no_file(settings: TridentSettings, trident: Trident) -> None:
    t = trident
    t.write("wap2/src", pa.table({"k": [1, 1]}))
    node = transform_asset("wap2/out", "wap2/src", "SELECT k FROM source", expectations=[ex.unique("k")])
    t.write("wap2/out", pa.table({"k": [9]}))
    bad = materialize_nodes(settings, [node])
    assert not bad.success
    [(_, staged)] = t.staged("wap2/out")
    t.discard("wap2/out", staged.txn_id)
    assert _txn_files(t, "wap2/out", staged.txn_id) == []
    assert _ks(t, "wap2/out") == [9]


def test_non_blocking_failures_publish(settings: TridentSettings, trident: Trident) -> None:
    t = trident
    t.write("wap3/src", pa.table({"k": [1, 1]}))
    node = transform_asset(
        "wap3/out", "wap3/src", "SELECT k FROM source", expectations=[ex.unique("k", blocking=False), ex.not_null("k")]
    )
    res = materialize_nodes(settings, [node])
    assert res.success, step_errors(res)
    assert _ks(t, "wap3/out") == [1, 1] and t.staged("wap3/out") == []


def test_an_asset_without_blocking_checks_writes_directly(settings: TridentSettings, trident: Trident) -> None:
    t = trident
    t.write("wap4/src", pa.table({"k": [1]}))
    node = transform_asset("wap4/out", "wap4/src", "SELECT k FROM source")
    res = materialize_nodes(settings, [node])
    assert res.success, step_errors(res)
    assert [e.status for e in t.history("wap4/out")] == ["committed"]
    assert all("trident.staged" not in e.metadata for e in t.history("wap4/out"))
