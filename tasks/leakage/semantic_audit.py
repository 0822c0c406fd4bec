"""The semantic detector's pass in the leakage stage: threshold on dev, the corpus scan, the review sample.

Order (``audit``): embed the eval docs that are long enough (``semantic.min_words``), the planted copies
of the ``planted_docs`` sampled eval docs (``planted_windows`` windows each, over the eval text) and the task
train docs; choose the threshold on the dev
plants against the known-clean pairs of the calibration half (``semantic.choose_threshold``); embed the
pretraining docs kept after the lexical action and search them; write the review sample from the test plants
and the other half's known-clean pairs. Returns the table rows, which plants it finds, the metrics and the
review records. See ``tasks/leakage/semantic.py`` for the method.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from tasks.config.leakage import LeakageParams
from tasks.leakage import embedding_store, semantic
from tasks.leakage.planted import Plant, clopper_pearson
from tasks.leakage.semantic import METHOD, Encoder, Windows

#: Words of each text kept in review.jsonl and in the leakage table's span.
REVIEW_WORDS = 80


@dataclass(frozen=True)
class SemanticResult:
    """What the pass yields: ``rows`` (records of the leakage table), ``found`` and ``scored`` (per plant: found
    by the detector; scored at all, ``planted_sample``), ``metrics`` and ``review`` (the records of
    review.jsonl)."""

    rows: list[tuple]
    found: np.ndarray
    scored: np.ndarray
    metrics: dict
    review: list[dict]


def audit(cfg: LeakageParams, eval_frame: pd.DataFrame, eval_words: list[list[str]], train_frame: pd.DataFrame,
          removed: set[str], plants: list[Plant], log, encoder: Encoder | None = None,
          store: Path | None = None) -> SemanticResult:
    """The semantic pass (see the module docstring); ``encoder`` defaults to ``Encoder(cfg.semantic, ...)``.
    ``store``: the folder of the kept window vectors (``embedding_store``), read first and written back."""
    scfg = cfg.semantic
    clock = {"start": time.perf_counter()}
    enc = encoder or Encoder(scfg, cfg.hardware)
    kept = open_store(enc, store, cfg.incremental, log) if store is not None else None
    n_words = np.array([len(w) for w in eval_words])
    attempted = n_words >= scfg.min_words
    texts = [str(t) if a else "" for t, a in zip(eval_frame["text"], attempted)]
    evals = enc.windows(texts)
    log.info(f"leakage semantic: {int(attempted.sum())} of {len(texts)} eval docs embedded ({len(evals.doc)} windows)")

    sampled = np.zeros(len(texts), dtype=bool)
    sampled[planted_sample(list(eval_frame["doc_id"]), cfg)] = True
    scored = np.array([bool(sampled[p.eval_index]) for p in plants], dtype=bool)
    plant_texts = [p.text if scored[k] and attempted[p.eval_index] else "" for k, p in enumerate(plants)]
    spans = [_normalized_span(p) for p in plants]
    planted = enc.windows(plant_texts, spans=spans, max_windows=scfg.planted_windows)
    plant_score = semantic.plant_scores(planted, [p.eval_index for p in plants], evals)
    clock["plants"] = time.perf_counter()

    task_train = train_frame[(train_frame["role"] == "task") & ~train_frame["is_duplicate"].astype(bool)]
    task_train = task_train.reset_index(drop=True)
    from tasks.leakage import tokenize  # the detectors' words (folded)

    train_long = [len(tokenize(str(t))) >= scfg.min_words for t in task_train["text"]]
    train_windows = enc.windows([str(t) if ok else "" for t, ok in zip(task_train["text"], train_long)])
    labels = task_train["label"] if "label" in task_train else pd.Series([None] * len(task_train))
    groups = [f"{s}/{'' if pd.isna(y) else y}" for s, y in zip(task_train["source"], labels)]
    clusters = list(task_train["cluster_id"]) if "cluster_id" in task_train else list(task_train["doc_id"])
    clean_score, partner = semantic.clean_pair_scores(train_windows, groups, clusters)
    calibration = semantic.half(list(task_train["doc_id"]), f"{cfg.planted.seed}:clean")
    valid = partner >= 0
    splits = eval_frame["split"].to_numpy()
    plant_split = np.array([splits[p.eval_index] for p in plants], dtype=object)
    plant_on = scored & np.array([attempted[p.eval_index] for p in plants], dtype=bool)
    dev_plants = plant_on & (plant_split == "dev")
    choice = semantic.choose_threshold(plant_score[dev_plants], clean_score[calibration & valid], scfg.min_precision)
    threshold = choice["threshold"]
    clock["threshold"] = time.perf_counter()
    log.info(f"leakage semantic: threshold {threshold} ({choice['rule']}; dev recall {choice['dev_recall']}, "
             f"dev false flag rate {choice['dev_false_flag_rate']})")

    corpus = train_frame[(train_frame["role"] == "pretrain") & ~train_frame["doc_id"].isin(list(removed))]
    corpus = corpus.reset_index(drop=True)
    corpus_windows = enc.windows([str(t) for t in corpus["text"]])
    pairs, best = semantic.pair_scores(evals, corpus_windows, threshold, scfg)
    clock["corpus"] = time.perf_counter()
    rows = []
    for (c, e), (score, cw, _) in sorted(pairs.items()):
        ev = eval_frame.iloc[e]
        rows.append((corpus["doc_id"].iloc[c], ev["doc_id"], METHOD, round(score, 6),
                     corpus_windows.text_of(cw, cfg.max_span_words), corpus["source"].iloc[c], ev["source"],
                     ev["split"], "pretrain"))
    found = plant_on & (plant_score >= threshold)

    review, review_metrics = review_sample(cfg, threshold, plants, plant_score, plant_on & (plant_split == "test"),
                                           planted, evals, eval_frame, task_train, train_windows, clean_score,
                                           partner, ~calibration & valid, pairs, corpus, corpus_windows)
    flagged_docs = sorted({e for (_, e) in pairs})
    sets = list(eval_frame["source"] + "/" + eval_frame["split"])
    by_set = {}
    for name in sorted(set(sets)):
        members = [j for j, s in enumerate(sets) if s == name]
        flagged = [j for j in members if j in set(flagged_docs)]
        by_set[name] = {"docs": len(members), "attempted": int(attempted[members].sum()), "flagged": len(flagged),
                        "rate": round(len(flagged) / len(members), 6) if members else None,
                        "flagged_docs": sorted(eval_frame["doc_id"].iloc[flagged])}
    end = time.perf_counter()
    metrics = {
        **enc.describe(),
        "window_tokens": scfg.window_tokens, "stride_tokens": scfg.stride_tokens, "min_words": scfg.min_words,
        "action": scfg.action,
        **{f"threshold_{k}" if k not in ("threshold",) else k: v for k, v in choice.items()},
        "eval_docs": len(texts),
        "eval_docs_attempted": int(attempted.sum()),
        "eval_docs_not_attempted": {"no_words": int((n_words == 0).sum()),
                                    "under_min_words": int(((n_words > 0) & ~attempted).sum())},
        "eval_docs_windowed": int(sum(len(evals.of_doc(d)) > 1 for d in range(len(texts)))),
        "eval_windows": int(len(evals.doc)), "max_windows_per_eval_doc": int(np.bincount(evals.doc).max())
        if len(evals.doc) else 0,
        "eval_docs_flagged": len(flagged_docs),
        "pairs_flagged": len(pairs),
        "by_eval_set": by_set,
        "best_score_quantiles": _quantiles(best[attempted]),
        "corpus": {"docs": len(corpus), "windows": int(len(corpus_windows.doc)),
                   "search": "exact" if len(corpus_windows.doc) <= scfg.exact_max_windows else "faiss_hnsw"},
        "review": review_metrics,
        **{k: v for k, v in enc.stats.items() if k != "embed_seconds"},
    }
    # timings go to the MLflow run only: metrics/leakage.json is a DVC output that must repeat byte for byte
    log.metrics({"semantic_seconds_eval_and_plants": clock["plants"] - clock["start"],
                 "semantic_seconds_train_and_threshold": clock["threshold"] - clock["plants"],
                 "semantic_seconds_corpus": clock["corpus"] - clock["threshold"],
                 "semantic_seconds_total": end - clock["start"], "semantic_embed_seconds": enc.stats["embed_seconds"]})
    metrics["planted_docs_scored"] = int(sampled.sum())
    if kept is not None:
        close_store(enc, store, kept, cfg.incremental, log)
    return SemanticResult(rows, found, scored, metrics, review)


def open_store(enc: Encoder, folder: Path, incremental: bool, log) -> dict:
    """Load the kept vectors into ``enc.stored``; returns the fingerprint they were checked against."""
    key = embedding_store.fingerprint(enc)
    enc.stored, reason = embedding_store.load(folder, key, incremental, enc.model.config.hidden_size)
    mode = "stored" if enc.stored else "none"
    log.info(f"leakage semantic: {len(enc.stored)} window vectors kept from the last run ({reason})")
    log.tags({"leakage.semantic_store": mode, "leakage.semantic_store_reason": reason})
    return key


def close_store(enc: Encoder, folder: Path, key: dict, incremental: bool, log) -> None:
    """Write this run's window vectors back (none when ``incremental`` is false) and log the store's share."""
    embedding_store.save(folder, enc.cache if incremental else {}, key)
    log.info(f"leakage semantic: {enc.store_stats['windows_stored']} windows from the store, "
             f"{enc.store_stats['windows_computed']} embedded")
    log.metrics({"semantic_store": dict(enc.store_stats)})


def planted_sample(eval_ids: list[str], cfg: LeakageParams) -> list[int]:
    """The eval rows whose planted copies the semantic detector scores: the first ``semantic.planted_docs`` by
    the planting seed's hash rank (all when null)."""
    ranked = sorted(range(len(eval_ids)),
                    key=lambda k: hashlib.sha256(f"{cfg.planted.seed}:semantic:{eval_ids[k]}".encode()).hexdigest())
    return ranked if cfg.semantic.planted_docs is None else ranked[: cfg.semantic.planted_docs]


