"""Statistics of the claim table: arm estimates, paired and unpaired differences, and verdicts.

Statistics (all quantiles from scipy, none written by hand):

- an arm: mean with a two-sided Student-t interval over its units;
- a difference ``treatment - baseline``: paired when both arms have the same units (the same seeds or
  the same words): paired t (``scipy.stats.ttest_rel``) or a paired percentile bootstrap
  (``scipy.stats.bootstrap``, Efron & Tibshirani 1993); otherwise Welch's unequal-variance t
  (``scipy.stats.ttest_ind(equal_var=False)``, Welch 1947).

Verdicts of a ``difference`` claim: ``supported`` when the CI's lower bound exceeds ``min_effect``;
``contradicted`` when its upper bound is below ``min(0, min_effect)`` (clearly the other way; a negative
``min_effect`` is a non-inferiority margin); ``equivalent`` when two one-sided tests (TOST, Schuirmann 1987)
put the difference within +-``min_effect`` at ``alpha`` (a tight null result; only for ``min_effect > 0``);
``ruled out`` when a positive claim (``min_effect > 0``) is not equivalent but its CI's upper bound is
below ``min_effect`` (an effect as large as claimed is excluded, a smaller one is not); ``inconclusive``
otherwise. Each verdict carries the p-value of its test, and the report applies Holm's
step-down correction within each declared family of claims (``holm_verdicts``; primary, findings, integrity): a
decisive verdict whose adjusted p-value exceeds ``alpha = 1 - level`` becomes ``inconclusive``. An ``upper_bound`` claim
(``treatment`` must stay at or below ``min_effect``, e.g. a leakage rate) is ``supported`` when the
treatment's CI upper bound is <= ``min_effect``, ``contradicted`` when its lower bound is above it.
A claim whose inputs are missing gets verdict ``not run`` with the reason; it never disappears. A claim whose
precondition fails (e.g. the pretrained encoder never beat the unigram baseline, so the treatment was never
produced) gets ``not resolvable: <precondition>, measured <value>``, never ``contradicted``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import stats

from tasks.common.stats import t_interval
from tasks.report.stats.bootstrap import holm

Verdict = Literal["supported", "equivalent", "ruled out", "contradicted", "inconclusive", "not resolvable", "not run"]
#: Every verdict, in the order the summaries list them.
VERDICTS: tuple[Verdict, ...] = (
    "supported",
    "equivalent",
    "ruled out",
    "inconclusive",
    "contradicted",
    "not resolvable",
    "not run",
)
#: The verdicts that reject a null hypothesis, so Holm's correction can demote them to ``inconclusive``.
DECISIVE: tuple[Verdict, ...] = ("supported", "contradicted", "equivalent", "ruled out")


@dataclass(frozen=True)
class StatsConfig:
    """The statistics settings from the ``report`` params section (``alpha`` = 1 - ``level``, family-wise):
    ``power`` of the minimum detectable effects, and the floor gate (``floor_baseline`` ``best`` | ``weakest``
    baseline, plus ``floor_margin``) of ``tasks.report.claims.gates``; ``family_size`` is the declared size ``m``
    of the Holm family of the claim being evaluated (set per claim by ``evaluation.evaluate_all``)."""

    level: float
    paired_method: str
    resamples: int
    seed: int
    max_diverged_fraction: float = 0.0
    slice_resamples: int = 2000
    calibration_bins: int = 15
    power: float = 0.8
    floor_margin: float = 0.0
    floor_baseline: str = "best"
    family_size: int = 1

    @property
    def alpha(self) -> float:
        """The family-wise error rate of the report's verdicts (Holm), ``1 - level``."""
        return 1.0 - self.level

    @property
    def first_step_alpha(self) -> float:
        """Holm's first step in a family of ``family_size`` claims, ``alpha / m``: the MDEs are computed at it."""
        return self.alpha / self.family_size


@dataclass(frozen=True)
class Tests:
    """One-sided p-values of a claim's quantity (a difference, or a rate against a bound), as functions:
    ``greater(null)`` tests H0 "value <= null", ``less(null)`` H0 "value >= null", ``tost(margin)`` the two
    one-sided tests of equivalence within +-margin (Schuirmann 1987). Each returns a p-value in [0, 1]."""

    __test__ = False  # not a pytest test class: test modules import it, and pytest would try to collect it

    greater: Callable[[float], float]
    less: Callable[[float], float]
    tost: Callable[[float], float]


