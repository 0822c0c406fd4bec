"""What the semantic pass embeds, all known before the first window is: the eval docs long enough, the planted
copies of the sampled eval docs (over their normalised span), the kept task train docs and the pretraining docs
kept after the lexical action.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tasks.config.corpus.leakage import LeakageParams
from tasks.leakage.lexical.words import tokenize
from tasks.leakage.outputs import Picked, SplitShards, task_train_rows
from tasks.leakage.planted.variants import Plant
from tasks.leakage.semantic.cluster.corpus_layout import SplitCorpus
from tasks.leakage.semantic.windows import normalize_text


@dataclass
class Texts:
    """What the pass embeds, in order: the eval docs long enough (``evals``, "" for the others; ``n_words``,
    ``attempted``), the planted copies of the sampled docs (``plants``, "" for the others, and ``plant_spans``;
    ``sampled`` per eval doc, ``scored`` per plant), the kept task train docs (``task_train``, and ``train``:
    "" for the short ones) and the pretraining docs kept after the lexical action (``corpus_frame``, their rows
    without ``text``, and ``corpus``, their texts: read from the training frame when used, ``outputs.Picked``, or,
    when it holds none, left in the split shards, ``corpus_layout.SplitCorpus``)."""

    evals: list[str]
    n_words: np.ndarray
    attempted: np.ndarray
    sampled: np.ndarray
    scored: np.ndarray
    plants: list[str]
    plant_spans: list[tuple[int, int]]
    task_train: pd.DataFrame
    train: list[str]
    corpus_frame: pd.DataFrame
    corpus: Picked | SplitCorpus


def texts_to_embed(
    cfg: LeakageParams,
    eval_frame: pd.DataFrame,
    eval_words: list[list[str]],
    train_frame: pd.DataFrame,
    removed: set[str],
    plants: list[Plant],
    shards: SplitShards | None = None,
) -> Texts:
    """The ``Texts`` of the pass: all known before the first window is embedded, so ``Encoder.prefetch``
    embeds what is new in one go. With ``engine: ray`` (a ``train_frame`` without texts) the task train rows are
    read from ``shards`` (``outputs.task_train_rows``) and the corpus's texts left there (``SplitCorpus``); raises
    ``ValueError`` when what the engine reads is not given (``train_and_corpus``)."""
    scfg = cfg.semantic
    n_words = np.array([len(w) for w in eval_words])
    attempted = n_words >= scfg.min_words
    sampled = np.zeros(len(eval_frame), dtype=bool)
    sampled[planted_sample(list(eval_frame["doc_id"]), cfg)] = True
    scored = np.array([bool(sampled[p.eval_index]) for p in plants], dtype=bool)
    plant_texts = [p.text if scored[k] and attempted[p.eval_index] else "" for k, p in enumerate(plants)]
    at = np.flatnonzero((train_frame["role"] == "pretrain") & ~train_frame["doc_id"].isin(list(removed)))
    corpus = train_frame.iloc[at, train_frame.columns != "text"].reset_index(drop=True)  # texts: read when used
    task_train, corpus_texts = train_and_corpus(cfg, train_frame, at, corpus, removed, shards)
    spans = [_normalized_span(p) if text else (0, -1) for p, text in zip(plants, plant_texts)]
    train = [str(t) if len(tokenize(str(t))) >= scfg.min_words else "" for t in task_train["text"]]
    return Texts(
        [str(t) if a else "" for t, a in zip(eval_frame["text"], attempted)],
        n_words,
        attempted,
        sampled,
        scored,
        plant_texts,
        spans,
        task_train,
        train,
        corpus,
        corpus_texts,
    )


def train_and_corpus(
    cfg: LeakageParams,
    train_frame: pd.DataFrame,
    at: np.ndarray,
    corpus: pd.DataFrame,
    removed: set[str],
    shards: SplitShards | None,
) -> tuple[pd.DataFrame, Picked | SplitCorpus]:
    """The kept task train rows (texts included) and the corpus's texts (``corpus``: rows ``at`` of
    ``train_frame``): from the training frame with ``engine: local``, from ``shards`` with ``engine: ray``, whose
    frame holds no text (``texts_to_embed``). Raises ``ValueError`` when what the engine reads is not given."""
    if cfg.engine == "local":
        if "text" not in train_frame:
            raise ValueError("leakage semantic: engine local needs the training rows with their texts")
        task_train = train_frame[(train_frame["role"] == "task") & ~train_frame["is_duplicate"].astype(bool)]
        return task_train.reset_index(drop=True), Picked(train_frame["text"], at)
    if shards is None:
        raise ValueError("leakage semantic: engine ray reads the texts from the split shards, and none were given")
    return task_train_rows(shards.files), SplitCorpus(shards, sorted(removed), corpus["doc_id"])


def planted_sample(eval_ids: list[str], cfg: LeakageParams) -> list[int]:
    """The eval rows whose planted copies the semantic detector scores: the first ``semantic.planted_docs`` by
    the planting seed's hash rank (all when null)."""
    ranked = sorted(
        range(len(eval_ids)),
        key=lambda k: hashlib.sha256(f"{cfg.planted.seed}:semantic:{eval_ids[k]}".encode()).hexdigest(),
    )
    return ranked if cfg.semantic.planted_docs is None else ranked[: cfg.semantic.planted_docs]


def _normalized_span(plant: Plant) -> tuple[int, int]:
    """``plant.span`` mapped onto its normalised text (lengths of the normalised prefixes)."""
    a, b = plant.span
    if b < 0:
        return (0, -1)
    return (len(normalize_text(plant.text[:a])), len(normalize_text(plant.text[:b])))
