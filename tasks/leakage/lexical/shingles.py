"""The screen in front of the lexical detectors (``tasks.leakage.lexical.detectors``): which training docs and windows
hold a word k-gram shingle of some eval doc.

A training doc that holds none of an eval doc's k-grams shares with it no n-gram of at least k words and no
MinHash shingle of k words (Jaccard 0, under any threshold, which is above 0), so the n-gram and MinHash
detectors need not scan it; a night's few new eval docs share a 5-gram with about a third of the kept corpus
(``tasks/leakage/scan/incremental.py`` rescans it against them). One pass over the training docs' words laid end
to end (a k-gram never reaches past its doc's end: a window's count is a difference of running sums) serves the doc
screen and both MinHash detectors' window screens, whose eval shingles are the same set (passages cover their
docs). Shingles are 64-bit rolling hashes (``minhash.rolling_hashes``): a collision can only let a doc or window
through, never hold one back. ``filter_table`` (a table of the top bits of sorted hashes) stands before every
binary search of the lexical detectors' keys.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tasks.common.matching import minhash
from tasks.config.corpus.leakage import LexicalParams


def filter_table(keys: np.ndarray) -> tuple[np.uint64, np.ndarray]:
    """``(shift, table)``: ``table[h >> shift]`` is True for every key h (bool, 2**10 to 2**23 entries).

    About 32 entries per key: a hash that is no key passes with probability about 1/32 or less, so a binary
    search of the keys (the n-gram index, the substitution seeds, the shingle screen) sees few of the others.
    """
    width = int(min(max(np.ceil(np.log2(max(len(keys), 1) * 32)), 10), 23))
    table = np.zeros(1 << width, dtype=bool)
    table[keys >> np.uint64(64 - width)] = True
    return np.uint64(64 - width), table


def key_hits(
    h: np.ndarray,
    length: int,
    pos: np.ndarray,
    doc: np.ndarray,
    doc_len: np.ndarray,
    keys: np.ndarray,
    group: np.ndarray,
    docs: np.ndarray,
    starts: np.ndarray,
    key_filter: tuple,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(flat position, eval doc, eval start)`` of every ``length``-word window inside one training doc whose
    hash (``h[p]``: the window starting at flat position p; ``pos``, ``doc``, ``doc_len`` place it) equals an
    eval key. ``keys`` are sorted unique hashes, key ``u``'s entries rows ``group[u]:group[u + 1]`` of ``docs``
    and ``starts``; ``key_filter`` is ``filter_table(keys)``. The 13-gram index and the substitution seeds look
    up their windows here."""
    shift, table = key_filter
    cand = np.flatnonzero(table[h >> shift])
    cand = cand[pos[cand] + length <= doc_len[doc[cand]]]  # windows inside one doc
    at = np.minimum(np.searchsorted(keys, h[cand]), len(keys) - 1)
    hit = keys[at] == h[cand]
    rows, at = minhash.expand_ranges(group[at[hit]], group[at[hit] + 1])
    return cand[hit][rows], docs[at], starts[at]


class ShingleHits:
    """For the ``docs`` of ``query_ids`` (all by default), which word k-grams are k-gram shingles of some
    ``index_windows`` (``(doc, start, end)`` word ranges of ``index_ids``); ``held`` answers per query window."""

    def __init__(
        self,
        query_ids: list[np.ndarray],
        index_ids: list[np.ndarray],
        index_windows,
        k: int,
        docs: np.ndarray | None = None,
    ) -> None:
        shingles = [minhash.rolling_hashes(index_ids[doc][start:end], k) for doc, start, end in index_windows]
        others = np.unique(np.concatenate(shingles)) if shingles else np.zeros(0, np.uint64)
        docs = np.arange(len(query_ids)) if docs is None else docs
        lengths = np.array([len(query_ids[d]) for d in docs.tolist()], dtype=np.int64)
        self.k, self.offset = k, np.zeros(len(query_ids), dtype=np.int64)
        self.offset[docs] = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if len(docs) else []
        words = np.concatenate([query_ids[d] for d in docs.tolist()]) if len(docs) else np.zeros(0, np.uint64)
        rolling = minhash.rolling_hashes(words, k)
        found = np.zeros(len(rolling), dtype=bool)
        if len(others) and len(rolling):
            shift, table = filter_table(others)
            maybe = np.flatnonzero(table[rolling >> shift])  # the binary search sees only what the table lets by
            at = np.minimum(np.searchsorted(others, rolling[maybe]), len(others) - 1)
            found[maybe] = others[at] == rolling[maybe]
        self.hits = np.concatenate([[0], np.cumsum(found)])  # hits[p]: shingles found before position p

    def held(self, windows) -> list[int]:
        """Indexes of the ``(doc, start, end)`` query ``windows`` holding at least one shingle (a window under k
        words holds none); the docs must be among those laid out."""
        windows = np.asarray(windows, dtype=np.int64).reshape(-1, 3)
        candidates = np.flatnonzero(windows[:, 2] - windows[:, 1] >= self.k)
        windows = windows[candidates]
        first = self.offset[windows[:, 0]] + windows[:, 1]
        last = self.offset[windows[:, 0]] + windows[:, 2] - self.k + 1  # one past the last k-gram's start
        return candidates[self.hits[last] > self.hits[first]].tolist()


def sharing_windows(query_ids, query_windows, index_ids, index_windows, k: int) -> list[int]:
    """Indexes of the ``query_windows`` holding at least one k-gram shingle hash of some index window (only their
    docs laid out). Any other window has Jaccard 0 with every index window, so it cannot reach a threshold above
    0: LSH need not sign it."""
    docs = np.unique(np.asarray(query_windows, dtype=np.int64).reshape(-1, 3)[:, 0])
    return ShingleHits(query_ids, index_ids, index_windows, k, docs).held(query_windows)


def screen(trains, evals, cfg: LexicalParams) -> tuple[np.ndarray, Callable | None]:
    """``(near, held)`` for the ``words.Side`` s ``trains`` and ``evals``: ``near``, the ascending indexes of
    the training docs the n-gram, exact and MinHash detectors could match to some eval doc (those under
    ``min_match_words`` words, which ``exact`` compares whole, and those holding a word k-gram of some eval doc,
    k = min(``min_match_words``, ``shingle_words``)); ``held``, the window screen of the MinHash detectors run on
    the ``near`` docs alone (their windows numbered as in that subset), or None when k is not ``shingle_words``
    (then they screen their own windows)."""
    k = min(cfg.min_match_words, cfg.shingle_words)
    hits = ShingleHits(trains.hashes, evals.hashes, [(j, 0, len(x)) for j, x in enumerate(evals.hashes)], k)
    lengths = np.array([len(x) for x in trains.hashes], dtype=np.int64)
    sharing = hits.held(np.stack([np.arange(len(lengths)), np.zeros_like(lengths), lengths], axis=1))
    near = np.union1d(np.flatnonzero(lengths < cfg.min_match_words), np.asarray(sharing, dtype=np.int64))
    if k != cfg.shingle_words:
        return near, None

    def held(windows) -> list[int]:  # the subset's windows, their docs renumbered to the laid-out ones
        windows = np.asarray(windows, dtype=np.int64).reshape(-1, 3)
        return hits.held(np.column_stack([near[windows[:, 0]], windows[:, 1:]]))

    return near, held
