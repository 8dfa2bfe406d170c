"""Issue 12: SQL and node compute read the current snapshot's Parquet files natively in DuckDB,
inside a sandbox that allows exactly those files: not another dataset's, not another workspace's,
and never a past or future version's."""

from __future__ import annotations

from datetime import UTC
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from tests.conftest import backend_settings, make_settings
from trident_assets.compute import open_session
from trident_assets.strategies import replace
from trident_resources import SqlNotAllowedError, Trident, TridentError, TridentSettings
from trident_resources.core.identity import IDENTITY_COLUMNS


def _files(t: Trident, key: str) -> list[str]:
    plan = t.scan_plan(key)
    assert plan.path == "native" and plan.files
    return list(plan.files)


def test_a_local_dataset_is_scanned_natively_and_describe_says_so(trident: Trident) -> None:
    t = trident
    t.write("n/a", pa.table({"k": [1, 2, 3], "v": ["x", "y", "z"]}))
    d = t.describe("n/a")
    assert d.scan_path == "native" and "read_parquet" in d.scan_reason
    plan = t.scan_plan("n/a")
    assert plan.snapshot_id == d.snapshot_id and all(f.endswith(".parquet") for f in plan.files)
    assert plan.schema.names == [*IDENTITY_COLUMNS, "k", "v"]
    got = t.sql('select k, v from "n/a" order by k')
    assert got.to_pydict() == {"k": [1, 2, 3], "v": ["x", "y", "z"]}
    # identity is visible to SQL, as it was over Arrow
    assert t.sql('select count(distinct __row_id) as n from "n/a"').column("n").to_pylist() == [3]


def test_a_query_cannot_read_a_data_file_of_a_dataset_it_did_not_name(trident: Trident) -> None:
    t = trident
    t.write("n/mine", pa.table({"a": [1]}))
    t.write("n/secret", pa.table({"s": ["hidden"]}))
    secret = _files(t, "n/secret")[0]
    mine = _files(t, "n/mine")[0]
    # not even its own files: only through the view (test_sql_direct_files.py) ...
    with pytest.raises(SqlNotAllowedError):
        t.sql(f"select count(*) as n from \"n/mine\", read_parquet('{mine}')")
    # ... nor another dataset's file, even when the query names a dataset too
    with pytest.raises(SqlNotAllowedError):
        t.sql(f"select * from \"n/mine\", read_parquet('{secret}')")
    with pytest.raises(SqlNotAllowedError):
        t.sql(f"select * from read_parquet('{secret}')")
    folder = secret.rsplit("/", 1)[0]
    with pytest.raises(SqlNotAllowedError):
        t.sql(f"select * from \"n/mine\", read_parquet('{folder}/*.parquet')")
    with pytest.raises(SqlNotAllowedError):
        t.sql(f"select * from \"n/mine\", glob('{folder}/*')")


def test_a_query_cannot_read_another_workspaces_files(trident: Trident, settings: TridentSettings) -> None:
    other_settings = make_settings(settings.home, settings.pg_dsn.get_secret_value())  # type: ignore[union-attr]
    with Trident(other_settings) as other:
        other.write("n/same", pa.table({"s": ["theirs"]}))
        theirs = _files(other, "n/same")[0]
    trident.write("n/same", pa.table({"s": ["ours"]}))
    assert trident.sql('select s from "n/same"').column("s").to_pylist() == ["ours"]
    with pytest.raises(SqlNotAllowedError):
        trident.sql(f"select * from \"n/same\", read_parquet('{theirs}')")


def test_an_older_version_of_the_named_dataset_is_not_readable(trident: Trident) -> None:
    t = trident
    t.write("n/v", pa.table({"a": [1, 2]}))
    old = _files(t, "n/v")
    t.write("n/v", pa.table({"a": [3]}))  # replace: the old files stay until maintenance
    assert t.sql('select a from "n/v"').column("a").to_pylist() == [3]
    with pytest.raises(SqlNotAllowedError):
        t.sql(f"select * from \"n/v\", read_parquet('{old[0]}')")


