"""Variance components of a contrast of fine-tuning arms, and its t interval on Satterthwaite degrees of freedom.

A claim's difference is a contrast ``sum_j w_j * arm_j`` of arms (``w = (1, -1)``; a gap claim ``(1, -1, -1, 1)``),
each arm the mean over its runs (pretraining seed x fine-tuning seed) of a metric of summed per-item counts
(``tasks.report.stats.bootstrap``). Its variance has three parts, each a contribution to the variance of the
estimate in the metric's units squared (0 where a level has one unit):

- ``pretraining_seed`` and ``seed``: from the run values on the whole test set, a two-way crossed random-effects
  ANOVA without replication of the per-run contrast ``D[p, f]`` (pretraining seed ``p``, fine-tuning seed ``f``;
  Searle, Casella & McCulloch 1992, "Variance Components", ch. 4). The design is crossed, not nested: fine-tuning
  seed ``f`` trains on the same drawn subset, in the same order, under every pretraining seed
  (``tasks/finetune/draw.py``, ``tasks/finetune/reruns/from_pretraining_seeds.py``), so its effect is shared by
  the rows. ``MS_p`` (df ``n_p - 1``, rows), ``MS_f`` (df ``n_f - 1``, columns) and ``MS_pf`` (df
  ``(n_p - 1)(n_f - 1)``) give ``seed = MS_f / (n_p n_f)`` (the seed effect over ``n_f`` plus the interaction
  over ``n_p n_f``) and ``pretraining_seed = max(0, MS_p - MS_pf) / (n_p n_f)``: their sum is unbiased for the
  variance of the mean, ``s_p^2 / n_p + s_f^2 / n_f + s_pf^2 / (n_p n_f)``, and stays so when the seeds are in
  fact nested (``s_f = 0``). A one-way nested ANOVA (``MS_between / (n_p n_f)``) would drop ``s_f^2 / n_f``, the
  largest part when the train draw dominates. When the arms ran the same fine-tuning seeds the contrast is taken
  per run (paired), else each arm's parts are summed with ``w_j^2``;
- ``item``: the variance of the contrast over ``resamples`` bootstrap draws of the test items (or of their
  clusters: items that share a dedup cluster or a same-story group move together), every run kept (Efron &
  Tibshirani 1993, ch. 6), df ``n_items - 1`` (clusters - 1).

The interval is ``estimate +- t(df, 1 - alpha / 2) * sqrt(V)``, ``V`` the sum of the parts, ``df`` by
Satterthwaite (1946, "An approximate distribution of estimates of variance components", Biometrics Bulletin
2(6)): ``V^2 / sum_k (V_k^2 / df_k)`` over the mean-square terms ``c_k MS_k`` (``- MS_pf / (n_p n_f)`` one of
them when ``MS_p > MS_pf``: a negative coefficient enters squared, which lowers df). With 5 seeds the seed term
has 4 df, so the t quantile is about 2.8, where a percentile bootstrap over the same 5 seeds acts as if it were
1.96 and understates the seed part.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

#: The levels, in the order the report lists them.
LEVELS = ("pretraining_seed", "seed", "item")
#: Item draws per chunk of ``item_variance`` (bounds its memory).
CHUNK = 256


@dataclass(frozen=True)
class Components:
    """Contributions to the variance of a contrast (metric units squared), one per level of ``LEVELS``, and the
    variance terms with their degrees of freedom for Satterthwaite (``terms``: ``(variance, df)``)."""

    pretraining_seed: float
    seed: float
    item: float
    terms: tuple[tuple[float, float], ...]
    n_seeds: int  # fine-tuning seeds per pretraining seed of the contrast (the fewest over its arms)
    n_items: int  # test items (or clusters) the item part resamples
    n_pretraining: int = 1  # pretraining seeds of the contrast (the most over its arms)
    #: ``seed`` split by the fine-tuning seeds each part rests on, ``((variance, n_f), ...)``: one part when the
    #: arms ran the same seeds, one per arm otherwise (e.g. a 5-seed MiniLM against a 20-seed arm); empty: all of
    #: ``seed`` on ``n_seeds``.
    seed_by_count: tuple[tuple[float, int], ...] = ()

    @property
    def total(self) -> float:
        """``V``: the variance of the contrast's estimate."""
        return self.pretraining_seed + self.seed + self.item

    @property
    def se(self) -> float:
        """``sqrt(V)``."""
        return math.sqrt(self.total)

    @property
    def df(self) -> float:
        """Satterthwaite's degrees of freedom of ``V`` (inf when every term is 0; a negative term counts squared)."""
        live = [(v, d) for v, d in self.terms if v != 0]
        if not live:
            return math.inf
        return self.total**2 / sum(v**2 / d for v, d in live)

    def seed_at(self, seeds: int) -> float:
        """The seed part with ``seeds`` fine-tuning seeds for every arm that has fewer (an arm with more keeps
        its own): each part ``v`` on ``n_f`` seeds becomes ``v n_f / max(n_f, seeds)``."""
        parts = self.seed_by_count or ((self.seed, self.n_seeds),)
        return sum(v * n / max(n, seeds) for v, n in parts)

    def as_dict(self) -> dict[str, float]:
        """``{pretraining_seed, seed, item}``: report.json ``variance_components``."""
        return {"pretraining_seed": self.pretraining_seed, "seed": self.seed, "item": self.item}

    def shares(self) -> dict[str, float]:
        """Each level's fraction of ``V`` (summing to 1; all 0 when ``V`` is 0): report.json ``variance_shares``."""
        total = self.total
        return {k: (v / total if total > 0 else 0.0) for k, v in self.as_dict().items()}


