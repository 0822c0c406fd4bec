"""The semantic detector's pass in the leakage stage: threshold on dev, the corpus scan, the review sample.

Order (``audit``): embed, in one go (``Encoder.prefetch``), the eval docs that are long enough
(``semantic.min_words``), the planted copies of the ``planted_docs`` sampled eval docs (``planted_windows``
windows each, over the eval text), the task train docs and the pretraining docs kept after the lexical action;
choose the threshold on the dev plants against the known-clean pairs of the calibration half
(``method.choose_threshold``); search the pretraining docs; write the review sample from the test plants and
the other half's known-clean pairs. Returns the table rows, which plants it finds, the metrics and the
review records. See ``tasks/leakage/semantic/method.py`` for the method.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from tasks.config.corpus.leakage import LeakageParams
from tasks.leakage.outputs import SplitShards
from tasks.leakage.planted.variants import Plant
from tasks.leakage.semantic import method, store
from tasks.leakage.semantic.cluster.ray_engine import RayEncoder
from tasks.leakage.semantic.encoder import Encoder
from tasks.leakage.semantic.method import METHOD
from tasks.leakage.semantic.review import review_sample
from tasks.leakage.semantic.texts import Texts, texts_to_embed
from tasks.leakage.semantic.windows import Windows


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


def audit(
    cfg: LeakageParams,
    eval_frame: pd.DataFrame,
    eval_words: list[list[str]],
    train_frame: pd.DataFrame,
    removed: set[str],
    plants: list[Plant],
    log,
    encoder: Encoder | None = None,
    store_folder: Path | None = None,
    shards: SplitShards | None = None,
) -> SemanticResult:
    """The semantic pass (see the module docstring); ``encoder`` defaults to ``Encoder(cfg.semantic, ...)``, with
    ``engine: ray`` to a ``RayEncoder`` (its windows embedded by a Ray actor pool, its corpus search one Ray task a
    shard: ``tasks/leakage/semantic/cluster/ray_engine.py``).
    ``store_folder``: the folder of the kept window vectors (``store``), read first and written back.
    ``shards``: where the texts of a ``train_frame`` without them are read (``texts.texts_to_embed``)."""
    clock = {"start": time.perf_counter()}
    ray = cfg.engine == "ray"
    enc = encoder or (RayEncoder(cfg.semantic, cfg.hardware, cfg.ray) if ray else Encoder(cfg.semantic, cfg.hardware))
    kept = open_store(enc, store_folder, cfg.incremental, log) if store_folder is not None else None
    texts = texts_to_embed(cfg, eval_frame, eval_words, train_frame, removed, plants, shards)
    layouts = [
        enc.layout(texts.evals),
        enc.layout(texts.plants, texts.plant_spans, cfg.semantic.planted_windows),
        enc.layout(texts.train),
        enc.layout_searched(texts.corpus),
    ]
    enc.prefetch(layouts[:3], searched=layouts[3])
    side = embed_evals_and_plants(enc, cfg, texts, eval_frame, plants, layouts[:2], log)
    clock["plants"] = time.perf_counter()
    cal = calibrate(enc, cfg, texts, side, layouts[2], log)
    clock["threshold"] = time.perf_counter()
    scan = scan_corpus(enc, cfg, texts, layouts[3], eval_frame, side.evals, cal.threshold)
    clock["corpus"] = time.perf_counter()
    review, review_metrics = review_sample(
        cfg,
        cal.threshold,
        plants,
        side.plant_score,
        side.plant_on & (side.plant_split == "test"),
        side.planted,
        side.evals,
        eval_frame,
        cal.task_train,
        cal.train_windows,
        cal.clean_score,
        cal.partner,
        ~cal.calibration & cal.valid,
        scan.pairs,
        scan.corpus,
        scan.corpus_windows,
    )
    clock["end"] = time.perf_counter()
    metrics = semantic_metrics(enc, cfg, texts, side.evals, cal.choice, scan, eval_frame, review_metrics)
    # timings go to the MLflow run only: metrics/leakage.json is a DVC output that must repeat byte for byte
    log.metrics(
        {
            "semantic_seconds_eval_and_plants": clock["plants"] - clock["start"],
            "semantic_seconds_train_and_threshold": clock["threshold"] - clock["plants"],
            "semantic_seconds_corpus": clock["corpus"] - clock["threshold"],
            "semantic_seconds_total": clock["end"] - clock["start"],
            "semantic_embed_seconds": enc.stats["embed_seconds"],
        }
    )
    if kept is not None:
        close_store(enc, store_folder, kept, cfg.incremental, log)
    found = side.plant_on & (side.plant_score >= cal.threshold)
    return SemanticResult(scan.rows, found, texts.scored, metrics, review)


@dataclass
class EvalSide:
    """The eval docs' windows and the planted copies' scores; arrays are per plant (``plant_on``: scored and
    its eval doc attempted (``Texts``), ``plant_split``, ``plant_score``: best cosine to its own eval doc)."""

    evals: Windows
    plant_on: np.ndarray
    plant_split: np.ndarray
    planted: Windows
    plant_score: np.ndarray


def embed_evals_and_plants(
    enc: Encoder, cfg: LeakageParams, texts: Texts, eval_frame: pd.DataFrame, plants: list[Plant], layouts: list, log
) -> EvalSide:
    """The windows of the eval docs of at least ``semantic.min_words`` words and of the planted copies of the
    sampled ones (``layouts``: theirs; ``planted_windows`` windows each, over the copied span), and each
    copy's score against its eval doc."""
    attempted, scored = texts.attempted, texts.scored
    evals, planted = enc.embedded(layouts[0]), enc.embedded(layouts[1])
    log.info(
        f"leakage semantic: {int(attempted.sum())} of {len(texts.evals)} eval docs embedded ({len(evals.doc)} windows)"
    )
    splits = eval_frame["split"].to_numpy()
    return EvalSide(
        evals,
        plant_on=scored & np.array([attempted[p.eval_index] for p in plants], dtype=bool),
        plant_split=np.array([splits[p.eval_index] for p in plants], dtype=object),
        planted=planted,
        plant_score=method.plant_scores(planted, [p.eval_index for p in plants], evals),
    )


