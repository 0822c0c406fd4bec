"""Calibration of the fine-tuned arms: expected calibration error (ECE), Brier score, negative log-likelihood
(NLL), the reliability curve (drawn by ``figures.reliability_diagram``) and a paired hierarchical bootstrap of each,
of the finetune stage's prediction files (``probs``, and ``probs_scaled`` after temperature scaling on dev, read by
``tasks.report.claims.arms.calibration_arms``).

Brier and NLL are strictly proper scoring rules (Gneiting & Raftery 2007): their expectation is lowest for the true
distribution, so, unlike ECE, they cannot be improved by a predictor that is calibrated but uninformative (the
majority baseline has ECE near 0). The claims read a proper score after temperature scaling (Guo et al. 2017;
``tasks.finetune.temperature``: one ``T`` per run and seed fitted on dev), with ECE beside it. A statistic named
``<name>_scaled`` is ``<name>`` of the temperature-scaled probabilities.

A predictor is calibrated when, among the units it predicts with confidence ``c``, a share ``c`` is right
(Guo et al. 2017, "On Calibration of Modern Neural Networks"). The units:

- cls: one per test doc; confidence = the top probability of the predicted distribution, correct = its
  argmax is the gold label;
- ner: one per *predicted* entity span (seqeval strict IOB2, as the finetune stage scores them);
  confidence = the product of the span's word probabilities (the "product of marginals" span confidence,
  e.g. Jagannatha & Yu 2020, "Calibrating Structured Output Predictors for NER"), correct = the same
  (type, start, end) is a gold span. A missed gold span is no unit: this is the calibration of what was
  predicted.

NLL (nats per unit) is ``-log p_gold`` of a doc and ``-log c`` / ``-log(1 - c)`` of a correct / wrong span, each
probability clipped to ``[EPS, 1 - EPS]`` as ``sklearn.metrics.log_loss`` clips.

ECE uses equal-mass (adaptive) bins: the units sorted by confidence and cut into ``n_bins`` bins of equal size (Nixon et
al. 2019, "Measuring Calibration in Deep Learning"), of the binned ECE of Naeini et al. 2015 and Guo et al. 2017, except
that tied confidences always share a bin: split by unit order, the docs of one constant-confidence predictor (the
majority baseline) would fall into bins by doc id, and since doc ids group the classes, its ECE would measure that order
(0.35 on BBC News) instead of ``|accuracy - confidence|``. The Brier score is Brier 1950 ("Verification of forecasts
expressed in terms of probability"), summed over classes. Both are per-seed numbers; an arm's value is their mean over
seeds.

The bootstrap is that of ``tasks.report.stats.bootstrap`` (Davison & Hinkley 1997, sec. 3.8): seeds with
replacement, then test items (docs for cls, sentences for ner, each carrying its 0+ spans) with replacement,
the same item draw for every arm. Binned ECE is biased upward on small samples (Kumar et al. 2019,
"Verified Uncertainty Calibration"): its bin accuracies carry sampling noise, and a resample adds more. At
~220 docs in 15 bins a perfectly calibrated predictor scores about 0.09, and the replicates sit above the
point estimate, so for an arm within ~0.1 of calibration the percentile interval can exclude its own point;
``estimates`` therefore bias-corrects ECE with the bootstrap. The Brier score, a mean of per-item terms, has
no such bias.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

import numpy as np
from seqeval.scheme import IOB2, Entities

from tasks.report.stats import bootstrap as bs

Statistic = Literal["ece", "brier", "nll", "ece_scaled", "brier_scaled", "nll_scaled"]
#: The range of each base statistic (``base``), to which estimates are clipped.
RANGES = {"ece": (0.0, 1.0), "brier": (0.0, 2.0), "nll": (0.0, 40.0)}
#: Probabilities are clipped to [EPS, 1 - EPS] before a log (float64 machine epsilon, sklearn's ``log_loss``).
EPS = float(np.finfo(float).eps)
#: Working-memory cap of one chunk of resamples (as ``bootstrap.hierarchical_bootstrap``).
_CHUNK_BYTES = 200 * 2**20


def _check(confidence, correct) -> tuple[np.ndarray, np.ndarray]:
    """``(confidence, correct)`` as float arrays ``(n,)``; ValueError on 0 units, unequal lengths or a
    confidence outside [0, 1]."""
    conf, hit = np.asarray(confidence, dtype=float), np.asarray(correct, dtype=bool).astype(float)
    if conf.ndim != 1 or conf.shape != hit.shape:
        raise ValueError(f"confidence and correct must be 1-D of equal length, got {conf.shape} and {hit.shape}")
    if conf.size == 0:
        raise ValueError("calibration of 0 units is undefined")
    if not np.all((conf >= 0) & (conf <= 1)):
        raise ValueError(f"confidences must lie in [0, 1], got [{conf.min()}, {conf.max()}]")
    return conf, hit


def equal_mass_bins(confidence, n_bins: int) -> np.ndarray:
    """Equal-mass bin index ``(n,)`` of each unit, bin 0 the least confident: a stable sort by confidence cut
    where ``np.array_split`` would cut it into ``min(n_bins, n)`` bins, except that a cut inside a run of equal
    confidences moves to the end of the run, so tied units share a bin (a constant predictor is one bin, and
    the doc order cannot change an ECE). Bins are numbered consecutively. ValueError if ``n_bins < 1``."""
    if n_bins < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}")
    conf = np.asarray(confidence, dtype=float)
    order = np.argsort(conf, kind="stable")
    ranked = conf[order]
    sizes = [len(part) for part in np.array_split(ranked, max(1, min(n_bins, conf.size)))]
    cuts = np.cumsum(sizes)[:-1]
    cuts = np.unique(np.searchsorted(ranked, ranked[cuts - 1], side="right")) if cuts.size else cuts
    bins = np.empty(conf.size, dtype=np.intp)
    bins[order] = np.searchsorted(cuts, np.arange(conf.size), side="right")
    return bins


def reliability(confidence, correct, n_bins: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per equal-mass bin: mean confidence, accuracy (share correct) and unit count, each ``(min(n_bins, n),)``.

    ``confidence`` ``(n,)`` in [0, 1], ``correct`` ``(n,)`` bools. Raises ValueError as ``ece``.
    """
    conf, hit = _check(confidence, correct)
    bins = equal_mass_bins(conf, n_bins)
    count = np.bincount(bins)
    return np.bincount(bins, conf) / count, np.bincount(bins, hit) / count, count


