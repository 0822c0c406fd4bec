"""dedup's near-duplicate merge pass: LSH candidates verified by exact Jaccard in keep order, without computing
a Jaccard for a pair already joined (``merge_near``; the stage is ``tasks/dedup/__init__.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from tqdm import tqdm

from tasks.common.matching.unionfind import UnionTimes, joining_pairs

if TYPE_CHECKING:
    from tasks.config.corpus.dedup import DedupParams
    from tasks.dedup.signatures import DocSignatures


class Forest:
    """Union-find over the rows ``0..n-1`` in one numpy array (8 bytes a row; a dict of Python ints costs about
    100): path halving, and each set's root is its row of lowest ``rank`` (the cluster's kept row). ``parent``:
    the forest to start from (the exact groups: each row under its group's first row in rank)."""

    def __init__(self, parent: np.ndarray, rank: np.ndarray) -> None:
        self.parent, self.rank = np.array(parent, np.int64), rank

    def find(self, node: int) -> int:
        """The root of ``node``'s set."""
        parent = self.parent
        while parent[node] != node:
            parent[node] = parent[parent[node]]
            node = int(parent[node])
        return node

    def union(self, a: int, b: int) -> None:
        """Merge the sets of ``a`` and ``b``; the root of lower rank stays root."""
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            low, high = (ra, rb) if self.rank[ra] < self.rank[rb] else (rb, ra)
            self.parent[high] = low

    def roots(self) -> np.ndarray:
        """``(n,)`` int64: every row's root (pointer jumping, in numpy)."""
        roots = self.parent.copy()
        while True:
            up = roots[roots]
            if np.array_equal(up, roots):
                return roots
            roots = up


def merge_near(
    docs: DocSignatures,
    exact_rep: np.ndarray,
    text_id: np.ndarray,
    clusters: Forest,
    cfg: DedupParams,
    bands_rows: tuple[int, int],
    allowed: np.ndarray,
) -> tuple[list[tuple[int, int, float]], dict[str, int]]:
    """Union ``allowed`` rows, one per exact group (its first allowed row in rank), whose LSH candidates pass
    exact Jaccard >= ``cfg.threshold``.

    One banding holds every source. Pairs are checked in keep order (the better row first, its candidates
    by rank), and candidates already in one cluster are not checked again; two rows with the same normalized
    text (kept apart by the exact policy) are skipped (``identical_text_pairs``). Returns the merges
    ``(row, row, jaccard)`` and counts of candidate pairs checked, merged and rejected.

    Locally, no Jaccard is computed for a pair already joined (``_pairs_to_check``); with the shingle sets held
    elsewhere (``engine: ray``) every candidate is computed up front. The decisions, and so the outputs, are
    the same either way (``_merge_checked``). ``text_id``: ``(rows,)`` equal for rows of one normalized text;
    ``clusters`` holds the exact groups (``exact_rep``: each row's group's first row in rank).
    """
    order = np.argsort(clusters.rank)
    eligible = order[allowed[order]]  # in keep order; the first of each exact group is signed
    signed = eligible[np.sort(np.unique(exact_rep[eligible], return_index=True)[1])]
    left, right = docs.candidates(signed, bands_rows)
    identical = text_id[left] == text_id[right]
    roots = clusters.roots()  # the exact clusters every pass starts from
    if len(docs.shingles) == len(docs.text_hash):
        check = _pairs_to_check(left, right, identical, roots)
    else:
        check = np.flatnonzero(~identical)
    similarity = np.full(len(left), np.nan)
    similarity[check] = docs.jaccards(left[check], right[check], cfg.num_proc)
    return _merge_checked(docs, left, right, identical, similarity, clusters, roots, cfg)


def _pairs_to_check(left: np.ndarray, right: np.ndarray, identical: np.ndarray, roots: np.ndarray) -> np.ndarray:
    """Indices of the candidates that can need a Jaccard: those still apart at their turn if every candidate
    before them had merged (``joining_pairs`` from the exact clusters, ``roots``). The real merges are a subset
    of those, so a pair joined here may still be apart in reality (after a rejection): ``_merge_checked`` finds
    such a pair and has it computed."""
    return joining_pairs(roots, left, right, identical)


def _merge_checked(docs, left, right, identical, similarity, clusters: Forest, roots: np.ndarray, cfg: DedupParams):
    """The merge pass, in candidate order: a pair still in two clusters at its turn is counted as identical
    text, merged (Jaccard >= threshold) or rejected. ``similarity`` holds the Jaccards computed so far (NaN: not
    computed). Only the pairs at or above the threshold are walked in Python; when the other pairs were
    apart at their turn (``UnionTimes``) is answered in numpy. A pair apart at its turn whose Jaccard was not
    computed is computed, and the pass is run again from the same start."""
    start = clusters.parent.copy()
    nodes = np.unique(np.concatenate([left, right]))  # UnionTimes over these only: 3 lists of the rows, else
    while True:
        merging = np.flatnonzero(similarity >= cfg.threshold)
        edges, times = _merge_in_order(left, right, similarity, merging, clusters, roots, nodes)
        others = np.setdiff1d(np.arange(len(left)), merging, assume_unique=True)
        at_left, at_right = np.searchsorted(nodes, left[others]), np.searchsorted(nodes, right[others])
        apart = ~times.connected_before(at_left, at_right, others)
        unknown = others[apart & ~identical[others] & np.isnan(similarity[others])]
        if not len(unknown):
            break
        similarity[unknown] = docs.jaccards(left[unknown], right[unknown], cfg.num_proc)
        clusters.parent = start.copy()
    rejected, identical_apart = int((apart & ~identical[others]).sum()), int((apart & identical[others]).sum())
    counts = {
        "candidate_pairs": len(edges) + rejected,
        "merged_pairs": len(edges),
        "rejected_pairs": rejected,
        "identical_text_pairs": identical_apart,
    }
    return edges, counts


def _merge_in_order(left, right, similarity, order: np.ndarray, clusters: Forest, roots: np.ndarray, nodes):
    """Union the candidate pairs ``order`` (indices into ``left``/``right``, ascending) whose rows are still in
    two clusters of ``clusters``, which holds the exact clusters (``roots``: each row's root); returns the merges
    ``(row, row, jaccard)`` and when each pair of rows became connected, over ``nodes`` (the candidates' rows,
    ascending; the exact merges before never join two rows that LSH compares: those are one per exact group)."""
    times = UnionTimes(len(nodes))
    edges: list[tuple[int, int, float]] = []
    joins = order[joining_pairs(roots, left[order], right[order])]
    merges = zip(joins.tolist(), left[joins].tolist(), right[joins].tolist(), similarity[joins].tolist())
    for t, i, j, value in tqdm(merges, total=len(joins), desc="dedup: lsh merges", unit="merge"):
        clusters.union(i, j)
        times.union(int(np.searchsorted(nodes, i)), int(np.searchsorted(nodes, j)), t)
        edges.append((i, j, value))
    return edges, times
