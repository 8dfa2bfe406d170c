"""``Trident.adopt``: taking over an Iceberg table this control plane did not create (or, on the
upgrade path, stamping an unowned table of an existing dataset when the ledger agrees with it),
as one ledger transaction."""

from __future__ import annotations

import logging
import uuid
from dataclasses import replace
from typing import TYPE_CHECKING

from ..control.plane import DatasetRecord
from ..core.errors import InvalidWriteError, TableOwnershipError
from ..core.keys import iceberg_identifier, validate_key
from ..core.results import Description
from ..engine import Engine
from ..read import records
from ..transaction.driver import Intent

if TYPE_CHECKING:
    from ..sinks.iceberg.sink import IcebergSink

log = logging.getLogger("trident")


def adopt(engine: Engine, key: str) -> Description:
    """``Trident.adopt`` (see there for when a table is adopted, stamped or refused)."""
    from ..control.router import RouteDecision
    from ..sinks.iceberg.sink import IcebergSink

    validate_key(key)
    sink = engine.driver.sink("iceberg_native")
    assert isinstance(sink, IcebergSink)
    existing = engine.control.dataset(engine.workspace, key)
    upgrade = existing is not None and existing.exists
    if upgrade and existing is not None and existing.sink != sink.name:
        raise InvalidWriteError(
            f"{key!r} is already a dataset of this control plane (in {existing.sink}); there is nothing to adopt"
        )
    ident = ".".join(iceberg_identifier(engine.settings.namespace_root, engine.workspace, key))
    ds = existing or engine.control.ensure_dataset(engine.workspace, key, sink.name, ident)
    with engine.driver.locked(ds) as ds:
        if upgrade:
            _ledger_agrees(engine, ds, sink)
        elif ds.sink != sink.name:
            engine.control.set_dataset_sink(ds.dataset_id, sink.name, ident)
            ds = engine.control.dataset_by_id(ds.dataset_id) or ds
        sink.adoptable(ds)  # refuse before any ledger row exists
        route = RouteDecision(sink=sink.name, requested=sink.name, clamped=False, reason="adopt")
        intent = Intent(txn_id=uuid.uuid4(), mode="adopt", writer="manual.table", sink=sink.name, route=route)  # type: ignore[arg-type]
        transaction = engine.driver.open(ds, intent)
        assert transaction is not None
        try:
            outcome = sink.adopt(ds, transaction.txn_id)
            if upgrade:  # indexes once given out (rows deleted since) are never handed out again
                outcome = replace(outcome, next_row_index=max(outcome.next_row_index, ds.next_row_index))
        except BaseException as exc:
            transaction.fail(exc)
            raise
        transaction.commit(outcome)
    log.info("trident %s the Iceberg table %s as %s", "stamped" if upgrade else "adopted", ident, key)
    return records.describe(engine, key)


def _ledger_agrees(engine: Engine, ds: DatasetRecord, sink: IcebergSink) -> None:
    """For ``adopt`` of an existing dataset's unowned table: refuse unless the table's current
    snapshot is the one this dataset's ledger last committed (see ``adopt``)."""
    state = sink.ownership(ds)
    if state.owner == str(ds.dataset_id):
        raise InvalidWriteError(f"{ds.key!r} is already a dataset of this control plane; there is nothing to adopt")
    if state.owner:
        return  # another dataset's table: adoptable() refuses it with the reason
    entry = engine.control.ledger_entry(state.txn_id) if state.txn_id is not None else None
    ours = entry is not None and entry.dataset_id == ds.dataset_id and entry.status == "committed"
    if not ours or state.snapshot_id != ds.snapshot_id:
        if state.txn_id is None:
            made_by = "no Trident transaction"
        elif entry is None or entry.dataset_id != ds.dataset_id:
            made_by = f"transaction {state.txn_id}, which this dataset's ledger never recorded"
        else:
            made_by = f"transaction {state.txn_id}, {entry.status} in the ledger"
        raise TableOwnershipError(
            f"the Iceberg table {state.identifier} carries no owner, and its current snapshot "
            f"{state.snapshot_id} (made by {made_by}) is not the version {ds.snapshot_id} the ledger of "
            f"{ds.key!r} last committed: something other than this control plane wrote to it, so Trident "
            "will not stamp it as this dataset's. Inspect it; to start over, drop the dataset and copy the rows in"
        )
