"""Provenance merge rules: defined in ``trident_resources.dagster.provenance``, where the IO manager
(plain ``@asset``s) and the node factories share them."""

from trident_resources.dagster.provenance import RESERVED, lineage_entry, merge_provenance

__all__ = ["RESERVED", "lineage_entry", "merge_provenance"]