def ece(confidence, correct, n_bins: int = 15) -> float:
    """Expected calibration error ``sum_b (n_b / N) |acc_b - conf_b|`` over equal-mass bins (Nixon et al. 2019;
    the binned ECE of Naeini et al. 2015, Guo et al. 2017), in [0, 1].

    ``confidence`` ``(n,)`` in [0, 1], ``correct`` ``(n,)`` bools. Raises ValueError on 0 units, unequal
    lengths, a confidence outside [0, 1] or ``n_bins < 1``.
    """
    mean_conf, accuracy, count = reliability(confidence, correct, n_bins)
    return float(np.sum(count * np.abs(accuracy - mean_conf)) / count.sum())


def brier_terms(probs, gold) -> np.ndarray:
    """Per item ``sum_k (p_k - 1[k = gold])^2`` ``(n,)``; ValueError on bad shapes or labels."""
    p, y = np.asarray(probs, dtype=float), np.asarray(gold)
    if p.ndim != 2 or y.shape != (p.shape[0],) or p.shape[0] == 0:
        raise ValueError(f"probs must be (n >= 1, C) and gold (n,), got {p.shape} and {y.shape}")
    if y.min() < 0 or y.max() >= p.shape[1]:
        raise ValueError(f"gold labels must lie in [0, {p.shape[1]}), got [{y.min()}, {y.max()}]")
    onehot = np.zeros_like(p)
    onehot[np.arange(y.size), y] = 1.0
    return np.sum((p - onehot) ** 2, axis=1)


