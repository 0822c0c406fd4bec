"""Keep Python's cyclic garbage collector off millions of small containers that a step builds and holds.

The leakage stage reads, merges and writes a cache of per-text results (sets of word-tuple n-grams: ~5.6
million at 16x the default corpus) and keeps them to the end; CPython's collector walks every tracked container
again and again as others are allocated. At 16x that tripled the time to read the cache (7 s against 22 s) and
to write it back (9 s against 25 s). So the collector is paused while they are built (``paused_gc``), and what
is alive afterwards is frozen (``frozen_survivors``: ``gc.freeze``, moved out of every generation the collector
walks) until the stage ends. The collector is not left off for longer: a stage that runs for many minutes
with it off keeps every reference cycle it drops (frames, pandas objects) until the end.
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


@contextmanager
def frozen_survivors() -> Iterator[None]:
    """Inside the block ``freeze()`` moves every object alive at its call out of the collector's reach (they
    are still freed by reference counting); everything frozen is given back to the collector at the end."""
    try:
        yield
    finally:
        gc.unfreeze()


def freeze() -> None:
    """``gc.freeze()``: the objects alive now are skipped by later collections (inside ``frozen_survivors``)."""
    gc.freeze()
