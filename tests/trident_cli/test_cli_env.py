"""``trident env list | show | diff | promote | drop`` and ``trident maintain``'s environment
report, through the real CLI (click's runner, the session's embedded Postgres)."""

from __future__ import annotations

import json

import pyarrow as pa
from click.testing import CliRunner

from tests.support.helpers import cli_env
from trident_cli.main import cli
from trident_resources import Trident, TridentSettings


def test_env_commands(trident: Trident, settings: TridentSettings) -> None:
    prod = trident
    prod.write("cli/e", pa.table({"id": [1]}))
    runner = CliRunner()
    base = cli_env(settings)
    in_env = base | {"TRIDENT_ENVIRONMENT": "pr-7"}
    wrote = runner.invoke(cli, ["sql", 'select count(*) as n from "cli/e"'], env=in_env)
    assert wrote.exit_code == 0, wrote.output
    with Trident(settings.model_copy(update={"environment": "pr-7"})) as env:
        env.write("cli/e", pa.table({"id": [2, 3]}), mode="append")
        env.write("cli/born", pa.table({"id": [1]}))
    seen = runner.invoke(cli, ["sql", 'select count(*) as n from "cli/e"'], env=in_env)
    assert seen.exit_code == 0 and "3" in seen.output, seen.output
    listed = runner.invoke(cli, ["env", "list", "--json"], env=base)
    assert listed.exit_code == 0, listed.output
    [row] = json.loads(listed.output)
    assert row["name"] == "pr-7" and row["dataset_count"] == 2
    shown = runner.invoke(cli, ["env", "show", "pr-7"], env=base)
    assert shown.exit_code == 0 and "cli/born" in shown.output and "born here" in shown.output, shown.output
    diffed = runner.invoke(cli, ["env", "diff", "pr-7", "--json"], env=base)
    assert diffed.exit_code == 0, diffed.output
    by_key = {d["key"]: d for d in json.loads(diffed.output)}
    assert by_key["cli/e"]["rows_added"] == 2 and by_key["cli/born"]["born_in_env"]
    refused = runner.invoke(cli, ["env", "promote", "pr-7"], env=in_env)
    assert refused.exit_code == 2 and "from production" in refused.output
    maintained = runner.invoke(cli, ["maintain", "--older-than-days", "0", "--retain-last", "1"], env=base)
    assert maintained.exit_code == 0 and "environment pr-7" in maintained.output, maintained.output
    promoted = runner.invoke(cli, ["env", "promote", "pr-7"], env=base)
    assert promoted.exit_code == 0 and "2 dataset(s) at once" in promoted.output, promoted.output
    assert sorted(prod.read("cli/e").column("id").to_pylist()) == [1, 2, 3] and prod.exists("cli/born")
    dropped = runner.invoke(cli, ["env", "drop", "pr-7"], env=base)
    assert dropped.exit_code == 0, dropped.output
    gone = runner.invoke(cli, ["env", "show", "pr-7"], env=base)
    assert gone.exit_code == 2 and "no environment 'pr-7'" in gone.output
    bad = runner.invoke(cli, ["env", "diff", "Bad Name"], env=base)
    assert bad.exit_code == 2 and "not an environment name" in bad.output


def test_maintain_drops_stale_environments_only_with_the_flag(trident: Trident, settings: TridentSettings) -> None:
    trident.write("cli/s", pa.table({"id": [1]}))
    with Trident(settings.model_copy(update={"environment": "old-pr"})) as env:
        env.write("cli/s", pa.table({"id": [2]}), mode="append")
    runner = CliRunner()
    base = cli_env(settings) | {"TRIDENT_ENVIRONMENT_MAX_AGE_DAYS": "0"}
    kept = runner.invoke(cli, ["maintain"], env=base)
    assert kept.exit_code == 0 and "stale" in kept.output, kept.output
    assert [e.name for e in trident.environments.list()] == ["old-pr"]
    dropped = runner.invoke(cli, ["maintain", "--drop-stale"], env=base)
    assert dropped.exit_code == 0 and "dropped (stale)" in dropped.output, dropped.output
    assert trident.environments.list() == []
    assert trident.read("cli/s").column("id").to_pylist() == [1]
