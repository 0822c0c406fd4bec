"""tasks/common/matching/compiled.py: when a loop runs compiled, and compiling where numba cannot cache."""

import sys

import numpy as np

from tasks.common.matching import compiled


def _sum_of_squares(values):
    total = 0
    for v in values:
        total += v * v
    return total


def test_worth_compiling_from_min_items_or_once_numba_is_loaded(monkeypatch):
    monkeypatch.delitem(sys.modules, "numba", raising=False)  # as in a process that never loaded it
    assert not compiled.worth_compiling(compiled.MIN_ITEMS - 1)
    assert compiled.worth_compiling(compiled.MIN_ITEMS)
    monkeypatch.setitem(sys.modules, "numba", object())
    assert compiled.worth_compiling(1)


def test_the_compiled_function_equals_the_python_one():
    values = np.arange(1000, dtype=np.int64)
    assert compiled.jit(_sum_of_squares)(values) == _sum_of_squares(values.tolist()) == 332_833_500


def test_no_writable_cache_folder_compiles_without_caching(monkeypatch):
    import numba

    real = numba.njit

    def no_locator(*args, cache=False, **kwargs):
        if cache:
            raise RuntimeError("cannot cache function '_sum_of_squares': no locator available for file")
        return real(*args, **kwargs)

    monkeypatch.setattr(numba, "njit", no_locator)
    compiled.jit.cache_clear()
    try:
        assert compiled.jit(_sum_of_squares)(np.arange(4, dtype=np.int64)) == 14
    finally:
        compiled.jit.cache_clear()  # later tests get the cached compile again
