"""Model-based test (issue 8, "make it stay fixed"): random sequences of writes in every mode, with
schema changes and deletes, on both sinks, checked after EVERY step against a plain Python model
of the rows and of the identity rules; and ``as_of`` reads of earlier versions of the iceberg
dataset checked against the model as it was then.

Identity rules checked:
- ``__row_id`` is unique and stable: a row keeps it until it is deleted or replaced;
- ``__row_index`` is dense 0..n-1 in input order after a plain replace; an append continues from
  the dataset's next index (max + 1 of everything ever numbered) in input order; keyed writes
  number their new rows densely from there; a matched key keeps its row's id and index (the
  oldest row of that key when plain appends duplicated it);
- ``__created_at`` of every row a write stored is the write's ``created_at`` (its τ).

Hypothesis's stateful testing drives it, derandomized so CI runs the same sequences every time;
``pytest --long`` runs thousands of operations instead of a few hundred.
"""

from __future__ import annotations

import copy
import itertools
import uuid
import warnings
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from trident_resources import DatasetNotFoundError, SchemaMismatchError, Trident

# Every value column always has the same type, so appends never conflict by accident; the
# incompatible-type rule below sends a wrong type on purpose.
COLUMN_TYPES: dict[str, pa.DataType] = {"v": pa.string(), "w": pa.float64(), "x": pa.int64(), "y": pa.string()}
WRONG_TYPE: dict[str, pa.DataType] = {"v": pa.int64(), "w": pa.string(), "x": pa.string(), "y": pa.int64()}
KEYS = st.integers(min_value=0, max_value=12)
VALUES: dict[str, st.SearchStrategy[Any]] = {
    "v": st.none() | st.text(alphabet="abcxyz", max_size=3),
    "w": st.none() | st.floats(min_value=-1e6, max_value=1e6, allow_nan=False).map(lambda f: round(f, 3)),
    "x": st.none() | st.integers(min_value=-(2**40), max_value=2**40),
    "y": st.none() | st.sampled_from(["p", "q", "é", ""]),
}

RUN = {"operations": 0, "sequences": 0}  # reported at the end of the test


@dataclass
class Row:
    values: dict[str, Any]  # user columns, k included
    row_id: str | None  # None until the write that creates it has been read back
    index: int
    created_at: Any


@dataclass
class Model:
    """What one dataset must contain: its user columns (in order), rows and next row index."""

    exists: bool = False
    columns: list[str] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    next_index: int = 0

    def keys(self) -> set[int]:
        return {r.values["k"] for r in self.rows}

    def survivor(self, k: int) -> Row:
        """The row whose identity a keyed write keeps for key ``k`` (the oldest one)."""
        return min((r for r in self.rows if r.values["k"] == k), key=lambda r: r.index)


