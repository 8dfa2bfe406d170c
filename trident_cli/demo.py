"""``trident demo``: the smallest end-to-end proof that the trident works on this machine."""

from __future__ import annotations

import click
import pyarrow as pa

from trident_resources import Trident

from .render import print_table


@click.command("demo")
def demo() -> None:
    """Write, read and describe a small dataset on the configured (default: embedded) trident."""
    with Trident.from_env() as t:
        orders = pa.table(
            {
                "order_id": [1, 2, 3, 4],
                "customer": ["acme", "globex", "acme", "initech"],
                "amount": [120.5, 80.0, 42.25, 310.0],
            }
        )
        r = t.write("demo/orders", orders, mode="replace", writer="ingest.api", source_refs=["demo/generated"])
        click.echo(f"replace: {r.rows_written} rows, txn {r.txn_id}, snapshot {r.snapshot_id}")
        r = t.write(
            "demo/orders", pa.table({"order_id": [2, 5], "customer": ["globex", "umbrella"], "amount": [99.0, 12.0]}),
            mode="upsert", keys=["order_id"],
        )
        click.echo(f"upsert: {r.rows_written} rows ({r.preserved} kept their identity), now {r.row_count} rows")
        print_table(t.read("demo/orders"), title="demo/orders")
        d = t.describe("demo/orders")
        click.echo(
            f"\n{d.key}: sink={d.sink} rows={d.row_count} schema_version={d.schema_version} "
            f"snapshot={d.snapshot_id} iceberg={d.iceberg_identifier}"
        )
        click.echo("\nhistory (newest first):")
        for e in t.history("demo/orders"):
            click.echo(f"  {e.started_at:%H:%M:%S.%f} {e.status:9} {e.mode:8} rows_written={e.rows_written} row_count={e.row_count} txn={e.txn_id}")


COMMANDS = [demo]