def _from_one_sided(one: Callable[[float, str], float]) -> Tests:
    """``Tests`` from ``one(null, "greater" | "less")``; TOST is the larger p of the two shifted one-sided tests."""
    return Tests(
        lambda m: one(m, "greater"),
        lambda m: one(m, "less"),
        lambda m: max(one(-abs(m), "greater"), one(abs(m), "less")),
    )


def t_tests(deltas: np.ndarray) -> Tests:
    """``Tests`` of the mean of paired differences ``deltas`` (one-sample t, ``scipy.stats.ttest_1samp``)."""

    def one(null: float, side: str) -> float:
        if float(np.ptp(deltas)) == 0.0:  # no spread: the test is decided by the sign alone
            gap = float(deltas[0]) - null
            return 0.0 if (gap > 0 if side == "greater" else gap < 0) else 1.0
        return float(stats.ttest_1samp(deltas, null, alternative=side).pvalue)

    return _from_one_sided(one)


def welch_tests(treatment: tuple[float, ...], baseline: tuple[float, ...]) -> Tests:
    """``Tests`` of ``mean(treatment) - mean(baseline)`` by Welch's t (the treatment shifted by the null)."""
    t = np.asarray(treatment, dtype=float)

    def one(null: float, side: str) -> float:
        return float(stats.ttest_ind(t - null, baseline, equal_var=False, alternative=side).pvalue)

    return _from_one_sided(one)


def binomial_tests(events: int, trials: int) -> Tests:
    """``Tests`` of a rate ``events/trials`` against a bound (exact binomial, ``scipy.stats.binomtest``)."""

    def one(bound: float, side: str) -> float:
        return float(stats.binomtest(events, trials, min(max(bound, 0.0), 1.0), alternative=side).pvalue)

    return Tests(lambda b: one(b, "greater"), lambda b: one(b, "less"), lambda b: 1.0)


def two_proportion_tests(events: tuple[int, int], trials: tuple[int, int]) -> Tests:
    """``Tests`` of ``p1 - p2`` against a margin for two independent rates: a Wald z-test with the unpooled
    standard error (``scipy.stats.norm``); TOST from its two one-sided p-values."""
    p1, p2 = (e / n for e, n in zip(events, trials, strict=True))
    se = math.sqrt(p1 * (1 - p1) / trials[0] + p2 * (1 - p2) / trials[1])

    def one(margin: float, side: str) -> float:
        if se == 0.0:
            return 0.0 if (p1 - p2 > margin if side == "greater" else p1 - p2 < margin) else 1.0
        z = (p1 - p2 - margin) / se
        return float(stats.norm.sf(z) if side == "greater" else stats.norm.cdf(z))

    return Tests(
        lambda m: one(m, "greater"),
        lambda m: one(m, "less"),
        lambda m: max(one(-abs(m), "greater"), one(abs(m), "less")),
    )


def untestable() -> Tests:
    """``Tests`` when there is nothing to test (no CI): every p-value is 1."""
    return Tests(lambda _: 1.0, lambda _: 1.0, lambda _: 1.0)


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


def two_proportion_ci(events: tuple[int, int], trials: tuple[int, int], level: float) -> Estimate:
    """CI of ``p1 - p2`` for two independent rates: Newcombe's hybrid score interval (Newcombe 1998, method 10)
    from each rate's Wilson interval (``scipy.stats.binomtest``). Rates measured on the same items (e.g. the
    same masked tokens) are paired, so treating them as independent gives a conservative, wider interval."""
    (p1, l1, u1), (p2, l2, u2) = (
        (e / n, float(ci.low), float(ci.high))
        for e, n in zip(events, trials, strict=True)
        for ci in [stats.binomtest(e, n).proportion_ci(confidence_level=level, method="wilson")]
    )
    diff = p1 - p2
    low = diff - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2)
    high = diff + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)
    return Estimate(diff, low, high, min(trials), "Newcombe hybrid score (independent rates)")


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