@pytest.mark.usefixtures("iceberg_writes")  # about the data files each Iceberg commit leaves
def test_schema_evolution_reads_added_columns_as_null_and_dropped_ones_gone(trident: Trident) -> None:
    t = trident
    t.write("n/evo", pa.table({"id": [1, 2], "a": ["p", "q"]}))
    t.write("n/evo", pa.table({"id": [3], "a": ["r"], "b": [30.5]}), mode="append")
    t.write("n/evo", pa.table({"id": [4], "b": [40.5]}), mode="append")
    assert len(_files(t, "n/evo")) == 3
    got = t.sql('select id, a, b from "n/evo" order by id').to_pydict()
    assert got == {"id": [1, 2, 3, 4], "a": ["p", "q", "r", None], "b": [None, None, 30.5, 40.5]}
    # a keyed rewrite keeps files written before "b" existed: still NULL there, by field id
    t.write("n/evo", pa.table({"id": [4], "b": [41.0]}), mode="upsert", keys=["id"])
    assert t.sql('select id, b from "n/evo" order by id').column("b").to_pylist() == [None, None, 30.5, 41.0]
    # a replace that drops a column: the new snapshot's files lack it, and so does the view
    t.write("n/evo", pa.table({"id": [9], "b": [1.0]}))
    assert t.sql('select * from "n/evo"').column_names == [*IDENTITY_COLUMNS, "id", "b"]
    with pytest.raises((duckdb.Error, TridentError)):  # translation of DuckDB errors is sql.py's own change
        t.sql('select a from "n/evo"')
    # a replace that re-adds the dropped name with another type: the new column, not the old bytes
    t.write("n/evo", pa.table({"id": [10], "a": [7]}), mode="append")
    assert t.sql('select id, a from "n/evo" order by id').to_pydict() == {"id": [9, 10], "a": [None, 7]}


def test_an_empty_version_has_the_schema_and_no_rows(trident: Trident) -> None:
    t = trident
    t.write("n/empty", pa.table({"a": [1]}))
    t.write("n/empty", pa.table({"a": pa.array([], pa.int64())}))
    assert t.scan_plan("n/empty").files == ()
    out = t.sql('select a from "n/empty"')
    assert out.num_rows == 0 and out.column_names == ["a"]


def test_node_compute_hides_identity_and_filters_the_delta_window_natively(trident: Trident) -> None:
    t = trident
    first = t.write("n/src", pa.table({"id": [1, 2]}))
    t.write("n/src", pa.table({"id": [3]}), mode="append")
    session = open_session(t, "n/out", {"source": "n/src"}, replace())
    try:
        cols = session.con.sql("select * from source").columns
        assert cols == ["id"]  # identity hidden as before
        # the node's SQL cannot widen its sandbox once the sources are registered
        with pytest.raises(Exception, match="configuration"):
            session.con.execute("SET enable_external_access = true")
        since = first.committed_at
        session.con.execute(
            "CREATE TEMP VIEW later AS SELECT * FROM __trident_src_0 WHERE __created_at > "
            f"'{since.astimezone(UTC).isoformat()}'::TIMESTAMPTZ"
        )
        assert session.con.sql("select id from later").fetchall() == [(3,)]
    finally:
        session.close()


def test_on_s3_storage_the_scan_takes_the_arrow_path_and_says_why(
    request: pytest.FixtureRequest, trident_home: Path, pg_dsn: str
) -> None:
    with Trident(backend_settings(request, "s3", trident_home, pg_dsn)) as t:
        t.write("n/remote", pa.table({"a": [1, 2]}))
        d = t.describe("n/remote")
        assert d.scan_path == "arrow" and "httpfs" in d.scan_reason
        plan = t.scan_plan("n/remote")
        assert plan.path == "arrow" and plan.files == ()
        assert t.sql('select sum(a) as s from "n/remote"').column("s").to_pylist() == [3]


