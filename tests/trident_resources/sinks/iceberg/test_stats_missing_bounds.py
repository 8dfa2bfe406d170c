"""Prober 2: Parquet writes no min/max for a row group whose value is longer than its statistics
size limit (pyarrow: 4096 bytes), but still a null count. The file statistics (ours, and
pyiceberg's, which ours copy) took the bounds of the OTHER row groups as the file's, so a file
holding one long string in one row group and short ones in another said its strings lie between
the short ones: a filtered read pruned the file and silently lost the rows in between."""

from __future__ import annotations

import math
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import make_settings
from trident_resources import Trident


def test_a_row_group_without_bounds_widens_the_file_to_unbounded(trident_home: Path, pg_dsn: str) -> None:
    # one row group per ~1 KiB of Arrow data, one file for the whole write
    t = Trident(make_settings(trident_home, pg_dsn, row_group_bytes=1024, write_parallelism=1))
    try:
        long = "m" + "x" * 5000
        first = pa.table({"id": [1, 2], "s": [long, "a"]})
        second = pa.table({"id": [3, 4], "s": ["b", "c"]})
        t.write("st/long", pa.concat_tables([first, second]))  # two chunks: two row groups, one file
        files = t.scan_plan("st/long").files
        assert len(files) == 1 and pq.read_metadata(files[0]).num_row_groups == 2
        whole = t.read("st/long")
        for row_filter, want in [
            ("s = 'a'", [2]),
            (f"s = '{long}'", [1]),
            ("s > 'l'", [1]),
            ("s < 'b'", [2]),
        ]:
            got = sorted(t.read("st/long", row_filter=row_filter).column("id").to_pylist())
            assert got == want, (row_filter, got, whole.to_pydict()["id"])
    finally:
        t.close()


# -- every filtered read equals filtering the whole read (hypothesis) ----------------------------

_CHARS = st.characters(codec="utf-8", exclude_characters="'\\", exclude_categories=("Cs", "Cc"))
_TEXT = st.one_of(
    st.text(_CHARS, max_size=20),  # around Iceberg's 16-character truncation
    st.builds(lambda c, n: c * n, st.sampled_from(["a", "é", "€", "\U0001f600", "\U0010ffff", "z"]), st.integers(14, 18)),
    st.builds(lambda c, n: c * n, st.sampled_from(["a", "\U0010ffff", "z"]), st.integers(4090, 4200)),  # over Parquet's limit
)
_ROW = st.fixed_dictionaries(
    {
        "s": st.none() | _TEXT,
        "n": st.none() | st.integers(-(2**63), 2**63 - 1),
        "f": st.none() | st.floats(allow_nan=True, allow_infinity=True),
        "d": st.none() | st.dates(),
    }
)
_OPS = ["=", "<", "<=", ">", ">=", "!="]
_PY = {
    "=": lambda a, b: a == b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "!=": lambda a, b: a != b,
}


def _literal(column: str, value: Any) -> str:
    if column == "s":
        return f"'{value}'"
    if column == "d":
        return f"'{value.isoformat()}'"
    if column == "f":  # the filter grammar has no exponent: the same double, written out
        return format(Decimal(repr(value)), "f")
    return repr(value)


@given(
    chunks=st.lists(st.lists(_ROW, min_size=1, max_size=6), min_size=1, max_size=3),
    probes=st.lists(
        st.tuples(st.sampled_from(["s", "n", "f", "d"]), st.sampled_from(_OPS), st.integers(0, 50)), min_size=1, max_size=6
    ),
)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_filtered_reads_never_lose_rows(
    trident: Trident, chunks: list[list[dict[str, Any]]], probes: list[tuple[str, str, int]]
) -> None:
    t = trident
    key = f"st/h{uuid.uuid4().hex[:10]}"
    schema = pa.schema([("id", pa.int64()), ("s", pa.string()), ("n", pa.int64()), ("f", pa.float64()), ("d", pa.date32())])
    rows: list[dict[str, Any]] = []
    tables = []
    for chunk in chunks:
        part = [{"id": len(rows) + i, **r} for i, r in enumerate(chunk)]
        rows.extend(part)
        tables.append(pa.Table.from_pylist(part, schema=schema))
    t.write(key, pa.concat_tables(tables))
    for column, op, pick in probes:
        present = [r[column] for r in rows if r[column] is not None and not (column == "f" and math.isnan(r[column]))]
        if not present or (column == "f" and math.isinf(present[pick % len(present)])):
            continue
        value = present[pick % len(present)]
        want = sorted(r["id"] for r in rows if r[column] is not None and _PY[op](r[column], value))
        got = sorted(t.read(key, row_filter=f"{column} {op} {_literal(column, value)}").column("id").to_pylist())
        assert got == want, (column, op, value)
