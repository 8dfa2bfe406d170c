"""Provenance: governance metadata (counterparty, contract, tags, upstream lineage) that every
derivation merges from its sources into its output, so governance never evaporates downstream.

It lives in the Dagster adapter because derivations happen there: the node factories merge it with
the exact source versions they read, and the IO manager merges it for any plain ``@asset`` from the
asset's upstream datasets. (Nothing here imports Dagster; ``trident_resources.dagster`` exports
``merge_provenance`` and ``lineage_entry``.)

Merge rules, chosen so that nothing is ever silently dropped:

* lists are unioned (first appearance order, duplicates removed);
* dicts are merged key by key with the same rules;
* equal scalars stay a scalar; different scalars become the list of the distinct values and the
  disagreement is recorded under ``conflicts`` (which sources said what);
* the node's own declared provenance is applied last: its lists are unioned in, its scalars win,
  and a scalar that overrides disagreeing sources is recorded as a conflict ``resolved_by: node``;
* ``column_lineage`` is the output's own (a SQL node sets it after merging), never a source's;
* ``upstream`` is the transitive set of source keys, ``lineage`` names the exact source
  transactions this derivation read, and sources' own ``conflicts`` are carried forward.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from ..core.results import Description

# the derivation's own, never merged from sources: upstream/lineage/conflicts are recomputed, and
# column_lineage (a SQL node's: which source columns each of its columns came from) is per dataset
RESERVED = ("upstream", "lineage", "conflicts", "column_lineage")


def lineage_entry(key: str, source: Description) -> dict[str, Any]:
    """Which version of ``source`` a derivation read. Ids are strings: Iceberg snapshot ids are
    64-bit and a browser parsing JSON rounds any integer past 2**53."""
    return {
        "key": key,
        "txn_id": str(source.last_txn_id) if source.last_txn_id else None,
        "snapshot_id": str(source.snapshot_id) if source.snapshot_id is not None else None,
        "committed_at": source.committed_at.isoformat() if source.committed_at else None,
    }


def merge_provenance(
    sources: Mapping[str, Mapping[str, Any]],
    own: Mapping[str, Any] | None = None,
    lineage: Iterable[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The provenance of an output derived from ``sources`` (source key -> its provenance)."""
    out: dict[str, Any] = {}
    conflicts: list[dict[str, Any]] = []
    for prov in sources.values():
        conflicts = _union(conflicts, prov.get("conflicts", []))
    fields = _ordered(f for prov in sources.values() for f in prov if f not in RESERVED)
    for name in fields:
        said = {src: prov[name] for src, prov in sources.items() if name in prov}
        value, disagree = _merge(list(said.values()))
        out[name] = value
        if disagree:
            conflicts = _union(conflicts, [{"field": name, "values": said}])
    for name, value in (own or {}).items():
        if name in RESERVED:
            continue
        if name not in out:
            out[name] = value
            continue
        merged, disagree = _merge([out[name], value])
        if disagree:  # scalars: the node's declaration wins, the override is recorded
            conflicts = _union(
                conflicts, [{"field": name, "values": {"<sources>": out[name]}, "resolved_by": "node", "value": value}]
            )
            out[name] = value
        else:
            out[name] = merged
    upstream: list[str] = []
    for src, prov in sources.items():
        upstream = _union(upstream, [src, *prov.get("upstream", [])])
    out["upstream"] = sorted(upstream)
    out["lineage"] = [dict(x) for x in lineage]
    out["conflicts"] = conflicts
    return out


def _merge(values: list[Any]) -> tuple[Any, bool]:
    """Merge values of one field; the flag says the sources disagreed on a scalar."""
    if all(isinstance(v, list) for v in values):
        merged: list[Any] = []
        for v in values:
            merged = _union(merged, v)
        return merged, False
    if all(isinstance(v, Mapping) for v in values):
        result: dict[str, Any] = {}
        disagree = False
        for k in _ordered(k for v in values for k in v):
            sub, d = _merge([v[k] for v in values if k in v])
            result[k] = sub
            disagree = disagree or d
        return result, disagree
    distinct: list[Any] = []
    for v in values:
        for item in v if isinstance(v, list) else [v]:
            distinct = _union(distinct, [item])
    if len(distinct) == 1 and not any(isinstance(v, list) for v in values):
        return distinct[0], False
    return distinct, True


def _union(a: list[Any], b: Iterable[Any]) -> list[Any]:
    seen = {_canon(x) for x in a}
    out = list(a)
    for x in b:
        c = _canon(x)
        if c not in seen:
            seen.add(c)
            out.append(x)
    return out


def _ordered(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _canon(x: Any) -> str:
    return json.dumps(x, sort_keys=True, default=str)
