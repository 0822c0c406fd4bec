"""The audit's lexical detectors, shared by the real audit and the planted-recall pass (``tasks.leakage.planted``).

All work on ``tasks.common.matching.textnorm.words`` (the dedup normalization: Unicode format characters (Cf) dropped,
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
  (``tasks.common.matching.minhash``: the same word hashes, permutations, band rule and banding, so with equal seed,
  ``num_perm`` and shingle size a text gets the same signature in both stages; ``tasks.common.matching.pairjaccard``:
  the same exact Jaccard of many candidate pairs at once). One permuted matrix per
  document serves all of its windows. Passages are windows of ``passage_words`` words every
  ``passage_stride_words`` words on both sides, so an eval paragraph inside a long training document is
  compared with a window of about its own size. With stride s and window w the worst alignment still shares
  ``w - s/2`` words.
- ``ngram_substituted`` (``tasks.leakage.lexical.substitution``): word n-grams equal but for at most a share of their
  positions at the same alignment (a copy with words swapped for others leaves no 13-gram).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
from tqdm import tqdm

from tasks.common.matching import minhash, pairjaccard
from tasks.config.corpus.leakage import LexicalParams
from tasks.leakage.lexical import blocks, shingles, substitution
from tasks.leakage.lexical.shingles import filter_table, key_hits, sharing_windows
from tasks.leakage.lexical.words import Side

BYTES_PER_INDEX_NGRAM = 64  # eval n-gram index bytes per n-gram (key, group, doc, start, 32 filter-table bytes)
_INVERSE = np.uint64(pow(int(minhash.MULTIPLIER), -1, 1 << 64))  # M**-1 mod 2**64
#: The lexical detectors' methods, in the order ``detect`` lists their matches.
DETECTORS = ("ngram", "exact", "minhash_doc", "minhash_passage", substitution.METHOD)


def detect(trains: Side, evals: Side, cfg: LexicalParams, owner: np.ndarray | None = None) -> list[tuple]:
    """Every detector's ``(train_i, eval_j, method, score, span)`` matches, in a fixed order (detector, then
    pair). The n-gram, exact and MinHash detectors see only the docs ``shingles.screen`` lets through (the rest
    can match no eval doc for them); the substitution detector, whose seeds are 2 to 4 words, sees every doc.

    ``owner`` (per training doc, an eval doc index): only the pairs ``(i, owner[i])`` are wanted (the planted
    copies, each scored against the eval doc it was built from); the substitution and MinHash detectors verify
    no other candidate, and only those pairs are returned, each decided as without ``owner``."""
    near, held = shingles.screen(trains, evals, cfg)
    part = Side([trains.tokens[i] for i in near.tolist()], [trains.hashes[i] for i in near.tolist()])
    part_owner = None if owner is None else owner[near]
    lexical = (
        ngram_matches(part, evals, cfg)
        + exact_matches(part, evals, cfg.min_match_words)
        + minhash_doc_matches(part, evals, cfg, held, part_owner)
        + minhash_passage_matches(part, evals, cfg, held, part_owner)
    )
    found = [(int(near[i]), *rest) for i, *rest in lexical] + substitution.substitution_matches(
        trains, evals, cfg, owner
    )
    return found if owner is None else [m for m in found if owner[m[0]] == m[1]]


def ngram_matches(trains: Side, evals: Side, cfg: LexicalParams) -> list[tuple]:
    """GPT-3-style n-gram hits: ``(train_i, eval_j, "ngram", score, span)`` per matching pair, sorted by pair.

    Eval docs with ``min_match_words <= len < ngram_words`` words use their whole length as n. The eval
    n-grams are indexed in shards by hash (``_ngram_index_shards``, each at most half of
    ``cfg.worker_memory_mib``), and the training docs are scanned in blocks of whole docs sized to the other
    half (``blocks.block_words``), each block against each shard in turn (``_hit_windows``), so memory per process
    is set by the param, not by the corpus; every hash hit is confirmed word by word. Score = share of the
    eval doc's n-grams found; span = the longest run of overlapping matched windows.
    """
    shards = _ngram_index_shards(evals.hashes, cfg)
    eval_all, _, _ = blocks.concatenate(evals.hashes)
    eval_offset = np.cumsum([0] + [len(x) for x in evals.hashes])[:-1]
    lengths = np.array([len(x) for x in trains.hashes], dtype=np.int64)
    block_ranges = blocks.blocks_of_docs(lengths, blocks.block_words(cfg))
    most = max([int(lengths[a:b].sum()) for a, b in block_ranges] + [1])
    powers = (np.cumprod(np.full(most, _INVERSE)), np.cumprod(np.full(most, minhash.MULTIPLIER)))
    found = []
    for first, stop in block_ranges:
        flat, doc, pos = blocks.concatenate(trains.hashes[first:stop])
        for index in shards:
            for i, p, j, q in _hit_windows(flat, doc, pos, lengths[first:stop], index, eval_all, eval_offset, powers):
                found.append((i + first, p, j, q))
    i, p, j, q = (np.concatenate(col) for col in zip(*found)) if found else [np.zeros(0, np.int64)] * 4
    if len(i) == 0:
        return []
    eval_len = np.array([len(x) for x in evals.hashes], dtype=np.int64)
    n = np.minimum(cfg.ngram_words, eval_len)
    order = np.lexsort((q, j, i))  # one pair's distinct eval windows (the score's numerator) are adjacent
    first_of_pair = minhash.changes(i[order], j[order])
    distinct_q = np.add.reduceat(minhash.changes(i[order], j[order], q[order]), np.flatnonzero(first_of_pair))
    order = np.lexsort((p, j, i))
    i, j, p = i[order], j[order], p[order]
    keep = minhash.changes(i, j, p)  # distinct matched train positions per pair, ascending
    i, j, p = i[keep], j[keep], p[keep]
    new_pair = minhash.changes(i, j)
    run_start = new_pair | (p > np.roll(p, 1) + n[j])  # windows overlap or touch: the same run
    starts = np.flatnonzero(run_start)
    run_end = np.append(starts[1:], len(p)) - 1
    run_words = p[run_end] + n[j[starts]] - p[starts]
    run_pair = np.cumsum(new_pair)[starts] - 1
    best = np.lexsort((np.arange(len(starts)), -run_words, run_pair))  # longest run, the first on ties
    best = best[minhash.changes(run_pair[best])]
    out = []
    for k, r in enumerate(best):
        ti, ej, s = int(i[starts[r]]), int(j[starts[r]]), int(p[starts[r]])
        length = int(n[ej])
        score = int(distinct_q[k]) / (int(eval_len[ej]) - length + 1)
        span = " ".join(trains.tokens[ti][s : min(s + int(run_words[r]), s + cfg.max_span_words)])
        out.append((ti, ej, "ngram", score, span))
    return out


def _hit_windows(flat, doc, pos, doc_len, index, eval_all, eval_offset, powers):
    """``(doc, pos, eval doc, eval start)`` arrays per n-gram length: word-verified windows of one block.

    All lengths' window hashes come from one prefix array: with ``P[k+1] = P[k] * M + w[k]`` (mod 2**64),
    the window ``[s, s + n)`` hashes to ``P[s + n] - P[s] * M**n``, the value ``minhash.rolling_hashes``
    gives; ``P[k+1] = M**(k+1) * sum(w[t] * M**-(t+1), t <= k)`` (M is odd: invertible mod 2**64), with
    ``powers = (M**-(t+1), M**(t+1))`` for t in 0 .. at least len(flat) - 1. A table of the eval hashes' top
    bits (``shingles.filter_table``) drops nearly all non-matching windows before the binary search.
    """
    if len(flat) == 0:
        return
    inverse, forward = powers[0][: len(flat)], powers[1][: len(flat)]
    prefix = np.empty(len(flat) + 1, dtype=np.uint64)
    prefix[0] = 0
    np.cumsum(flat * inverse, out=prefix[1:])
    prefix[1:] *= forward
    for length, entries in index.items():
        count = len(flat) - length + 1
        if count <= 0:
            continue
        h = prefix[length : length + count] - prefix[:count] * forward[length - 1]
        start, j, q = key_hits(h, length, pos, doc, doc_len, *entries)
        offsets = np.arange(length)
        same = (flat[start[:, None] + offsets] == eval_all[(eval_offset[j] + q)[:, None] + offsets]).all(axis=1)
        yield doc[start[same]], pos[start[same]], j[same], q[same]


def _ngram_index_shards(eval_ids: list[np.ndarray], cfg: LexicalParams) -> list[dict[int, tuple]]:
    """The eval n-gram index split by the top bits of the hash into ``2**b`` shards, the fewest whose
    estimated size (``BYTES_PER_INDEX_NGRAM`` per n-gram) is at most half of ``cfg.worker_memory_mib``;
    each shard is ``{length: (unique hashes, group, eval doc, start, filter)}``, one entry per n-gram length.

    The n-grams of unique hash ``k`` are rows ``group[k]:group[k + 1]`` of ``eval doc`` and ``start``;
    ``filter`` is ``shingles.filter_table`` of the hashes. A window can only equal a key of its own shard, so
    scanning every shard finds each hit exactly once.
    """
    parts: dict[int, list] = defaultdict(list)
    for j, ids in enumerate(eval_ids):
        if len(ids) < cfg.min_match_words:
            continue
        length = min(cfg.ngram_words, len(ids))
        h = minhash.rolling_hashes(ids, length)
        parts[length].append((h, np.full(len(h), j), np.arange(len(h))))
    columns = {length: [np.concatenate(col) for col in zip(*parts[length])] for length in sorted(parts)}
    count = sum(len(keys) for keys, _, _ in columns.values())
    bits = int(np.ceil(np.log2(max(count * BYTES_PER_INDEX_NGRAM / (cfg.worker_memory_mib << 19), 1))))
    bits = min(bits, int(np.ceil(np.log2(max(count, 1)))))  # no more shards than n-grams
    shards = []
    for shard in range(1 << bits):
        picked = {}
        for length, (keys, docs, starts) in columns.items():
            mine = (keys >> np.uint64(64 - bits)) == shard if bits else np.ones(len(keys), bool)
            if mine.any():
                picked[length] = (keys[mine], docs[mine], starts[mine])
        shards.append(_ngram_index(picked))
    return shards


def _ngram_index(columns: dict[int, tuple]) -> dict[int, tuple]:
    """One shard's index from ``{length: (hashes, eval doc, start)}`` (see ``_ngram_index_shards``)."""
    index = {}
    for length, (keys, docs, starts) in columns.items():
        order = np.argsort(keys, kind="stable")
        keys, docs, starts = keys[order], docs[order], starts[order]
        first = np.flatnonzero(minhash.changes(keys))
        group = np.append(first, len(keys))
        index[length] = (keys[first], group, docs, starts, filter_table(keys))
    return index


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


