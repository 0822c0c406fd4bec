"""The sense probe's scores of one model: per word and layer, ``within``/``across``-sense mean cosine, their
difference ``separation`` and leave-one-out 1-NN sense accuracy (the method: ``tasks.probe``'s docstring),
and the pairwise cosines behind them that the report resamples (``word_cosines``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from tasks.probe.probe_set import words_of

if TYPE_CHECKING:
    from tasks.probe.probe_set import ProbeSentence

DECIMALS = 6  # rounding of every score written out, so reruns are byte-identical
SCORES = ("within", "across", "separation", "knn_accuracy")


def cosine_matrix(vectors: np.ndarray) -> np.ndarray:
    """Pairwise cosine similarity ``(n, n)`` of ``(n, hidden)`` vectors (a zero vector has cosine 0)."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    unit = vectors / np.where(norms == 0, 1.0, norms)
    return unit @ unit.T


def sense_scores(vectors: np.ndarray, senses: Sequence[str]) -> dict[str, float]:
    """``within``, ``across``, ``separation`` and ``knn_accuracy`` of one word at one layer.

    ``vectors``: ``(n, hidden)``, one per sentence; ``senses``: ``n`` labels with at least 2 distinct values
    and at least 2 sentences each. ``within``/``across`` average the cosine over unordered pairs i < j with
    equal/different senses. 1-NN leaves the query out and breaks similarity ties by the lower index.
    """
    sim = cosine_matrix(vectors)
    labels = np.asarray(senses)
    same = labels[:, None] == labels[None, :]
    upper = np.triu(np.ones_like(same), k=1)
    within = float(sim[same & upper].mean())
    across = float(sim[~same & upper].mean())
    np.fill_diagonal(sim, -np.inf)
    knn = float((labels[sim.argmax(axis=1)] == labels).mean())
    return {"within": within, "across": across, "separation": within - across, "knn_accuracy": knn}


def layer_scores(vectors: np.ndarray, rows: Sequence[ProbeSentence]) -> dict:
    """Scores per layer, per word and averaged over words, in the ``metrics/probe.json`` layout of one model.

    ``vectors``: ``(n_layers + 1, n_sentences, hidden)`` aligned with ``rows``. Averages use unrounded
    per-word scores; everything returned is rounded to ``DECIMALS`` places.
    """
    per_word = {}
    for word in words_of(rows):
        index = [i for i, row in enumerate(rows) if row.word == word]
        senses = [rows[i].sense for i in index]
        layers = [sense_scores(layer[index], senses) for layer in vectors]
        per_word[word] = {name: np.array([scores[name] for scores in layers]) for name in SCORES}
    model = {"layers": int(vectors.shape[0])}
    for name in SCORES:
        model[name] = rounded(np.mean([per_word[word][name] for word in per_word], axis=0))
    model["per_word"] = {
        word: {name: rounded(values) for name, values in table.items()} for word, table in per_word.items()
    }
    return model


def rounded(values: np.ndarray) -> list[float]:
    """A 1-D array as a list of floats rounded to ``DECIMALS`` places (stable JSON and TSV bytes)."""
    return [round(float(value), DECIMALS) for value in values]


def word_cosines(vectors: np.ndarray, rows: Sequence[ProbeSentence]) -> dict[str, list[list[float]]]:
    """``{word: [per layer: the upper triangle of its sentences' cosine matrix]}``, rounded to ``DECIMALS``.

    ``vectors``: ``(n_layers + 1, n_sentences, hidden)`` aligned with ``rows``; a word's sentences are taken in
    file order and the triangle is ``cosine_matrix(...)[numpy.triu_indices(n, 1)]`` (row-major, i < j), what
    ``sense_scores`` averages. The report recomputes a word's separation from these after resampling its
    sentences (``tasks/report/stats/probe_bootstrap.py``)."""
    out = {}
    for word in words_of(rows):
        index = [i for i, row in enumerate(rows) if row.word == word]
        upper = np.triu_indices(len(index), 1)
        out[word] = [rounded(cosine_matrix(layer[index])[upper]) for layer in vectors]
    return out
