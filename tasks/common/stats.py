"""Student-t intervals and exact binomial intervals: the one implementation every stage and the claim table use.

A mean of a few i.i.d. measurements (seeds, probe words) gets the two-sided interval
``mean +- t_{(1+level)/2, n-1} * s / sqrt(n)`` with ``s`` the sample standard deviation (ddof=1) and the
quantile from ``scipy.stats.t`` (Student 1908; any statistics text, e.g. Wasserman, *All of Statistics*, 6.3).
A proportion ``found / n`` (a detector's recall, a share of true flags) gets the exact Clopper-Pearson interval
(Clopper and Pearson 1934), from ``scipy.stats.binomtest``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from scipy import stats


def t_interval(values: Sequence[float], level: float) -> tuple[float, float, float, float]:
    """``(mean, std, low, high)`` of ``values`` at two-sided coverage ``level`` (e.g. 0.95).

    Zero spread gives ``low == high == mean``. Raises ``ValueError`` for fewer than 2 values or a
    non-finite value (one value has no spread to estimate, and JSON has no NaN).
    """
    n = len(values)
    if n < 2:
        raise ValueError(f"a t-interval needs at least 2 values, got {n}")
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"non-finite value among {list(values)}")
    mean = math.fsum(values) / n
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    half = stats.t.ppf((1 + level) / 2, df=n - 1) * std / math.sqrt(n)
    return mean, std, mean - half, mean + half


def summarize(
    values: Sequence[float], seeds: Sequence[int], level: float, bounds: tuple[float, float] | None = None
) -> dict:
    """``{per_seed, seeds, mean, std, ci95_low, ci95_high, n}`` for one metric measured once per seed.

    The interval is ``t_interval``, clipped to ``bounds`` (e.g. ``(0, 1)`` for an F1: with 2 seeds a t-interval
    easily reaches past 1); its keys say ``ci95`` as the metrics contract fixes them, ``level`` sets the
    coverage. With one seed ``std`` and the interval are ``None``. Raises ``ValueError`` when values and seeds
    differ in length or are empty, or a value is not finite.
    """
    if len(values) != len(seeds) or not values:
        raise ValueError(f"need one value per seed, got {len(values)} values for {len(seeds)} seeds")
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"non-finite metric value among {list(values)}")
    n = len(values)
    out = {"per_seed": [float(v) for v in values], "seeds": [int(s) for s in seeds], "n": n}
    if n < 2:
        return {**out, "mean": math.fsum(values) / n, "std": None, "ci95_low": None, "ci95_high": None}
    mean, std, low, high = t_interval(values, level)
    if bounds is not None:
        low, high = max(low, bounds[0]), min(high, bounds[1])
    return {**out, "mean": mean, "std": std, "ci95_low": low, "ci95_high": high}


def clopper_pearson(found: int, n: int, level: float = 0.95) -> tuple[float | None, float | None]:
    """Exact (Clopper-Pearson) two-sided interval ``(low, high)`` of the proportion ``found / n`` at coverage
    ``level``, each end rounded to 1e-6 and within [0, 1]; ``(None, None)`` when ``n == 0`` (no trials, no
    proportion). Raises ``ValueError`` (from ``scipy.stats.binomtest``) when ``found`` is not in ``[0, n]``."""
    if n == 0:
        return None, None
    ci = stats.binomtest(found, n).proportion_ci(confidence_level=level, method="exact")
    return round(float(ci.low), 6), round(float(ci.high), 6)
