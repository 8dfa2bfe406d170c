"""Which allocator Arrow's buffers come from: chosen once per process, when a Trident opens.

pyarrow's default pool on Linux is its bundled mimalloc, which gives freed memory back to the
kernel 10 ms after it is freed and asks for 2 MiB transparent huge pages where the kernel allows
them on request (``madvise``, the usual default). A write encodes row group after row group and a
scan decodes batch after batch, each freed before the next is allocated, so most allocations land
on pages the kernel has just taken back and must zero again, 2 MiB at a time. On the example
pipeline at SF1 that zeroing was ~0.6 CPU s of a ~12 CPU s run (``perf``: ``clear_page_erms`` under
``do_huge_pmd_anonymous_page`` under ``mi_page_free_list_extend``). With pyarrow's bundled jemalloc,
which keeps freed pages for reuse for a second, the same run took ~0.4 CPU s less and its peak
RSS was ~110 MiB lower (6 alternating pairs; ``bench/README.md``).

The pool is process-wide, so choosing it here also serves the caller's own Arrow work. An
``ARROW_DEFAULT_MEMORY_POOL`` set in the environment is Arrow's own, explicit choice and is left
alone, as is ``TRIDENT_ARROW_MEMORY_POOL=default``; a pool this pyarrow build lacks (jemalloc is
not in Windows wheels) leaves pyarrow's default in place.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

import pyarrow as pa

log = logging.getLogger("trident")

_POOLS: dict[str, Callable[[], pa.MemoryPool]] = {
    "jemalloc": pa.jemalloc_memory_pool,
    "mimalloc": pa.mimalloc_memory_pool,
    "system": pa.system_memory_pool,
}


def use_memory_pool(name: str) -> str:
    """Make ``name`` Arrow's default pool unless the environment chose one; the backend in use."""
    chosen_elsewhere = name == "default" or bool(os.environ.get("ARROW_DEFAULT_MEMORY_POOL"))
    if not chosen_elsewhere and name not in pa.supported_memory_backends():
        log.debug("Arrow memory pool %r is not in this pyarrow build; keeping %r", name, pa.default_memory_pool().backend_name)
    elif not chosen_elsewhere and pa.default_memory_pool().backend_name != name:
        pa.set_memory_pool(_POOLS[name]())
    return pa.default_memory_pool().backend_name