def brier(probs, gold) -> float:
    """Multi-class Brier score (Brier 1950): mean over items of ``sum_k (p_k - 1[k = gold])^2``, in [0, 2].

    ``probs`` ``(n, C)`` predicted distributions, ``gold`` ``(n,)`` int labels. Raises ValueError on 0 items,
    bad shapes or a label outside ``[0, C)``.
    """
    return float(brier_terms(probs, gold).mean())


def brier_binary(confidence, correct) -> float:
    """Brier score of binary outcomes, ``mean (c - 1[correct])^2`` in [0, 1] (for spans: ``confidence`` ``(n,)``
    the span confidences, ``correct`` ``(n,)`` bools). Raises ValueError as ``ece``."""
    conf, hit = _check(confidence, correct)
    return float(np.mean((conf - hit) ** 2))


def nll_terms(probs, gold) -> np.ndarray:
    """Per item ``-log p_gold`` ``(n,)`` (nats; ``p`` clipped to ``[EPS, 1 - EPS]``); ValueError as ``brier_terms``."""
    n = brier_terms(probs, gold).size  # the shape and label checks
    p = np.clip(np.asarray(probs, dtype=float)[np.arange(n), np.asarray(gold)], EPS, 1 - EPS)
    return -np.log(p)


def nll_binary_terms(confidence, correct) -> np.ndarray:
    """Per unit ``-log c`` if correct else ``-log(1 - c)`` ``(n,)`` (nats; ``c`` clipped to ``[EPS, 1 - EPS]``),
    the NLL of a span's confidence as a binary forecast. Raises ValueError as ``ece``."""
    conf, hit = _check(confidence, correct)
    conf = np.clip(conf, EPS, 1 - EPS)
    return -(hit * np.log(conf) + (1 - hit) * np.log(1 - conf))


def base(statistic: str) -> str:
    """The statistic without its ``_scaled`` suffix (``ece``, ``brier``, ``nll``); ValueError on another name."""
    name = statistic.removesuffix("_scaled")
    if name not in RANGES:
        raise ValueError(f"statistic must be one of {sorted(RANGES)} (or <name>_scaled), got {statistic!r}")
    return name


def difference_range(statistic: str) -> tuple[float, float]:
    """The range of a difference of two arms' ``statistic``: ``(-high, high)`` of its ``RANGES``."""
    high = RANGES[base(statistic)][1]
    return -high, high


def cls_confidence(probs, gold) -> tuple[np.ndarray, np.ndarray]:
    """``(confidence, correct)`` ``(n,)`` of classification: the top probability of each distribution in
    ``probs`` ``(n, C)``, and whether its argmax (the first on a tie) is ``gold`` ``(n,)``."""
    p = np.asarray(probs, dtype=float)
    return p.max(axis=1), p.argmax(axis=1) == np.asarray(gold)


def span_confidences(
    gold_tags: Sequence[str], pred_tags: Sequence[str], word_probs: Sequence[float]
) -> tuple[np.ndarray, np.ndarray]:
    """``(confidence, correct)`` ``(k,)`` per predicted entity span of one sentence, in order of start.

    Spans are seqeval's strict IOB2 entities (an ``I-X`` that starts a chunk is no span); a span's confidence
    is the product of its words' probabilities, and it is correct when a gold span has the same type, start
    and end. Raises ValueError when the three lists differ in length.
    """
    if not len(gold_tags) == len(pred_tags) == len(word_probs):
        raise ValueError(f"{len(gold_tags)} gold tags, {len(pred_tags)} predicted tags, {len(word_probs)} probs")
    gold = {(e.tag, e.start, e.end) for e in Entities([list(gold_tags)], IOB2, False).entities[0]}
    pred = Entities([list(pred_tags)], IOB2, False).entities[0]
    probs = np.asarray(word_probs, dtype=float)
    return (
        np.array([np.prod(probs[e.start : e.end]) for e in pred], dtype=float),
        np.array([(e.tag, e.start, e.end) in gold for e in pred], dtype=bool),
    )


