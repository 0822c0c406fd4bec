"""The audit's detectors, shared by the real audit and the planted-recall pass (``tasks.leakage.planted``).

All work on ``tasks.common.textnorm.words`` (the dedup normalization: Unicode format characters (Cf) dropped,
NFKC, casefold, whitespace and line breaks collapsed, punctuation dropped), so re-wrapping, case changes or
invisible characters hide nothing. An eval text without words (only punctuation, symbols or format
characters) is checked by no detector: it has no n-gram and no shingle, and the whole-doc check needs at
least one word, since two wordless texts share nothing (``docs_without_words`` in the metrics):

- ``ngram``: word n-gram overlap as in GPT-3 (Brown et al. 2020, appendix C) and lm-eval-harness
  decontamination: any shared ``ngram_words``-gram is a hit; an eval text shorter than n uses its whole
  length as the n-gram. N-grams are 64-bit rolling hashes of the words' 64-bit blake2b hashes (numpy), and
  every n-gram hit is confirmed word by word on those word hashes, so an n-gram hash collision cannot create
  a match (only two distinct words with equal blake2b hashes could, probability ~2**-64). Score = share of
  the eval doc's n-grams found.
- ``exact``: eval texts of 1 to ``min_match_words - 1`` words (2-word tweets would occur inside almost any
  text) match only a training doc with the same words.
- ``minhash_doc`` / ``minhash_passage``: MinHash (Broder 1997) LSH over word ``shingle_words``-gram
  shingles, candidates confirmed by exact Jaccard (as in text-dedup), with the kit dedup uses
  (``tasks.common.minhash``: the same word hashes, permutations, band rule and banding, so with equal seed,
  ``num_perm`` and shingle size a text gets the same signature in both stages). One permuted matrix per
  document serves all of its windows. Passages are windows of ``passage_words`` words every
  ``passage_stride_words`` words on both sides, so an eval paragraph inside a long training document is
  compared with a window of about its own size. With stride s and window w the worst alignment still shares
  ``w - s/2`` words.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import pandas as pd
from tqdm import tqdm

from tasks.common import minhash
from tasks.config.leakage import LeakageParams


@dataclass(frozen=True)
class Side:
    """Documents of one side, index-aligned with its frame: normalized words and their 64-bit hashes."""

    tokens: list[list[str]]
    hashes: list[np.ndarray]


def make_sides(train_tokens: list[list[str]], eval_tokens: list[list[str]]) -> tuple[Side, Side]:
    """Both sides with each word's 64-bit hash (``minhash.word_hashes``, one cache for both)."""
    cache = minhash.WordHashes()
    return make_side(train_tokens, cache), make_side(eval_tokens, cache)


def make_side(tokens: list[list[str]], cache: minhash.WordHashes) -> Side:
    """One side; word hashes are blake2b, so any cache gives the same values (a cache only saves time)."""
    return Side(tokens, [minhash.word_hashes(x, cache) for x in tokens])


def detect(trains: Side, evals: Side, cfg: LeakageParams) -> list[tuple]:
    """Every detector's ``(train_i, eval_j, method, score, span)`` matches, in a fixed order."""
    return (
        ngram_matches(trains, evals, cfg)
        + exact_matches(trains, evals, cfg.min_match_words)
        + minhash_doc_matches(trains, evals, cfg)
        + minhash_passage_matches(trains, evals, cfg)
    )


