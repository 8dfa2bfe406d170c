"""Maintenance deletes only files its own table's metadata once referenced (issue 8, item 1).

Listing the table's folder and deleting "every file my snapshots don't use" deleted another
dataset's files whenever two datasets shared a folder (the trailing-newline key did exactly that).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import cast

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from tests.conftest import backend_settings
from tests.support.helpers import table, user_rows
from trident_resources import Trident
from trident_resources.core.schemas import to_iceberg, with_identity
from trident_resources.sinks.iceberg.files import filesystem_for
from trident_resources.sinks.iceberg.sink import OWNER_PROPERTY, IcebergSink

pytestmark = pytest.mark.usefixtures("iceberg_writes")  # about what each Iceberg commit leaves


def _sink(t: Trident) -> IcebergSink:
    sink = t.driver.sinks["iceberg_native"]
    assert isinstance(sink, IcebergSink)
    return sink


def _files(t: Trident, key: str) -> set[str]:
    ds = t.control.dataset(t.workspace, key)
    assert ds is not None
    tbl = _sink(t).tables.table(ds)
    assert tbl is not None
    fs, path = filesystem_for(tbl.io, f"{tbl.location()}/data")
    return {i.base_name for i in fs.get_file_info(pafs.FileSelector(path)) if i.type == pafs.FileType.File}


def _location(t: Trident, key: str) -> str:
    ds = t.control.dataset(t.workspace, key)
    assert ds is not None
    tbl = _sink(t).tables.table(ds)
    assert tbl is not None
    return tbl.location()


@pytest.fixture(params=["local", "s3"])  # the REST catalog assigns table locations itself
def folder_trident(request: pytest.FixtureRequest, trident_home: Path, pg_dsn: str) -> Iterator[Trident]:
    t = Trident(backend_settings(request, request.param, trident_home, pg_dsn))
    yield t
    t.close()


def test_maintain_leaves_a_folder_neighbours_files_alone(folder_trident: Trident) -> None:
    """Dataset ``shared/b``'s table lives in ``shared/a``'s folder (as the newline key made happen);
    a stray file sits there too. Maintaining ``shared/a`` removes only ``shared/a``'s expired file."""
    t = folder_trident
    t.write("shared/a", table(k=[1, 2]))
    t.write("shared/a", table(k=[3]))
    location = _location(t, "shared/a")

    # shared/b: the same storage folder, a table of its own (created in the real catalog first)
    sink = _sink(t)
    b = t.control.ensure_dataset(t.workspace, "shared/b", "iceberg_native", None)
    ident = sink.tables.identifier(b)
    sink._ensure_namespaces(ident)
    sink.catalog.create_table(  # owned by shared/b, as if created by its first write
        ident,
        schema=to_iceberg(with_identity(pa.schema([("k", pa.int64())]))),
        location=location,
        properties={OWNER_PROPERTY: str(b.dataset_id)},
    )
    t.write("shared/b", table(k=[7, 8, 9]))
    t.write("shared/b", table(k=[10]), mode="append")
    a_txns = {str(e.txn_id) for e in t.history("shared/a")}
    b_files = {f for f in _files(t, "shared/a") if f[:36] not in a_txns}  # <txn_id>-NNNNN.parquet
    assert len(b_files) == 2

    # a file nobody's metadata ever referenced (another tool's, a partial upload...)
    ds = t.control.dataset(t.workspace, "shared/a")
    assert ds is not None
    tbl = sink.tables.table(ds)
    assert tbl is not None
    with tbl.io.new_output(f"{location}/data/not-ours.parquet").create(overwrite=True) as out:
        out.write(b"PAR1 not ours")

    report = t.maintain("shared/a", older_than=timedelta(0), retain_last=1)
    assert (report.expired_snapshots, report.deleted_files) == (1, 1)
    left = _files(t, "shared/a")
    assert b_files <= left and "not-ours.parquet" in left
    assert user_rows(t, "shared/b", "k") == [{"k": 7}, {"k": 8}, {"k": 9}, {"k": 10}]
    assert user_rows(t, "shared/a", "k") == [{"k": 3}]
    assert t.sql('select count(*) as n from "shared/b"').column("n").to_pylist() == [4]


def test_maintain_finishes_a_cleanup_an_earlier_run_could_not(trident: Trident) -> None:
    """Snapshots expired without their files being deleted (a maintenance run that died between
    the two steps): the metadata log still says the table once referenced those files."""
    t = trident
    t.write("m/log", table(k=[1]))
    t.write("m/log", table(k=[2]))
    ds = t.control.dataset(t.workspace, "m/log")
    assert ds is not None
    tbl = _sink(t).tables.table(ds)
    assert tbl is not None
    first = min(tbl.snapshots(), key=lambda s: cast(int, s.sequence_number)).snapshot_id
    tbl.maintenance.expire_snapshots().by_ids([first]).commit()  # expired, files left behind
    assert len(_files(t, "m/log")) == 2

    report = t.maintain("m/log", older_than=timedelta(days=1))
    assert (report.expired_snapshots, report.deleted_files) == (0, 1)
    assert len(_files(t, "m/log")) == 1
    assert user_rows(t, "m/log", "k") == [{"k": 2}]
    again = t.maintain("m/log", older_than=timedelta(days=1))
    assert again.deleted_files == 0


@pytest.mark.parametrize("retain_last", [1, 3])
def test_maintain_keeps_every_file_a_retained_snapshot_reads(trident: Trident, retain_last: int) -> None:
    t = trident
    t.write("m/keep", table(k=[1, 2]))
    t.write("m/keep", table(k=[3]), mode="append")
    t.write("m/keep", table(k=[4]), mode="upsert", keys=["k"])
    t.write("m/keep", table(k=[5]), mode="append")
    snaps = [e.txn_id for e in t.history("m/keep")]
    t.maintain("m/keep", older_than=timedelta(0), retain_last=retain_last)
    assert user_rows(t, "m/keep", "k") == [{"k": k} for k in (1, 2, 3, 4, 5)]
    for txn in snaps[:retain_last]:
        t.read("m/keep", as_of=txn)  # every retained version still reads
