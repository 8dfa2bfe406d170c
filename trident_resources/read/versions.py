"""Which stored version a read (or a publish) names, decided by the ledger: ``as_of`` (a
transaction id, a snapshot id or an instant) resolved to a committed snapshot, and a
``staged=txn_id`` checked to be a staged transaction of that dataset."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from ..control.plane import ENV_PROMOTED_META, PRODUCTION, DatasetRecord, LedgerEntry, entry_environment
from ..core.errors import DatasetNotFoundError, InvalidReadError
from ..core.keys import validate_key
from ..engine import Engine
from ..sinks.contract import AsOf


def version_at(engine: Engine, ds: DatasetRecord, as_of: AsOf) -> int | None:
    """The snapshot id of the version ``as_of`` names (``entry_at``'s)."""
    entry = entry_at(engine, ds, as_of)
    return None if entry is None else entry.snapshot_id


def entry_at(engine: Engine, ds: DatasetRecord, as_of: AsOf) -> LedgerEntry | None:
    """The committed transaction whose version ``as_of`` names, decided by the ledger: a
    transaction id, a snapshot id or an instant name a COMMITTED transaction of this dataset, and
    an instant reads the version that was visible then: the newest one whose ``committed_at`` (the
    instant it became visible, the table's snapshot log's for Iceberg) is at or before it, so
    Trident answers what Iceberg readers' time travel by timestamp answers. A staged version
    published later becomes visible at its publish, not at its staging. A snapshot id names the
    transaction that made it (inlined writes after it share it: they add no snapshot).
    Anything else is an InvalidReadError, never an empty or older version."""
    if as_of is None:
        return None
    committed = [e for e in engine.control.history(ds.dataset_id, None) if e.status == "committed"]
    if isinstance(as_of, bool) or not isinstance(as_of, (int, str, uuid.UUID, datetime)):
        raise InvalidReadError(f"as_of must be a transaction id, a snapshot id or a datetime, not {as_of!r}")
    if isinstance(as_of, datetime):
        when = as_of if as_of.tzinfo is not None else as_of.replace(tzinfo=UTC)
        at = [e for e in committed if e.committed_at is not None and e.committed_at <= when]
        if engine.environment != PRODUCTION:
            at = _seen_by_environment_at(engine, at)
        if not at:
            raise InvalidReadError(f"dataset {ds.key!r} has no version committed at or before {when.isoformat()}")
        return max(at, key=lambda e: e.committed_at)  # type: ignore[arg-type, return-value]
    if isinstance(as_of, int):
        made = [e for e in committed if e.snapshot_id == as_of and e.committed_at is not None]
        if made:
            return min(made, key=lambda e: e.committed_at)  # type: ignore[arg-type, return-value]
        raise InvalidReadError(f"no committed version of {ds.key!r} has snapshot id {as_of}")
    entry = _entry_of(engine, ds, as_of, f"as_of {as_of!r} is neither a transaction id (uuid) nor a snapshot id")
    if entry.status != "committed" or entry.snapshot_id is None:
        raise InvalidReadError(f"transaction {entry.txn_id} of {ds.key!r} is {entry.status}, not committed: it has no version")
    return entry


def _seen_by_environment_at(engine: Engine, at: list[LedgerEntry]) -> list[LedgerEntry]:
    """Of ``at`` (the committed entries of a dataset, production's and this environment's, up to
    an instant T), those whose newest is the version this environment read at T: once it had
    written the dataset it read its own versions (a production commit after its fork is not in
    its past), until a promotion of that version made it read production's again. So the newest
    event at or before T decides: its own write (its entries only), a promotion from it or none
    (production's entries only). Entries of an earlier environment of the same name (dropped,
    its ledger rows kept as the audit trail) are not its own: only those from its creation on."""
    env = engine.environment
    record = engine.control.environment_record(engine.workspace, env)
    born = record.created_at if record is not None else None

    def event(e: LedgerEntry) -> str | None:
        # ended_at, not committed_at (the snapshot's instant, before the COMMIT's Postgres
        # transaction that creates the environment's record on its first write)
        if born is None or e.committed_at is None or e.ended_at is None or e.ended_at < born:
            return None
        if entry_environment(e) == env:
            return "own"
        return "promoted" if (e.metadata or {}).get(ENV_PROMOTED_META) == env else None

    events = [(e, kind) for e in at if (kind := event(e)) is not None]
    last = max(events, key=lambda ek: ek[0].committed_at)[1] if events else None  # type: ignore[arg-type, return-value]
    if last == "own":
        return [e for e, kind in events if kind == "own"]
    return [e for e in at if entry_environment(e) == PRODUCTION]


def staged_entry(engine: Engine, key: str, txn_id: uuid.UUID | str) -> tuple[DatasetRecord, LedgerEntry]:
    """The dataset ``key`` and its staged transaction ``txn_id``, read in ONE query:
    every check of a staged version, every SQL read of one and its publish ask for it."""
    try:
        txn = _txn_id(txn_id, f"{txn_id!r} is not a transaction id")
    except InvalidReadError:  # refused once the key is known to name a dataset
        if engine.control.dataset(engine.workspace, validate_key(key)) is None:
            raise DatasetNotFoundError(key, engine.workspace) from None
        raise
    ds, entry = engine.control.dataset_and_entry(engine.workspace, validate_key(key), txn)
    if ds is None:
        raise DatasetNotFoundError(key, engine.workspace)
    entry = _owned(entry, ds, txn, engine.environment)
    if entry.status != "staged":
        raise InvalidReadError(f"transaction {entry.txn_id} of {ds.key!r} is {entry.status}, not staged")
    if entry_environment(entry) != engine.environment:  # a staged version is its own environment's to audit and decide
        raise InvalidReadError(
            f"staged transaction {entry.txn_id} of {ds.key!r} was staged in production, not in {engine.environment!r}: "
            "audit, publish or discard it from production"
        )
    return ds, entry


def _entry_of(engine: Engine, ds: DatasetRecord, txn_id: object, not_an_id: str) -> LedgerEntry:
    """The ledger entry ``txn_id`` names, refused unless it is a transaction of ``ds``."""
    txn = _txn_id(txn_id, not_an_id)
    return _owned(engine.control.ledger_entry(txn), ds, txn, engine.environment)


def _txn_id(txn_id: object, not_an_id: str) -> uuid.UUID:
    try:
        return uuid.UUID(str(txn_id))
    except ValueError:
        raise InvalidReadError(not_an_id) from None


def _owned(entry: LedgerEntry | None, ds: DatasetRecord, txn: uuid.UUID, environment: str) -> LedgerEntry:
    """``entry`` when it is a transaction of ``ds`` that ``environment`` sees: an id of another
    dataset must not select a version of this one, and an id of an environment's transaction
    must not let production (or another environment) read, publish or discard that
    environment's version. An environment sees production's transactions and its own."""
    if entry is None or entry.dataset_id != ds.dataset_id:
        raise InvalidReadError(f"transaction {txn} is not a transaction of {ds.key!r}")
    written_in = entry_environment(entry)
    if written_in != PRODUCTION and written_in != environment:
        raise InvalidReadError(
            f"transaction {txn} of {ds.key!r} is not one of {environment!r}: it belongs to another environment"
        )
    return entry
