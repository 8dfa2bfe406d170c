"""``maintain`` repairs data files written before Trident's statistics knew that Parquet omits a
row group's min/max (a value over its 4 KiB statistics limit, an all-NaN float chunk): their
manifest bounds are the OTHER row groups', so a filtered read pruned the file and lost rows.
Such a file is made here as older Trident made it: its DataFile statistics from pyiceberg's own
``data_file_statistics_from_parquet_metadata`` (which still has the bug), committed through
compaction's commit path in a pyiceberg transaction."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.io.pyarrow import (
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
)
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.table import Table

from tests.conftest import make_settings
from tests.support.s3_gate import S3Gate, s3_gate
from trident_resources import Trident, WriteResult

pytestmark = pytest.mark.usefixtures("iceberg_writes")  # about what each Iceberg commit leaves

if TYPE_CHECKING:
    from tests.support.s3_server import S3Server

LONG = "m" + "x" * 5000  # over Parquet's 4 KiB statistics limit: its row group gets no min/max


def _table(t: Trident, key: str) -> Table:
    ds = t.control.dataset(t.workspace, key)
    assert ds is not None
    return t.driver.sink(ds.sink).tables.existing_table(ds)  # type: ignore[attr-defined]


def _write_two_row_groups(t: Trident, key: str) -> None:
    first = pa.table({"id": [1, 2], "s": [LONG, "a"]})
    second = pa.table({"id": [3, 4], "s": ["b", "c"]})
    t.write(key, pa.concat_tables([first, second]))  # two chunks: two row groups, one file
    files = t.scan_plan(key).files
    assert len(files) == 1 and pq.read_metadata(files[0]).num_row_groups == 2


def _forged_copy(table: Table, old: DataFile) -> DataFile:
    """A copy of ``old`` whose statistics are pyiceberg's (as Trident's were before ``stats.py``)."""
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
    return DataFile.from_args(
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


def _as_older_trident_wrote_it(t: Trident, key: str, only: set[str] | None = None) -> int:
    """Replace the dataset's data files (or the ``only`` ones) by copies whose statistics are
    pyiceberg's, in one snapshot committed as an older Trident (or another tool) did: through
    pyiceberg, without the summary mark of a writer whose bounds are exact. Returns how many."""
    table = _table(t, key)
    olds = [task.file for task in table.scan().plan_files() if only is None or task.file.file_path in only]
    forged = [_forged_copy(table, f) for f in olds]
    with table.transaction() as tx:
        with tx.update_snapshot().overwrite() as p:
            for f in olds:
                p.delete_data_file(f)
            for f in forged:
                p.append_data_file(f)
    _record_current_snapshot(t, key)  # the older Trident recorded the version it committed
    return len(forged)


def _record_current_snapshot(t: Trident, key: str) -> None:
    """Make the table's current snapshot the version the control plane records (readers follow
    the record): what a Trident that committed it would have left."""
    current = _table(t, key).current_snapshot()
    assert current is not None
    with t.engine.control.connection() as conn:
        conn.execute(
            "UPDATE trident_datasets SET snapshot_id = %s WHERE workspace = %s AND key = %s",
            (current.snapshot_id, t.engine.workspace, key),
        )


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
        repair = _table(t, "rb/older").current_snapshot()
        assert repair is not None and repair.summary is not None
        assert repair.summary.operation.value == "replace"  # the same rows, rewritten (issue 28 item 5)

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

    from tests.support.dagster_helpers import resources_for, succeeded
    from tests.support.helpers import cli_env
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


# -- footers are read once: what maintain reads is counted on the wire (moto behind the S3 gate) --


@pytest.fixture
def gate(s3: S3Server) -> Iterator[S3Gate]:
    with s3_gate(s3.endpoint) as g:
        yield g


def _on_s3(home: Path, dsn: str, s3: S3Server, gate: S3Gate) -> Trident:
    return Trident(
        make_settings(
            home,
            dsn,
            s3_endpoint=gate.endpoint,
            s3_bucket=s3.bucket,
            s3_access_key_id=s3.access_key_id,
            s3_secret_access_key=s3.secret_access_key,
            s3_region=s3.region,
            s3_prefix=f"wh-{uuid.uuid4().hex[:8]}",
            row_group_bytes=1024,
            write_parallelism=1,
        )
    )


def _append_two_row_groups(t: Trident, key: str, start: int, *, stage: bool = False) -> WriteResult:
    """One file of two row groups whose bounds are right whoever computed them (short strings)."""
    ids = [list(range(start + i, start + i + 100)) for i in (0, 100)]  # each over row_group_bytes
    rows = pa.concat_tables([pa.table({"id": i, "s": [f"v{n:06d}" for n in i]}) for i in ids])
    return t.write(key, rows, mode="append", stage=stage)


def _parquet_reads(gate: S3Gate, since: int) -> set[str]:
    """Data files maintain fetched (GET or HEAD of a ``.parquet`` object) after request ``since``."""
    return {s.path.split("?", 1)[0] for s in gate.requests()[since:] if s.method in ("GET", "HEAD") and ".parquet" in s.path}


def _maintain_reads(t: Trident, gate: S3Gate, key: str) -> set[str]:
    since = len(gate.requests())
    report = t.maintain(key)
    assert report.skipped is None and report.repaired_files == 0 and report.compacted_files == 0
    return _parquet_reads(gate, since)


def test_footers_of_an_older_table_are_read_by_the_first_maintain_only(
    trident_home: Path, pg_dsn: str, s3: S3Server, gate: S3Gate
) -> None:
    t = _on_s3(trident_home, pg_dsn, s3, gate)
    try:
        for start in (0, 1000):  # (4 files at most below: 5 small ones would be compacted)
            _append_two_row_groups(t, "rb/aged", start)
        assert _as_older_trident_wrote_it(t, "rb/aged") == 2
        files = _live_files(t, "rb/aged")
        assert all(len(f.split_offsets or []) == 2 for f in files)

        first = _maintain_reads(t, gate, "rb/aged")  # each file's footer, once
        assert {p.rsplit("/", 1)[1] for p in first} == {f.file_path.rsplit("/", 1)[1] for f in files}
        assert _maintain_reads(t, gate, "rb/aged") == set()  # checked once: never again

        _append_two_row_groups(t, "rb/aged", 3000)  # written by this Trident: exact bounds, never read
        assert _maintain_reads(t, gate, "rb/aged") == set()

        before = {f.file_path for f in _live_files(t, "rb/aged")}
        _append_two_row_groups(t, "rb/aged", 4000)
        new = {f.file_path for f in _live_files(t, "rb/aged")} - before
        assert _as_older_trident_wrote_it(t, "rb/aged", only=new) == 1  # an unmarked file after the check
        third = _maintain_reads(t, gate, "rb/aged")
        assert len(third) == 1 and all("/older-" in p for p in third)
        assert _maintain_reads(t, gate, "rb/aged") == set()
        assert sorted(t.read("rb/aged").column("id").to_pylist()) == [i for s in (0, 1000, 3000, 4000) for i in range(s, s + 200)]
    finally:
        t.close()


def test_a_table_trident_wrote_has_no_footer_read_by_maintain(
    trident_home: Path, pg_dsn: str, s3: S3Server, gate: S3Gate
) -> None:
    t = _on_s3(trident_home, pg_dsn, s3, gate)
    try:
        for start in (0, 1000, 2000):
            _append_two_row_groups(t, "rb/fresh", start)
        staged = _append_two_row_groups(t, "rb/fresh", 3000, stage=True)  # published: the writer's snapshot
        t.publish("rb/fresh", staged.txn_id)
        files = _live_files(t, "rb/fresh")
        assert len(files) == 4 and all(len(f.split_offsets or []) == 2 for f in files)
        assert _maintain_reads(t, gate, "rb/fresh") == set()
    finally:
        t.close()


def _live_files(t: Trident, key: str) -> list[DataFile]:
    return [task.file for task in _table(t, key).scan().plan_files()]


def test_a_rollback_below_the_checked_mark_does_not_hide_a_lossy_file(trident_home: Path, pg_dsn: str) -> None:
    """Prober 3: the mark says 'every live file at or below sequence number N was checked', true
    only of the snapshot that pass looked at and its descendants. Another tool rolling the table
    back to a snapshot older than the mark brings back a file no pass ever looked at (it was not
    live then), at a sequence number below N: maintain skipped it and a filtered read kept losing
    its row."""
    t = Trident(make_settings(trident_home, pg_dsn, row_group_bytes=1024, write_parallelism=1))
    try:
        _write_two_row_groups(t, "rb/rolled")
        _as_older_trident_wrote_it(t, "rb/rolled")
        lossy = _table(t, "rb/rolled").current_snapshot()
        assert lossy is not None
        t.write("rb/rolled", pa.table({"id": [9], "s": ["z"]}))  # a replace: the lossy file is gone
        assert t.maintain("rb/rolled").repaired_files == 0  # nothing to repair; the mark moves up
        table = _table(t, "rb/rolled")
        assert int(table.properties["trident.bounds-checked-through"]) > (lossy.sequence_number or 0)

        table.manage_snapshots().rollback_to_snapshot(lossy.snapshot_id).commit()  # another tool
        _record_current_snapshot(t, "rb/rolled")  # ... whose rollback the control plane followed
        assert _ids(t, "rb/rolled", "s > 'l'") == []  # the lossy file is live again: row 1 pruned
        report = t.maintain("rb/rolled")
        assert report.skipped is None and report.repaired_files == 1
        assert _ids(t, "rb/rolled", "s > 'l'") == [1]
    finally:
        t.close()
