"""``trident describe KEY`` prints a partitioned dataset's partitions (issue 10): each partition's
key, row count, data files and the transaction that last wrote it, as ``Trident.describe`` returns
them. Runs the real CLI against the test's embedded Postgres and warehouse."""

from __future__ import annotations

from datetime import date, timedelta

import pyarrow as pa
from click.testing import CliRunner

from tests.support.helpers import cli_env
from trident_cli.main import cli
from trident_resources import PartitionFilter, Trident, TridentSettings

D0 = date(2024, 1, 1)


def _day(i: int, n: int) -> tuple[pa.Table, PartitionFilter]:
    d = D0 + timedelta(days=i)
    return pa.table({"d": [d] * n, "v": list(range(n))}), PartitionFilter.time_window("d", d, d + timedelta(days=1), "day")


def _partition_lines(output: str) -> list[list[str]]:
    """The data rows of the partitions table: cells of lines that start with a partition date."""
    rows = []
    for line in output.splitlines():
        cells = [c.strip() for c in line.strip().strip("│┃|").split("│")]
        if cells and cells[0].startswith("2024-"):
            rows.append(cells)
    return rows


def test_describe_prints_each_partition_with_rows_files_and_last_txn(trident: Trident, settings: TridentSettings) -> None:
    txns = []
    for i, n in enumerate((3, 5, 2)):
        rows, part = _day(i, n)
        txns.append(trident.write("cli/parts", rows, partition=part).txn_id)
    again, part = _day(1, 4)
    txns[1] = trident.write("cli/parts", again, partition=part).txn_id  # 01-02 rewritten: its last txn moves

    res = CliRunner().invoke(cli, ["describe", "cli/parts"], env=cli_env(settings))
    assert res.exit_code == 0, res.output
    assert "day(d)" in res.output and "partitions (3)" in res.output
    assert _partition_lines(res.output) == [
        ["2024-01-01", "3", "1", str(txns[0])],
        ["2024-01-02", "4", "1", str(txns[1])],
        ["2024-01-03", "2", "1", str(txns[2])],
    ]

    res = CliRunner().invoke(cli, ["describe", "cli/parts", "--limit", "2"], env=cli_env(settings))
    assert res.exit_code == 0, res.output
    assert len(_partition_lines(res.output)) == 2 and "1 more partition(s) not shown" in res.output


def test_describe_of_an_unpartitioned_dataset_says_so(trident: Trident, settings: TridentSettings) -> None:
    trident.write("cli/flat", pa.table({"v": [1, 2]}))
    res = CliRunner().invoke(cli, ["describe", "cli/flat"], env=cli_env(settings))
    assert res.exit_code == 0, res.output
    assert "partitioning" in res.output and "none" in res.output and "partitions (" not in res.output


def test_describe_names_the_current_metadata_file_other_engines_open(trident: Trident, settings: TridentSettings) -> None:
    """Issue 28 item 9: ``describe().metadata_location`` is the table's current metadata file, so
    another engine reads exactly this version without the catalog; ``trident describe`` shows it."""
    from pyiceberg.table import StaticTable

    t = trident
    t.write("cli/meta", pa.table({"k": [1, 2], "v": ["a", "b"]}))
    first = t.describe("cli/meta").metadata_location
    assert first is not None and first.endswith(".metadata.json")
    t.write("cli/meta", pa.table({"k": [3], "v": ["c"]}), mode="append")
    assert t.describe("cli/meta").inlined_rows == 1  # a small append is inlined: not in Iceberg yet
    t.flush("cli/meta")  # other engines read inlined rows once they are flushed
    d = t.describe("cli/meta")
    assert d.metadata_location is not None and d.metadata_location != first  # every Iceberg commit writes a new one
    static = StaticTable.from_metadata(d.metadata_location)
    current = static.current_snapshot()
    assert current is not None and current.snapshot_id == d.snapshot_id
    assert sorted(static.scan().to_arrow().column("k").to_pylist()) == [1, 2, 3]
    assert StaticTable.from_metadata(first).scan().to_arrow().num_rows == 2  # the earlier version, as it was
    assert t.describe("cli/meta", storage=False).metadata_location is None  # not looked up

    result = CliRunner().invoke(cli, ["describe", "cli/meta"], env=cli_env(settings), terminal_width=400)
    assert result.exit_code == 0, result.output
    assert "metadata location" in result.output
    assert d.metadata_location.rsplit("/", 1)[-1] in result.output.replace("\n", "")

    t.router.set_pin("cli/pg", "pg")
    t.write("cli/pg", pa.table({"k": [1]}))
    assert t.describe("cli/pg").metadata_location is None  # the rows sink has no table
