"""The YAML vocabulary of the Trident components: how a ``defs.yaml`` names a strategy, an
expectation and a retry policy. Each model builds the object the Python factories take, so a node
declared in YAML is exactly the node the factory builds (``trident_assets.factories``)."""

import importlib
from collections.abc import Callable, Sequence
from typing import Any, Literal

import dagster as dg

from .. import expectations as ex
from .. import strategies as st
from ..expectations import Expectation
from ..strategies import Strategy


class StrategyModel(dg.Resolvable, dg.Model):
    """``strategy: {kind: snapshot_replace, keys: [c_custkey]}``; kinds as ``trident_assets.strategies``."""

    kind: Literal["replace", "append_always", "append_new", "upsert", "snapshot_replace", "delta"] = "replace"
    keys: list[str] = []
    driver: str | None = None  # delta only: the source whose new rows drive the increment

    def build(self) -> Strategy:
        """The factory's ``Strategy``.

        Raises:
            ValueError: a keyed kind without ``keys`` (as the strategy functions raise).
        """
        if self.kind == "replace":
            return st.replace()
        if self.kind == "append_always":
            return st.append_always()
        if self.kind == "delta":
            return st.delta(self.keys or None, self.driver)
        keyed: dict[str, Callable[[Sequence[str]], Strategy]] = {
            "append_new": st.append_new,
            "upsert": st.upsert,
            "snapshot_replace": st.snapshot_replace,
        }
        return keyed[self.kind](self.keys)


class ExpectationModel(dg.Resolvable, dg.Model):
    """One expectation (an asset check), as ``trident_assets.expectations`` declares it::

        - {type: not_null, columns: [l_orderkey, revenue]}
        - {type: unique, columns: l_orderkey}
        - {type: accepted_values, columns: c_mktsegment, values: [BUILDING]}
        - {type: row_count_between, min: 1}
        - {type: custom_sql, name: revenue_positive, sql: "SELECT * FROM {dataset} WHERE revenue <= 0"}

    ``blocking`` (default true) keeps a version that fails it unpublished."""

    type: Literal["not_null", "unique", "accepted_values", "row_count_between", "custom_sql"]
    columns: str | list[str] | None = None
    values: list[Any] | None = None
    min: int | None = None
    max: int | None = None
    name: str | None = None
    sql: str | None = None
    description: str = ""
    blocking: bool = True

    def build(self) -> Expectation:
        """The ``Expectation``.

        Raises:
            ValueError: a field its type needs is missing (``columns``, ``values``, ``name``/``sql``).
        """
        if self.type == "row_count_between":
            return ex.row_count_between(self.min, self.max, blocking=self.blocking)
        if self.type == "custom_sql":
            if not self.name or not self.sql:
                raise ValueError("a custom_sql expectation needs `name` and `sql` (a query of the failing rows over {dataset})")
            return ex.custom_sql(self.name, self.sql, description=self.description, blocking=self.blocking)
        if self.columns is None:
            raise ValueError(f"a {self.type} expectation needs `columns` (a column name or a list of them)")
        if self.type == "not_null":
            return ex.not_null(self.columns, blocking=self.blocking)
        if self.type == "unique":
            return ex.unique(self.columns, blocking=self.blocking)
        if not isinstance(self.columns, str) or self.values is None:
            raise ValueError("an accepted_values expectation needs one column in `columns` and its `values`")
        return ex.accepted_values(self.columns, self.values, blocking=self.blocking)


class RetryPolicyModel(dg.Resolvable, dg.Model):
    """``retry_policy: {max_retries: 2, delay: 30}`` (seconds), Dagster's ``RetryPolicy``."""

    max_retries: int = 1
    delay: float | None = None

    def build(self) -> dg.RetryPolicy:
        return dg.RetryPolicy(max_retries=self.max_retries, delay=self.delay)


def import_callable(path: str) -> Callable[..., Any]:
    """The function ``module.path:name`` (or ``module.path.name``) names.

    Raises:
        ValueError: the module cannot be imported or has no such callable.
    """
    module, _, name = path.partition(":") if ":" in path else path.rpartition(".")
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot import {path!r}: name a function as 'package.module:function'") from exc
    if not callable(fn):
        raise ValueError(f"{path!r} is not a function")
    return fn
