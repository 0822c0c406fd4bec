"""dedup's merge pass computes no Jaccard for a candidate pair already joined, and decides as the plain sequential
rule does: in candidate order, a pair still in two clusters is identical text, merged (J >= threshold) or
rejected."""

from __future__ import annotations

import numpy as np
import pytest

from dedup_fixtures import make_cfg
from tasks.common.matching import minhash
from tasks.common.matching.unionfind import UnionFind
from tasks.dedup import near
from tasks.dedup.signatures import shared_bucket_pairs


class Docs:
    """What the merge pass reads of ``DocSignatures``: row count and Jaccards (from a table), counting calls."""

    def __init__(self, n_rows: int, table: dict[tuple[int, int], float]) -> None:
        self.text_hash, self.table, self.computed = [""] * n_rows, table, []

    def jaccards(self, left, right, num_proc):
        self.computed += list(zip(left.tolist(), right.tolist()))
        return np.array([self.table[(i, j)] for i, j in zip(left.tolist(), right.tolist())])


def sequential(left, right, identical, table, n_rows, threshold):
    clusters, edges, counts = UnionFind(), [], {"rejected": 0, "identical": 0}
    for i, j, same in zip(left, right, identical):
        if clusters.find(i) == clusters.find(j):
            continue
        if same:
            counts["identical"] += 1
        elif table[(i, j)] >= threshold:
            clusters.union(i, j)
            edges.append((i, j, table[(i, j)]))
        else:
            counts["rejected"] += 1
    return edges, counts, [clusters.find(i) for i in range(n_rows)]


def lazy(left, right, identical, table, n_rows):
    docs, clusters = Docs(n_rows, table), near.Forest(np.arange(n_rows), np.arange(n_rows))
    left, right, identical = np.array(left, np.int64), np.array(right, np.int64), np.array(identical, bool)
    roots = clusters.roots()
    check = near._pairs_to_check(left, right, identical, roots)
    similarity = np.full(len(left), np.nan)
    similarity[check] = docs.jaccards(left[check], right[check], 1)
    edges, counts = near._merge_checked(docs, left, right, identical, similarity, clusters, roots, make_cfg())
    return edges, counts, [clusters.find(i) for i in range(n_rows)], docs.computed


def test_a_pair_joined_only_through_a_rejected_one_is_computed():
    # (0, 1) is rejected, (0, 2) merges; (1, 2) looks joined if (0, 1) had merged, but is apart: it is computed
    table = {(0, 1): 0.7, (0, 2): 0.9, (1, 2): 0.85}
    edges, counts, roots, computed = lazy([0, 0, 1], [1, 2, 2], [False] * 3, table, 3)
    assert edges == [(0, 2, 0.9), (1, 2, 0.85)] and counts["rejected_pairs"] == 1 and len(set(roots)) == 1
    assert (1, 2) in computed


@pytest.mark.parametrize("seed", range(30))
def test_random_candidates_decide_as_the_sequential_rule(seed):
    rng = np.random.default_rng(seed)
    n_rows = int(rng.integers(3, 40))
    pairs = sorted({tuple(sorted(rng.choice(n_rows, 2, replace=False).tolist())) for _ in range(3 * n_rows)})
    left, right = [p[0] for p in pairs], [p[1] for p in pairs]
    table = {p: float(rng.choice([0.5, 0.79, 0.8, 0.95])) for p in pairs}
    identical = (rng.random(len(pairs)) < 0.1).tolist()
    edges, counts, roots, computed = lazy(left, right, identical, table, n_rows)
    want_edges, want_counts, want_roots = sequential(left, right, identical, table, n_rows, 0.8)
    assert edges == want_edges and roots == want_roots
    assert counts["rejected_pairs"] == want_counts["rejected"]
    assert counts["identical_text_pairs"] == want_counts["identical"]
    assert counts["merged_pairs"] == len(want_edges) and len(set(computed)) == len(computed) <= len(pairs)


def test_shared_bucket_pairs_by_hand_and_against_the_general_band_join():
    # band 0 buckets {0, 2, 3} and {1}; band 1 buckets {1, 3}, {0}, {2}: pairs (0,2) (0,3) (2,3) and (1,3)
    keys = np.array([[5, 1], [6, 2], [5, 3], [5, 2]], np.uint64)
    first, second = shared_bucket_pairs(keys)
    assert list(zip(first.tolist(), second.tolist())) == [(0, 2), (0, 3), (1, 3), (2, 3)]
    rng = np.random.default_rng(1)
    for n, bands, values in [(0, 4, 5), (1, 4, 5), (300, 16, 40), (3000, 16, 900)]:
        keys = rng.integers(0, values, (n, bands)).astype(np.uint64)
        query, index = minhash.candidate_pair_arrays(keys, keys)
        later = index > query  # the general join's self-join holds (x, x) and both orders of each pair
        first, second = shared_bucket_pairs(keys)
        assert first.tolist() == query[later].tolist() and second.tolist() == index[later].tolist()
