"""``dg scaffold defs trident_assets.components.<Node> <path>``: a ``defs.yaml`` to start from.

The dataset key is the path under the defs folder (``sales/big_orders`` declares ``sales/big_orders``),
and the attributes are the node's required ones with placeholders that say what goes there, plus
one expectation, so ``dg check defs`` points at what is left to fill in rather than at an empty file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg

TEMPLATES: dict[str, dict[str, Any]] = {
    "TransformNode": {"source": "tpch/orders", "sql": "SELECT * FROM source"},
    "JoinNode": {
        "sources": {"orders": "tpch/orders", "customer": "tpch/customer"},
        "sql": "SELECT o_orderkey, c_name FROM orders JOIN customer ON o_custkey = c_custkey",
    },
    "SplitNode": {"source": "tpch/orders", "predicate": "o_totalprice > 100000"},
    "ModelNode": {"source": "tpch/lineitem", "fn": "my_project.models:score"},
}


def dataset_key(target: Path) -> str:
    """The dataset key a scaffolded folder declares: its path under the ``defs`` folder, in the
    key alphabet (lowercase words of [a-z0-9_])."""
    parts = list(target.parts)
    if "defs" in parts:
        parts = parts[len(parts) - parts[::-1].index("defs") :]
    words = ["".join(ch if ch.isalnum() else "_" for ch in p.lower()) for p in parts] or ["my_dataset"]
    return "/".join(words)


class TridentNodeScaffolder(dg.Scaffolder):
    """Writes ``defs.yaml`` for a Trident node with the key its folder names."""

    def scaffold(self, request: dg.ScaffoldRequest) -> None:
        kind = request.type_name.rsplit(".", 1)[-1]
        key = dataset_key(Path(request.target_path))
        attributes: dict[str, Any] = {"matched": key, "unmatched": f"{key}_rest"} if kind == "SplitNode" else {"key": key}
        attributes.update(TEMPLATES.get(kind, {}))
        if kind == "SplitNode":
            attributes["expectations"] = {key: [{"type": "row_count_between", "min": 0}]}
        else:
            attributes["expectations"] = [{"type": "row_count_between", "min": 1}]
        dg.scaffold_component(request, attributes)
