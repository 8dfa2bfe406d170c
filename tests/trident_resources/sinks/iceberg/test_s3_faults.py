"""S3 connections cut mid-write for real (issue 8, "make it stay fixed"): a loopback TCP proxy in
front of the S3 API server resets every connection (and, in some scenarios, refuses new ones until
the writer has failed). Every scenario ends the same way after S3 is back and ``reconcile`` ran:
the dataset is the old or the new version whole, no ledger row is open, no cleanup is pending, no
object under the table is unreferenced by its metadata, no multipart upload is incomplete, and a
writer that failed got a named TridentError with the cause chained."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pytest

from tests.support.tcp_proxy import TcpProxy
from tests.trident_resources.ops.test_storage_cleanup import _objects, _proxied, _uploads, _upstream
from trident_resources import StorageUnavailableError, Trident, TridentError
from trident_resources.sinks.iceberg import committer as iceberg_commits

SCHEMA = pa.schema([("k", pa.int64()), ("blob", pa.binary())])
OUTCOMES: list[str] = []


@pytest.fixture(scope="module", autouse=True)
def _report() -> Iterator[None]:
    yield
    if OUTCOMES:
        print("\nS3-cut scenarios:\n  " + "\n  ".join(OUTCOMES))


def _stream(started: threading.Event, delay: float) -> Iterator[pa.RecordBatch]:
    for i in range(12):
        if i == 3:
            started.set()
        time.sleep(delay)
        yield pa.record_batch(
            {"k": pa.array(range(i * 200, (i + 1) * 200), pa.int64()), "blob": [bytes([i]) * 1500 for _ in range(200)]},
            schema=SCHEMA,
        )


def _referenced(table: Any) -> set[str]:
    """Every object the table's metadata references: metadata files (current and logged), and for
    each snapshot its manifest list, manifests and data files."""
    refs = {table.metadata_location, *(e.metadata_file for e in table.metadata.metadata_log)}
    for snap in table.snapshots():
        refs.add(snap.manifest_list)
        for manifest in snap.manifests(table.io):
            refs.add(manifest.manifest_path)
            refs |= {e.data_file.file_path for e in manifest.fetch_manifest_entry(table.io, discard_deleted=False)}
    return {urlsplit(r).path.lstrip("/") for r in refs}


def _unreferenced_objects(t: Trident, s3: Any, key: str) -> list[str]:
    ds = t.control.dataset(t.workspace, key)
    assert ds is not None
    table = t.driver.sinks["iceberg_native"].tables.table(ds)  # type: ignore[attr-defined]
    assert table is not None
    prefix = urlsplit(table.location()).path.strip("/") + "/"
    # keys ending in "/" are pyarrow's empty-directory markers (it leaves one when a delete
    # empties a folder): no bytes, not a file of any transaction
    return sorted({k for k in _objects(s3, prefix, "") if not k.endswith("/")} - _referenced(table))


SCENARIOS = {
    # name: (how the connections fail, pause at the sink's failpoint first)
    "reset once mid-stream": ("cut", None),
    "reset, then refused until the writer failed": ("down", None),
    "refused during the Iceberg commit": ("down", "commit.before_catalog"),
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_s3_connections_cut_mid_write(
    request: pytest.FixtureRequest, trident_home: Path, pg_dsn: str, s3: Any, monkeypatch: pytest.MonkeyPatch, scenario: str
) -> None:
    how, pause = SCENARIOS[scenario]
    key = "cut/x"
    with TcpProxy(*_upstream(s3)) as proxy:
        settings = _proxied(request, trident_home, pg_dsn, proxy, target_file_bytes=256 * 1024, row_group_bytes=64 * 1024)
        with Trident(settings) as t:
            t.write(key, pa.table({"k": pa.array([-1], pa.int64()), "blob": pa.array([b"x"], pa.binary())}))
            old = sorted(t.read(key).column("k").to_pylist())
            new = sorted(old + list(range(12 * 200)))
            started = threading.Event()
            resume = threading.Event()
            if pause is not None:
                reached = threading.Event()
                real = iceberg_commits.failpoint

                def hook(point: str) -> None:
                    if point == pause:
                        reached.set()
                        assert resume.wait(60)
                    real(point)

                monkeypatch.setattr(iceberg_commits, "failpoint", hook)
            else:
                reached = started
            caught: list[BaseException] = []

            def run() -> None:
                try:
                    t.write(key, pa.RecordBatchReader.from_batches(SCHEMA, _stream(started, 0 if pause else 0.1)), mode="append")
                except BaseException as exc:
                    caught.append(exc)

            th = threading.Thread(target=run)
            th.start()
            assert reached.wait(60), "the writer never got to the fault"
            assert proxy.connections > 0
            proxy.down() if how == "down" else proxy.cut()
            resume.set()
            th.join(180)
            assert not th.is_alive()
            if how == "down":
                assert caught, "S3 refused every connection and the write still succeeded"
            proxy.up()

            if caught:
                err = caught[0]
                assert isinstance(err, TridentError), f"raw error escaped: {type(err).__name__}: {err}"
                assert isinstance(err, StorageUnavailableError) and err.__cause__ is not None
            report = t.reconcile()
            history = t.history(key)
            assert [e for e in history if e.status == "open"] == []
            assert not any(e.cleanup_pending for e in history), report
            rows = sorted(t.read(key).column("k").to_pylist())
            assert rows in (old, new), "torn: neither the old nor the new version"
            assert t.describe(key).row_count == len(rows)
            assert _uploads(s3, settings.s3_prefix) == [], "incomplete multipart uploads left"
            assert _unreferenced_objects(t, s3, key) == []
            OUTCOMES.append(
                f"{scenario}: writer {'got ' + type(caught[0]).__name__ if caught else 'committed'}; "
                f"reconcile aborted {len(report.aborted)} open txn(s), cleaned {len(report.cleaned_up)} pending, "
                f"deleted {report.deleted_files} files, aborted {report.aborted_uploads} incomplete uploads; "
                f"dataset = {'new' if rows == new else 'old'} version, whole"
            )
