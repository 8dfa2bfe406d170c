"""The operator's side of write-audit-publish and of pins, through the real CLI (click's runner,
the session's embedded Postgres): staged versions are listed, published or discarded by txn id,
and a pin never advises a canary its writers could not follow (issue 15.3)."""

from __future__ import annotations

import pyarrow as pa
from click.testing import CliRunner

from tests.support.helpers import cli_env
from trident_cli.main import cli
from trident_resources import Trident, TridentSettings


def test_staged_publish_and_discard(trident: Trident, settings: TridentSettings) -> None:
    t = trident
    t.write("cli/w", pa.table({"k": [1]}))
    a = t.write("cli/w", pa.table({"k": [2]}), mode="append", stage=True)
    runner = CliRunner()
    env = cli_env(settings)
    listed = runner.invoke(cli, ["staged"], env=env)
    assert listed.exit_code == 0, listed.output
    assert str(a.txn_id) in listed.output.replace("\n", "") or str(a.txn_id)[:8] in listed.output
    audit = runner.invoke(cli, ["sql", 'select count(*) as n from "cli/w"', "--staged", f"cli/w={a.txn_id}"], env=env)
    assert audit.exit_code == 0 and "2" in audit.output, audit.output
    done = runner.invoke(cli, ["publish", "cli/w", str(a.txn_id)], env=env)
    assert done.exit_code == 0, done.output
    assert sorted(t.read("cli/w").column("k").to_pylist()) == [1, 2]
    b = t.write("cli/w", pa.table({"k": [3]}), mode="append", stage=True)
    gone = runner.invoke(cli, ["discard", "cli/w", str(b.txn_id)], env=env)
    assert gone.exit_code == 0, gone.output
    assert t.history("cli/w")[0].status == "rejected"
    again = runner.invoke(cli, ["publish", "cli/w", str(b.txn_id)], env=env)
    assert again.exit_code == 2 and "rejected" in again.output


def test_pin_does_not_advise_a_canary_the_writer_cannot_follow(trident: Trident, settings: TridentSettings) -> None:
    t = trident
    t.write_manifest("files/raw", [{"object_key": "a", "size": 1, "checksum": "c", "content_type": "x"}])
    out = CliRunner().invoke(cli, ["pin", "set", "files/raw", "iceberg_native", "--force"], env=cli_env(settings))
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())
    assert "trident canary" not in text and "dataset.manifest" in text


def test_staged_lists_groups_and_publish_discard_take_a_group_prefix(trident: Trident, settings: TridentSettings) -> None:
    t = trident
    runner = CliRunner()
    env = cli_env(settings)
    for k in ("cli/ga", "cli/gb"):
        t.write(k, pa.table({"k": [1]}))
    tx = t.transaction().open()
    for k in ("cli/ga", "cli/gb"):
        tx.write(k, pa.table({"k": [2]}))
    prefix = str(tx.group_id)[:8]
    listed = runner.invoke(cli, ["staged"], env=env)
    text = " ".join(listed.output.split())
    assert listed.exit_code == 0, listed.output
    assert f"group {tx.group_id}: 2 dataset(s)" in text and f"trident publish {prefix}" in text
    # a group member is never published on its own, even by prefix
    member = t.history("cli/ga")[0].txn_id
    alone = runner.invoke(cli, ["publish", "cli/ga", str(member)[:8]], env=env)
    assert alone.exit_code == 2 and "whole group" in " ".join(alone.output.split()), alone.output
    done = runner.invoke(cli, ["publish", prefix], env=env)
    assert done.exit_code == 0 and "2 dataset(s) at once" in done.output, done.output
    assert [t.read(k).column("k").to_pylist() for k in ("cli/ga", "cli/gb")] == [[2], [2]]
    other = t.transaction().open()
    other.write("cli/ga", pa.table({"k": [3]}))
    gone = runner.invoke(cli, ["discard", str(other.group_id)[:6]], env=env)
    assert gone.exit_code == 0 and "1 staged version(s)" in gone.output, gone.output
    assert t.read("cli/ga").column("k").to_pylist() == [2]
    missing = runner.invoke(cli, ["publish", "cli/ga"], env=env)  # one argument: a group id, and a key is none
    assert missing.exit_code == 2 and "no transaction group" in missing.output, missing.output


def test_publish_and_discard_take_a_txn_prefix(trident: Trident, settings: TridentSettings) -> None:
    t = trident
    t.write("cli/p", pa.table({"k": [1]}))
    a = t.write("cli/p", pa.table({"k": [2]}), mode="append", stage=True)
    out = CliRunner().invoke(cli, ["publish", "cli/p", str(a.txn_id)[:8]], env=cli_env(settings))
    assert out.exit_code == 0, out.output
    assert sorted(t.read("cli/p").column("k").to_pylist()) == [1, 2]
