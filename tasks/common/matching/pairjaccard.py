"""Exact Jaccard of many pairs of sorted shingle sets at once, with a compiled merge (numba).

Dedup verifies every LSH candidate it cannot skip by an exact Jaccard on the two documents' shingle sets (sorted unique
uint64 hashes, ``tasks.common.matching.minhash``). At 16x the benchmark corpus that is about 830,000 pairs of sets of a
few hundred hashes each. A numpy binary search per document costs about 5 us of CPU per pair, most of it per-call
overhead; the linear merge of two sorted arrays (the intersection step of set-similarity joins, e.g. Bayardo, Ma &
Srikant 2007, "Scaling up all pairs similarity search") compiled by numba costs about 2 us, and releases the GIL, so
``threads`` threads share one copy of the sets (no forked workers, nothing pickled). Loading numba costs about 0.7 s
once per process, as much as 60,000 pairs by numpy (about 12 us each): a smaller call in a process without numba takes
numpy's search per document (``minhash.jaccards_with``) instead (``tasks/common/matching/compiled.py``).

The values equal ``minhash.jaccard`` of each pair bit for bit: the same integer counts, divided as float64
(``int64 / int64`` below 2**53 is exact, so numpy's true division is Python's correctly rounded ``int / int``);
0.0 when both sets are empty.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from tasks.common.matching import compiled, minhash

CHUNK_PAIRS = 16_384  # pairs per kernel call: threads take chunks in turn, so a chunk of long sets never idles one


def jaccards(
    sets: list[np.ndarray],
    left: np.ndarray,
    right: np.ndarray,
    threads: int = 1,
    packed: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """``minhash.jaccard(sets[left[k]], sets[right[k]])`` for every ``k``: ``(pairs,)`` float64.

    ``sets``: sorted unique uint64 arrays (one per row); ``left``, ``right``: ``(pairs,)`` row indices. The sets
    that the pairs name are copied once into one flat array (a set named by many pairs is copied once), unless
    ``packed`` gives every set already there: ``(flat uint64, (rows,) starts, (rows,) sizes)`` with ``sets[r] ==
    flat[starts[r]:][:sizes[r]]``; the pairs are split into chunks of ``CHUNK_PAIRS`` merged on ``threads``
    threads. Raises ``ValueError`` when ``left`` and ``right`` are not 1-d arrays of one length, ``IndexError``
    for a row outside ``sets`` and ``TypeError`` for a named set that is not uint64 (the compiled merge checks
    no bounds, and a mixed concatenation would round other sets' hashes through float64).
    """
    left, right = np.asarray(left, np.int64), np.asarray(right, np.int64)
    if left.ndim != 1 or left.shape != right.shape:
        raise ValueError(f"left {left.shape} and right {right.shape} must be 1-d arrays of one length")
    if not len(left):
        return np.zeros(0)
    low, high = min(left.min(), right.min()), max(left.max(), right.max())
    if low < 0 or high >= len(sets):
        raise IndexError(f"pair row {low if low < 0 else high} is outside the {len(sets)} sets")
    if packed is not None and packed[0].dtype == np.uint64 and compiled.worth_compiling(len(left)):
        return _merged(*packed, left, right, threads)
    rows, at = np.unique(np.concatenate([left, right]), return_inverse=True)
    chosen = [sets[row] for row in rows.tolist()]
    wrong = next((row for row, s in zip(rows.tolist(), chosen) if len(s) and s.dtype != np.uint64), None)
    if wrong is not None:
        raise TypeError(f"set {wrong} is {sets[wrong].dtype}, not sorted unique uint64 hashes")
    if not compiled.worth_compiling(len(left)):
        return _by_search(sets, left, right)
    sizes = np.fromiter(map(len, chosen), np.int64, count=len(chosen))
    flat = np.concatenate([np.zeros(0, np.uint64)] + chosen, dtype=np.uint64, casting="unsafe")  # empties only
    return _merged(flat, np.cumsum(sizes) - sizes, sizes, at[: len(left)], at[len(left) :], threads)


def _merged(
    flat: np.ndarray, starts: np.ndarray, sizes: np.ndarray, left_at: np.ndarray, right_at: np.ndarray, threads: int
) -> np.ndarray:
    """The Jaccards of the sets ``left_at[k]`` and ``right_at[k]`` of ``flat`` by the compiled merge."""
    shared = np.empty(len(left_at), np.int64)
    chunks = [slice(k, k + CHUNK_PAIRS) for k in range(0, len(left_at), CHUNK_PAIRS)]
    kernel = compiled.jit(_intersection_sizes)  # loaded before the threads start

    def merge(chunk: slice) -> None:
        shared[chunk] = kernel(flat, starts, sizes, left_at[chunk], right_at[chunk])

    if threads > 1 and len(chunks) > 1:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(merge, chunks))
    else:
        for chunk in chunks:
            merge(chunk)
    union = sizes[left_at] + sizes[right_at] - shared
    return np.divide(shared, union, out=np.zeros(len(left_at)), where=union > 0)


def _by_search(sets: list[np.ndarray], left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """``jaccards`` by ``minhash.jaccards_with``: one numpy search of a left row's partners per left row."""
    order = np.argsort(left, kind="stable")
    starts = np.flatnonzero(np.diff(left[order], prepend=-1))
    out = np.empty(len(left))
    for group in np.split(order, starts[1:]):
        out[group] = minhash.jaccards_with(sets[int(left[group[0]])], [sets[j] for j in right[group].tolist()])
    return out


def _intersection_sizes(
    flat: np.ndarray, starts: np.ndarray, sizes: np.ndarray, left: np.ndarray, right: np.ndarray
) -> np.ndarray:
    """``|A ∩ B|`` for sets ``A = flat[starts[l]:][:sizes[l]]`` and ``B`` the same of ``r``, per pair ``(l, r)``
    of ``left``/``right``: one linear merge of the two sorted arrays per pair. ``(pairs,)`` int64."""
    out = np.empty(len(left), np.int64)
    for p in range(len(left)):
        i, j = starts[left[p]], starts[right[p]]
        i_end, j_end = i + sizes[left[p]], j + sizes[right[p]]
        count = 0
        while i < i_end and j < j_end:
            a, b = flat[i], flat[j]
            if a == b:
                count += 1
            i += a <= b
            j += b <= a
        out[p] = count
    return out