def ngram_matches(trains: Side, evals: Side, cfg: LeakageParams) -> list[tuple]:
    """GPT-3-style n-gram hits: ``(train_i, eval_j, "ngram", score, span)`` per matching pair.

    Eval docs with ``min_match_words <= len < ngram_words`` words use their whole length as n. N-gram hashes
    (``minhash.rolling_hashes`` of the word hashes) are computed once over all training docs concatenated
    (windows crossing a document boundary are dropped); every hash hit is then confirmed word by word.
    """
    train_all, train_doc, train_pos = _concatenate(trains.hashes)
    eval_all, eval_doc, _ = _concatenate(evals.hashes)
    eval_offset = np.searchsorted(eval_doc, np.arange(len(evals.hashes)))
    doc_len = np.array([len(x) for x in trains.hashes], dtype=np.int64)
    found = []
    for length, (keys, docs, starts) in tqdm(_ngram_index(evals.hashes, cfg).items(), desc="leakage ngram", unit="n"):
        h = minhash.rolling_hashes(train_all, length)
        inside = np.flatnonzero(train_pos[: len(h)] + length <= doc_len[train_doc[: len(h)]])
        lo = np.minimum(np.searchsorted(keys, h[inside], side="left"), len(keys) - 1)
        inside = inside[keys[lo] == h[inside]]  # the right bound is searched for hits only
        rows, at = minhash.expand_ranges(
            np.searchsorted(keys, h[inside], side="left"), np.searchsorted(keys, h[inside], side="right")
        )
        start, j, q = inside[rows], docs[at], starts[at]
        offsets = np.arange(length)
        same = (train_all[start[:, None] + offsets] == eval_all[(eval_offset[j] + q)[:, None] + offsets]).all(axis=1)
        start = start[same]
        found.append(pd.DataFrame({"i": train_doc[start], "pos": train_pos[start], "j": j[same], "q": q[same]}))
    hits = pd.concat(found, ignore_index=True) if found else pd.DataFrame(columns=["i", "pos", "j", "q"])
    out = []
    for (i, j), part in hits.groupby(["i", "j"], sort=True):
        length = min(cfg.ngram_words, len(evals.hashes[j]))
        score = part["q"].nunique() / (len(evals.hashes[j]) - length + 1)
        span = _longest_span(trains.tokens[i], sorted(set(part["pos"])), length, cfg.max_span_words)
        out.append((int(i), int(j), "ngram", score, span))
    return out


