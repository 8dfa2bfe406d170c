"""Dataset keys: one validation rule, used at every door, so a key can never name a path outside
its workspace or break out of a quoted SQL identifier."""

from __future__ import annotations

import re

from .errors import InvalidDatasetKeyError

_KEY = re.compile(r"^[a-z0-9_]+(/[a-z0-9_]+)*$")
MAX_KEY_LENGTH = 200


def validate_key(key: object) -> str:
    """Return the key unchanged when it is a valid dataset key, else raise InvalidDatasetKeyError."""
    if not isinstance(key, str) or len(key) > MAX_KEY_LENGTH or not _KEY.match(key):
        raise InvalidDatasetKeyError(key)
    return key


def key_parts(key: str) -> list[str]:
    return validate_key(key).split("/")


def iceberg_identifier(root: str, workspace: str, key: str) -> tuple[str, ...]:
    """`<root>.<workspace>.<key path>`: the key's last part is the table, the rest namespaces."""
    return (root, workspace, *key_parts(key))
