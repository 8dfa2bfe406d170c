"""``maintain`` repairs data files written before Trident's statistics knew that Parquet omits a
row group's min/max (a value over its 4 KiB statistics limit, an all-NaN float chunk): their
manifest bounds are the OTHER row groups', so a filtered read pruned the file and lost rows.
Such a file is made here as older Trident made it: its DataFile statistics from pyiceberg's own
``data_file_statistics_from_parquet_metadata`` (which still has the bug), committed through
compaction's commit path in a pyiceberg transaction."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import (
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
)
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.table import Table

from tests.conftest import make_settings
from trident_resources import Trident
from trident_resources.sinks.iceberg.compaction import _commit

LONG = "m" + "x" * 5000  # over Parquet's 4 KiB statistics limit: its row group gets no min/max


def _table(t: Trident, key: str) -> Table:
    ds = t.control.dataset(t.workspace, key)
    assert ds is not None
    return t._sink(ds.sink)._existing_table(ds)  # type: ignore[attr-defined]


def _write_two_row_groups(t: Trident, key: str) -> None:
    first = pa.table({"id": [1, 2], "s": [LONG, "a"]})
    second = pa.table({"id": [3, 4], "s": ["b", "c"]})
    t.write(key, pa.concat_tables([first, second]))  # two chunks: two row groups, one file
    files = t.scan_plan(key).files
    assert len(files) == 1 and pq.read_metadata(files[0]).num_row_groups == 2


def _as_older_trident_wrote_it(t: Trident, key: str) -> None:
    """Replace the dataset's one data file by a copy whose statistics are pyiceberg's."""
    table = _table(t, key)
    (old,) = [task.file for task in table.scan().plan_files()]
    copy = f"{table.location().rstrip('/')}/data/older-{uuid.uuid4().hex}.parquet"
    data = table.io.new_input(old.file_path).open().read()
    with table.io.new_output(copy).create() as out:
        out.write(data)
    schema = table.schema()
    stats = data_file_statistics_from_parquet_metadata(
        pq.read_metadata(pa.BufferReader(data)),
        compute_statistics_plan(schema, table.properties),
        parquet_path_to_id_mapping(schema),
    )
    forged = DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=copy,
        file_format=FileFormat.PARQUET,
        partition=old.partition,
        file_size_in_bytes=len(data),
        sort_order_id=None,
        spec_id=old.spec_id,
        equality_ids=None,
        key_metadata=None,
        **stats.to_serialized_dict(),
    )
    fid = schema.find_field("s").field_id
    assert fid in forged.lower_bounds and fid in forged.upper_bounds  # the lossy bounds: 'a'..'c'
    current = table.current_snapshot()
    assert current is not None
    _commit(table.transaction(), [old], [forged], current.snapshot_id, uuid.uuid4())


def _ids(t: Trident, key: str, row_filter: str) -> list[int]:
    return sorted(t.read(key, row_filter=row_filter).column("id").to_pylist())


def _rows(t: Trident, key: str) -> list[dict[str, Any]]:
    return sorted(t.read(key).to_pylist(), key=lambda r: r["__row_index"])


def test_maintain_rewrites_a_file_whose_bounds_lose_rows(trident_home: Path, pg_dsn: str) -> None:
    t = Trident(make_settings(trident_home, pg_dsn, row_group_bytes=1024, write_parallelism=1))
    try:
        _write_two_row_groups(t, "rb/older")
        _as_older_trident_wrote_it(t, "rb/older")
        before = _rows(t, "rb/older")
        assert [r["id"] for r in before] == [1, 2, 3, 4]
        assert _ids(t, "rb/older", "s > 'l'") == []  # the bug: the file is pruned, row 1 lost

        report = t.maintain("rb/older")
        assert report.skipped is None
        assert report.repaired_files == 1 and report.compacted_files == 0

        assert _ids(t, "rb/older", "s > 'l'") == [1]
        assert _ids(t, "rb/older", f"s = '{LONG}'") == [1]
        assert _ids(t, "rb/older", "s < 'b'") == [2]
        after = _rows(t, "rb/older")
        assert after == before  # __row_id, __row_index and __created_at unchanged, every row
        again = t.maintain("rb/older")  # the rewritten file is right: nothing more to repair
        assert again.repaired_files == 0
    finally:
        t.close()


def test_maintain_of_an_unaffected_table_rewrites_nothing(trident_home: Path, pg_dsn: str) -> None:
    t = Trident(make_settings(trident_home, pg_dsn, row_group_bytes=1024, write_parallelism=1))
    try:
        _write_two_row_groups(t, "rb/fine")  # Trident's own statistics: already no bounds for s
        snapshot = _table(t, "rb/fine").current_snapshot()
        files = t.scan_plan("rb/fine").files
        report = t.maintain("rb/fine")
        assert report.skipped is None and report.repaired_files == 0 and report.compacted_files == 0
        after = _table(t, "rb/fine").current_snapshot()
        assert snapshot is not None and after is not None and after.snapshot_id == snapshot.snapshot_id
        assert t.scan_plan("rb/fine").files == files
        assert _ids(t, "rb/fine", "s > 'l'") == [1]
    finally:
        t.close()


def test_cli_and_dagster_maintenance_report_repaired_files(trident_home: Path, pg_dsn: str) -> None:
    from click.testing import CliRunner

    from tests.dagster_support import resources_for, succeeded
    from tests.helpers import cli_env
    from trident_cli.main import cli
    from trident_sensors.maintenance import table_maintenance_job

    settings = make_settings(trident_home, pg_dsn, row_group_bytes=1024, write_parallelism=1)
    t = Trident(settings)
    try:
        for key in ("rb/cli", "rb/job"):
            _write_two_row_groups(t, key)
            _as_older_trident_wrote_it(t, key)
        res = CliRunner().invoke(cli, ["maintain", "rb/cli"], env=cli_env(settings))
        assert res.exit_code == 0, res.output
        assert "1 files with lossy bounds rewritten" in " ".join(res.output.split())
        assert _ids(t, "rb/cli", "s > 'l'") == [1]

        result = table_maintenance_job.execute_in_process(
            run_config={"ops": {"maintain_tables": {"config": {"keys": ["rb/job"]}}}},
            resources={"trident": resources_for(settings)["trident"]},
        )
        succeeded(result)
        output = next(e for e in result.all_node_events if e.is_successful_output)
        assert output.step_output_data.metadata["repaired_files"].value == 1
        assert _ids(t, "rb/job", "s > 'l'") == [1]
    finally:
        t.close()
