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
