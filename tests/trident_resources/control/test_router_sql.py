"""The writer registry and its clamp, flags seen across processes, sink-mismatch refusal, and the
read-only SQL sandbox refusing every forbidden statement kind (API and CLI)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

from tests.support.helpers import cli_env
from trident_cli.main import cli
from trident_resources import SinkMismatchError, SqlNotAllowedError, Trident, TridentSettings
from trident_resources.control.router import WRITERS

REPO = Path(__file__).resolve().parents[3]


def test_registry_has_the_ten_writers_of_the_design() -> None:
    assert len(WRITERS) == 10
    assert WRITERS["dataset.manifest"].max_mode == "pg" and WRITERS["dataset.manifest"].tier == 4
    assert {w.name for w in WRITERS.values() if w.tier == 3} == {"ingest.stream", "row.edit"}


def test_a_pg_capped_writer_cannot_be_flipped_by_any_flag_or_pin(trident: Trident) -> None:
    t = trident
    decision = t.router.set_flag("dataset.manifest", "iceberg_native")
    assert decision.clamped and decision.sink == "pg"
    t.router.set_pin("files/index", "iceberg_native")
    r = t.write_manifest("files/index", [{"object_key": "a.csv", "size": 3, "checksum": "sha256:00", "content_type": "text/csv"}])
    assert r.sink == "pg" and "clamped from iceberg_native" in r.route
    entry = t.history("files/index")[0]
    assert (entry.sink, entry.requested_sink, entry.clamped, entry.route_reason) == ("pg", "iceberg_native", True, "pin")
    t.router.clear_pin("files/index")
    r = t.write_manifest("files/index", [{"object_key": "b.csv", "size": 4, "checksum": "sha256:01", "content_type": "text/csv"}])
    assert r.sink == "pg" and t.history("files/index")[0].route_reason == "flag"
    d = t.describe("files/index")
    assert (
        d.sink == "pg"
        and d.row_count == 2
        and [f["name"] for f in d.schema][3:7] == ["object_key", "size", "checksum", "content_type"]
    )


def test_manifest_entries_point_at_real_files(trident: Trident, tmp_path: Path) -> None:
    from trident_resources.ops.manifest import manifest_entries

    (tmp_path / "x.json").write_text('{"a": 1}')
    (tmp_path / "y.parquet").write_bytes(b"PAR1")
    rows = manifest_entries(sorted(tmp_path.iterdir()), root=tmp_path)
    trident.write_manifest("files/local", rows)
    got = {r["object_key"]: r for r in trident.read("files/local").to_pylist()}
    assert got["x.json"]["size"] == 8 and got["x.json"]["content_type"] == "application/json"
    assert got["x.json"]["checksum"].startswith("sha256:") and len(got["x.json"]["checksum"]) == 7 + 64
    trident.write_manifest("files/local", pa.table({"object_key": ["x.json"]}), mode="delete")
    assert trident.read("files/local").column("object_key").to_pylist() == ["y.parquet"]


def test_a_write_never_splits_a_dataset_across_sinks(trident: Trident) -> None:
    t = trident
    t.router.set_flag("sync.full", "pg")
    t.write("legacy/t", pa.table({"a": [1]}), writer="sync.full")
    t.router.clear_flag("sync.full")
    with pytest.raises(SinkMismatchError, match="trident canary legacy/t"):
        t.write("legacy/t", pa.table({"a": [2]}), writer="sync.full")
    with pytest.raises(SinkMismatchError):
        t.ingest_stream("legacy/t", writer="sync.full")
    # tier-3 writers follow the dataset: a row edit of a pg dataset stays in pg
    assert t.write("legacy/t", pa.table({"a": [3]}), mode="append", writer="row.edit").sink == "pg"
    assert sorted(t.read("legacy/t").column("a").to_pylist()) == [1, 3]


WATCH = """
import sys, time
from trident_resources import Trident
t = Trident.from_env()
assert t.router.resolve("sync.full", "watch/x", None).sink == "iceberg_native"
print("ready", flush=True)
sys.stdin.readline()                 # the parent has set the flag
deadline = time.monotonic() + 10
while time.monotonic() < deadline:
    if t.router.resolve("sync.full", "watch/x", None).sink == "pg":
        print("seen", flush=True)
        sys.exit(0)
    time.sleep(0.2)
print("not seen within 10 s", flush=True)
sys.exit(1)
"""


def test_a_flag_change_is_seen_by_another_process_within_10_seconds(trident: Trident, settings: TridentSettings) -> None:
    env = {**os.environ, **cli_env(settings)}
    child = subprocess.Popen(
        [sys.executable, "-c", WATCH],
        env=env,
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "ready"
        trident.router.set_flag("sync.full", "pg")
        child.stdin.write("go\n")
        child.stdin.flush()
        out, err = child.communicate(timeout=60)
    finally:
        child.kill()
    assert child.returncode == 0, (out, err)
    assert "seen" in out


FORBIDDEN = [
    'insert into "s/t" values (1)',
    'update "s/t" set a = 2',
    'delete from "s/t"',
    "create table x (a int)",
    "create view v as select 1",
    'drop table "s/t"',
    "alter table x add column b int",
    "copy (select 1) to '/tmp/trident_x.csv'",
    "copy x from '/etc/hosts'",
    "attach '/tmp/trident_x.duckdb' as other",
    "install httpfs",
    "load httpfs",
    "select * from read_csv('/etc/hosts')",
    "select * from read_parquet('https://example.com/x.parquet')",
    "select * from '/etc/hosts'",
    "select * from glob('/etc/*')",
    "set enable_external_access = true",
    "pragma version",
    "export database '/tmp/trident_export'",
    "select 1; select 2",
]


@pytest.mark.parametrize("query", FORBIDDEN)
def test_sql_sandbox_refuses(trident: Trident, query: str) -> None:
    trident.write("s/t", pa.table({"a": [1]}))
    with pytest.raises(SqlNotAllowedError):
        trident.sql(query)
    assert trident.read("s/t").column("a").to_pylist() == [1]


def test_cli_readers_and_refusals(trident: Trident, settings: TridentSettings, tmp_path: Path) -> None:
    trident.router.set_pin("cli/x", "pg")
    trident.write("cli/x", pa.table({"a": list(range(1000)), "b": ["v"] * 1000}))
    run = CliRunner().invoke
    env = cli_env(settings)
    res = run(cli, ["sql", "attach 'x.db' as y"], env=env)
    assert res.exit_code == 2 and "only SELECT" in res.output
    res = run(cli, ["sql", 'select count(*) as n from "cli/x"'], env=env)
    assert res.exit_code == 0 and "1000" in res.output
    for fmt in ("csv", "parquet"):
        out = tmp_path / f"x.{fmt}"
        res = run(cli, ["export", "cli/x", "--format", fmt, "--out", str(out)], env=env)
        assert res.exit_code == 0 and out.exists(), res.output
    import pyarrow.parquet as pq

    assert pq.read_table(tmp_path / "x.parquet").num_rows == 1000
    for args in (["datasets"], ["describe", "cli/x"], ["history", "cli/x"], ["writers"], ["pins"]):
        res = run(cli, args, env=env)
        assert res.exit_code == 0 and res.output, (args, res.output)
    res = run(cli, ["flag", "set", "dataset.manifest", "iceberg_native"], env=env)
    assert res.exit_code == 0 and "clamped" in res.output
