"""Statistics of the claim table: arm estimates, paired and unpaired differences, and verdicts.

Statistics (all quantiles from scipy, none written by hand):

- an arm: mean with a two-sided Student-t interval over its units;
- a difference ``treatment - baseline``: paired when both arms have the same units (the same seeds or
  the same words): paired t (``scipy.stats.ttest_rel``) or a paired percentile bootstrap
  (``scipy.stats.bootstrap``, Efron & Tibshirani 1993); otherwise Welch's unequal-variance t
  (``scipy.stats.ttest_ind(equal_var=False)``, Welch 1947).

Verdicts of a ``difference`` claim: ``supported`` when the CI's lower bound exceeds ``min_effect``;
``contradicted`` when its upper bound is below ``min(0, min_effect)`` (clearly the other way; a negative
``min_effect`` is a non-inferiority margin); ``inconclusive`` otherwise. An ``upper_bound`` claim
(``treatment`` must stay at or below ``min_effect``, e.g. a leakage rate) is ``supported`` when the
treatment's CI upper bound is <= ``min_effect``, ``contradicted`` when its lower bound is above it.
A claim whose inputs are missing gets verdict ``not run`` with the reason; it never disappears. A claim whose
precondition fails (e.g. the pretrained encoder never beat the unigram baseline, so the treatment was never
produced) gets ``not resolvable: <precondition>, measured <value>``, never ``contradicted``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import stats

from tasks.common.stats import t_interval

Verdict = Literal["supported", "contradicted", "inconclusive", "not resolvable", "not run"]
#: Every verdict, in the order the summaries list them.
VERDICTS: tuple[Verdict, ...] = ("supported", "inconclusive", "contradicted", "not resolvable", "not run")


@dataclass(frozen=True)
class StatsConfig:
    """The statistics settings from the ``report`` params section."""

    level: float
    paired_method: str
    resamples: int
    seed: int


@dataclass(frozen=True)
class Estimate:
    """A point value with its two-sided CI (``nan`` bounds when not available), n units and the method."""

    mean: float
    low: float
    high: float
    n: int
    method: str

    @property
    def has_ci(self) -> bool:
        """Whether both CI bounds are finite."""
        return math.isfinite(self.low) and math.isfinite(self.high)


def mean_ci(values: tuple[float, ...], level: float) -> Estimate:
    """Mean and Student-t CI over units (``tasks.common.stats.t_interval``); n=1 has no CI."""
    if len(values) < 2:
        return Estimate(float(np.mean(values)), math.nan, math.nan, len(values), "single value, no CI")
    mean, std, low, high = t_interval([float(v) for v in values], level)
    method = "t over units (zero variance)" if std == 0.0 else "t over units"
    return Estimate(mean, low, high, len(values), method)


def proportion_ci(events: int, trials: int, level: float) -> Estimate:
    """A rate ``events/trials`` with its exact Clopper-Pearson CI (``scipy.stats.binomtest``)."""
    ci = stats.binomtest(events, trials).proportion_ci(confidence_level=level, method="exact")
    return Estimate(events / trials, float(ci.low), float(ci.high), trials, "Clopper-Pearson")


def welch_ci(treatment: tuple[float, ...], baseline: tuple[float, ...], level: float) -> Estimate:
    """CI of ``mean(treatment) - mean(baseline)`` by Welch's t (Welch 1947, via ``scipy.stats.ttest_ind``).

    Needs n >= 2 per arm, else the bounds are ``nan``. ``n`` is the smaller arm's size.
    """
    diff = float(np.mean(treatment) - np.mean(baseline))
    n = min(len(treatment), len(baseline))
    if n < 2:
        return Estimate(diff, math.nan, math.nan, n, "Welch t: needs n>=2 per arm, no CI")
    res = stats.ttest_ind(treatment, baseline, equal_var=False)
    ci = res.confidence_interval(confidence_level=level)
    return Estimate(diff, float(ci.low), float(ci.high), n, "Welch t (unpaired)")


def paired_ci(treatment: tuple[float, ...], baseline: tuple[float, ...], level: float, method: str,
              resamples: int, seed: int) -> Estimate:
    """CI of the mean paired difference ``treatment[i] - baseline[i]``.

    ``method="t"``: paired t (``scipy.stats.ttest_rel``). ``method="bootstrap"``: percentile bootstrap of
    the mean difference (``scipy.stats.bootstrap(paired=True)``, ``resamples`` draws, a numpy Generator
    seeded with ``seed``). With 3 seeds a bootstrap has at most 10 distinct resample means and covers less
    than it claims, which is why ``t`` is the default in params.yaml. Raises ``ValueError`` on unequal lengths.
    """
    if len(treatment) != len(baseline):
        raise ValueError(f"paired arms differ in length: {len(treatment)} vs {len(baseline)}")
    deltas = np.asarray(treatment, dtype=float) - np.asarray(baseline, dtype=float)
    diff, n = float(deltas.mean()), int(deltas.size)
    if n < 2:
        return Estimate(diff, math.nan, math.nan, n, "paired: needs n>=2, no CI")
    if float(np.ptp(deltas)) <= 1e-12 * max(1.0, abs(diff)):  # equal up to float rounding: zero variance
        return Estimate(diff, diff, diff, n, f"paired {method} (identical differences)")
    if method == "t":
        ci = stats.ttest_rel(treatment, baseline).confidence_interval(confidence_level=level)
        return Estimate(diff, float(ci.low), float(ci.high), n, "paired t")
    res = stats.bootstrap((deltas,), np.mean, confidence_level=level, n_resamples=resamples,
                          method="percentile", rng=np.random.default_rng(seed))
    ci = res.confidence_interval
    return Estimate(diff, float(ci.low), float(ci.high), n, f"paired percentile bootstrap ({resamples} resamples)")


def difference_verdict(diff: Estimate, min_effect: float) -> tuple[Verdict, str]:
    """Verdict of a ``difference`` claim from its CI (rules in the module docstring), with a short reason."""
    if not diff.has_ci:
        return "inconclusive", "no CI for the difference"
    if diff.low > min_effect:
        return "supported", f"CI lower bound {diff.low:.4f} > min_effect {min_effect:g}"
    if diff.high < min(0.0, min_effect):
        return "contradicted", f"CI upper bound {diff.high:.4f} < {min(0.0, min_effect):g}"
    if diff.high < min_effect:
        return "inconclusive", f"effect, if any, is below min_effect {min_effect:g}"
    return "inconclusive", f"CI [{diff.low:.4f}, {diff.high:.4f}] contains min_effect {min_effect:g}"


def bound_verdict(value: Estimate, bound: float) -> tuple[Verdict, str]:
    """Verdict of an ``upper_bound`` claim: is the treatment's CI at or below ``bound``?"""
    if not value.has_ci:
        return "inconclusive", "no CI for the treatment"
    if value.high <= bound:
        return "supported", f"CI upper bound {value.high:.4f} <= {bound:g}"
    if value.low > bound:
        return "contradicted", f"CI lower bound {value.low:.4f} > {bound:g}"
    return "inconclusive", f"CI [{value.low:.4f}, {value.high:.4f}] contains the bound {bound:g}"
