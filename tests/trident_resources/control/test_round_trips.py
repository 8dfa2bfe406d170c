"""Issue 12: the fixed cost of a pipeline step is mostly round trips to the control plane and the
Iceberg catalog (both in the control-plane Postgres here). These count them for the calls one
write-audit-publish step makes, so a change that reads the same row twice again shows up.

Counted: every statement psycopg sends (the control plane's and the SQL catalog's, which runs on
psycopg too), and the catalog's table loads. The bounds are what the code issues today plus a
little slack. Before issue 12's changes the step made 95 round trips (59 statements and 36
BEGIN/COMMIT/ROLLBACK) and 8 table loads, the plain write 30 round trips; now 42, 3 and 19."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date, timedelta
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from psycopg._connection_base import BaseConnection

from tests.support.helpers import counted_table_loads, table
from trident_resources import PartitionFilter, StagedVersionConflictError, Trident, TridentSettings


@contextmanager
def counted_statements(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every statement psycopg executes inside the block (``Connection.execute`` runs through
    ``Cursor.execute``, so counting the cursor counts each statement once), and the transaction
    commands it sends by itself (a non-autocommit connection's implicit BEGIN, COMMIT, ROLLBACK)."""
    sent: list[str] = []
    real = psycopg.Cursor.execute

    def counting(self: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(" ".join(str(query if isinstance(query, str) else getattr(query, "text", query)).split())[:80])
        return real(self, query, *args, **kwargs)

    real_command = BaseConnection._exec_command

    def counting_command(self: Any, command: Any, *args: Any, **kwargs: Any) -> Any:
        # what psycopg sends on its own: BEGIN, COMMIT, ROLLBACK (a round trip each)
        sent.append(command.decode() if isinstance(command, bytes) else str(command))
        return real_command(self, command, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(psycopg.Cursor, "execute", counting)
        m.setattr(BaseConnection, "_exec_command", counting_command)
        yield sent


def test_a_write_audit_publish_step_reads_each_row_once(trident: Trident, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a checked asset's step asks: stage a write of an existing dataset, answer its checks
    from the staged version's statistics, publish it, report the materialization."""
    t = trident
    t.write("rt/a", table(k=[1, 2]))
    t.write("rt/src", table(k=[7]))
    loads = counted_table_loads(t, monkeypatch)
    with counted_statements(monkeypatch) as sent:
        mark = t.describe("rt/src")
        assert mark.committed_at is not None
        r = t.write("rt/a", table(k=[3]), mode="append", stage=True, watermarks={"rt/src": (mark.committed_at, mark.last_txn_id)})
        stats = t.version_stats("rt/a", staged=r.txn_id)
        assert stats is not None and stats.rows == 3
        done = t.publish("rt/a", r.txn_id)
        described = t.describe("rt/a")
    assert described.row_count == 3 and described.last_txn_id == done.txn_id
    assert sorted(t.read("rt/a").column("k").to_pylist()) == [1, 2, 3]
    # the table is loaded to write and by each of the two commits (pyiceberg's own optimistic
    # check); the checks, the publish and the report reuse what the commits left
    assert len(loads) <= 3, loads
    assert len(sent) <= 46, "\n".join(sent)


def test_a_plain_write_of_an_existing_dataset(trident: Trident, monkeypatch: pytest.MonkeyPatch) -> None:
    t = trident
    t.write("rt/b", table(k=[1]))
    with counted_statements(monkeypatch) as sent:
        t.write("rt/b", pa.table({"k": [2]}), mode="append")
    assert sorted(t.read("rt/b").column("k").to_pylist()) == [1, 2]
    # the lock's "record as it is now" and "anything open to settle?" are one query (were two);
    # the catalog's calls and the ledger's one-statement changes open no transaction
    assert len(sent) <= 21, "\n".join(sent)


def test_a_publish_from_the_table_this_process_last_saw_is_decided_on_the_current_one(
    trident: Trident, settings: TridentSettings
) -> None:
    """Publish commits against the table its own stage commit left, without loading it: another
    process's commits since then must still be seen (the catalog's commit check fails, and the
    publish decides on the table as it is now), never lost."""
    t = trident
    t.write("rt/c", table(k=[1]))
    staged = t.write("rt/c", table(k=[2]), mode="append", stage=True)
    with Trident(settings) as other:  # another process: none of this one's caches
        other.write("rt/c", table(k=[3]), mode="append")  # main moves on
        parked = other.write("rt/c", table(k=[4]), mode="append", stage=True)  # a branch of its own
    with pytest.raises(StagedVersionConflictError):
        t.publish("rt/c", staged.txn_id)
    assert sorted(t.read("rt/c").column("k").to_pylist()) == [1, 3]
    t.discard("rt/c", staged.txn_id)
    # the other process's staged version is intact and publishes (main did not move since)
    done = t.publish("rt/c", parked.txn_id)
    assert sorted(t.read("rt/c").column("k").to_pylist()) == [1, 3, 4] and done.row_count == 3


def test_a_publish_keeps_what_another_process_staged_meanwhile(trident: Trident, settings: TridentSettings) -> None:
    """The stale table's commit succeeds when main did not move; the catalog applies it to the
    current metadata, so another process's audit branch created since is kept."""
    t = trident
    t.write("rt/d", table(k=[1]))
    mine = t.write("rt/d", table(k=[2]), mode="append", stage=True)
    with Trident(settings) as other:
        theirs = other.write("rt/d", table(k=[5]), mode="append", stage=True)
    t.publish("rt/d", mine.txn_id)
    assert sorted(t.read("rt/d").column("k").to_pylist()) == [1, 2]
    assert sorted(t.read("rt/d", staged=theirs.txn_id).column("k").to_pylist()) == [1, 5]
    with pytest.raises(StagedVersionConflictError):  # staged on the version before mine
        t.publish("rt/d", theirs.txn_id)


def test_a_staged_partition_publishes_onto_another_process_partition_commit(trident: Trident, settings: TridentSettings) -> None:
    d0, d1 = date(2024, 1, 1), date(2024, 1, 2)

    def day(d: date, vs: list[int]) -> pa.Table:
        return pa.table({"d": [d] * len(vs), "v": vs})

    def on(d: date) -> PartitionFilter:
        return PartitionFilter.time_window("d", d, d + timedelta(days=1), "day")

    t = trident
    t.write("rt/p", day(d0, [1]), partition=on(d0))
    t.write("rt/p", day(d1, [10]), partition=on(d1))
    staged = t.write("rt/p", day(d0, [2, 3]), partition=on(d0), stage=True)
    with Trident(settings) as other:
        other.write("rt/p", day(d1, [20]), partition=on(d1))  # another partition, another process
    published = t.publish("rt/p", staged.txn_id)  # re-based onto it, as with a fresh table
    rows = sorted((r["d"], r["v"]) for r in t.read("rt/p").to_pylist())
    assert rows == [(d0, 2), (d0, 3), (d1, 20)] and published.row_count == 3
