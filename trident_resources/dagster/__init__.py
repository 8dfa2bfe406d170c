"""The Dagster adapter of the trident: ``TridentResource`` (resource.py) and ``TridentIOManager``
(io_manager.py). The engine (everything else in ``trident_resources``) never imports Dagster; only
this package does, the way dagster-iceberg sits on pyiceberg."""

from .io_manager import AssetReturnedNoneError, TridentIOManager, TridentOutput, WriteMode
from .pools import dataset_pool
from .resource import TridentResource

__all__ = ["AssetReturnedNoneError", "TridentIOManager", "TridentOutput", "TridentResource", "WriteMode", "dataset_pool"]
