"""Issue 12: ``unique`` over several columns first groups by one hash of them (cheaper than by
the columns), and runs the exact query only when a hash repeats: the check's meaning is the
exact query's (duplicates counted per repeated key, NULLs equal to NULLs as in GROUP BY)."""

from __future__ import annotations

import pyarrow as pa

from trident_assets import expectations as ex
from trident_resources import Trident


def test_unique_over_several_columns_screens_by_hash_and_still_counts_exactly(trident: Trident) -> None:
    t = trident
    check = ex.unique(["a", "b"])
    assert check.screen is not None and "hash(" in check.screen
    assert ex.unique("a").screen is None  # one column: grouping by it is as cheap as by its hash

    n = 50_000
    t.write("u/ok", pa.table({"a": list(range(n)), "b": [i % 7 for i in range(n)]}))
    assert check.evaluate(t, "u/ok") == (True, 0, {"violations": 0})

    # two repeated keys (one of them three times) and a repeated (NULL, 1): 3 violating keys
    a = [*range(n), 5, 6, 6, None, None]
    b = [*(i % 7 for i in range(n)), 5, 6, 6, 1, 1]
    t.write("u/dup", pa.table({"a": pa.array(a, pa.int64()), "b": pa.array(b, pa.int64())}))
    passed, value, meta = check.evaluate(t, "u/dup")
    assert (passed, value) == (False, 3) and meta == {"violations": 3}
    exact = t.sql('SELECT count(*) FROM (SELECT a, b FROM "u/dup" GROUP BY a, b HAVING count(*) > 1)').column(0)[0].as_py()
    assert exact == 3

    # the same failure through the screen and the exact query on a staged version
    staged = t.write("u/ok", pa.table({"a": [1, 1], "b": [2, 2]}), mode="append", stage=True)
    assert check.evaluate(t, "u/ok", staged.txn_id)[:2] == (False, 1)
    assert check.evaluate(t, "u/ok")[:2] == (True, 0)