class TridentModel(RuleBasedStateMachine):
    trident: Trident
    pg_adds_columns = True  # see _pg_sink_adds_columns
    counter = itertools.count()

    def __init__(self) -> None:
        super().__init__()
        n = next(self.counter)
        self.keys = {"ice": f"model/m{n}/ice", "pg": f"model/m{n}/pg"}
        self.trident.router.set_pin(self.keys["pg"], "pg")
        self.models = {"ice": Model(), "pg": Model()}
        self.versions: list[tuple[Any, Model]] = []  # iceberg: (txn id, model after that commit)
        self._names: dict[str, list[str]] = {}  # column names of the last read, per dataset
        RUN["sequences"] += 1

    # -- inputs -------------------------------------------------------------------------------
    def _input(self, data: st.DataObject, which: str, *, replace: bool, min_rows: int, unique: bool) -> pa.Table:
        model = self.models[which]
        pool = list(COLUMN_TYPES)
        if not replace and model.exists and which == "pg" and not self.pg_adds_columns:
            pool = [c for c in pool if c in model.columns]
        if replace:
            cols = data.draw(st.lists(st.sampled_from(pool), unique=True, max_size=3), label="columns")
        else:
            kept = data.draw(st.lists(st.sampled_from(model.columns[1:] or ["v"]), unique=True), label="kept")
            addable = [c for c in pool if c not in model.columns]
            new = data.draw(st.lists(st.sampled_from(addable), max_size=1), label="added") if addable else []
            cols = [c for c in model.columns[1:] if c in kept] + [c for c in new if c not in kept]
        keys_strategy = st.lists(KEYS, min_size=min_rows, max_size=6, unique=unique)
        ks = data.draw(keys_strategy, label="keys")
        arrays = {"k": pa.array(ks, pa.int64())}
        for c in cols:
            arrays[c] = pa.array([data.draw(VALUES[c]) for _ in ks], COLUMN_TYPES[c])
        return pa.table(arrays)

    def _write(self, which: str, tbl: pa.Table | None, **kw: Any) -> Any:
        RUN["operations"] += 1
        return self.trident.write(self.keys[which], tbl, **kw)

    def _columns_after(self, model: Model, tbl: pa.Table, *, replace: bool) -> list[str]:
        if replace or not model.exists:
            return list(tbl.column_names)
        return model.columns + [c for c in tbl.column_names if c not in model.columns]

    def _fill(self, row: dict[str, Any], columns: list[str]) -> dict[str, Any]:
        return {c: row.get(c) for c in columns}

    def _committed(self, which: str, model: Model, result: Any) -> None:
        """Adopt the write: bind new rows' ids from what the dataset now holds, then check."""
        model.exists = True
        actual = self._read(which)
        known = {r.row_id for r in model.rows if r.row_id is not None}
        for r in model.rows:
            if r.created_at is None:
                r.created_at = result.created_at
        fresh_actual = {row["__row_id"]: row for row in actual if row["__row_id"] not in known}
        unbound = [r for r in model.rows if r.row_id is None]
        assert len(fresh_actual) == len(unbound), (len(fresh_actual), len(unbound))
        by_index = {row["__row_index"]: rid for rid, row in fresh_actual.items()}
        for r in unbound:
            assert r.index in by_index, f"no new row has __row_index {r.index}: {sorted(by_index)}"
            r.row_id = by_index.pop(r.index)
        assert result.row_count == len(model.rows)
        self._check(which, actual)
        if which == "ice":
            self.versions.append((result.txn_id, copy.deepcopy(model)))

    def _new_rows(self, model: Model, rows: list[dict[str, Any]], columns: list[str], first: int) -> None:
        for i, row in enumerate(rows):
            model.rows.append(Row(self._fill(row, columns), None, first + i, None))

    # -- rules ----------------------------------------------------------------------------------
    @rule(which=st.sampled_from(["ice", "pg"]), data=st.data())
    def replace(self, which: str, data: st.DataObject) -> None:
        m = self.models[which]
        tbl = self._input(data, which, replace=True, min_rows=0, unique=False)
        r = self._write(which, tbl, mode="replace")
        m.columns = list(tbl.column_names)
        m.rows = []
        self._new_rows(m, tbl.to_pylist(), m.columns, 0)
        m.next_index = tbl.num_rows
        self._committed(which, m, r)

    @rule(which=st.sampled_from(["ice", "pg"]), data=st.data())
    def append(self, which: str, data: st.DataObject) -> None:
        m = self.models[which]
        tbl = self._input(data, which, replace=False, min_rows=0, unique=False)
        r = self._write(which, tbl, mode="append")
        first = m.next_index if m.exists else 0
        m.columns = self._columns_after(m, tbl, replace=False)
        for row in m.rows:
            row.values = self._fill(row.values, m.columns)
        self._new_rows(m, tbl.to_pylist(), m.columns, first)
        m.next_index = first + tbl.num_rows
        self._committed(which, m, r)

    def _keyed(self, which: str, data: st.DataObject, mode: str) -> None:
        m = self.models[which]
        replace = mode == "replace"
        tbl = self._input(data, which, replace=replace, min_rows=1, unique=True)
        r = self._write(which, tbl, mode=mode, keys=["k"])
        first = m.next_index if m.exists else 0
        columns = self._columns_after(m, tbl, replace=replace)
        existing = m.keys()
        incoming = set(tbl.column("k").to_pylist())
        kept = [] if replace else [row for row in m.rows if mode == "append_new" or row.values["k"] not in incoming]
        for row in kept:
            row.values = self._fill(row.values, columns)
        fresh: list[dict[str, Any]] = []
        skipped = 0
        for row in tbl.to_pylist():
            if row["k"] in existing and mode == "append_new":
                skipped += 1
            elif row["k"] in existing:
                s = m.survivor(row["k"])
                kept.append(Row(self._fill(row, columns), s.row_id, s.index, None))
            else:
                fresh.append(row)
        m.columns, m.rows = columns, kept
        # fresh rows are numbered densely from the next index, in an order the merge chooses:
        # bind them by key (input keys are unique) to whatever index the dataset gave them
        actual = {row["k"]: row["__row_index"] for row in self._read(which) if row["k"] in {f["k"] for f in fresh}}
        indexes = sorted(actual[f["k"]] for f in fresh if f["k"] in actual)
        assert indexes == list(range(first, first + len(fresh))), (indexes, first, len(fresh))
        for f in fresh:
            m.rows.append(Row(self._fill(f, columns), None, actual[f["k"]], None))
        m.next_index = first + len(fresh)
        if mode == "append_new":
            assert r.skipped == skipped
        self._committed(which, m, r)

    @rule(which=st.sampled_from(["ice", "pg"]), data=st.data())
    def upsert(self, which: str, data: st.DataObject) -> None:
        self._keyed(which, data, "upsert")

    @rule(which=st.sampled_from(["ice", "pg"]), data=st.data())
    def append_new(self, which: str, data: st.DataObject) -> None:
        self._keyed(which, data, "append_new")

    @rule(which=st.sampled_from(["ice", "pg"]), data=st.data())
    def snapshot_replace(self, which: str, data: st.DataObject) -> None:
        self._keyed(which, data, "replace")

    @rule(which=st.sampled_from(["ice", "pg"]), ks=st.lists(KEYS, min_size=1, max_size=4, unique=True))
    def delete_by_keys(self, which: str, ks: list[int]) -> None:
        m = self.models[which]
        if not m.exists:
            with pytest.raises(DatasetNotFoundError):
                self._write(which, pa.table({"k": pa.array(ks, pa.int64())}), mode="delete", keys=["k"])
            return
        r = self._write(which, pa.table({"k": pa.array(ks, pa.int64())}), mode="delete", keys=["k"])
        m.rows = [row for row in m.rows if row.values["k"] not in ks]
        self._committed(which, m, r)

    @rule(which=st.sampled_from(["ice", "pg"]), op=st.sampled_from(["<", ">=", "="]), bound=KEYS)
    def delete_by_filter(self, which: str, op: str, bound: int) -> None:
        m = self.models[which]
        if not m.exists:
            return
        r = self._write(which, None, mode="delete", row_filter=f"k {op} {bound}")
        test = {"<": lambda k: k < bound, ">=": lambda k: k >= bound, "=": lambda k: k == bound}[op]
        m.rows = [row for row in m.rows if not test(row.values["k"])]
        self._committed(which, m, r)

    @precondition(lambda self: any(len(m.columns) > 1 for m in self.models.values()))
    @rule(which=st.sampled_from(["ice", "pg"]), data=st.data())
    def incompatible_append_changes_nothing(self, which: str, data: st.DataObject) -> None:
        m = self.models[which]
        if len(m.columns) < 2:
            return
        col = data.draw(st.sampled_from(m.columns[1:]))
        before = self.trident.history(self.keys[which], 1)[0].txn_id
        with pytest.raises(SchemaMismatchError):
            self._write(which, pa.table({"k": pa.array([99], pa.int64()), col: pa.array([None], WRONG_TYPE[col])}), mode="append")
        assert self.trident.history(self.keys[which], 1)[0].txn_id != before  # the attempt is in the ledger...
        assert self.trident.history(self.keys[which], 1)[0].status == "aborted"
        self._check(which, self._read(which))  # ...and nothing changed

    @precondition(lambda self: len(self.versions) > 1)
    @rule(data=st.data())
    def read_an_earlier_version(self, data: st.DataObject) -> None:
        RUN["operations"] += 1
        txn, then = data.draw(st.sampled_from(self.versions[:-1]), label="version")
        rows = self.trident.read(self.keys["ice"], as_of=txn).to_pylist()
        self._check_rows(then, rows)

    # -- checks ---------------------------------------------------------------------------------
    def _read(self, which: str) -> list[dict[str, Any]]:
        table = self.trident.read(self.keys[which])
        self._names[which] = table.column_names
        return table.to_pylist()

    def _check(self, which: str, actual: list[dict[str, Any]]) -> None:
        m = self.models[which]
        assert [n for n in self._names[which] if not n.startswith("__")] == m.columns
        assert self.trident.describe(self.keys[which]).row_count == len(m.rows)
        self._check_rows(m, actual)

    def _check_rows(self, m: Model, actual: list[dict[str, Any]]) -> None:
        ids = [row["__row_id"] for row in actual]
        assert len(set(ids)) == len(ids), "__row_id must be unique"
        got = {row["__row_id"]: ({c: row.get(c) for c in m.columns}, row["__row_index"], row["__created_at"]) for row in actual}
        want = {r.row_id: (r.values, r.index, r.created_at) for r in m.rows}
        assert got == want

    @invariant()
    def row_indexes_are_unique(self) -> None:
        for m in self.models.values():
            idx = [r.index for r in m.rows]
            assert len(set(idx)) == len(idx)


