"""Transaction ids as people type them: the full UUID, or a unique prefix of it (what ``trident
staged`` and ``trident history`` show at a glance), resolved against the transactions it could
name. An ambiguous prefix is refused with the candidates; nothing is ever guessed."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

import click

from trident_resources import Trident

MIN_PREFIX = 4  # shorter prefixes match too much to be worth typing


def resolve_prefix(typed: str, candidates: Iterable[uuid.UUID], what: str) -> uuid.UUID | None:
    """The one candidate ``typed`` names (a full id, or a prefix of its text with or without
    dashes), None when none does. Raises ``click.BadParameter`` (exit 2) when it names several or
    is too short to be a prefix."""
    with_dashes = typed.strip().lower()
    try:
        full = uuid.UUID(with_dashes)
    except ValueError:
        full = None
    ids = list(dict.fromkeys(candidates))
    if full is not None:
        return full if full in ids else None
    bare = with_dashes.replace("-", "")
    if len(bare) < MIN_PREFIX or any(c not in "0123456789abcdef" for c in bare):
        raise click.BadParameter(
            f"{typed!r} is neither a transaction id nor a prefix of one ({MIN_PREFIX}+ hex digits)", param_hint="TXN"
        )
    matches = [i for i in ids if i.hex.startswith(bare) or str(i).startswith(with_dashes)]
    if len(matches) > 1:
        shown = ", ".join(str(m) for m in matches[:5])
        raise click.BadParameter(f"{typed!r} names {len(matches)} {what}: {shown}; type more of it", param_hint="TXN")
    return matches[0] if matches else None


def resolve_staged(t: Trident, key: str, typed: str) -> uuid.UUID | str:
    """The staged transaction of ``key`` that ``typed`` names; a text that names none is passed
    on as typed, so the engine's own error (not staged, not this dataset's) is what the user sees."""
    found = resolve_prefix(typed, (e.txn_id for _, e in t.staged(key)), f"staged versions of {key}")
    return found if found is not None else typed


def resolve_decision(t: Trident, key: str, typed: str) -> uuid.UUID | str:
    """What ``publish``/``discard`` act on: the staged version ``typed`` names; when it names none,
    the transaction of ``key``'s whole ledger it names (one published already gets a note, a
    rejected one the engine's error), else ``typed`` as it is."""
    staged = resolve_prefix(typed, (e.txn_id for _, e in t.staged(key)), f"staged versions of {key}")
    if staged is not None:
        return staged
    found = resolve_prefix(typed, (e.txn_id for e in t.history(key)), f"transactions of {key}")
    return found if found is not None else typed
