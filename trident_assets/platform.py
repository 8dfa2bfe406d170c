"""``platform_definitions``: the part of a code location every Trident project needs, whatever
assets it declares, as one ``dg.Definitions`` to merge with the user's own.

A project that wires only its own assets gets no reconciler (a crashed writer's transaction stays
open), no ledger sensor (commits made outside Dagster, by scripts or the CLI, never reach Dagster)
and no maintenance schedule (snapshots are never expired): nothing fails, the platform is just
silently missing. So the platform is one call::

    defs = dg.Definitions.merge(my_defs, platform_definitions())

It holds the two resources every Trident asset takes, under the keys the factories and the IO
manager use (``trident``, ``io_manager``), and ``trident_sensors``' automation (the
``trident_reconciler`` and ``trident_ledger_commits`` sensors, the table-maintenance and canary
jobs and the maintenance schedule). It sets no executor unless given one, because
``Definitions.merge`` refuses two executors and a user's Definitions may already name theirs.
"""

from __future__ import annotations

import warnings

import dagster as dg

from trident_resources.dagster import TridentIOManager, TridentResource, validate_asset_keys
from trident_sensors import automation_definitions


def platform_resources(trident: TridentResource | None = None) -> dict[str, object]:
    """The resource keys Trident assets expect, both on one ``TridentResource``."""
    trident = trident or TridentResource()
    return {"trident": trident, "io_manager": TridentIOManager(trident=trident)}


ICEBERG_KIND = "iceberg"
MAX_KINDS = 3  # Dagster refuses an asset with more kinds


def iceberg_kinds(defs: dg.Definitions, io_manager_key: str = "io_manager") -> dg.Definitions:
    """``defs`` with the ``iceberg`` kind on every asset stored by the Trident IO manager (bound
    to ``io_manager_key``, as ``platform_definitions`` binds it), so a plain ``@dg.asset`` that
    returns rows shows where they live, as the factories' nodes do. An asset that already has
    Dagster's maximum of three kinds keeps its own; assets of other IO managers are untouched.

    It is the last pass over a project's merged Definitions, so it also checks that every asset
    the Trident IO manager stores has a dataset key: a bad key fails the code location's load
    (``dagster dev``, ``dg check defs``), not the asset's step after its work was done.

    Raises:
        InvalidAssetKeysError: an asset the Trident IO manager stores has a key that is no
            dataset key (the message names each and the fix).
        dagster.DagsterInvalidDefinitionError: when ``defs`` cannot be resolved (as Dagster raises
            on loading them).
    """
    bound = (defs.resources or {}).get(io_manager_key)
    if bound is not None and not isinstance(bound, TridentIOManager):
        return defs
    validate_asset_keys(defs)
    keys = {
        k
        for a in defs.assets or []
        if isinstance(a, dg.AssetsDefinition) and a.is_materializable
        for k in a.keys
        if a.get_io_manager_key_for_asset_key(k) == io_manager_key
    }
    if not keys:
        return defs

    def add_kind(spec: dg.AssetSpec) -> dg.AssetSpec:
        kinds = {t.removeprefix(KIND_TAG) for t in spec.tags if t.startswith(KIND_TAG)}
        if spec.key not in keys or ICEBERG_KIND in kinds or len(kinds) >= MAX_KINDS:
            return spec
        return spec.merge_attributes(kinds={ICEBERG_KIND})

    with warnings.catch_warnings():  # preview in 1.13; the call is the documented one, the warning noise in every load
        warnings.simplefilter("ignore", dg.PreviewWarning)
        return defs.map_asset_specs(func=add_kind)


KIND_TAG = "dagster/kind/"


def platform_definitions(
    trident: TridentResource | None = None, *, executor: dg.ExecutorDefinition | None = None
) -> dg.Definitions:
    """The platform's Definitions on ``trident`` (default ``TridentResource()``, i.e. the
    ``TRIDENT_*`` variables): resources, sensors, maintenance jobs and schedule, and ``executor``
    when one is given. Merge it with your own: ``dg.Definitions.merge(mine, platform_definitions())``.

    Raises:
        dagster.DagsterInvalidDefinitionError: from ``Definitions.merge`` later, when the other
            Definitions bind ``trident`` or ``io_manager`` to a different resource, or name an
            executor while this call was given one too.
    """
    return dg.Definitions.merge(
        automation_definitions(),
        dg.Definitions(resources=platform_resources(trident), executor=executor),
    )


__all__ = ["iceberg_kinds", "platform_definitions", "platform_resources"]