@dataclass(frozen=True)
class SeedUnits:
    """The calibration units of one seed (docs for cls, predicted spans for ner), each ``(U,)``: ``item`` the
    index of its test item in the arm's ``doc_ids``, ``confidence``, ``correct``, ``brier`` and ``nll`` (its Brier
    and NLL terms: multi-class for a doc, binary for a span)."""

    item: np.ndarray
    confidence: np.ndarray
    correct: np.ndarray
    brier: np.ndarray
    nll: np.ndarray

    def by_confidence(self) -> SeedUnits:
        """The same units sorted by confidence (stable: ties keep unit order)."""
        order = np.argsort(self.confidence, kind="stable")
        return SeedUnits(*(getattr(self, f)[order] for f in ("item", "confidence", "correct", "brier", "nll")))

    def terms(self, statistic: str) -> np.ndarray:
        """The per-unit terms ``(U,)`` whose mean is the Brier score or the NLL (``statistic``'s base)."""
        return self.brier if base(statistic) == "brier" else self.nll


@dataclass(frozen=True)
class ArmCalibration:
    """One arm's calibration data: ``name`` (its prediction folder), ``task``, the test items ``doc_ids``
    (sorted, the same order in every arm and seed), ``seeds`` and per seed its ``SeedUnits``; ``scaled``: per
    seed the units of the temperature-scaled probabilities (None: the prediction files have no ``probs_scaled``),
    ``temperatures``: per seed its ``T`` (None: not recorded)."""

    name: str
    task: str
    doc_ids: tuple[str, ...]
    seeds: tuple[int, ...]
    per_seed: tuple[SeedUnits, ...]
    scaled: tuple[SeedUnits, ...] | None = None
    temperatures: tuple[float, ...] | None = None
    pretrain: tuple[str, ...] | None = None  # per entry of seeds, pretraining-seed-major (bootstrap.pretrain_layout)

    def units(self, statistic: str) -> tuple[SeedUnits, ...]:
        """The per-seed units ``statistic`` reads: the scaled ones for ``<name>_scaled``. Raises ValueError
        naming the arm when those were not written."""
        if not statistic.endswith("_scaled"):
            return self.per_seed
        if self.scaled is None:
            raise ValueError(f"{self.name}: no probs_scaled in the predictions (rerun the finetune stage)")
        return self.scaled

    def pooled(self) -> tuple[np.ndarray, np.ndarray]:
        """``(confidence, correct)`` of every seed's units together (what a reliability diagram draws)."""
        return (
            np.concatenate([u.confidence for u in self.per_seed]),
            np.concatenate([u.correct for u in self.per_seed]),
        )


def _seed_value(units: SeedUnits, statistic: Statistic, n_bins: int) -> float:
    if base(statistic) == "ece":
        return ece(units.confidence, units.correct, n_bins)
    return float(units.terms(statistic).mean())


def point_estimate(arm: ArmCalibration, statistic: Statistic, n_bins: int) -> float:
    """Mean over the arm's seeds of the per-seed ECE, Brier score or NLL (``statistic``, scaled or not) on the
    whole test set.

    Raises ValueError naming the arm and seed when a seed has no unit (a NER seed that predicted no span), and
    as ``ArmCalibration.units`` and ``base``.
    """
    values = []
    for seed, units in zip(arm.seeds, arm.units(statistic), strict=True):
        if units.confidence.size == 0:
            raise ValueError(f"{arm.name}: seed {seed} has no calibration unit (no predicted entity span)")
        values.append(_seed_value(units, statistic, n_bins))
    return float(np.mean(values))