def crossed_anova(values: np.ndarray) -> tuple[float, float, tuple[tuple[float, float], ...]]:
    """``(pretraining_seed, seed, terms)`` of the mean of ``values`` ``(n_p, n_f)``, fine-tuning seeds crossed with
    pretraining seeds (module docstring); ``terms`` the ``(c_k MS_k, df_k)`` whose sum is the variance."""
    n_p, n_f = values.shape
    if n_p * n_f < 2:
        return 0.0, 0.0, ()
    if n_f == 1:
        part = float(np.var(values[:, 0], ddof=1)) / n_p
        return part, 0.0, ((part, n_p - 1.0),)
    rows, cols = values.mean(axis=1), values.mean(axis=0)
    seed = float(np.var(cols, ddof=1)) / n_f  # MS_f / (n_p n_f), MS_f = n_p var(column means)
    if n_p == 1:
        return 0.0, seed, ((seed, n_f - 1.0),)
    ms_rows = n_f * float(np.var(rows, ddof=1))
    residuals = values - rows[:, None] - cols[None, :] + values.mean()
    ms_interaction = float(np.sum(residuals**2)) / ((n_p - 1) * (n_f - 1))
    if ms_rows <= ms_interaction:
        return 0.0, seed, ((seed, n_f - 1.0),)
    n = n_p * n_f
    terms = ((ms_rows / n, n_p - 1.0), (-ms_interaction / n, (n_p - 1.0) * (n_f - 1.0)), (seed, n_f - 1.0))
    return (ms_rows - ms_interaction) / n, seed, terms


def run_values(counts: np.ndarray, metric: Callable, layout: tuple[int, int]) -> np.ndarray:
    """The metric of each run on the whole test set, as ``(n_p, n_f)`` (runs pretraining-seed-major)."""
    return np.asarray(metric(np.asarray(counts, dtype=float).sum(axis=1)), dtype=float).reshape(layout)


def seed_parts(
    values: Sequence[np.ndarray], weights: Sequence[float], shared: bool
) -> tuple[float, tuple[tuple[float, int], ...], tuple[tuple[float, float], ...]]:
    """``(pretraining_seed, seed_by_count, terms)`` of the contrast (``Components``): paired per run when ``shared``
    and the layouts broadcast (one pretraining seed or the same number), else each arm's own parts weighted by
    ``w^2``."""
    widest = max(v.shape[0] for v in values)
    if shared and all(v.shape[0] in (1, widest) for v in values):
        contrast = sum(w * np.broadcast_to(v, (widest, v.shape[1])) for w, v in zip(weights, values, strict=True))
        paired = crossed_anova(np.asarray(contrast))
        return paired[0], ((paired[1], values[0].shape[1]),), paired[2]
    pretraining = 0.0
    by_count: tuple[tuple[float, int], ...] = ()
    terms: tuple[tuple[float, float], ...] = ()
    for w, v in zip(weights, values, strict=True):
        p, s, t = crossed_anova(v)
        pretraining, by_count = pretraining + w**2 * p, by_count + ((w**2 * s, v.shape[1]),)
        terms += tuple((w**2 * var, df) for var, df in t)
    return pretraining, by_count, terms


def item_variance(
    arms: Sequence[np.ndarray],
    metric: Callable,
    weights: Sequence[float],
    resamples: int,
    seed: int,
    clusters: np.ndarray | None = None,
) -> tuple[float, int]:
    """``(variance, units)`` of the contrast over bootstrap draws of the test items, every run kept: each draw
    weights the items (multinomial, the same weights for every arm), or, with ``clusters`` (``(n_items,)`` int
    labels), draws whole clusters and gives each item its cluster's count."""
    flat = [np.asarray(a, dtype=float).transpose(1, 0, 2).reshape(a.shape[1], -1) for a in arms]
    n_items, k = arms[0].shape[1], arms[0].shape[2]
    rng = np.random.default_rng(seed)
    labels = np.unique(clusters, return_inverse=True)[1] if clusters is not None else np.arange(n_items)
    units = int(labels.max()) + 1
    contrast = np.zeros(resamples)
    for start in range(0, resamples, CHUNK):  # bounded memory: CHUNK draws at a time
        stop = min(start + CHUNK, resamples)
        draws = rng.multinomial(units, np.full(units, 1.0 / units), size=stop - start).astype(float)[:, labels]
        for w, a, f in zip(weights, arms, flat, strict=True):
            summed = (draws @ f).reshape(stop - start, a.shape[0], k)
            contrast[start:stop] += w * np.asarray(metric(summed), dtype=float).mean(axis=1)
    return float(np.var(contrast, ddof=1)), units