def minhash_doc_matches(trains: Side, evals: Side, cfg: LexicalParams, held=None, owner=None) -> list[tuple]:
    """Whole-document MinHash LSH at ``doc_threshold``, confirmed by exact shingle Jaccard (``held``, ``owner``:
    see ``lsh_pairs``)."""
    train_windows = [(i, 0, len(x)) for i, x in enumerate(trains.hashes) if len(x) >= cfg.shingle_words]
    eval_windows = [(j, 0, len(x)) for j, x in enumerate(evals.hashes) if len(x) >= cfg.shingle_words]
    pairs = lsh_pairs(trains.hashes, train_windows, evals.hashes, eval_windows, cfg.doc_threshold, cfg, held, owner)
    return [(train_windows[a][0], eval_windows[b][0], "minhash_doc", score, None) for a, b, score in pairs]


def minhash_passage_matches(trains: Side, evals: Side, cfg: LexicalParams, held=None, owner=None) -> list[tuple]:
    """Passage-window MinHash LSH at ``passage_threshold``; best window pair per (train doc, eval doc)
    (``held``, ``owner``: see ``lsh_pairs``)."""
    train_windows = [(i, s, e) for i, x in enumerate(trains.hashes) for s, e in passage_windows(len(x), cfg)]
    eval_windows = [(j, s, e) for j, x in enumerate(evals.hashes) for s, e in passage_windows(len(x), cfg)]
    best: dict[tuple[int, int], tuple[float, str]] = {}
    pairs = lsh_pairs(trains.hashes, train_windows, evals.hashes, eval_windows, cfg.passage_threshold, cfg, held, owner)
    for a, b, score in pairs:
        (i, start, end), j = train_windows[a], eval_windows[b][0]
        if score > best.get((i, j), (-1.0, ""))[0]:
            best[(i, j)] = (score, " ".join(trains.tokens[i][start:end]))
    return [(i, j, "minhash_passage", score, span) for (i, j), (score, span) in sorted(best.items())]


