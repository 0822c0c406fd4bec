"""Temperature scaling (Guo et al. 2017, "On Calibration of Modern Neural Networks", sec. 4.2) of every finetune
run's predicted probabilities, fitted on dev, applied to test.

One scalar ``T > 0`` per run and seed: the predicted distribution ``p`` becomes ``softmax(log p / T)``, i.e.
``p_k^(1/T) / sum_j p_j^(1/T)`` (for an arm ``log p`` is its logits up to a constant, so this is
``softmax(logits / T)``; a baseline that has probabilities only, TF-IDF LR, majority, memorise, CRF marginals, is
scaled the same way on its log-probabilities). ``T`` minimises the dev negative log-likelihood (NLL, nats per
unit) of the gold labels, found by ``scipy.optimize.minimize_scalar`` on ``log T`` in ``[log 0.05, log 20]``
(bounded Brent; the NLL is convex in ``1/T``, so the minimum is unique). ``T`` changes no argmax, so no label and
no accuracy or F1 moves. Units: a dev doc (cls), a dev word with its distribution over the tags (ner).

Records (``tasks.finetune.cls``/``ner`` ``records``, and the baselines' ``fitting.records``): cls ``probs`` is the
distribution; ner ``probs`` the probability of each word's predicted tag and ``tag_probs`` each word's
distribution over the labels. ``scale_records`` adds ``probs_scaled`` to the test records (cls: the scaled
distribution; ner: each word's scaled probability of its predicted tag, ``probs^(1/T) / sum tag_probs^(1/T)``,
which needs no index: the same for an argmax, a Viterbi tag or memorise's repaired tag), what the report's
calibration reads after scaling.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import minimize_scalar
from scipy.special import log_softmax

#: Probabilities are clipped here before the log: a baseline's exact 0 (a class absent from its train docs).
FLOOR = 1e-30
#: The range searched for ``T``: far beyond any temperature Guo et al. report (about 1 to 3).
BOUNDS = (0.05, 20.0)


def log_probs(probs) -> np.ndarray:
    """``log(max(p, FLOOR))`` of ``probs`` ``(n, C)``, as float64."""
    return np.log(np.clip(np.asarray(probs, dtype=float), FLOOR, None))


def nll(logp: np.ndarray, gold: np.ndarray, temperature: float = 1.0) -> float:
    """Mean NLL (nats) of the ``gold`` ids ``(n,)`` under ``softmax(logp / temperature)``, ``logp`` ``(n, C)``."""
    scaled = log_softmax(logp / temperature, axis=1)
    return float(-scaled[np.arange(gold.size), gold].mean())


def fit_temperature(logp, gold) -> float:
    """The ``T`` in ``BOUNDS`` that minimises ``nll(logp, gold, T)``: ``logp`` ``(n, C)`` log-probabilities (or
    logits), ``gold`` ``(n,)`` label ids. Raises ``ValueError`` on no unit, unequal lengths or a label outside
    ``[0, C)``."""
    logp, gold = np.asarray(logp, dtype=float), np.asarray(gold, dtype=int)
    if logp.ndim != 2 or gold.shape != (logp.shape[0],) or gold.size == 0:
        raise ValueError(f"temperature: logp must be (n >= 1, C) and gold (n,), got {logp.shape} and {gold.shape}")
    if gold.min() < 0 or gold.max() >= logp.shape[1]:
        raise ValueError(f"temperature: gold ids must lie in [0, {logp.shape[1]}), got [{gold.min()}, {gold.max()}]")
    found = minimize_scalar(
        lambda log_t: nll(logp, gold, math.exp(log_t)),
        bounds=tuple(math.log(b) for b in BOUNDS),
        method="bounded",
        options={"xatol": 1e-5},
    )
    return float(math.exp(found.x))


def dev_units(recs: list[dict], labels: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """``(log-probabilities (n, C), gold ids (n,))`` of dev records: one unit per doc (cls ``probs``) or per word
    (ner ``tag_probs``). Raises ``ValueError`` naming the doc on a distribution of the wrong length or an
    unknown gold label."""
    index = {name: i for i, name in enumerate(labels)}
    dists, gold = [], []
    for rec in recs:
        ner = "tag_probs" in rec
        pairs = zip(rec["tag_probs"], rec["gold"], strict=True) if ner else [(rec["probs"], rec["gold"])]
        for dist, tag in pairs:
            if len(dist) != len(labels) or tag not in index:
                raise ValueError(
                    f"temperature: doc {rec['doc_id']!r}: needs {len(labels)} probs and a label of {labels}"
                )
            dists.append(dist)
            gold.append(index[tag])
    return log_probs(np.array(dists, dtype=float).reshape(-1, len(labels))), np.array(gold, dtype=int)


def scaled(rec: dict, temperature: float) -> list[float]:
    """A test record's ``probs_scaled`` (the module docstring): cls the scaled distribution, ner per word the
    scaled probability of its predicted tag."""
    if "tag_probs" not in rec:
        return np.exp(log_softmax(log_probs([rec["probs"]])[0] / temperature)).tolist()
    logp = log_probs(rec["tag_probs"]) / temperature
    norm = np.logaddexp.reduce(logp, axis=1) if logp.size else np.zeros(0)
    return np.exp(log_probs(rec["probs"]) / temperature - norm).tolist()


def scale_records(dev: list[dict], test: list[dict], labels: list[str]) -> dict:
    """Fit ``T`` on the ``dev`` records, add ``probs_scaled`` to each ``test`` record (in place); returns the
    facts: ``temperature``, ``dev_nll`` and ``dev_nll_scaled`` (nats per unit, before and after) and
    ``dev_units``. Raises ``ValueError`` as ``dev_units``."""
    logp, gold = dev_units(dev, labels)
    temperature = fit_temperature(logp, gold)
    for rec in test:
        rec["probs_scaled"] = scaled(rec, temperature)
    return {
        "temperature": round(temperature, 6),
        "dev_nll": round(nll(logp, gold), 6),
        "dev_nll_scaled": round(nll(logp, gold, temperature), 6),
        "dev_units": int(gold.size),
    }
