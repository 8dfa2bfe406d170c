"""The Dagster adapter of the trident: the resource and the IO manager. The engine (everything
else in ``trident_resources``) never imports Dagster; only this package does."""

from .resources import TridentIOManager, TridentOutput, TridentResource

__all__ = ["TridentIOManager", "TridentOutput", "TridentResource"]