def _normalized_span(plant: Plant) -> tuple[int, int]:
    """``plant.span`` mapped onto its normalised text (lengths of the normalised prefixes)."""
    a, b = plant.span
    if b < 0:
        return (0, -1)
    return (len(semantic.normalize_text(plant.text[:a])), len(semantic.normalize_text(plant.text[:b])))


def _quantiles(x: np.ndarray) -> dict:
    if len(x) == 0:
        return {}
    return {f"p{q}": round(float(np.quantile(x, q / 100)), 4) for q in (50, 90, 99, 100)}


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


def review_sample(cfg, threshold, plants, plant_score, test_plants, planted, evals, eval_frame, task_train,
                  train_windows, clean_score, partner, review_half, pairs, corpus, corpus_windows):
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
        records.append({"label": "planted", "score": round(score, 6), "flagged": bool(score >= threshold),
                        "variant": plants[p].variant, "doc": eval_ids[plants[p].eval_index],
                        "other_doc": f"planted:{plants[p].variant}", "text": evals.text_of(ew, words),
                        "other_text": planted.text_of(pw, words)})
    anchors = np.flatnonzero(review_half)
    train_ids = list(task_train["doc_id"])
    for k in _rank([train_ids[a] for a in anchors], f"{cfg.planted.seed}:review-clean")[: scfg.review_per_label]:
        a = int(anchors[k])
        score, wa, wb = best_pair(train_windows, a, train_windows, int(partner[a]))
        records.append({"label": "known_clean", "score": round(score, 6), "flagged": bool(score >= threshold),
                        "variant": None, "doc": train_ids[a], "other_doc": train_ids[int(partner[a])],
                        "text": train_windows.text_of(wa, words), "other_text": train_windows.text_of(wb, words)})
    labelled = list(records)
    top = sorted(pairs.items(), key=lambda item: (-item[1][0], item[0]))[: scfg.review_flags]
    for (c, e), (score, cw, ew) in top:
        records.append({"label": None, "score": round(score, 6), "flagged": True, "variant": None,
                        "doc": eval_ids[e], "other_doc": corpus["doc_id"].iloc[c], "text": evals.text_of(ew, words),
                        "other_text": corpus_windows.text_of(cw, words)})
    flagged = [r for r in labelled if r["flagged"]]
    true = sum(r["label"] == "planted" for r in flagged)
    low, high = clopper_pearson(true, len(flagged))
    planted_n = sum(r["label"] == "planted" for r in labelled)
    metrics = {"file": "review.jsonl", "planted": planted_n, "known_clean": len(labelled) - planted_n,
               "flagged": len(flagged), "flagged_planted": true, "flagged_known_clean": len(flagged) - true,
               "precision": round(true / len(flagged), 6) if flagged else None, "precision_ci_low": low,
               "precision_ci_high": high, "false_discovery_rate": round(1 - true / len(flagged), 6) if flagged
               else None, "recall": round(true / planted_n, 6) if planted_n else None,
               "unlabelled_real_flags": len(records) - len(labelled)}
    return records, metrics
