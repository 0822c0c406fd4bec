"""Probability of improvement: how often a run of the treatment scores above a run of the baseline, with its interval.

For per-run scores ``x`` (n runs of the treatment) and ``y`` (m runs of the baseline),
``P(X > Y) = (1 / (n m)) sum_i sum_j S(x_i, y_j)``, ``S = 1`` when ``x_i > y_j``, ``1/2`` on a tie, ``0`` else:
the Mann-Whitney ``U`` of ``x`` divided by ``n m`` (``scipy.stats.mannwhitneyu(x, y).statistic``), an estimate of
``P(X > Y)`` for a run drawn from each arm. Its interval is the percentile interval of a bootstrap that draws each
arm's runs with replacement, independently of the other's (rliable's ``StratifiedIndependentBootstrap`` with one
task). Source: Agarwal, Schwarzer, Castro, Courville & Bellemare (2021), "Deep Reinforcement Learning at the Edge
of the Statistical Precipice", NeurIPS, sec. 4.3 and rliable's ``metrics.probability_of_improvement`` (one task:
the average over tasks is the task's own value). 0.5 means neither arm tends to score higher; the treatment is
better in the sense of this statistic when the interval's lower end exceeds 0.5.
"""

from __future__ import annotations

import numpy as np

#: Bootstrap draws compared at once (bounds the ``(chunk, n, m)`` comparison array's memory).
CHUNK = 512


def probability_of_improvement(x: np.ndarray, y: np.ndarray) -> float:
    """``P(X > Y)`` (ties count 1/2) of scores ``x`` ``(n,)`` over ``y`` ``(m,)``, in [0, 1].

    Raises ValueError unless both are non-empty, finite and 1-D."""
    x, y = _scores(x, "x"), _scores(y, "y")
    return float(_wins(x[None, :], y[None, :])[0])


def improvement_replicates(x: np.ndarray, y: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    """``(resamples,)`` bootstrap replicates of ``probability_of_improvement``: each draws ``n`` runs of ``x`` and
    ``m`` of ``y`` with replacement, the arms independently (``numpy.random.default_rng(seed)``; ``x``'s indices,
    then ``y``'s). Raises ValueError for bad scores or ``resamples < 1``."""
    x, y = _scores(x, "x"), _scores(y, "y")
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1, got {resamples}")
    rng = np.random.default_rng(seed)
    draws_x = rng.integers(0, x.size, size=(resamples, x.size))
    draws_y = rng.integers(0, y.size, size=(resamples, y.size))
    return np.concatenate(
        [_wins(x[draws_x[s : s + CHUNK]], y[draws_y[s : s + CHUNK]]) for s in range(0, resamples, CHUNK)]
    )


def improvement_ci(x: np.ndarray, y: np.ndarray, level: float, resamples: int, seed: int) -> tuple[float, float, float]:
    """``(P(X > Y), low, high)``: the point value and the two-sided ``level`` percentile interval of
    ``improvement_replicates`` (Efron & Tibshirani 1993, sec. 13.3). Raises ValueError unless ``0 < level < 1``."""
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    replicates = improvement_replicates(x, y, resamples, seed)
    low, high = np.quantile(replicates, [(1 - level) / 2, (1 + level) / 2])
    return probability_of_improvement(x, y), float(low), float(high)


def _wins(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per row ``b`` of ``x`` ``(B, n)`` and ``y`` ``(B, m)``: the share of pairs with ``x > y``, ties 1/2."""
    greater = (x[:, :, None] > y[:, None, :]).mean(axis=(1, 2))
    ties = (x[:, :, None] == y[:, None, :]).mean(axis=(1, 2))
    return greater + ties / 2


def _scores(values: np.ndarray, name: str) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    if array.ndim != 1 or array.size == 0 or not np.all(np.isfinite(array)):
        raise ValueError(f"{name} must be a non-empty finite 1-D array of scores, got shape {array.shape}")
    return array
