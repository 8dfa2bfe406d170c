"""The SQL catalog's multi-table commit (``SqlCatalogReusingMetadata.commit_tables``): every
table's pointer swaps in one Postgres transaction, each only if it still names the metadata file
its change started from; one table changed meanwhile and none of them moves."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table.update import AssertTableUUID, SetPropertiesUpdate

from tests.support.helpers import iceberg_table
from trident_resources import Trident
from trident_resources.core.pyiceberg_compat import SqlCatalogReusingMetadata


def _change(table: object, value: str) -> tuple[object, tuple[object, ...], tuple[object, ...]]:
    return (
        table,
        (AssertTableUUID(uuid=table.metadata.table_uuid),),  # type: ignore[attr-defined]
        (SetPropertiesUpdate(updates={"test.mark": value}),),
    )


def test_all_tables_swap_in_one_transaction_or_none(trident: Trident) -> None:
    t = trident
    keys = ["mt/a", "mt/b", "mt/c"]
    for k in keys:
        t.write(k, pa.table({"v": [1]}))
    tables = [iceberg_table(t, k) for k in keys]
    catalog = tables[0].catalog
    assert isinstance(catalog, SqlCatalogReusingMetadata)

    done = catalog.commit_tables([_change(tb, "one") for tb in tables])  # type: ignore[misc]
    assert [tb.properties.get("test.mark") for tb in done] == ["one"] * 3
    assert [iceberg_table(t, k).properties.get("test.mark") for k in keys] == ["one"] * 3

    # mt/b moves under the stale view of it: the batch fails whole, nothing of it lands
    iceberg_table(t, "mt/b").transaction().set_properties({"test.other": "x"}).commit_transaction()
    with pytest.raises(CommitFailedException, match="1 of 3"):
        catalog.commit_tables([_change(tb, "two") for tb in done])  # type: ignore[misc]
    assert [iceberg_table(t, k).properties.get("test.mark") for k in keys] == ["one"] * 3
