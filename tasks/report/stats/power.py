"""What each claim could detect: the minimum detectable effect (MDE) of a difference claim and the sample that
would make its ``min_effect`` detectable.

The MDE is the true difference that the verdict's test finds (the two-sided ``level`` CI excludes 0 on the
right side) with probability ``power``, by the normal approximation (Bloom 1995, "Minimum detectable effects:
a simple way to report the statistical power of experimental designs", Evaluation Review 19(5), eq. 1)::

    MDE = (q(1 - alpha / 2) + q(power)) * SE

``alpha = 1 - level`` is the CI's two-sided level (the test each verdict reads before Holm), ``q`` the
standard normal quantile, or Student's t with ``df`` degrees of freedom when the difference's CI is a t
interval (paired t over seeds or probe words, Welch). ``SE`` is the standard error of the difference from the
same resampling as its CI: the standard deviation of the hierarchical bootstrap replicates (seeds, then test
items; the Multi-Bootstrap of Sellam et al. 2022 is the reference design), the t interval's SE, or for two
rates the Newcombe interval's half-width over ``q(1 - alpha / 2)``. Holm's correction makes a family's
first test stricter still (``alpha / m``), so the MDE here is a lower bound on what the family can detect.

An ``upper_bound`` claim ("the value is at most ``bound``") is supported when its CI's upper end lies at or
below the bound. Its MDE is the distance below the bound at which the true value makes that happen with
``power``: for a rate, the one-sample binomial design (Fleiss, Levin & Paik 2003, "Statistical Methods for
Rates and Proportions", eq. 2.5), ``MDE = q(1 - alpha/2) * sqrt(b(1 - b)/n) + q(power) * sqrt(p(1 - p)/n)`` with
``p = b - MDE`` solved numerically; for a mean over units, ``(t(1 - alpha/2) + t(power)) * sd / sqrt(n)``. The
claim's own gap is the bound minus its point estimate: an inconclusive bound claim whose gap is below the MDE
was underpowered, and one whose point estimate is at or above the bound cannot be supported by more units.

More units shrink the SE as ``1 / sqrt(n)``, so ``min_effect`` becomes detectable with
``n_needed = n * (MDE / |min_effect|)^2`` units of the kind the SE was resampled over (test items for a
fine-tuning claim; seeds, probe words, pairs or masked tokens otherwise). Scaling test items assumes the
item part of the variance dominates: with few seeds, seed variance does not shrink with more items. For a t
interval the multiplier is kept at the present df, so ``n_needed`` errs high (more units, more df).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy import optimize, stats


@dataclass(frozen=True)
class Power:
    """A difference claim's MDE (in the metric's units) at ``power`` and two-sided ``alpha``, its ``se``, and
    ``n`` units of kind ``unit`` (``test items``, ``seeds``...) behind it; ``n_needed`` units would make
    ``|min_effect|`` detectable (None when ``min_effect`` is 0). For an ``upper_bound`` claim ``bound`` is set
    and ``min_effect`` is the gap ``bound - point estimate`` (module docstring)."""

    mde: float
    se: float
    alpha: float
    power: float
    n: int
    unit: str
    min_effect: float
    df: float | None = None
    bound: float | None = None

    @property
    def gap(self) -> float:
        """The effect the design must detect: ``|min_effect|``, or a bound claim's positive gap (else 0)."""
        return max(self.min_effect, 0.0) if self.bound is not None else abs(self.min_effect)

    @property
    def detectable(self) -> bool:
        """Whether the gap is at least the MDE (a true effect that large is found with ``power``)."""
        return self.gap != 0 and self.mde <= self.gap

    @property
    def n_needed(self) -> int | None:
        """Units that bring the MDE down to the gap: ``ceil(n * (MDE / gap)^2)``; None for a zero gap."""
        if self.gap == 0 or not math.isfinite(self.mde):
            return None
        return max(self.n, math.ceil(self.n * (self.mde / self.gap) ** 2 - 1e-9))


def multiplier(alpha: float, power: float, df: float | None = None) -> float:
    """``q(1 - alpha / 2) + q(power)``: normal quantiles, or Student's t with ``df`` degrees of freedom."""
    if not (0 < alpha < 1 and 0 < power < 1):
        raise ValueError(f"alpha and power must lie in (0, 1), got {alpha}, {power}")
    dist = stats.norm if df is None else stats.t(df)
    return float(dist.ppf(1 - alpha / 2) + dist.ppf(power))


def minimum_detectable_effect(se: float, alpha: float, power: float, df: float | None = None) -> float:
    """Bloom's MDE ``(q(1 - alpha / 2) + q(power)) * se`` (module docstring); ``se >= 0``."""
    if not se >= 0:
        raise ValueError(f"standard error must be >= 0, got {se}")
    return multiplier(alpha, power, df) * se


