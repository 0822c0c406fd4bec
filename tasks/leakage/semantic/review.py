"""The semantic detector's review sample, written to review.jsonl: planted test copies and known-clean pairs, each
with its score and whether it is flagged, then the highest-scoring real flags; its precision with a
Clopper-Pearson interval.
"""

from __future__ import annotations

import hashlib

import numpy as np

from tasks.common.stats import clopper_pearson
from tasks.leakage.semantic.windows import Windows

#: Words of each text kept in review.jsonl and in the leakage table's span.
REVIEW_WORDS = 80


def best_pair(a: Windows, da: int, b: Windows, db: int) -> tuple[float, int, int]:
    """``(score, window of a, window of b)`` of the best-scoring window pair of docs ``da`` and ``db``."""
    wa, wb = a.of_doc(da), b.of_doc(db)
    if len(wa) == 0 or len(wb) == 0:
        return -1.0, -1, -1
    scores = a.vectors[wa] @ b.vectors[wb].T
    r, c = np.unravel_index(int(scores.argmax()), scores.shape)
    return float(scores[r, c]), int(wa[r]), int(wb[c])


def _rank(keys: list[str], salt: str) -> list[int]:
    return sorted(range(len(keys)), key=lambda k: hashlib.sha256(f"{salt}:{keys[k]}".encode()).hexdigest())


def review_sample(
    cfg,
    threshold,
    plants,
    plant_score,
    test_plants,
    planted,
    evals,
    eval_frame,
    task_train,
    train_windows,
    clean_score,
    partner,
    review_half,
    pairs,
    corpus,
    corpus_windows,
):
    """The review records and their metrics: ``review_per_label`` planted test copies (label ``planted``) and
    known-clean pairs of the review half (label ``known_clean``), each with its score and whether it is
    flagged, then the ``review_flags`` highest-scoring real flags (label ``null``). Precision = planted among
    the flagged labelled records, with its Clopper-Pearson interval."""
    scfg, words = cfg.semantic, REVIEW_WORDS
    eval_ids = list(eval_frame["doc_id"])
    candidates = np.flatnonzero(test_plants)
    keys = [f"{eval_ids[plants[p].eval_index]}:{plants[p].variant}" for p in candidates]
    records = []
    for k in _rank(keys, f"{cfg.planted.seed}:review")[: scfg.review_per_label]:
        p = int(candidates[k])
        score, pw, ew = best_pair(planted, p, evals, plants[p].eval_index)
        records.append(
            {
                "label": "planted",
                "score": round(score, 6),
                "flagged": bool(score >= threshold),
                "variant": plants[p].variant,
                "doc": eval_ids[plants[p].eval_index],
                "other_doc": f"planted:{plants[p].variant}",
                "text": evals.text_of(ew, words),
                "other_text": planted.text_of(pw, words),
            }
        )
    anchors = np.flatnonzero(review_half)
    train_ids = list(task_train["doc_id"])
    for k in _rank([train_ids[a] for a in anchors], f"{cfg.planted.seed}:review-clean")[: scfg.review_per_label]:
        a = int(anchors[k])
        score, wa, wb = best_pair(train_windows, a, train_windows, int(partner[a]))
        records.append(
            {
                "label": "known_clean",
                "score": round(score, 6),
                "flagged": bool(score >= threshold),
                "variant": None,
                "doc": train_ids[a],
                "other_doc": train_ids[int(partner[a])],
                "text": train_windows.text_of(wa, words),
                "other_text": train_windows.text_of(wb, words),
            }
        )
    labelled = list(records)
    top = sorted(pairs.items(), key=lambda item: (-item[1][0], item[0]))[: scfg.review_flags]
    for (c, e), (score, cw, ew) in top:
        records.append(
            {
                "label": None,
                "score": round(score, 6),
                "flagged": True,
                "variant": None,
                "doc": eval_ids[e],
                "other_doc": corpus["doc_id"].iloc[c],
                "text": evals.text_of(ew, words),
                "other_text": corpus_windows.text_of(cw, words),
            }
        )
    flagged = [r for r in labelled if r["flagged"]]
    true = sum(r["label"] == "planted" for r in flagged)
    low, high = clopper_pearson(true, len(flagged))
    planted_n = sum(r["label"] == "planted" for r in labelled)
    metrics = {
        "file": "review.jsonl",
        "planted": planted_n,
        "known_clean": len(labelled) - planted_n,
        "flagged": len(flagged),
        "flagged_planted": true,
        "flagged_known_clean": len(flagged) - true,
        "precision": round(true / len(flagged), 6) if flagged else None,
        "precision_ci_low": low,
        "precision_ci_high": high,
        "false_discovery_rate": round(1 - true / len(flagged), 6) if flagged else None,
        "recall": round(true / planted_n, 6) if planted_n else None,
        "unlabelled_real_flags": len(records) - len(labelled),
    }
    return records, metrics
