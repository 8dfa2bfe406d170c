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

    res = CliRunner().invoke(cli, ["describe", "cli/parts", "--max-partitions", "2"], env=cli_env(settings))
    assert res.exit_code == 0, res.output
    assert len(_partition_lines(res.output)) == 2 and "1 more partition(s) not shown" in res.output


def test_describe_of_an_unpartitioned_dataset_says_so(trident: Trident, settings: TridentSettings) -> None:
    trident.write("cli/flat", pa.table({"v": [1, 2]}))
    res = CliRunner().invoke(cli, ["describe", "cli/flat"], env=cli_env(settings))
    assert res.exit_code == 0, res.output
    assert "partitioning" in res.output and "none" in res.output and "partitions (" not in res.output
