"""``Recent``: a thread-safe map that keeps its most recently used entries.

Why one: the process remembers several things that never change once made (a SQL text's guard
verdict, a dataset version's ``read_parquet`` expression, a parsed Iceberg metadata file), each
bounded and shared between threads; three hand-written copies of the same move-to-end-and-evict
loop differed only in their sizes.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Recent(Generic[K, V]):
    """At most ``size`` entries; a hit makes its entry the newest, an insert past ``size`` drops
    the oldest."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            value = self._entries.get(key)
            if value is not None:
                self._entries.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def discard(self, key: K) -> None:
        with self._lock:
            self._entries.pop(key, None)