def test_read_in_parallel_gives_what_stream_gives(trident: Trident) -> None:
    t = trident
    t.write("n/r", pa.table({"id": [1, 2, 3], "a": ["p", "q", "r"]}))
    t.write("n/r", pa.table({"id": [4], "b": [4.5]}), mode="append")
    for kwargs in ({}, {"columns": ["id", "b"]}, {"row_filter": "id >= 3"}, {"columns": ["__row_id"], "row_filter": "id < 3"}):
        got = t.read("n/r", **kwargs).sort_by("__row_id" if kwargs.get("columns") == ["__row_id"] else "id")
        want = t.stream("n/r", **kwargs).read_all().sort_by("__row_id" if kwargs.get("columns") == ["__row_id"] else "id")
        assert got.equals(want), kwargs
    first = t.history("n/r")[-1].txn_id
    assert t.read("n/r", as_of=first).column("id").to_pylist() == [1, 2, 3]


def _view_sql(t: Trident, key: str) -> str:
    from trident_resources.sql.sandbox import register_dataset, sandbox

    plan = t.scan_plan(key)
    con = sandbox("256MB", 1, plan.files)
    try:
        register_dataset(con, "v", plan, lambda: None)
        return str(con.execute("select sql from duckdb_views() where view_name = 'v'").fetchall()[0][0])
    finally:
        con.close()


def test_the_field_id_map_is_skipped_only_when_every_file_holds_exactly_the_versions_columns(trident: Trident) -> None:
    """The schema map cost a few ms on every query (issue 12); a plain read_parquet matches by
    name, which is matching by id only while every file has the version's columns and ids."""
    t = trident
    t.write("n/plain", pa.table({"id": [1, 2], "a": ["p", "q"]}))
    t.write("n/plain", pa.table({"id": [3], "a": ["r"]}), mode="append")
    assert "default_value" not in _view_sql(t, "n/plain")
    assert t.sql('select sum(id) as s from "n/plain"').column("s").to_pylist() == [6]
    t.write("n/plain", pa.table({"id": [4], "a": ["s"], "b": [1.5]}), mode="append")  # older files lack b
    assert "default_value" in _view_sql(t, "n/plain")
    assert t.sql('select b from "n/plain" order by id').column("b").to_pylist() == [None, None, None, 1.5]
    t.write("n/plain", pa.table({"id": [9]}))  # a replace drops a and b: one new file, plain again
    assert "default_value" not in _view_sql(t, "n/plain")
    t.write("n/plain", pa.table({"id": [10], "a": [7]}), mode="append")  # 'a' again, a new field id
    assert "default_value" in _view_sql(t, "n/plain")
    assert t.sql('select id, a from "n/plain" order by id').to_pydict() == {"id": [9, 10], "a": [None, 7]}


def test_a_versions_read_parquet_is_worked_out_once_per_process(trident: Trident, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 12: each sandbox that registers a version (every node and every step's checks that
    read it) read all its files' schemas again to decide on the field-id map; the answer depends
    only on the version's files, schema and field ids, so it is worked out once. A new version
    (new files, or the same files under a new schema) gets its own, and reads what it should."""
    from trident_resources.sql import sandbox as trident_sql

    t = trident
    t.write("n/once", pa.table({"id": [1, 2]}))
    t.write("n/once", pa.table({"id": [3]}), mode="append")
    decided: list[str] = []
    real = trident_sql._files_match_schema

    def counting(con: Any, plan: Any, plain: str, types: list[str]) -> bool:
        decided.append(plan.key)
        return real(con, plan, plain, types)

    monkeypatch.setattr(trident_sql, "_files_match_schema", counting)
    first = _view_sql(t, "n/once")
    assert _view_sql(t, "n/once") == first and len(decided) == 1  # a second sandbox: no footer read
    assert t.sql('select sum(id) as s from "n/once"').column("s").to_pylist() == [6] and len(decided) == 1
    t.write("n/once", pa.table({"id": [4], "b": [1.5]}), mode="append")  # new files, older ones lack b
    assert "default_value" in _view_sql(t, "n/once") and len(decided) == 2
    assert t.sql('select b from "n/once" order by id').column("b").to_pylist() == [None, None, None, 1.5]
    assert len(decided) == 2