def _bin_bounds(total: np.ndarray, n_bins: int) -> np.ndarray:
    """Positions ``(R, n_bins + 1)`` that cut ``total[r]`` sorted units as ``np.array_split`` into
    ``min(n_bins, total)`` bins would (the first ``total % m`` bins one longer); bins past the last are empty."""
    m = np.clip(np.minimum(n_bins, total), 1, None)
    q, r = total // m, total % m
    j = np.arange(n_bins + 1)
    return np.minimum(j * q[:, None] + np.minimum(j, r[:, None]), total[:, None])


def _weighted_ece(confidence: np.ndarray, correct: np.ndarray, weights: np.ndarray, n_bins: int) -> np.ndarray:
    """ECE ``(R,)`` of each row of ``weights`` ``(R, U)``: of the sample repeating unit ``u`` ``weights[r, u]``
    times, i.e. ``ece(np.repeat(confidence, w), np.repeat(correct, w), n_bins)`` without building it.

    ``confidence``, ``correct`` ``(U,)`` sorted by confidence, ``U >= 1``. A row of zero weights scores 0.
    ``sum_b (n_b / N) |acc_b - conf_b|`` is ``sum_b |sum over bin b of (correct - confidence)| / N``, so running
    sums of weight and of weighted ``correct - confidence`` over the runs of equal confidence give every bin:
    a cut of ``np.array_split`` at position ``p`` moves to the end of the run that holds position ``p - 1``
    (``equal_mass_bins``), the first run boundary at or after ``p``.
    """
    total = weights.sum(axis=1)
    starts = np.flatnonzero(np.r_[True, np.diff(confidence) != 0])  # the runs of equal confidence
    zero = np.zeros((weights.shape[0], 1))
    cum_weight = np.hstack([zero, np.cumsum(np.add.reduceat(weights, starts, axis=1), axis=1)])
    cum_gap = np.hstack([zero, np.cumsum(np.add.reduceat(weights * (correct - confidence), starts, axis=1), axis=1)])
    bounds = _bin_bounds(total, n_bins).astype(float)
    rows, width = cum_weight.shape
    shift = (np.arange(rows) * (cum_weight[:, -1].max() + 1))[:, None]  # one searchsorted for all rows
    at = np.searchsorted((cum_weight + shift).ravel(), (bounds + shift).ravel(), side="left")
    at = np.minimum(at.reshape(bounds.shape) - np.arange(rows)[:, None] * width, width - 1)
    per_bin = np.abs(np.diff(np.take_along_axis(cum_gap, at, axis=1), axis=1)).sum(axis=1)
    return np.divide(per_bin, total, out=np.zeros(total.shape), where=total > 0)


