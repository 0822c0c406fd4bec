"""Expected validation performance: the best dev score expected from ``n`` hyperparameter configurations drawn at
random from a tuning grid, as a function of ``n`` (the tuning budget).

For the dev scores ``v`` of the ``N`` configurations a sweep tried, sorted ascending ``v_(1) <= ... <= v_(N)``,
and ``n`` configurations drawn uniformly with replacement, the maximum is ``v_(i)`` with probability
``(i / N)^n - ((i - 1) / N)^n``, so (Dodge, Gururangan, Card, Schwartz & Smith 2019, "Show Your Work: Improved
Reporting of Experimental Results", EMNLP, eq. 1)::

    E[max of n] = sum_i v_(i) [(i / N)^n - ((i - 1) / N)^n]

``n = 1`` gives the mean of ``v``, and the value rises to ``max(v)`` as ``n`` grows; ``n`` may exceed ``N``, so
arms with grids of different sizes are compared at equal budgets. An arm whose curve lies above another's at
budget ``n`` is expected to win when both are tuned with ``n`` configurations.
"""

from __future__ import annotations

import numpy as np


def expected_max(values: np.ndarray, n: int) -> float:
    """``E[max]`` of ``n`` draws with replacement from ``values`` ``(N,)`` (Dodge et al. 2019, eq. 1).

    Raises ValueError unless ``values`` is non-empty, finite and 1-D and ``n >= 1``."""
    return float(expected_max_curve(values, n)[-1])


def expected_max_curve(values: np.ndarray, budget: int) -> np.ndarray:
    """``(budget,)``: ``expected_max(values, n)`` for ``n = 1, ..., budget``.

    Raises ValueError unless ``values`` is non-empty, finite and 1-D and ``budget >= 1``."""
    v = np.sort(np.asarray(values, dtype=float))
    if v.ndim != 1 or v.size == 0 or not np.all(np.isfinite(v)):
        raise ValueError(f"values must be a non-empty finite 1-D array of dev scores, got shape {v.shape}")
    if budget < 1:
        raise ValueError(f"budget must be at least 1, got {budget}")
    share = np.arange(v.size + 1) / v.size  # (i / N) for i = 0..N
    n = np.arange(1, budget + 1)[:, None]
    weights = share[None, 1:] ** n - share[None, :-1] ** n  # (budget, N): P(max = v_(i))
    return weights @ v