def components(
    arms: Sequence[np.ndarray],
    layouts: Sequence[tuple[int, int]],
    metric: Callable,
    weights: Sequence[float],
    shared: bool,
    resamples: int,
    seed: int,
    clusters: np.ndarray | None = None,
) -> Components:
    """The ``Components`` of the contrast ``sum_j weights[j] * arms[j]`` (counts ``(n_runs, n_items, K)``, each with
    its ``(n_p, n_f)`` layout; ``shared``: the arms ran the same fine-tuning seeds). Raises ValueError when a
    layout does not match its arm's runs or ``resamples < 2``."""
    if resamples < 2:
        raise ValueError(f"resamples must be >= 2, got {resamples}")
    for a, (n_p, n_f) in zip(arms, layouts, strict=True):
        if np.shape(a)[0] != n_p * n_f:
            raise ValueError(f"layout {n_p} x {n_f} does not match {np.shape(a)[0]} runs")
    values = [run_values(a, metric, lay) for a, lay in zip(arms, layouts, strict=True)]
    pretraining, by_count, terms = seed_parts(values, weights, shared)
    item, units = item_variance(arms, metric, weights, resamples, seed, clusters)
    return Components(
        pretraining,
        sum(v for v, _ in by_count),
        item,
        terms + ((item, units - 1.0),) if units > 1 else terms,
        min(n_f for _, n_f in layouts),
        units,
        max(n_p for n_p, _ in layouts),
        by_count,
    )


def t_interval(estimate: float, parts: Components, level: float, bounds: tuple[float, float]) -> tuple[float, float]:
    """``estimate +- t(df, (1 + level) / 2) * SE`` clipped to ``bounds`` (Satterthwaite's df; a normal quantile when
    df is infinite)."""
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    half = float(stats.t.ppf((1 + level) / 2, parts.df)) * parts.se if parts.total > 0 else 0.0
    low, high = np.clip([estimate - half, estimate + half], *bounds)
    return float(low), float(high)


def t_p_value(estimate: float, parts: Components, null: float, alternative: str) -> float:
    """One-sided p-value of the t statistic ``(estimate - null) / SE`` on Satterthwaite's df: ``greater`` tests H0
    ``value <= null``, ``less`` H0 ``value >= null``; with ``V = 0`` the sign decides (0 or 1)."""
    gap = estimate - null
    if parts.total <= 0:
        return 0.0 if (gap > 0 if alternative == "greater" else gap < 0) else 1.0
    t = gap / parts.se
    return float(stats.t.sf(t, parts.df) if alternative == "greater" else stats.t.cdf(t, parts.df))


def ratio_difference(hits: Sequence[np.ndarray], masked: np.ndarray, level: float) -> tuple[float, float, float, float]:
    """``(estimate, low, high, se)`` of ``sum(hits[0] - hits[1]) / sum(masked)`` (or ``sum(hits[0]) / sum(masked)``
    with one array) over clusters (e.g. held-out blocks: ``masked`` tokens each, ``hits`` of one or two models on
    the same masks). The ratio estimator's linearised variance (Cochran 1977, "Sampling Techniques", eq. 6.9):
    ``n / (n - 1) * sum(e_b^2) / sum(masked)^2`` with ``e_b = d_b - estimate * masked_b``, and a t interval on
    ``n - 1`` df. Raises ValueError with fewer than 2 clusters or no masked token."""
    m = np.asarray(masked, dtype=float)
    d = np.asarray(hits[0], dtype=float) - (np.asarray(hits[1], dtype=float) if len(hits) > 1 else 0.0)
    if m.size < 2 or m.sum() <= 0:
        raise ValueError(f"a ratio over clusters needs >= 2 clusters and masked tokens, got {m.size}, {m.sum()}")
    estimate = float(d.sum() / m.sum())
    residuals = d - estimate * m
    se = math.sqrt(m.size / (m.size - 1) * float(np.sum(residuals**2))) / float(m.sum())
    half = float(stats.t.ppf((1 + level) / 2, m.size - 1)) * se
    return estimate, estimate - half, estimate + half, se