@dataclass
class Calibration:
    """The task train docs' windows, their known-clean partners (``partner[i]``, -1 for none; ``valid``), the
    calibration half (``calibration``) and the threshold chosen on it against the dev plants (``choice``)."""

    task_train: pd.DataFrame
    train_windows: Windows
    clean_score: np.ndarray
    partner: np.ndarray
    calibration: np.ndarray
    valid: np.ndarray
    choice: dict

    @property
    def threshold(self) -> float:
        return self.choice["threshold"]


def calibrate(enc: Encoder, cfg: LeakageParams, texts: Texts, side: EvalSide, layout, log) -> Calibration:
    """The kept task train docs' windows (``layout``: theirs), each doc paired with its nearest same-class doc
    of another cluster (known clean), and the threshold chosen on the dev plants against the calibration half's
    clean pairs (``method.choose_threshold``)."""
    scfg, task_train = cfg.semantic, texts.task_train
    train_windows = enc.embedded(layout)
    labels = task_train["label"] if "label" in task_train else pd.Series([None] * len(task_train))
    groups = [f"{s}/{'' if pd.isna(y) else y}" for s, y in zip(task_train["source"], labels)]
    ids = list(task_train["doc_id"])  # a doc without a dedup cluster is its own (a null is no shared cluster)
    clusters = [d if pd.isna(c) else c for c, d in zip(task_train.get("cluster_id", ids), ids)]
    clean_score, partner = method.clean_pair_scores(train_windows, groups, clusters)
    calibration = method.half(list(task_train["doc_id"]), f"{cfg.planted.seed}:clean")
    valid = partner >= 0
    dev_plants = side.plant_on & (side.plant_split == "dev")
    choice = method.choose_threshold(side.plant_score[dev_plants], clean_score[calibration & valid], scfg.min_precision)
    log.info(
        f"leakage semantic: threshold {choice['threshold']} ({choice['rule']}; dev recall "
        f"{choice['dev_recall']}, dev false flag rate {choice['dev_false_flag_rate']})"
    )
    return Calibration(task_train, train_windows, clean_score, partner, calibration, valid, choice)


@dataclass
class CorpusScan:
    """The pretraining docs kept after the lexical action, their windows, the flagged (corpus doc, eval doc)
    pairs (``pairs``: ``(c, e) -> (score, corpus window, eval window)``), each eval doc's best score and the
    leakage table's rows."""

    corpus: pd.DataFrame
    corpus_windows: Windows
    pairs: dict
    best: np.ndarray
    rows: list[tuple]


def scan_corpus(
    enc: Encoder, cfg: LeakageParams, texts: Texts, layout, eval_frame: pd.DataFrame, evals: Windows, threshold: float
) -> CorpusScan:
    """The kept pretraining docs' windows (``layout``: theirs), searched for every eval window at
    ``threshold``; the texts of the flagged docs are held (``Texts.corpus``), for the table's and the review's
    matched spans."""
    corpus = texts.corpus_frame
    corpus_windows = enc.embedded(layout)
    pairs, best = method.pair_scores(evals, corpus_windows, threshold, cfg.semantic, enc.search)
    texts.corpus.hold(sorted({c for c, _ in pairs}))  # the flagged docs' texts, for their matched spans
    rows = []
    for (c, e), (score, cw, _) in sorted(pairs.items()):
        ev = eval_frame.iloc[e]
        rows.append(
            (
                corpus["doc_id"].iloc[c],
                ev["doc_id"],
                METHOD,
                round(score, 6),
                corpus_windows.text_of(cw, cfg.max_span_words),
                corpus["source"].iloc[c],
                ev["source"],
                ev["split"],
                "pretrain",
            )
        )
    return CorpusScan(corpus, corpus_windows, pairs, best, rows)


