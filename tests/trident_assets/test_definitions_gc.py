"""Issue 12: loading the Definitions root freezes what it imported and built (``gc.freeze``), so
full collections during a run skip those long-lived objects instead of walking them again."""

from __future__ import annotations

from tests.support.helpers import fresh_python


def test_importing_the_definitions_root_freezes_its_objects() -> None:
    code = (
        "import gc; assert gc.get_freeze_count() == 0; "
        "import trident_assets.definitions as d; assert d.defs is not None; "
        "print(gc.get_freeze_count())"
    )
    assert int(fresh_python(code)) > 100_000  # the imports and the Definitions