def replicates(
    arms: Sequence[ArmCalibration], statistic: Statistic, n_bins: int, resamples: int, rng: np.random.Generator
) -> np.ndarray:
    """Paired hierarchical bootstrap replicates ``(resamples, len(arms))`` of an arm's ECE, Brier score or NLL.

    Replicate ``b`` draws the arms' runs with replacement (``bootstrap.run_draws``: pretraining seeds, then the
    fine-tuning seeds crossed with them, jointly when every arm ran the same fine-tuning seeds, else per arm; a
    one-seed arm repeats its seed), then ``n_items`` test items with
    replacement, the same draw for every arm and seed; each unit (doc, or span of a drawn sentence) counts as
    often as its item was drawn. An arm's value is the mean over its drawn seeds of the statistic of each
    seed's resampled units. Seeds are drawn before the items, chunk by chunk, so the result does not depend on
    the chunking. Raises ValueError when ``resamples < 1``, the arms differ in task or test items, a seed has
    no unit, or ``statistic`` is unknown.
    """
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    if any(a.task != arms[0].task or a.doc_ids != arms[0].doc_ids for a in arms):
        raise ValueError(f"arms {[a.name for a in arms]} do not share one task and one test set")
    for arm in arms:
        point_estimate(arm, statistic, n_bins)  # the per-seed checks: every seed has a unit, statistic known
    n_items = len(arms[0].doc_ids)
    shared = len({a.seeds[: len(a.seeds) // len(set(a.pretrain or [""]))] for a in arms}) == 1  # same fine seeds
    seed_idx = bs.run_draws([len(a.seeds) for a in arms], [a.pretrain for a in arms], resamples, rng, shared)
    sorted_units = [[u.by_confidence() for u in a.units(statistic)] for a in arms]
    widest = max(u.item.size for units in sorted_units for u in units)
    chunk = max(1, _CHUNK_BYTES // (8 * (n_items + 10 * widest)))  # about ten (rows, units) arrays at once
    out = np.empty((resamples, len(arms)))
    for start in range(0, resamples, chunk):
        stop = min(start + chunk, resamples)
        draws = rng.multinomial(n_items, np.full(n_items, 1.0 / n_items), size=stop - start).astype(float)
        for j, units in enumerate(sorted_units):
            values = _seed_values(units, draws, statistic, n_bins)
            out[start:stop, j] = np.take_along_axis(values, seed_idx[j][start:stop], axis=1).mean(axis=1)
    return out


def _seed_values(units: Sequence[SeedUnits], draws: np.ndarray, statistic: Statistic, n_bins: int) -> np.ndarray:
    """The statistic ``(R, S)`` of each seed's units under the item draws ``(R, n_items)`` (counts per item).

    Brier and NLL are means of per-unit terms, so a seed's value is ``draws @ item_terms / draws @ item_units``
    with its terms and units summed per item first: one matrix product for all seeds. ECE is not additive and
    takes one pass per seed (``_weighted_ece``)."""
    if base(statistic) == "ece":
        return np.stack(
            [_weighted_ece(u.confidence, u.correct.astype(float), draws[:, u.item], n_bins) for u in units], 1
        )
    n_items = draws.shape[1]
    terms = np.stack([np.bincount(u.item, weights=u.terms(statistic), minlength=n_items) for u in units], axis=1)
    counts = np.stack([np.bincount(u.item, minlength=n_items) for u in units], axis=1).astype(float)
    total = draws @ counts
    return np.divide(draws @ terms, total, out=np.zeros(total.shape), where=total > 0)


class Interval(NamedTuple):
    """A point estimate and its two-sided interval."""

    point: float
    low: float
    high: float


def estimates(
    arms: Sequence[ArmCalibration],
    statistic: Statistic,
    n_bins: int,
    resamples: int,
    rng: np.random.Generator,
    level: float,
) -> tuple[list[Interval], np.ndarray]:
    """Each arm's ECE (``n_bins`` equal-mass bins), Brier score or NLL (scaled or not) with its ``level``
    interval, and the replicates ``(resamples, n_arms)``, all from one paired hierarchical bootstrap
    (``replicates``).

    Brier and NLL: the mean over seeds, with the percentile interval (Efron & Tibshirani 1993, sec. 13.3). ECE: binned
    ECE is biased upward on a few hundred units and a resample adds to the bias (the module docstring), so the
    point is the bootstrap bias-corrected ``2 * ECE - mean(replicates)`` and the interval the basic (reflected)
    one, ``2 * ECE - quantiles`` (Davison & Hinkley 1997, sec. 2.4 and 5.2); the returned replicates are
    reflected too, so differences and p-values taken from them are bias-corrected alike. Clipped to the
    statistic's range (``RANGES``: [0, 1] for ECE, [0, 2] for Brier). Raises ValueError as ``replicates``.
    """
    reps = replicates(arms, statistic, n_bins, resamples, rng)
    points = np.array([point_estimate(arm, statistic, n_bins) for arm in arms])
    ece_like = base(statistic) == "ece"
    if ece_like:
        reps = 2 * points - reps
    bounds = RANGES[base(statistic)]
    out = []
    for j in range(len(arms)):
        point = float(np.clip(reps[:, j].mean(), *bounds)) if ece_like else float(points[j])
        out.append(Interval(point, *bs.percentile_ci(reps[:, j], level, bounds)))
    return out, reps