def power_of(
    se: float, n: int, unit: str, min_effect: float, alpha: float, power: float, df: float | None = None
) -> Power | None:
    """The ``Power`` of a difference with standard error ``se`` over ``n`` ``unit``; None without a finite SE."""
    if not (math.isfinite(se) and se >= 0) or n < 1:
        return None
    return Power(minimum_detectable_effect(se, alpha, power, df), se, alpha, power, n, unit, min_effect, df)


def bound_power(
    point: float, bound: float, n: int, unit: str, alpha: float, power: float, sd: float | None = None
) -> Power | None:
    """The ``Power`` of an ``upper_bound`` claim: a rate ``point`` over ``n`` trials (``sd`` None), or a mean of
    ``n`` units with standard deviation ``sd`` (t quantiles, ``n - 1`` df). ``mde`` is ``inf`` when even a true
    rate of 0 would leave the CI above the bound at ``power``. None without a usable SE."""
    if sd is not None:
        if n < 2 or not (math.isfinite(sd) and sd > 0):
            return None
        se = sd / math.sqrt(n)
        return Power(
            minimum_detectable_effect(se, alpha, power, n - 1), se, alpha, power, n, unit, bound - point, n - 1, bound
        )
    if n < 1 or not 0 < bound < 1:
        return None
    z_alpha, z_power = stats.norm.ppf(1 - alpha / 2), stats.norm.ppf(power)
    se = math.sqrt(bound * (1 - bound) / n)

    def shortfall(delta: float) -> float:
        rate = bound - delta
        return delta - z_alpha * se - z_power * math.sqrt(rate * (1 - rate) / n)

    mde = optimize.brentq(shortfall, 0.0, bound) if shortfall(bound) > 0 else math.inf
    return Power(float(mde), se, alpha, power, n, unit, bound - point, None, bound)


def se_from_ci(low: float, high: float, alpha: float) -> float:
    """The normal-approximation SE of a two-sided ``1 - alpha`` interval: half its width over ``q(1 - alpha/2)``."""
    return (high - low) / (2 * float(stats.norm.ppf(1 - alpha / 2)))


def underpowered(p: Power | None) -> str:
    """``underpowered: MDE 0.0600 > min_effect 0.02`` when ``min_effect`` was not detectable, else ``""``."""
    if p is None or p.gap == 0 or p.detectable:
        return ""
    if p.bound is not None:
        return f"underpowered: MDE {p.mde:.4f} > gap to the bound {p.gap:.4f}"
    return f"underpowered: MDE {p.mde:.4f} > min_effect {abs(p.min_effect):g}"


def describe(p: Power | None) -> str:
    """The details line: the MDE, its formula's inputs, and the units that would make min_effect detectable."""
    if p is None:
        return "not computed (no standard error of the difference: no CI)"
    if p.bound is not None:
        return describe_bound(p)
    q = f"t({p.df:.3g})" if p.df is not None else "normal"
    text = (
        f"{p.mde:.4f} at {p.power:.0%} power, two-sided alpha {p.alpha:g} ({q} quantiles; SE {p.se:.4f} over "
        f"{p.n} {p.unit}; Bloom 1995)"
    )
    if p.min_effect == 0:
        return text + "; min_effect 0: any effect counts"
    if p.detectable:
        return text + f"; min_effect {abs(p.min_effect):g} was detectable"
    return (
        text + f"; min_effect {abs(p.min_effect):g} was not detectable: about {p.n_needed} {p.unit} would "
        "make it so (SE scaled by 1/sqrt(n); " + SCALES.get(p.unit, "only this unit scaled") + ")"
    )


#: What scaling each kind of unit assumes.
SCALES = {
    "test items": "items only: seed variance does not shrink with more items, add seeds if it dominates",
    "seeds": "seeds only, the same test items",
}


def describe_bound(p: Power) -> str:
    """The details line of an ``upper_bound`` claim's MDE: how far below the bound the true value must lie."""
    if not math.isfinite(p.mde):
        return (
            f"not reachable: with {p.n} {p.unit} even a true value of 0 leaves the CI above {p.bound:g} at "
            f"{p.power:.0%} power"
        )
    text = (
        f"{p.mde:.4f} below the bound {p.bound:g} at {p.power:.0%} power, two-sided alpha {p.alpha:g} (SE "
        f"{p.se:.4f} over {p.n} {p.unit}): supported that often when the true value is at most "
        f"{p.bound - p.mde:.4f}"
    )
    if p.gap == 0:
        return text + "; the point estimate is at or above the bound, so more units cannot support it"
    if p.detectable:
        return text + f"; the observed gap {p.gap:.4f} was detectable"
    return text + (
        f"; the observed gap {p.gap:.4f} was not: about {p.n_needed} {p.unit} would make it so (SE scaled by 1/sqrt(n))"
    )
