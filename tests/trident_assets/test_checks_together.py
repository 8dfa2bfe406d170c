"""Issue 12: the checks of one dataset version are evaluated together: its statistics are read
once and the counts still to run go out as one query per round (one SQL sandbox), instead of a
look-up and a query (and a sandbox) per check. Each check's result is exactly its own: the same
value and metadata, a failing check fails alone, and a check whose query errors reports its own
error without hiding the others' results."""

from __future__ import annotations

import uuid
from typing import Any

import dagster as dg
import pyarrow as pa
import pytest

from tests.support.dagster_helpers import materialize_nodes, step_errors
from trident_assets import expectations as ex
from trident_assets import transform_asset
from trident_resources import Trident, TridentSettings
from trident_resources.read import sql as trident_sql

ROWS = {
    "k": [1, 2, 3, 4, 5, 5],
    "j": [1, 1, 1, 1, 1, 1],  # (k, j) repeats once: the hash screen finds it, the exact query counts it
    "c": ["x", "y", "x", "zz", "y", "x"],  # one value outside the accepted ones
    "v": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
}


def _exact(t: Trident, e: ex.Expectation, key: str, staged: uuid.UUID | None = None) -> int:
    result = t.sql(e.sql.format(dataset=f'"{key}"'), staged={key: staged} if staged else None)
    return int(result.column(0)[0].as_py() or 0)


class _Queries:
    """Counts the SQL queries (``Trident.sql``, each with its sandbox) the real code runs."""

    def __init__(self) -> None:
        self.run, self.queries = trident_sql.run_sql, []  # type: ignore[var-annotated]

    def __call__(self, engine: Any, query: str, staged: Any = None) -> Any:
        self.queries.append(query)
        return self.run(engine, query, staged)


def _expectations() -> list[ex.Expectation]:
    return [
        ex.not_null("v"),  # from the files' statistics: no query
        ex.row_count_between(1, 100),  # idem
        ex.accepted_values("c", ["x", "y"]),  # fails: 1
        ex.unique(["k", "j"]),  # screen, then the exact query: 1
        ex.unique("v"),  # passes
        ex.custom_sql("positive", "SELECT * FROM {dataset} WHERE v <= 0"),  # passes
    ]


def test_checks_of_one_version_share_one_query_per_round(trident: Trident, monkeypatch: pytest.MonkeyPatch) -> None:
    t = trident
    t.write("ct/a", pa.table(ROWS))
    staged = t.write("ct/a", pa.table({**ROWS, "c": ["x"] * 6}), stage=True)  # no bad value in this version
    exps = _expectations()
    expected = [(False, 1), (True, 0), (True, 0)]
    counter = _Queries()
    monkeypatch.setattr(trident_sql, "run_sql", counter)

    results = ex.evaluate_all(t, "ct/a", exps)
    assert [r[:2] for r in results] == [(True, 0), (True, 6), (False, 1), (False, 1), *expected[1:]]
    assert [r[2] for r in results[2:]] == [{"violations": v} for v in (1, 1, 0, 0)]
    assert results[1][2] == {"row_count": 6, "min": 1, "max": 100}
    # round one: accepted values, the screen of unique(k, j), unique(v) and the custom SQL; round
    # two: the exact query of unique(k, j), whose screen found a repeated hash
    assert len(counter.queries) == 2, counter.queries

    counter.queries.clear()
    staged_results = ex.evaluate_all(t, "ct/a", exps, staged.txn_id)
    assert [r[:2] for r in staged_results] == [(True, 0), (True, 6), (True, 0), (False, 1), (True, 0), (True, 0)]
    assert len(counter.queries) == 2

    monkeypatch.undo()
    for e, r in zip(exps, results, strict=True):  # the same answers as each check alone, and as its query
        assert e.evaluate(t, "ct/a") == r
        assert r[1] == _exact(t, e, "ct/a")
    for e, r in zip(exps, staged_results, strict=True):
        assert e.evaluate(t, "ct/a", staged.txn_id) == r


