"""The model-based test (``transaction/test_model_based.py``) with inlining on: appends of up to 3
rows to the iceberg dataset are inlined, larger ones (and every other mode, and appends that add a
column) take the Iceberg path after flushing the tail, a threshold flushes at 8 inlined rows, and
a ``flush`` rule flushes at random points. After every step the dataset must equal the plain
model, and ``as_of`` reads of earlier versions (inlined or not, before or after flushes) must equal
the model as it was then; after a flush the Iceberg table itself holds exactly the model's rows."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule, run_state_machine_as_test

from tests.support.helpers import iceberg_table
from tests.trident_resources.transaction.test_model_based import (  # noqa: F401 - model_settings is a fixture
    COLUMN_TYPES,
    KEYS,
    RUN,
    VALUES,
    TridentModel,
    _pg_sink_adds_columns,
    model_settings,
)
from trident_resources import Trident, TridentSettings
from trident_resources.core.identity import public


class InlinedModel(TridentModel):
    @precondition(lambda self: self.models["ice"].exists)
    @rule(data=st.data())
    def small_append(self, data: st.DataObject) -> None:
        """An append of 1-3 rows in the dataset's own columns: the inlined path."""
        m = self.models["ice"]
        ks = data.draw(st.lists(KEYS, min_size=1, max_size=3), label="keys")
        arrays = {
            c: pa.array(ks, pa.int64()) if c == "k" else pa.array([data.draw(VALUES[c]) for _ in ks], COLUMN_TYPES[c])
            for c in m.columns
        }
        tbl = pa.table(arrays)
        r = self._write("ice", tbl, mode="append")
        first = m.next_index
        self._new_rows(m, tbl.to_pylist(), m.columns, first)
        m.next_index = first + tbl.num_rows
        self._committed("ice", m, r)

    @rule()
    def flush(self) -> None:
        RUN["operations"] += 1
        m = self.models["ice"]
        if not m.exists:
            return
        inlined = self.trident.describe(self.keys["ice"]).inlined_rows
        entry = self.trident.flush(self.keys["ice"])
        assert (entry is None) == (inlined == 0)
        assert self.trident.describe(self.keys["ice"]).inlined_rows == 0
        self._check("ice", self._read("ice"))
        stored = public(iceberg_table(self.trident, self.keys["ice"]).scan().to_arrow())
        assert sorted(stored.column("__row_id").to_pylist()) == sorted(str(r.row_id) for r in m.rows)
        assert sorted(stored.column("__row_index").to_pylist()) == sorted(r.index for r in m.rows)


def test_random_sequences_with_inlining_match_the_model(settings: TridentSettings, model_settings: settings) -> None:  # noqa: F811
    with Trident(settings.model_copy(update={"inline_max_rows": 3, "inline_flush_rows": 8})) as t:
        RUN.update(operations=0, sequences=0)
        InlinedModel.trident = t
        InlinedModel.pg_adds_columns = _pg_sink_adds_columns(t)
        run_state_machine_as_test(InlinedModel, settings=model_settings)
        inlined = sum(1 for d in t.datasets() for e in t.history(d.key) if e.metadata.get("trident.inlined"))
        flushes = sum(1 for d in t.datasets() for e in t.history(d.key) if e.writer == "inline.flush")
        print(f"\nmodel-based with inlining: {RUN['operations']} operations, {inlined} inlined commits, {flushes} flushes")
        assert RUN["operations"] >= 100 and inlined >= 5 and flushes >= 3