def _concatenate(docs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All docs' word hashes end to end, with the doc index and the position in its doc of every word."""
    lengths = np.array([len(x) for x in docs], dtype=np.int64)
    flat = np.concatenate(docs) if docs else np.zeros(0, dtype=np.uint64)
    doc = np.repeat(np.arange(len(docs)), lengths)
    pos = np.arange(len(flat)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return flat, doc, pos


def _ngram_index(eval_ids: list[np.ndarray], cfg: LeakageParams) -> dict[int, tuple]:
    """``{length: (sorted hashes, eval doc per hash, start per hash)}``, one entry per n-gram length in use."""
    parts: dict[int, list] = defaultdict(list)
    for j, ids in enumerate(eval_ids):
        if len(ids) < cfg.min_match_words:
            continue
        length = min(cfg.ngram_words, len(ids))
        h = minhash.rolling_hashes(ids, length)
        parts[length].append((h, np.full(len(h), j), np.arange(len(h))))
    index = {}
    for length in sorted(parts):
        keys, docs, starts = (np.concatenate(col) for col in zip(*parts[length]))
        order = np.argsort(keys, kind="stable")
        index[length] = (keys[order], docs[order], starts[order])
    return index


def _longest_span(tokens: list[str], positions: list[int], length: int, max_words: int) -> str:
    """The longest run of overlapping matched windows, as words, cut to ``max_words``."""
    best_start, best_end, start, end = 0, 0, positions[0], positions[0] + length
    for pos in positions[1:] + [None]:
        if pos is not None and pos <= end:
            end = max(end, pos + length)
            continue
        if end - start > best_end - best_start:
            best_start, best_end = start, end
        if pos is not None:
            start, end = pos, pos + length
    return " ".join(tokens[best_start : min(best_end, best_start + max_words)])


def exact_matches(trains: Side, evals: Side, min_words: int) -> list[tuple]:
    """Eval texts of 1 to ``min_words - 1`` words whose words equal a whole training doc's (after normalization);
    a wordless eval text matches nothing."""
    short: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for j, tokens in enumerate(evals.tokens):
        if 0 < len(tokens) < min_words:
            short[tuple(tokens)].append(j)
    out = []
    for i, tokens in enumerate(trains.tokens):
        for j in short.get(tuple(tokens), []) if len(tokens) < min_words else []:
            out.append((i, j, "exact", 1.0, " ".join(tokens)))
    return out


def minhash_doc_matches(trains: Side, evals: Side, cfg: LeakageParams) -> list[tuple]:
    """Whole-document MinHash LSH at ``doc_threshold``, confirmed by exact shingle Jaccard."""
    train_windows = [(i, 0, len(x)) for i, x in enumerate(trains.hashes) if len(x) >= cfg.shingle_words]
    eval_windows = [(j, 0, len(x)) for j, x in enumerate(evals.hashes) if len(x) >= cfg.shingle_words]
    pairs = lsh_pairs(trains.hashes, train_windows, evals.hashes, eval_windows, cfg.doc_threshold, cfg)
    return [(train_windows[a][0], eval_windows[b][0], "minhash_doc", score, None) for a, b, score in pairs]


def minhash_passage_matches(trains: Side, evals: Side, cfg: LeakageParams) -> list[tuple]:
    """Passage-window MinHash LSH at ``passage_threshold``; best window pair per (train doc, eval doc)."""
    train_windows = [(i, s, e) for i, x in enumerate(trains.hashes) for s, e in passage_windows(len(x), cfg)]
    eval_windows = [(j, s, e) for j, x in enumerate(evals.hashes) for s, e in passage_windows(len(x), cfg)]
    best: dict[tuple[int, int], tuple[float, str]] = {}
    for a, b, score in lsh_pairs(trains.hashes, train_windows, evals.hashes, eval_windows, cfg.passage_threshold, cfg):
        (i, start, end), j = train_windows[a], eval_windows[b][0]
        if score > best.get((i, j), (-1.0, ""))[0]:
            best[(i, j)] = (score, " ".join(trains.tokens[i][start:end]))
    return [(i, j, "minhash_passage", score, span) for (i, j), (score, span) in sorted(best.items())]


def passage_windows(n_words: int, cfg: LeakageParams) -> list[tuple[int, int]]:
    """``(start, end)`` word windows covering the text, the last one ending at its end; [] if too short."""
    if n_words < cfg.shingle_words:
        return []
    last = max(n_words - cfg.passage_words, 0)
    starts = list(range(0, last + 1, cfg.passage_stride_words))
    starts += [] if starts[-1] == last else [last]
    return [(s, min(s + cfg.passage_words, n_words)) for s in starts]


def lsh_pairs(query_ids, query_windows, index_ids, index_windows, threshold: float, cfg) -> list[tuple]:
    """``(query window, indexed window, Jaccard)`` for LSH candidates with exact Jaccard >= ``threshold``.

    Windows are ``(doc, start, end)`` word ranges of the ``*_ids`` docs. Bands and rows follow datasketch's
    rule with equal weights (``minhash.lsh_bands_rows``); candidates share at least one band. Raises
    ``ValueError`` naming the keys when datasketch finds no shape (fewer than 2 bands).
    """
    try:
        bands, rows = minhash.lsh_bands_rows(threshold, cfg.num_perm)
    except ValueError as err:
        raise ValueError(f"leakage: MinHash threshold {threshold} (leakage.doc_threshold / passage_threshold) with "
                         f"leakage.num_perm={cfg.num_perm}: datasketch finds no LSH shape ({err}); a threshold this "
                         "high needs more num_perm (0.99: 512)") from None
    perms = minhash.permutations(cfg.num_perm, cfg.minhash_seed)
    query_keys = minhash.band_keys(signatures(query_ids, query_windows, cfg.shingle_words, perms), bands, rows)
    index_keys = minhash.band_keys(signatures(index_ids, index_windows, cfg.shingle_words, perms), bands, rows)
    out = []
    for a, b in minhash.candidate_pairs(query_keys, index_keys):
        score = window_jaccard(query_ids, query_windows[a], index_ids, index_windows[b], cfg.shingle_words)
        if score >= threshold:
            out.append((a, b, score))
    return out


def signatures(doc_ids: list[np.ndarray], windows: list[tuple], k: int, perms) -> np.ndarray:
    """MinHash signatures ``(len(windows), num_perm)`` uint32 of the word k-gram shingle set of each window.

    One permuted matrix per document (``minhash.window_signatures``) serves all of its windows.
    """
    out = np.empty((len(windows), len(perms[0])), dtype=np.uint32)
    by_doc: dict[int, list[int]] = defaultdict(list)
    for w, (doc, _, _) in enumerate(windows):
        by_doc[doc].append(w)
    for doc, members in tqdm(sorted(by_doc.items()), desc="leakage minhash", unit="doc", mininterval=5):
        out[members] = minhash.window_signatures(doc_ids[doc], [windows[w][1:] for w in members], k, *perms)
    return out


def window_jaccard(ids_a, window_a: tuple, ids_b, window_b: tuple, k: int) -> float:
    """Jaccard of the k-gram shingle sets (64-bit hashed) of two ``(doc, start, end)`` word windows."""
    (da, sa, ea), (db, sb, eb) = window_a, window_b
    return minhash.jaccard(np.unique(minhash.rolling_hashes(ids_a[da][sa:ea], k)),
                           np.unique(minhash.rolling_hashes(ids_b[db][sb:eb], k)))