def passage_windows(n_words: int, cfg: LexicalParams) -> list[tuple[int, int]]:
    """``(start, end)`` word windows covering the text, the last one ending at its end; [] if too short."""
    if n_words < cfg.shingle_words:
        return []
    last = max(n_words - cfg.passage_words, 0)
    starts = list(range(0, last + 1, cfg.passage_stride_words))
    starts += [] if starts[-1] == last else [last]
    return [(s, min(s + cfg.passage_words, n_words)) for s in starts]


def lsh_pairs(
    query_ids, query_windows, index_ids, index_windows, threshold: float, cfg, held=None, owner=None
) -> list[tuple]:
    """``(query window, indexed window, Jaccard)`` for LSH candidates with exact Jaccard >= ``threshold``.

    Windows are ``(doc, start, end)`` word ranges of the ``*_ids`` docs. Bands and rows follow datasketch's
    rule with equal weights (``minhash.lsh_bands_rows``); candidates share at least one band. Only query windows
    that share a shingle with some index window are signed (``held(query_windows)``, the indexes of those windows,
    from a screen already computed (``shingles.screen``), else ``sharing_windows``; ``threshold`` is above 0).
    ``owner`` (per query doc, an index doc): only candidates of a query window and a window of its doc's owner
    are confirmed (``detect``). Raises
    ``ValueError`` naming the keys when datasketch finds no shape (fewer than 2 bands).
    """
    try:
        bands, rows = minhash.lsh_bands_rows(threshold, cfg.num_perm)
    except ValueError as err:
        raise ValueError(
            f"leakage: MinHash threshold {threshold} (leakage.doc_threshold / passage_threshold) with "
            f"leakage.num_perm={cfg.num_perm}: datasketch finds no LSH shape ({err}); a threshold this "
            "high needs more num_perm (0.99: 512)"
        ) from None
    kept = np.asarray(
        held(query_windows)
        if held is not None
        else sharing_windows(query_ids, query_windows, index_ids, index_windows, cfg.shingle_words),
        dtype=np.int64,
    )
    query_windows = [query_windows[w] for w in kept.tolist()]
    perms = minhash.permutations(cfg.num_perm, cfg.minhash_seed)
    query_keys = minhash.band_keys(signatures(query_ids, query_windows, cfg.shingle_words, perms), bands, rows)
    index_keys = minhash.band_keys(signatures(index_ids, index_windows, cfg.shingle_words, perms), bands, rows)
    query, index = minhash.candidate_pair_arrays(query_keys, index_keys)
    if owner is not None:
        query_doc = np.array([doc for doc, _, _ in query_windows], dtype=np.int64)
        index_doc = np.array([doc for doc, _, _ in index_windows], dtype=np.int64)
        wanted = owner[query_doc[query]] == index_doc[index]
        query, index = query[wanted], index[wanted]
    query_rows, query_at = np.unique(query, return_inverse=True)
    index_rows, index_at = np.unique(index, return_inverse=True)
    sets = [window_shingles(query_ids, query_windows[a], cfg.shingle_words) for a in query_rows.tolist()]
    sets += [window_shingles(index_ids, index_windows[b], cfg.shingle_words) for b in index_rows.tolist()]
    scores = pairjaccard.jaccards(sets, query_at, index_at + len(query_rows))  # dedup's exact Jaccard
    keep = scores >= threshold
    return list(zip(kept[query[keep]].tolist(), index[keep].tolist(), scores[keep].tolist()))


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


def window_shingles(ids, window: tuple, k: int) -> np.ndarray:
    """The sorted unique k-gram shingle hashes (64-bit) of a ``(doc, start, end)`` word window of ``ids``."""
    doc, start, end = window
    return np.unique(minhash.rolling_hashes(ids[doc][start:end], k))
