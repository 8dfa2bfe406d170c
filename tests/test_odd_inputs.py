"""Odd inputs (issue 8, items 1 and 12): names that only look valid, argument types a caller can
get wrong, column names and types the storage cannot hold. Each gets a named TridentError, says
what to do, and leaves nothing behind."""

from __future__ import annotations

import pytest

from tests.helpers import table
from trident_resources import InvalidDatasetKeyError, Trident, TridentSettings

# -- item 1: names are validated with a full match ------------------------------------------------
TRAILING = ["sales/orders\n", "sales\n", "orders\r\n", "a/b\n\n"]


@pytest.mark.parametrize("key", TRAILING)
def test_a_key_with_a_trailing_newline_is_refused(trident: Trident, key: str) -> None:
    """``$`` matches before a final newline; a key that did so shared another key's storage folder."""
    t = trident
    with pytest.raises(InvalidDatasetKeyError, match="invalid dataset key"):
        t.write(key, table(k=[1]))
    with pytest.raises(InvalidDatasetKeyError):
        t.read(key)
    with pytest.raises(InvalidDatasetKeyError):
        t.maintain(key)
    assert t.datasets() == []


@pytest.mark.parametrize("field", ["workspace", "namespace_root"])
@pytest.mark.parametrize("value", ["abc\n", "ab\nc", "ABC", "", "a.b"])
def test_workspace_and_namespace_root_are_full_matched(field: str, value: str) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        TridentSettings(**{field: value})  # type: ignore[arg-type]


def test_a_pin_is_for_a_valid_key_only(trident: Trident) -> None:
    """A pin on ``"sales/orders\\n"`` would never apply to any dataset: refuse it when it is set."""
    with pytest.raises(InvalidDatasetKeyError):
        trident.router.set_pin("sales/orders\n", "pg")
    with pytest.raises(InvalidDatasetKeyError):
        trident.router.clear_pin("../x")
    assert trident.router.pins() == {}
