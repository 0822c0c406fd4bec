"""Summary statistics of one metric over seeds: mean, sample std and a Student-t confidence interval."""

from __future__ import annotations

import math
from collections.abc import Sequence

from scipy import stats


def summarize(values: Sequence[float], seeds: Sequence[int], level: float) -> dict:
    """``{per_seed, seeds, mean, std, ci95_low, ci95_high, n}`` for one metric measured once per seed.

    ``std`` is the sample standard deviation (ddof=1). The interval is the two-sided Student-t interval
    ``mean +- t_{(1+level)/2, n-1} * std / sqrt(n)`` (scipy.stats.t), the usual interval for a mean of
    few i.i.d. runs; its keys say ``ci95`` as the metrics contract fixes them, ``level`` sets the coverage.
    With one seed ``std`` and the interval are ``None`` (undefined, and JSON has no NaN).
    Raises ``ValueError`` when values and seeds differ in length or are empty, or a value is not finite.
    """
    if len(values) != len(seeds) or not values:
        raise ValueError(f"need one value per seed, got {len(values)} values for {len(seeds)} seeds")
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"non-finite metric value among {list(values)}")
    n = len(values)
    mean = math.fsum(values) / n
    out = {"per_seed": [float(v) for v in values], "seeds": [int(s) for s in seeds], "mean": mean, "n": n}
    if n < 2:
        return {**out, "std": None, "ci95_low": None, "ci95_high": None}
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    half = stats.t.ppf((1 + level) / 2, df=n - 1) * std / math.sqrt(n)
    return {**out, "std": std, "ci95_low": mean - half, "ci95_high": mean + half}