@pytest.fixture
def model_settings(request: pytest.FixtureRequest) -> settings:
    long = request.config.getoption("--long")
    return settings(
        max_examples=150 if long else 15,
        stateful_step_count=25 if long else 20,
        derandomize=not long,
        database=None,
        deadline=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )


def _pg_sink_adds_columns(t: Trident) -> bool:
    """Issue 8.2 (another branch fixes it): on the pg sink, a write that adds a column leaves the
    older rows undecodable. Until that fix is here, the model does not add columns to its pg
    dataset (a warning says so); once it is, the full model runs on pg too, with no edit here."""
    key = f"model/probe_{uuid.uuid4().hex[:8]}"
    t.router.set_pin(key, "pg")
    t.write(key, pa.table({"k": [1], "v": ["a"]}))
    t.write(key, pa.table({"k": [2], "v": ["b"], "c1": [1]}), mode="append")
    try:
        t.read(key)
    except SchemaMismatchError:
        warnings.warn("pg sink cannot add columns yet (issue 8.2): the model adds none to its pg dataset", stacklevel=1)
        return False
    return True


def test_random_write_sequences_match_the_model(trident: Trident, model_settings: settings) -> None:
    RUN.update(operations=0, sequences=0)
    TridentModel.trident = trident
    TridentModel.pg_adds_columns = _pg_sink_adds_columns(trident)
    run_state_machine_as_test(TridentModel, settings=model_settings)
    print(f"\nmodel-based: {RUN['operations']} operations in {RUN['sequences']} sequences")
    assert RUN["operations"] >= 100


@pytest.mark.parametrize("sink", ["iceberg_native", "pg"])
def test_a_replace_takes_the_input_column_order_on_both_sinks(trident: Trident, sink: str) -> None:
    """Found by the model: on iceberg a replace kept the old column order (union_by_name), while
    the pg sink took the input's; a replace makes the dataset exactly its input."""
    t = trident
    t.router.set_pin("order/x", sink)
    t.write("order/x", pa.table({"k": [1], "y": ["a"], "w": [1.0], "v": ["z"]}))
    t.write("order/x", pa.table({"k": [2], "v": ["q"], "y": ["b"]}))
    assert t.read("order/x").column_names[3:] == ["k", "v", "y"]
    assert t.read("order/x").to_pylist()[0] | {"__row_id": None, "__created_at": None} == {
        "__row_index": 0,
        "__row_id": None,
        "__created_at": None,
        "k": 2,
        "v": "q",
        "y": "b",
    }
