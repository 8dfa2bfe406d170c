"""Issue 12: boto3 is imported only where a request is signed through the catalog (remote signing):
importing the engine, its sinks and the Definitions root does not import it (~0.1-0.2 s of every
process start that never signs anything, a Dagster run among them)."""

from __future__ import annotations

from tests.support.helpers import fresh_python


def test_the_engine_and_the_definitions_root_do_not_import_boto3() -> None:
    code = (
        "import sys; import trident_assets.definitions; "
        "from trident_resources.sinks.iceberg import catalog, credentials, sink, signing; "
        "print(sorted(m for m in ('boto3', 'botocore') if m in sys.modules))"
    )
    assert fresh_python(code) == "[]"
