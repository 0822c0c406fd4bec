"""Almost Stochastic Order (ASO): ``eps_min``, how far the treatment's score distribution is from dominating the
baseline's.

Scores ``x`` (treatment runs) and ``y`` (baseline runs), their empirical quantile functions ``F^-1`` and ``G^-1``
(``quantile``). The violation ratio (del Barrio, Cuesta-Albertos & Matrán 2018, "An optimal transportation
approach for assessing almost stochastic order", eq. 4-5; Dror, Shlomov & Reichart 2019, "Deep Dominance - How to
Properly Compare Deep Neural Models", ACL) is the share of the squared Wasserstein-2 distance between the two
where ``x`` is below ``y``::

    eps_W2 = int_{F^-1(t) < G^-1(t)} (F^-1(t) - G^-1(t))^2 dt / int_0^1 (F^-1(t) - G^-1(t))^2 dt

0 when every quantile of ``x`` lies above ``y``'s, 1 when below, 0.5 on equal distributions. ``eps_min`` is its
upper confidence bound at ``level``: ``eps_W2 - sigma / c * q(1 - level)``, ``c = sqrt(n m / (n + m))``, ``sigma``
the standard deviation of ``c (eps_W2* - eps_W2)`` over ``iterations`` bootstrap draws ``eps_W2*`` (each arm
resampled from its quantile function), clipped to [0, 1]. Reading (Ulmer, Hardmeier & Frellsen 2022,
"deep-significance: Easy and Meaningful Statistical Significance Testing in the Age of Neural Networks"):
``eps_min < 0.5`` says the treatment is almost stochastically dominant; they recommend reading ``eps_min <= 0.2``
as dominance. Two samples of one distribution give ``eps_W2`` near 0.5 and, as an upper bound, ``eps_min`` near 1.

This is the algorithm of ``deepsig.aso`` 1.2.8 (Ulmer et al.'s package) in vectorised numpy, integrated on the
same grid ``t = dt, 2 dt, ..., < 1`` and with the same random draws: bootstrap iteration ``k`` (1-based) draws
``x``'s uniforms, then ``y``'s, from ``numpy.random.RandomState(seed + k)``, as deepsig does after
``np.random.seed(seed + k)``. So ``epsilon_min(x, y, level, iterations, seed)`` equals
``deepsig.aso(x, y, confidence_level=level, num_bootstrap_iterations=iterations, seed=seed)``
(tests/report/test_aso.py checks it), about 100 times faster (deepsig's quantile function sorts the scores once per
point of the grid), without deepsig's side effects (it reseeds numpy's global generator and switches joblib's
pickler to dill at import) and without its warning on a zero distance (the ratio is then 0.5, as deepsig sets it).
"""

from __future__ import annotations

import numpy as np
from scipy import stats

#: The step of the integral over t in (0, 1): deepsig.aso's default.
DT = 0.005


def quantile(scores: np.ndarray, p: np.ndarray) -> np.ndarray:
    """The empirical quantile function of ``scores`` at probabilities ``p``: the ``ceil(n p)``-th smallest score
    (rank clipped to ``[1, n]``; deepsig's ``get_quantile_function``). ``scores`` ``(n,)``: ``p`` of any shape,
    the result of its shape; ``scores`` ``(B, n)`` (one sample per row): ``p`` ``(k,)``, the result ``(B, k)``."""
    ordered = np.sort(scores, axis=-1)
    n = ordered.shape[-1]
    index = np.clip(np.ceil(n * np.asarray(p)).astype(int) - 1, 0, n - 1)
    if ordered.ndim == 1:
        return ordered[index]
    return np.take_along_axis(ordered, np.broadcast_to(index, (ordered.shape[0], index.size)), axis=-1)


def violation_ratio(x: np.ndarray, y: np.ndarray, dt: float = DT) -> np.ndarray:
    """``eps_W2`` of each row of ``x`` ``(..., n)`` against the same row of ``y`` ``(..., m)`` (module docstring),
    integrated on ``t = arange(dt, 1, dt)`` (the violation part without its first point, as deepsig); 0.5 for a row
    whose two quantile functions are equal on the grid."""
    t = np.arange(dt, 1, dt)
    f, g = quantile(x, t), quantile(y, t)
    diff = g - f
    distance = np.sum(diff**2 * dt, axis=-1)
    violation = np.sum(np.where(f >= g, 0.0, diff)[..., 1:] ** 2 * dt, axis=-1)
    return np.where(distance == 0, 0.5, violation / np.where(distance == 0, 1.0, distance))


def epsilon_min(x: np.ndarray, y: np.ndarray, level: float, iterations: int, seed: int, dt: float = DT) -> float:
    """``eps_min`` of treatment scores ``x`` ``(n,)`` over baseline scores ``y`` ``(m,)`` at confidence ``level``
    from ``iterations`` bootstrap draws seeded by ``seed`` (module docstring), in [0, 1].

    Raises ValueError unless both are non-empty, finite and 1-D, ``0 < level < 1`` and ``iterations >= 1``."""
    x, y = _scores(x, "x"), _scores(y, "y")
    if not 0 < level < 1 or iterations < 1:
        raise ValueError(f"need 0 < level < 1 and iterations >= 1, got level={level}, iterations={iterations}")
    ratio = float(violation_ratio(x, y, dt))
    state = np.random.RandomState()  # reseeded per iteration: one object, as constructing one costs 20x more
    uniforms = [_uniforms(state, seed + k, x.size, y.size) for k in range(1, iterations + 1)]
    drawn_x = quantile(x, np.stack([u for u, _ in uniforms]))
    drawn_y = quantile(y, np.stack([v for _, v in uniforms]))
    samples = violation_ratio(drawn_x, drawn_y, dt)
    const = np.sqrt(x.size * y.size / (x.size + y.size))
    sigma = np.std(const * (samples - ratio))
    return float(np.clip(ratio - sigma / const * stats.norm.ppf(1 - level), 0.0, 1.0))


def _uniforms(state: np.random.RandomState, seed: int, n: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    """The uniforms of one bootstrap iteration: ``n`` then ``m`` from ``state`` seeded with ``seed`` (the stream of
    ``RandomState(seed)``)."""
    state.seed(seed)
    return state.uniform(0, 1, n), state.uniform(0, 1, m)


def _scores(values: np.ndarray, name: str) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    if array.ndim != 1 or array.size == 0 or not np.all(np.isfinite(array)):
        raise ValueError(f"{name} must be a non-empty finite 1-D array of scores, got shape {array.shape}")
    return array
