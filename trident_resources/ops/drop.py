"""Dropping a dataset: its rows and storage, then its control-plane records, under its writer lock."""

from __future__ import annotations

from ..engine import Engine


def drop(engine: Engine, key: str) -> None:
    """``Trident.drop`` (see there)."""
    with engine.driver.locked(engine.dataset_record(key)) as ds:
        engine.sink(ds.sink).drop(ds)
        engine.control.delete_dataset(ds.dataset_id)
