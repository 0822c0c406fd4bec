"""glibc's heap: large blocks each in a mapping of their own, given back to the system as soon as they are freed
(``map_large_blocks``), and the pages freed so far returned on demand (``give_back_freed_memory``).

glibc serves a block of ``M_MMAP_THRESHOLD`` bytes or more (128 KiB at start) with its own ``mmap``, which ``free``
unmaps; but each time such a block is freed, glibc raises the threshold to that block's size (up to 32 MiB), so
once a stage has freed its first large numpy array, the next ones (a few MiB each: one a row of a million rows)
come from the heap, and the pages they leave there stay resident while any block above them lives. A driver that
makes and drops many row-sized arrays one after another then grows by each step's temporaries: dedup's driver
(``engine: ray``, 10^6 remixed docs) held ~30% more at its peak. Setting the threshold (``mallopt``) also turns
the raising off (glibc's manual, "Memory Allocation Tunables"). Elsewhere than glibc this does nothing.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import pyarrow as pa

M_MMAP_THRESHOLD = -3  # glibc's malloc.h
THRESHOLD_BYTES = 128 << 10  # glibc's own starting value, kept


def map_large_blocks() -> None:
    """Serve every block of ``THRESHOLD_BYTES`` or more by its own mapping from now on, in this process."""
    mallopt = _libc("mallopt")
    if mallopt is not None:
        mallopt(M_MMAP_THRESHOLD, THRESHOLD_BYTES)


def give_back_freed_memory() -> None:
    """Return the pages freed so far to the system: Arrow's pool (mimalloc) keeps them for Arrow, and glibc's heap
    keeps the small blocks Python's objects freed (``malloc_trim``; absent elsewhere, then skipped). Either would
    otherwise stay in the process's resident set under the peaks that follow (split: ~300 B a row at the shard
    writes)."""
    pa.default_memory_pool().release_unused()
    trim = _libc("malloc_trim")
    if trim is not None:
        trim(0)


def _libc(name: str) -> Callable[..., int] | None:
    """The C library's function ``name``, or None where it has none (not glibc)."""
    return getattr(ctypes.CDLL(None), name, None)
