"""Exact Jaccard of many pairs (tasks/common/matching/pairjaccard.py): both of its paths against the one-pair
``minhash.jaccard`` and against values counted by hand."""

import numpy as np
import pytest

from tasks.common.matching import compiled, minhash, pairjaccard


def _random_sets(rng, count: int, universe: int, most: int) -> list[np.ndarray]:
    return [np.unique(rng.integers(0, universe, rng.integers(0, most), dtype=np.uint64)) for _ in range(count)]


def test_by_hand_both_paths():
    # {1,2,3}~{2,3,4}: 2 shared of 4; {1,2,3}~{}: 0 of 3; {}~{}: 0.0 by convention; {5}~{5}: 1.0;
    # {0, 2**64-1}~{2**64-1}: 1 of 2 (the top of the uint64 range compares as unsigned)
    sets = [np.array(v, np.uint64) for v in ([1, 2, 3], [2, 3, 4], [], [5], [0, 2**64 - 1], [2**64 - 1])]
    left, right = np.array([0, 0, 2, 3, 4]), np.array([1, 2, 2, 3, 5])
    want = [0.5, 0.0, 0.0, 1.0, 0.5]
    assert pairjaccard._by_search(sets, left, right).tolist() == want
    assert _compiled_path(sets, left, right).tolist() == want


def _compiled_path(sets, left, right, threads: int = 1):
    """The numba path whatever the pair count (the count alone would send a small call to numpy's search)."""
    compiled.jit(pairjaccard._intersection_sizes)  # loads numba: later calls take the compiled path
    return pairjaccard.jaccards(sets, left, right, threads)


@pytest.mark.parametrize("threads", [1, 2])
def test_compiled_path_equals_the_one_pair_jaccard_bit_for_bit(threads, monkeypatch):
    rng = np.random.default_rng(11)
    sets = _random_sets(rng, 300, 200, 120) + _random_sets(rng, 20, 2**64 - 1, 400)
    left, right = rng.integers(0, len(sets), 5000), rng.integers(0, len(sets), 5000)
    monkeypatch.setattr(pairjaccard, "CHUNK_PAIRS", 700)  # several chunks, shared out over the threads
    got = _compiled_path(sets, left, right, threads)
    assert got.tolist() == [minhash.jaccard(sets[i], sets[j]) for i, j in zip(left.tolist(), right.tolist())]


def test_a_small_first_call_takes_numpy_search_and_agrees(monkeypatch):
    rng = np.random.default_rng(5)
    sets = _random_sets(rng, 50, 60, 30)
    left, right = rng.integers(0, 50, 400), rng.integers(0, 50, 400)
    monkeypatch.delitem(__import__("sys").modules, "numba", raising=False)  # as in a process that never loaded it
    monkeypatch.setattr(compiled, "jit", lambda func: pytest.fail("a small first call must not load numba"))
    got = pairjaccard.jaccards(sets, left, right)
    assert got.tolist() == [minhash.jaccard(sets[i], sets[j]) for i, j in zip(left.tolist(), right.tolist())]


def test_no_pairs_and_a_row_outside_the_sets():
    sets = [np.array([1], np.uint64)]
    assert pairjaccard.jaccards(sets, np.zeros(0, np.int64), np.zeros(0, np.int64)).shape == (0,)
    with pytest.raises(IndexError, match="pair row 3 is outside the 1 sets"):
        pairjaccard.jaccards(sets, np.array([0]), np.array([3]))


def test_bad_arguments_are_errors_on_both_paths(monkeypatch):
    sets = [np.array([1, 2, 3], np.uint64), np.array([2, 3], np.uint64), np.array([2.0**60])]
    for worth in (False, True):
        monkeypatch.setattr(compiled, "worth_compiling", lambda items, worth=worth: worth)
        with pytest.raises(ValueError, match=r"left \(4,\) and right \(1,\)"):
            pairjaccard.jaccards(sets, [0, 1, 0, 1], [1])  # the compiled merge would read past right's end
        with pytest.raises(ValueError, match="1-d"):
            pairjaccard.jaccards(sets, [[0]], [[1]])
        with pytest.raises(IndexError, match="pair row -1 is outside"):
            pairjaccard.jaccards(sets, [-1], [0])
        with pytest.raises(TypeError, match="set 2 is float64"):
            pairjaccard.jaccards(sets, [0, 0], [1, 2])  # concatenated, float64 would merge hashes above 2**53
        # an empty set of another dtype holds no hash to round: allowed, as minhash.jaccard allows it
        assert pairjaccard.jaccards(sets[:2] + [np.array([])], [0, 0], [1, 2]).tolist() == [2 / 3, 0.0]
