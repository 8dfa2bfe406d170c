"""Dataset keys and the other names Trident accepts (workspaces, namespace roots): one rule each,
used at every door, so a name can never name a path outside its workspace or break out of a
quoted SQL identifier.

Every rule is applied with ``re.fullmatch``. ``re.match`` with a ``$`` anchor accepts a name with a
trailing newline (``$`` matches before a final ``\\n``), and URL parsing later strips that newline:
``"sales/orders\\n"`` then shared the storage folder of ``"sales/orders"``.
"""

from __future__ import annotations

import re

from .errors import InvalidDatasetKeyError

NAME_PATTERN = r"[a-z0-9_]+"
_NAME = re.compile(NAME_PATTERN)
_KEY = re.compile(rf"{NAME_PATTERN}(?:/{NAME_PATTERN})*")
MAX_KEY_LENGTH = 200


def quote(name: str) -> str:
    """``name`` as a quoted SQL identifier (DuckDB and Postgres): it can never end the quotes."""
    return '"' + name.replace('"', '""') + '"'


def is_name(value: object) -> bool:
    """True when ``value`` is one lowercase word of ``[a-z0-9_]`` and nothing else (no newline)."""
    return isinstance(value, str) and _NAME.fullmatch(value) is not None


def validate_name(value: str, what: str) -> str:
    """Return ``value`` when it is a valid name (workspace, namespace root), else raise ValueError
    (pydantic turns it into a ValidationError naming the setting)."""
    if not is_name(value):
        raise ValueError(f"invalid {what} {value!r}: use one lowercase word of [a-z0-9_]")
    return value


def validate_key(key: object) -> str:
    """Return the key unchanged when it is a valid dataset key, else raise InvalidDatasetKeyError."""
    if not isinstance(key, str) or len(key) > MAX_KEY_LENGTH or _KEY.fullmatch(key) is None:
        raise InvalidDatasetKeyError(key)
    return key


def key_parts(key: str) -> list[str]:
    return validate_key(key).split("/")


def iceberg_identifier(root: str, workspace: str, key: str) -> tuple[str, ...]:
    """`<root>.<workspace>.<key path>`: the key's last part is the table, the rest namespaces."""
    return (validate_name(root, "namespace root"), validate_name(workspace, "workspace"), *key_parts(key))
