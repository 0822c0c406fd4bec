"""The substitution-tolerant n-gram detector: word n-grams that match with some positions substituted.

The 13-gram detector needs 13 equal words in a row. A copy with every third content word swapped for another
word (a synonym, a spelling variant, a "spun" text) keeps the words in place but leaves no 13-gram, and on a
tweet of 15 words the sentence encoder moves by as much as between two tweets on the same topic. Here an eval
window of ``n = min(window_words, len)`` words matches a training window of the same length at the same
alignment when at most ``k = floor(n * max_substituted_share)`` of its positions hold a different word: the
Hamming distance of two word n-grams (the "approximate n-gram" of near-duplicate search; no lexical
resource, and no knowledge of which word replaced which). Insertions and deletions shift the alignment and are
left to the other detectors (MinHash, semantic).

**Search.** By the pigeonhole principle a window with at most k substitutions holds an exactly equal run of
``b = n // (k + 1)`` words (one of its k + 1 disjoint blocks). Every b-gram of every eval doc (its word
hashes, ``minhash.rolling_hashes``) is a seed; the training docs are scanned in blocks of whole docs
(``blocks.block_words``, as the 13-gram scan), every training b-gram equal to a seed is a candidate
alignment, and each candidate is verified word by word (64-bit word hashes) on every window of n words that
contains the seed and lies inside both docs. A hash collision of seeds can only add a candidate that then
fails; it cannot create a match.

Score = the best window's share of equal words, ``(n - substituted) / n``; span = the training words of that
window. Eval docs under ``min_match_words`` words are left to the whole-doc check (``exact``).
"""

from __future__ import annotations

import numpy as np

from tasks.common.matching import minhash
from tasks.config.corpus.leakage import LexicalParams
from tasks.leakage.lexical import blocks
from tasks.leakage.lexical.shingles import filter_table, key_hits

METHOD = "ngram_substituted"
#: candidate alignments verified at once (each costs about 2n gathered words of both sides)
CHUNK = 1 << 17


def window_rule(length: int, cfg: LexicalParams) -> tuple[int, int, int]:
    """``(n, k, b)`` for an eval doc of ``length`` words: window, substitutions allowed, seed length."""
    n = min(cfg.substitution.window_words, length)
    k = int(np.floor(n * cfg.substitution.max_substituted_share + 1e-9))
    return n, k, n // (k + 1)


def substitution_matches(trains, evals, cfg: LexicalParams, owner=None) -> list[tuple]:
    """``(train_i, eval_j, METHOD, score, span)`` per matching pair (best window), sorted by pair.

    ``trains`` / ``evals``: ``words.Side``. Memory per block is set by ``worker_memory_mib`` as in the
    13-gram scan; verification runs in chunks of ``CHUNK`` candidates. ``owner`` (per training doc, an eval
    doc): only its candidates with that eval doc are verified (``detectors.detect``)."""
    index = _seed_index(evals.hashes, cfg)
    if not index:
        return []
    eval_all, _, _ = blocks.concatenate(evals.hashes)
    eval_offset = np.cumsum([0] + [len(x) for x in evals.hashes])[:-1]
    eval_len = np.array([len(x) for x in evals.hashes], dtype=np.int64)
    lengths = np.array([len(x) for x in trains.hashes], dtype=np.int64)
    best: dict[tuple[int, int], tuple[float, int, int]] = {}
    for first, stop in blocks.blocks_of_docs(lengths, blocks.block_words(cfg)):
        flat, doc, pos = blocks.concatenate(trains.hashes[first:stop])
        for (n, k, b), seeds in index.items():
            t, j, q = key_hits(minhash.rolling_hashes(flat, b), b, pos, doc, lengths[first:stop], *seeds)
            if owner is not None:
                wanted = owner[doc[t] + first] == j
                t, j, q = t[wanted], j[wanted], q[wanted]
            for c in range(0, len(t), CHUNK):
                sl = slice(c, c + CHUNK)
                for ti, ej, matched, at in _verify(
                    flat, doc, pos, lengths[first:stop], t[sl], j[sl], q[sl], n, k, b, eval_all, eval_offset, eval_len
                ):
                    key, score = (int(ti) + first, int(ej)), matched / n
                    if score > best.get(key, (-1.0,))[0]:
                        best[key] = (score, int(at), n)
    out = []
    for (i, j), (score, at, n) in sorted(best.items()):
        span = " ".join(trains.tokens[i][at : at + min(n, cfg.max_span_words)])
        out.append((i, j, METHOD, score, span))
    return out


def _seed_index(eval_hashes: list[np.ndarray], cfg: LexicalParams) -> dict[tuple, tuple]:
    """``{(n, k, b): (unique seed hashes, group, eval doc, start, filter)}``: every b-gram of every eval doc of at
    least ``min_match_words`` words, grouped by its doc's window rule; the seeds of unique hash ``u`` are rows
    ``group[u]:group[u + 1]`` of ``eval doc`` and ``start``; ``filter`` is the 13-gram index's table of the
    hashes' top bits (``shingles.filter_table``), which drops nearly every training b-gram that is no seed
    before the binary search (at 16x the default corpus, most of this detector's time)."""
    parts: dict[tuple, list] = {}
    for j, ids in enumerate(eval_hashes):
        if len(ids) < cfg.min_match_words:
            continue
        rule = window_rule(len(ids), cfg)
        h = minhash.rolling_hashes(ids, rule[2])
        parts.setdefault(rule, []).append((h, np.full(len(h), j, dtype=np.int64), np.arange(len(h))))
    index = {}
    for rule in sorted(parts):
        keys, docs, starts = (np.concatenate(col) for col in zip(*parts[rule]))
        order = np.argsort(keys, kind="stable")
        keys, docs, starts = keys[order], docs[order], starts[order]
        first = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
        index[rule] = (keys[first], np.append(first, len(keys)), docs, starts, filter_table(keys))
    return index


def _verify(flat, doc, pos, doc_len, t, j, q, n, k, b, eval_all, eval_offset, eval_len):
    """Per candidate (training flat position ``t`` aligned with eval doc ``j`` at ``q``), the best window of n
    words containing the seed ``[q, q + b)`` inside both docs; yields ``(train doc, eval doc, equal words,
    training start)`` of those with at least ``n - k`` equal words."""
    if len(t) == 0:
        return
    rel = np.arange(b - n, n)  # offsets from the seed start that some window containing the seed covers
    p, length = pos[t], doc_len[doc[t]]
    train_at, eval_at = p[:, None] + rel, q[:, None] + rel
    inside = (train_at >= 0) & (train_at < length[:, None]) & (eval_at >= 0) & (eval_at < eval_len[j][:, None])
    a = flat[np.clip(t[:, None] + rel, 0, len(flat) - 1)]
    e = eval_all[np.clip(eval_offset[j][:, None] + eval_at, 0, len(eval_all) - 1)]
    equal = np.cumsum(np.c_[np.zeros(len(t), np.int64), (a == e) & inside], axis=1)
    valid = np.cumsum(np.c_[np.zeros(len(t), np.int64), inside], axis=1)
    width = n - b + 1  # window starts b - n .. 0 relative to the seed
    counts = equal[:, n : n + width] - equal[:, :width]
    whole = (valid[:, n : n + width] - valid[:, :width]) == n
    counts = np.where(whole, counts, -1)
    best = counts.argmax(axis=1)
    matched = counts[np.arange(len(t)), best]
    ok = np.flatnonzero(matched >= n - k)
    start = p[ok] + best[ok] + (b - n)
    yield from zip(doc[t[ok]].tolist(), j[ok].tolist(), matched[ok].tolist(), start.tolist())