def test_a_check_that_errors_reports_its_own_error_and_hides_no_other_result(trident: Trident) -> None:
    t = trident
    t.write("ct/b", pa.table(ROWS))
    exps = [
        ex.accepted_values("c", ["x", "y"]),
        ex.custom_sql("broken", "SELECT * FROM {dataset} WHERE no_such_column > 0"),
        ex.unique(["k", "j"]),
        ex.custom_sql("positive", "SELECT * FROM {dataset} WHERE v <= 0"),
        ex.accepted_values("missing_column", ["x"]),
    ]
    results = ex.evaluate_all(t, "ct/b", exps)
    assert [r[:2] for r in results] == [(False, 1), (False, -1), (False, 1), (True, 0), (False, -1)]
    assert results[0][2] == {"violations": 1} and results[2][2] == {"violations": 1}
    assert results[1][2]["error"].startswith("SqlError: ") and "no_such_column" in results[1][2]["error"]
    assert results[4][2]["error"].startswith("SqlError: ") and "missing_column" in results[4][2]["error"]
    assert [e.evaluate(t, "ct/b") for e in exps] == results  # what each says alone
    assert (
        ex.evaluate_all(t, "ct/none", exps[:2])
        == [(False, -1, {"error": "dataset 'ct/none' does not exist yet: materialize it first", "missing": True})] * 2
    )


def test_a_steps_checks_open_one_sql_session_per_round_and_report_each_result(
    settings: TridentSettings, trident: Trident, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In Dagster: the step stages its output, runs its checks against it together, reports each
    one's result (the failing one fails the step and nothing is published)."""
    trident.write("ct/src", pa.table(ROWS))
    node = transform_asset("ct/out", "ct/src", "SELECT * FROM source", expectations=_expectations())
    counter = _Queries()
    monkeypatch.setattr(trident_sql, "run_sql", counter)
    result = materialize_nodes(settings, [node])
    assert len(counter.queries) == 2, counter.queries  # was one per SQL check, screen and key-bounds query: 6
    assert not result.success and "accepted_values_c" in "".join(step_errors(result))
    evaluations = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert {n: (e.passed, e.metadata["observed"].value) for n, e in evaluations.items()} == {
        "not_null_v": (True, 0),
        "row_count_between": (True, 6),
        "accepted_values_c": (False, 1),
        "unique_k_j": (False, 1),
        "unique_v": (True, 0),
        "positive": (True, 0),
    }
    assert all(e.asset_key == dg.AssetKey(["ct", "out"]) for e in evaluations.values())
    assert not trident.exists("ct/out")  # staged, never published


def test_a_versions_statistics_are_looked_up_once_for_all_its_checks(trident: Trident, monkeypatch: pytest.MonkeyPatch) -> None:
    """Row counts, null counts and the unique keys' bounds all come from one look-up."""
    t = trident
    n = 70_000  # over key_bitmap.MIN_ROWS: unique(k) is proven from the bounds and one pass
    t.write("ct/big", pa.table({"k": list(range(n)), "v": [1.0] * n}))
    lookups: list[str] = []
    real = t.version_stats

    def counting(key: str, **kwargs: Any) -> Any:
        lookups.append(key)
        return real(key, **kwargs)

    monkeypatch.setattr(t, "version_stats", counting)
    exps = [ex.not_null("v"), ex.row_count_between(1), ex.unique("k"), ex.unique(["k", "v"])]
    assert [r[:2] for r in ex.evaluate_all(t, "ct/big", exps)] == [(True, 0), (True, n), (True, 0), (True, 0)]
    assert lookups == ["ct/big"]


def test_a_node_merges_its_sources_provenance_as_planning_described_it(trident: Trident, monkeypatch: pytest.MonkeyPatch) -> None:
    """The node's output carries its sources' provenance (and lineage) without looking each
    source up again after the session opened on exactly those versions."""
    from trident_assets.factories import _node_output
    from trident_assets.strategies import replace

    t = trident
    t.write("ct/p1", pa.table({"k": [1]}), provenance={"counterparty": "acme"})
    t.write("ct/p2", pa.table({"k": [2]}), provenance={"contract": "c-7"})
    looked: list[str] = []
    real = t.provenance

    def counting(key: str) -> dict[str, Any]:
        looked.append(key)
        return real(key)

    monkeypatch.setattr(t, "provenance", counting)
    out = _node_output(
        t, "ct/out", {"a": "ct/p1", "b": "ct/p2"}, replace(), {"tags": ["x"]}, lambda s: (s.stream("SELECT * FROM a"), None)
    )
    try:
        assert looked == []
        prov = dict(out.provenance or {})
        assert prov["counterparty"] == "acme" and prov["contract"] == "c-7"
        assert {e["key"] for e in prov["lineage"]} == {"ct/p1", "ct/p2"} and prov["upstream"] == ["ct/p1", "ct/p2"]
    finally:
        out.on_done()  # type: ignore[misc]
