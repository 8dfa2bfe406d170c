"""Asset keys checked when the Definitions load: an asset the Trident IO manager stores must have a
key that is a dataset key, and a bad one is found before anything runs (not when the asset's step
hands its rows to the IO manager, after the work was done)."""

from __future__ import annotations

import dagster as dg

from ..core.errors import InvalidDatasetKeyError
from .io_manager import AssetKeyNotADatasetKeyError, TridentIOManager, dataset_key


class InvalidAssetKeysError(InvalidDatasetKeyError):
    """Assets stored by the Trident IO manager have keys that are not dataset keys; the message
    names each (and the first one's fix)."""


def trident_asset_keys(defs: dg.Definitions) -> list[dg.AssetKey]:
    """The keys of the assets whose output the Definitions' Trident IO manager stores (an asset
    with another IO manager may have any key)."""
    resources = dict(defs.resources or {})
    keys: list[dg.AssetKey] = []
    for assets_def in defs.assets or []:
        if not isinstance(assets_def, dg.AssetsDefinition):
            continue
        for key in assets_def.keys:
            io_key = assets_def.get_io_manager_key_for_asset_key(key)
            manager = assets_def.resource_defs.get(io_key) or resources.get(io_key)
            if isinstance(manager, TridentIOManager):
                keys.append(key)
    return keys


def validate_asset_keys(defs: dg.Definitions) -> dg.Definitions:
    """``defs`` unchanged when every asset the Trident IO manager stores has a dataset key.

    Raises:
        InvalidAssetKeysError: some do not; the message names each and what to rename (the first
            one's ``AssetKeyNotADatasetKeyError`` is the cause).
    """
    bad: list[tuple[dg.AssetKey, AssetKeyNotADatasetKeyError]] = []
    for key in trident_asset_keys(defs):
        try:
            dataset_key(key)
        except AssetKeyNotADatasetKeyError as exc:
            bad.append((key, exc))
    if bad:
        names = ", ".join(repr(k.to_user_string()) for k, _ in bad)
        raise InvalidAssetKeysError(f"{len(bad)} asset key(s) are not dataset keys ({names}): {bad[0][1]}") from bad[0][1]
    return defs
