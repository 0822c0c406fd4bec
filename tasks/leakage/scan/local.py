"""One pass over the training docs in this process: every lexical detector and the residual scan.

A ``TrainingScan`` is what the stage reads of that pass, whichever engine made it (this process, forked
processes: ``forked.py``, Ray: ``ray_engine.py``, the per-text cache: ``incremental.py``, all in
``tasks/leakage/scan/``);
they all give the same one, byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tasks.common.matching import minhash
from tasks.config.corpus.leakage import LeakageParams
from tasks.leakage.lexical import residual
from tasks.leakage.lexical.detectors import detect
from tasks.leakage.lexical.words import Side, make_side, tokenize


@dataclass(frozen=True)
class TrainingScan:
    """What one pass over the training docs yields: the detectors' matches ``(train_i, eval_j, method, score,
    span)``, which training rows have words, and the residual scan of the pretraining rows (``residual.Scan``,
    its docs numbered as the pretraining rows of ``train_frame`` in order). ``words``: each row's count of
    whitespace-separated words (``len(text.split())``), given only by the engine whose process holds no training
    text (``engine: ray``: the planted filler reads it, ``outputs.Fetched``); else None."""

    matches: list[tuple]
    has_words: np.ndarray  # (len(train_frame),) bool
    pretrain: residual.Scan
    words: np.ndarray | None = None  # (len(train_frame),) int32


def scan_in_process(train_frame: pd.DataFrame, evals: Side, cfg: LeakageParams) -> TrainingScan:
    """``TrainingScan`` in this process: the lexical detectors (``cfg.lexical``) on every row, the residual scan
    (``cfg.residual.ngram_words``) on the pretraining rows."""
    trains = make_side([tokenize(x) for x in train_frame["text"]], minhash.WordHashes())
    pretrain = np.flatnonzero(train_frame["role"].to_numpy() == "pretrain")
    n = cfg.residual.ngram_words
    hits, whole = residual.scan_docs([trains.tokens[i] for i in pretrain], residual.eval_targets(evals.tokens, n), n)
    scan = residual.Scan(list(train_frame["doc_id"].iloc[pretrain]), hits, whole)
    return TrainingScan(detect(trains, evals, cfg.lexical), np.array([bool(t) for t in trains.tokens], bool), scan)
