"""Prober 2: Parquet writes no min/max for a row group whose value is longer than its statistics
size limit (pyarrow: 4096 bytes), but still a null count. The file statistics (ours, and
pyiceberg's, which ours copy) took the bounds of the OTHER row groups as the file's, so a file
holding one long string in one row group and short ones in another said its strings lie between
the short ones: a filtered read pruned the file and silently lost the rows in between."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

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
