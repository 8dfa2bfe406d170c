"""The Dagster adapter's configuration: typed resource fields that mirror the one settings object,
EnvVar-friendly, falling back to ``TRIDENT_*`` when unset; and the engine never imports Dagster."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pyarrow as pa
import pytest

from tests.support.helpers import fresh_python
from trident_resources import Trident, TridentSettings
from trident_resources.dagster import TridentResource

ROOT = Path(__file__).resolve().parents[3]


def test_the_resource_has_one_typed_documented_field_per_setting() -> None:
    fields = TridentResource.model_fields
    assert set(fields) == set(TridentSettings.model_fields)
    for name, f in fields.items():
        assert f.default is None, name  # unset means: TridentSettings decides (environment, then default)
        assert f.description and f.description.startswith(f"TRIDENT_{name.upper()}"), name
    assert "overrides" not in fields


def test_from_settings_reproduces_the_settings_exactly(settings: TridentSettings) -> None:
    s = settings.model_copy(update={"catalog_properties": {"prefix": "p"}, "s3_region": "auto", "join_max_rows": 7})
    assert TridentResource.from_settings(s).settings() == s


def test_unset_fields_come_from_the_environment_and_set_ones_win(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRIDENT_WORKSPACE", "from_env")
    monkeypatch.setenv("TRIDENT_JOIN_MAX_ROWS", "123")
    monkeypatch.setenv("TRIDENT_CATALOG_PROPERTIES", '{"prefix": "env"}')
    zero = TridentResource(home=str(tmp_path)).settings()
    assert (zero.workspace, zero.join_max_rows, zero.catalog_properties) == ("from_env", 123, {"prefix": "env"})
    assert zero.home == tmp_path.resolve()
    assert TridentResource(workspace="from_field", join_max_rows=5).settings().workspace == "from_field"
    monkeypatch.delenv("TRIDENT_WORKSPACE")
    assert TridentResource().settings().workspace == "default"


def test_secrets_and_workspace_from_envvar_in_a_run(
    settings: TridentSettings, trident: Trident, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert settings.pg_dsn is not None
    monkeypatch.setenv("MY_PG_DSN", settings.pg_dsn.get_secret_value())
    monkeypatch.setenv("MY_WORKSPACE", settings.workspace)
    resource = TridentResource(home=str(settings.home), pg_dsn=dg.EnvVar("MY_PG_DSN"), workspace=dg.EnvVar("MY_WORKSPACE"))

    @dg.asset(key=["cfg", "written"])
    def written(trident: TridentResource) -> dg.MaterializeResult:
        r = trident.get_client().write("cfg/written", pa.table({"id": [1, 2]}))
        return dg.MaterializeResult(metadata={"txn": str(r.txn_id)})

    result = dg.materialize([written], resources={"trident": resource})
    assert result.success
    assert trident.describe("cfg/written").row_count == 2
    outside_a_run = resource.settings()  # building Definitions: the EnvVars are read then
    assert outside_a_run.workspace == settings.workspace and outside_a_run.pg_dsn == settings.pg_dsn
    assert settings.pg_dsn.get_secret_value() not in repr(outside_a_run)  # a SecretStr once in the settings


def test_the_engine_never_imports_dagster() -> None:
    """Every module of ``trident_resources`` outside its ``dagster`` adapter, imported in a fresh
    interpreter, leaves Dagster unloaded."""
    engine = ROOT / "trident_resources"
    names = [
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for p in engine.rglob("*.py")
        if "dagster" not in p.relative_to(engine).parts
    ]
    code = (
        f"import importlib, sys\nfor n in {names!r}: importlib.import_module(n)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'dagster'))\n"
    )
    assert len(names) > 20 and "trident_resources.client" in names
    assert fresh_python(code, env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"}) == "[]"


def test_only_the_settings_object_reads_the_environment() -> None:
    """The Dagster layer reads configuration through TridentSettings, never os.environ."""
    offenders = [
        str(p.relative_to(ROOT))
        for folder in ("trident_assets", "trident_sensors", "trident_resources/dagster")
        for p in (ROOT / folder).rglob("*.py")
        if "os.environ" in p.read_text() or "getenv" in p.read_text()
    ]
    assert offenders == []


def test_a_run_opens_one_client_shared_by_the_io_manager_and_closes_it(settings: TridentSettings) -> None:
    """Issue 12: the IO manager nests the resource the assets get, and Dagster initialises the
    nested copy on its own; both copies now hand out the same client (one pool, one catalog, one
    set of read caches per run), closed once the run ends. Another configuration keeps its own."""
    from tests.support.dagster_helpers import resources_for, succeeded

    seen: dict[str, Trident] = {}
    other = TridentResource.from_settings(settings.model_copy(update={"join_max_rows": 11}))

    @dg.asset(key=["cfg", "shared"])
    def shared(context, trident: TridentResource, elsewhere: TridentResource) -> pa.Table:
        seen["asset"] = trident.get_client()
        seen["io_manager"] = context.resources.io_manager.trident.get_client()
        seen["elsewhere"] = elsewhere.get_client()
        return pa.table({"id": [1, 2]})

    succeeded(dg.materialize([shared], resources={**resources_for(settings), "elsewhere": other}))
    assert seen["asset"] is seen["io_manager"]
    assert seen["elsewhere"] is not seen["asset"] and seen["elsewhere"].settings.join_max_rows == 11
    assert seen["asset"].control.pool.closed and seen["elsewhere"].control.pool.closed