def paired_ci(
    treatment: tuple[float, ...], baseline: tuple[float, ...], level: float, method: str, resamples: int, seed: int
) -> Estimate:
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
    res = stats.bootstrap(
        (deltas,),
        np.mean,
        confidence_level=level,
        n_resamples=resamples,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    ci = res.confidence_interval
    return Estimate(diff, float(ci.low), float(ci.high), n, f"paired percentile bootstrap ({resamples} resamples)")


def two_sided(p_one_sided: float) -> float:
    """The two-sided p-value of a test whose direction the data picked: twice the one-sided one, at most 1.

    The verdicts read a two-sided CI, whose side is chosen after seeing the data; Holm needs the p-value of
    that two-sided decision, or the family-wise error doubles."""
    return min(1.0, 2.0 * p_one_sided)


def difference_verdict(diff: Estimate, min_effect: float, tests: Tests, alpha: float) -> tuple[Verdict, str, float]:
    """Verdict of a ``difference`` claim from its CI (rules in the module docstring), a short reason, and the
    p-value of the verdict's test, which the report adjusts across claims (Holm): ``supported``: H0 diff <=
    min_effect; ``contradicted``: H0 diff >= min(0, min_effect), both two-sided (``two_sided``);
    ``equivalent``: TOST within +-min_effect (already an intersection of two one-sided tests at alpha);
    ``ruled out``: H0 diff >= min_effect, two-sided; ``inconclusive``: the supported test."""
    if not diff.has_ci:
        return "inconclusive", "no CI for the difference", 1.0
    floor = min(0.0, min_effect)
    if diff.low > min_effect:
        return (
            "supported",
            f"CI lower bound {diff.low:.4f} > min_effect {min_effect:g}",
            two_sided(tests.greater(min_effect)),
        )
    if diff.high < floor:
        return "contradicted", f"CI upper bound {diff.high:.4f} < {floor:g}", two_sided(tests.less(floor))
    p_equivalent = tests.tost(min_effect) if min_effect > 0 else 1.0
    if p_equivalent <= alpha:
        return "equivalent", f"TOST p {p_equivalent:.3g} <= {alpha:g}: within +-{min_effect:g}", p_equivalent
    if diff.high < min_effect:  # min_effect > 0 here: the upper bound is in [0, min_effect)
        return (
            "ruled out",
            f"CI upper bound {diff.high:.4f} < min_effect {min_effect:g}: an effect that large is excluded",
            two_sided(tests.less(min_effect)),
        )
    p_supported = two_sided(tests.greater(min_effect))
    return "inconclusive", f"CI [{diff.low:.4f}, {diff.high:.4f}] contains min_effect {min_effect:g}", p_supported


def bound_verdict(value: Estimate, bound: float, tests: Tests) -> tuple[Verdict, str, float]:
    """Verdict of an ``upper_bound`` claim: is the treatment's CI at or below ``bound``? With the p-value of
    the verdict's two-sided test (``supported``/``inconclusive``: H0 value >= bound; ``contradicted``: H0 value
    <= bound)."""
    if not value.has_ci:
        return "inconclusive", "no CI for the treatment", 1.0
    if value.high <= bound:
        return "supported", f"CI upper bound {value.high:.4f} <= {bound:g}", two_sided(tests.less(bound))
    if value.low > bound:
        return "contradicted", f"CI lower bound {value.low:.4f} > {bound:g}", two_sided(tests.greater(bound))
    return (
        "inconclusive",
        f"CI [{value.low:.4f}, {value.high:.4f}] contains the bound {bound:g}",
        two_sided(tests.less(bound)),
    )


def holm_verdicts(
    verdicts: dict[str, tuple[Verdict, float]], alpha: float, m: int | None = None
) -> dict[str, tuple[Verdict, float]]:
    """``{claim id: (verdict, Holm-adjusted p)}``: a decisive verdict (``DECISIVE``) whose adjusted p-value
    exceeds ``alpha`` becomes ``inconclusive`` (family-wise error <= alpha over the claims given, Holm 1979:
    call it once per family). Input: each claim's verdict and the p-value of its test; ``m`` the family's declared
    size (default: the claims given; ``bootstrap.holm``)."""
    adjusted = holm({cid: p for cid, (_, p) in verdicts.items()}, m) if verdicts else {}
    out = {}
    for cid, (verdict, _) in verdicts.items():
        out[cid] = ("inconclusive" if verdict in DECISIVE and adjusted[cid] > alpha else verdict, adjusted[cid])
    return out
