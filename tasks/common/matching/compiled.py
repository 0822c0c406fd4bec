"""When and how dedup's inner loops run as machine code (numba), shared by ``pairjaccard`` and ``unionfind``.

A kernel is a plain Python function over arrays that numba can compile unchanged. Loading numba and a cached
kernel costs about 0.7 s once per process, so a loop runs compiled only when it is long enough to repay that
(``worth_compiling``: ``MIN_ITEMS`` items, or numba already loaded by an earlier loop of the process); below
that the caller takes its uncompiled path (``unionfind``: the same function over lists; ``pairjaccard``: a
numpy search). Either way the results are the same.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import cache

MIN_ITEMS = 60_000  # pairs: about 0.7 s of numpy search or Python union-find, what loading numba costs


def worth_compiling(items: int) -> bool:
    """Whether a loop over ``items`` should run compiled (see the module docstring)."""
    return items >= MIN_ITEMS or "numba" in sys.modules


@cache
def jit(func: Callable) -> Callable:
    """``func`` compiled by numba (imported here: about 0.3 s) with the GIL released, so threads can share it.

    The machine code is cached next to ``func``'s file or, where that is read-only, in the user's cache folder
    (``NUMBA_CACHE_DIR`` overrides both); with neither writable it is compiled in each process (about 1.5 s)
    instead of failing."""
    import numba

    try:
        return numba.njit(cache=True, nogil=True)(func)
    except RuntimeError:  # numba's "cannot cache function ...: no locator available"
        return numba.njit(nogil=True)(func)