def by_eval_set(eval_frame: pd.DataFrame, attempted: np.ndarray, flagged_rows: set[int]) -> dict[str, dict]:
    """Per eval set (``<source>/<split>``): docs, attempted, flagged, rate and the flagged doc ids."""
    sets = list(eval_frame["source"] + "/" + eval_frame["split"])
    out = {}
    for name in sorted(set(sets)):
        members = [j for j, s in enumerate(sets) if s == name]
        flagged = [j for j in members if j in flagged_rows]
        out[name] = {
            "docs": len(members),
            "attempted": int(attempted[members].sum()),
            "flagged": len(flagged),
            "rate": round(len(flagged) / len(members), 6) if members else None,
            "flagged_docs": sorted(eval_frame["doc_id"].iloc[flagged]),
        }
    return out


def semantic_metrics(
    enc: Encoder,
    cfg: LeakageParams,
    texts: Texts,
    evals: Windows,
    choice: dict,
    scan: CorpusScan,
    eval_frame: pd.DataFrame,
    review_metrics: dict,
) -> dict:
    """``metrics["semantic"]`` of the stage: the encoder, the threshold choice, the eval docs embedded
    (``evals``: their windows) and flagged (overall and per eval set), the corpus searched and the review
    sample."""
    scfg = cfg.semantic
    flagged_rows = {e for (_, e) in scan.pairs}
    return {
        **enc.describe(),
        "window_tokens": scfg.window_tokens,
        "stride_tokens": scfg.stride_tokens,
        "min_words": scfg.min_words,
        "action": scfg.action,
        **{f"threshold_{k}" if k != "threshold" else k: v for k, v in choice.items()},
        "eval_docs": len(texts.evals),
        "eval_docs_attempted": int(texts.attempted.sum()),
        "eval_docs_not_attempted": {
            "no_words": int((texts.n_words == 0).sum()),
            "under_min_words": int(((texts.n_words > 0) & ~texts.attempted).sum()),
        },
        "eval_docs_windowed": int(sum(len(evals.of_doc(d)) > 1 for d in range(len(texts.evals)))),
        "eval_windows": int(len(evals.doc)),
        "max_windows_per_eval_doc": int(np.bincount(evals.doc).max()) if len(evals.doc) else 0,
        "eval_docs_flagged": len(flagged_rows),
        "pairs_flagged": len(scan.pairs),
        "by_eval_set": by_eval_set(eval_frame, texts.attempted, flagged_rows),
        "best_score_quantiles": _quantiles(scan.best[texts.attempted]),
        "corpus": {
            "docs": len(scan.corpus),
            "windows": int(len(scan.corpus_windows.doc)),
            "search": "exact" if len(scan.corpus_windows.doc) <= scfg.exact_max_windows else "faiss_hnsw",
        },
        "review": review_metrics,
        **{k: v for k, v in enc.stats.items() if k != "embed_seconds"},
        "planted_docs_scored": int(texts.sampled.sum()),
    }


def open_store(enc: Encoder, folder: Path, incremental: bool, log) -> dict:
    """Load the kept vectors into ``enc.stored`` (``Encoder.load_store``; the Ray engine's: their keys); returns
    the fingerprint they were checked against."""
    key = enc.fingerprint()
    reason = enc.load_store(folder, key, incremental)
    enc.layouts = store.load_layouts(folder, store.layouts_key(key, enc.cfg), enc.cfg) if enc.stored else {}
    mode = "stored" if enc.stored else "none"
    log.info(
        f"leakage semantic: {len(enc.stored)} window vectors and {len(enc.layouts)} text layouts kept from the "
        f"last run ({reason})"
    )
    log.tags({"leakage.semantic_store": mode, "leakage.semantic_store_reason": reason})
    return key


def close_store(enc: Encoder, folder: Path, key: dict, incremental: bool, log) -> None:
    """Write this run's window vectors and text layouts back (none when ``incremental`` is false) and log the
    store's share."""
    enc.save_store(folder, key, incremental)
    log.info(
        f"leakage semantic: {enc.store_stats['windows_stored']} windows from the store, "
        f"{enc.store_stats['windows_computed']} embedded"
    )
    log.metrics({"semantic_store": dict(enc.store_stats)})


def _quantiles(x: np.ndarray) -> dict:
    if len(x) == 0:
        return {}
    return {f"p{q}": round(float(np.quantile(x, q / 100)), 4) for q in (50, 90, 99, 100)}
