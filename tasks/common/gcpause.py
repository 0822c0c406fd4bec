"""Pause Python's cyclic garbage collector while a step builds and holds millions of small containers.

The leakage stage reads, merges and writes a cache of per-text results (sets of word-tuple n-grams: ~5.6
million at 16x the default corpus) and keeps them to the end; CPython's collector walks every tracked container
again and again as others are allocated. At 16x that tripled the time to read the cache (7 s against 22 s) and
to write it back (9 s against 25 s), and slowed every later step that allocates. Reference counting still
frees everything that is not in a cycle at once; the little cyclic garbage such a step leaves (pandas frames,
tracebacks) waits for the collector, which runs again after the block.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused_gc() -> Iterator[None]:
    """Disable the cyclic collector inside the block (processes forked inside inherit that), restoring its
    state after; nested blocks keep it disabled until the outermost ends."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
