"""What each claim could detect: the difference its design detects against the claim's margin, at Holm's alpha, and
the design (seeds x test items) that would decide it.

The verdict ``supported`` tests H0 ``difference <= min_effect`` with a two-sided CI, and Holm's first step tests
the family's smallest p-value at ``alpha / m`` (``m``: the family's declared size). So the minimum detectable
difference (MDE) is the true difference that the test finds with probability ``power``, by the normal
approximation of Bloom (1995, "Minimum detectable effects: a simple way to report the statistical power of
experimental designs", Evaluation Review 19(5), eq. 1), moved to the margin::

    MDE = min_effect + (q(1 - alpha / (2 m)) + q(power)) * SE

``q`` is the standard normal quantile, or Student's t with ``df`` degrees of freedom when the CI is a t interval
(paired t over seeds or words, Welch, or Satterthwaite's df of the variance components,
``tasks.report.stats.components``). ``SE`` is the standard error of the difference from the same computation as
its CI. The claim is decided, with ``power``, when its true difference lies at least ``reach = MDE - min_effect``
from the margin; so it is ``underpowered`` when its observed ``|difference - min_effect|`` (``gap``) is below the
reach. Holm's later steps are less strict (``alpha / (m - 1)``, ...), so this is what the family's first test
can detect.

What would decide it: with variance components (``Components``: pretraining seed, seed, item), the SE of a design
with ``s`` fine-tuning seeds and ``n`` test items is ``sqrt(V_p + V_s s0 / s + V_i n0 / n)`` (``s0``, ``n0``
the present ones; pretraining seeds held; arms with their own seeds, e.g. a 5-seed MiniLM against a 20-seed arm,
scale each arm's seed part by its own ``s0``, and an arm that already has ``s`` or more keeps it:
``Components.seed_at``), and ``design`` lists the smallest ``(s, n)`` of the grid
``SEED_GRID x ITEM_FACTORS`` that bring the reach to the gap (quantiles at the present df, so it errs high).
When the seed part at the present seeds alone exceeds the gap no number of items decides it; when the
pretraining part alone does, only more pretraining seeds can: more than ``n_p q^2 V_p / gap^2`` of them.
Without components, ``n_needed = n * (reach / gap)^2`` units of the kind the SE was resampled over.

An ``upper_bound`` claim ("the value is at most ``bound``") is supported when its CI's upper end lies at or
below the bound. Its MDE is the distance below the bound at which the true value makes that happen with
``power``: for a rate, the one-sample binomial design (Fleiss, Levin & Paik 2003, "Statistical Methods for
Rates and Proportions", eq. 2.5), ``MDE = q(1 - alpha/2) * sqrt(b(1 - b)/n) + q(power) * sqrt(p(1 - p)/n)`` with
``p = b - MDE`` solved numerically; for a mean over units, ``(t(1 - alpha/2) + t(power)) * sd / sqrt(n)``. The
claim's own gap is the bound minus its point estimate: an inconclusive bound claim whose gap is below the MDE
was underpowered, and one whose point estimate is at or above the bound cannot be supported by more units.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy import optimize, stats

from tasks.report.stats.components import Components

#: Fine-tuning seeds and multiples of the present test items that ``Power.design`` tries.
SEED_GRID = (5, 10, 20, 40, 80)
ITEM_FACTORS = (1, 2, 4, 8)


@dataclass(frozen=True)
class Power:
    """A claim's MDE (metric units) at ``power`` and two-sided ``alpha`` (already Holm's ``alpha / m``), its
    ``se`` (with ``df``; None: normal) and ``n`` units of kind ``unit`` behind it; ``difference`` the observed one
    (nan: unknown) and ``parts`` its variance components. For an ``upper_bound`` claim ``bound`` is set, ``mde`` is
    the distance below the bound and ``min_effect`` the gap ``bound - point estimate`` (module docstring)."""

    mde: float
    se: float
    alpha: float
    power: float
    n: int
    unit: str
    min_effect: float
    df: float | None = None
    bound: float | None = None
    difference: float = math.nan
    parts: Components | None = None

    @property
    def reach(self) -> float:
        """How far from the margin a true difference must lie to be decided with ``power``: ``MDE - min_effect``
        (a bound claim: its MDE)."""
        return self.mde if self.bound is not None else self.mde - self.min_effect

    @property
    def gap(self) -> float:
        """The distance the design must resolve: ``|difference - min_effect|`` (0 when the difference is unknown),
        or a bound claim's positive gap to the bound."""
        if self.bound is not None:
            return max(self.min_effect, 0.0)
        return abs(self.difference - self.min_effect) if math.isfinite(self.difference) else 0.0

    @property
    def detectable(self) -> bool:
        """Whether the observed gap is at least the reach (a true difference that far is decided with power)."""
        return self.gap > 0 and self.reach <= self.gap

    @property
    def n_needed(self) -> int | None:
        """Units that bring the reach down to the gap, ``ceil(n * (reach / gap)^2)``; None for a zero gap."""
        if self.gap == 0 or not math.isfinite(self.reach):
            return None
        return max(self.n, math.ceil(self.n * (self.reach / self.gap) ** 2 - 1e-9))

    def design(self) -> tuple[list[dict[str, int]], str]:
        """``(designs, note)``: the smallest ``{seeds, items}`` of the grid that decide the gap (one per number of
        seeds, fewest seeds first), and a sentence; empty designs with a note when none can (module docstring)."""
        p, gap = self.parts, self.gap
        if p is None or gap == 0 or self.detectable:
            return [], ""
        mult = multiplier(self.alpha, self.power, self.df)
        if mult * math.sqrt(p.pretraining_seed) >= gap:
            more = math.ceil(p.n_pretraining * mult**2 * p.pretraining_seed / gap**2)
            return [], (
                "no number of fine-tuning seeds or test items: the pretraining-seed part alone exceeds it (more than "
                f"{more} pretraining seeds, from {p.n_pretraining})"
            )
        out = []
        for s in sorted({p.n_seeds, *(g for g in SEED_GRID if g > p.n_seeds)}):
            for f in ITEM_FACTORS:
                var = p.pretraining_seed + p.seed_at(s) + p.item / f
                if mult * math.sqrt(var) <= gap:
                    out.append({"seeds": s, "items": p.n_items * f})
                    break
        seeds_alone = mult * math.sqrt(p.pretraining_seed + p.seed) >= gap
        note = f"no number of test items at {p.n_seeds} seeds (the seed part alone exceeds it); " if seeds_alone else ""
        if not out:
            return [], note + f"no design up to {SEED_GRID[-1]} seeds x {ITEM_FACTORS[-1] * p.n_items} items"
        return out, note + "decided by " + ", ".join(f"{d['seeds']} seeds x {d['items']} items" for d in out)


def multiplier(alpha: float, power: float, df: float | None = None) -> float:
    """``q(1 - alpha / 2) + q(power)``: normal quantiles, or Student's t with ``df`` degrees of freedom."""
    if not (0 < alpha < 1 and 0 < power < 1):
        raise ValueError(f"alpha and power must lie in (0, 1), got {alpha}, {power}")
    dist = stats.norm if df is None or not math.isfinite(df) else stats.t(df)
    return float(dist.ppf(1 - alpha / 2) + dist.ppf(power))


def minimum_detectable_effect(se: float, alpha: float, power: float, df: float | None = None) -> float:
    """Bloom's ``(q(1 - alpha / 2) + q(power)) * se`` (module docstring: the reach from the margin); ``se >= 0``."""
    if not se >= 0:
        raise ValueError(f"standard error must be >= 0, got {se}")
    return multiplier(alpha, power, df) * se


def power_of(
    se: float,
    n: int,
    unit: str,
    min_effect: float,
    alpha: float,
    power: float,
    df: float | None = None,
    difference: float = math.nan,
    parts: Components | None = None,
) -> Power | None:
    """The ``Power`` of a difference with standard error ``se`` over ``n`` ``unit`` (``alpha``: the first Holm
    step's, ``alpha / m``): ``MDE = min_effect + reach``; None without a finite SE."""
    if not (math.isfinite(se) and se >= 0) or n < 1:
        return None
    reach = minimum_detectable_effect(se, alpha, power, df)
    return Power(min_effect + reach, se, alpha, power, n, unit, min_effect, df, None, difference, parts)


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
    """``underpowered: reach 0.0600 > |difference - min_effect| 0.0400`` when the observed gap was not
    detectable (the caller asks only for an undecided verdict), else ``""``."""
    if p is None or p.gap == 0 or p.detectable:
        return ""
    if p.bound is not None:
        return f"underpowered: MDE {p.mde:.4f} > gap to the bound {p.gap:.4f}"
    return f"underpowered: reach {p.reach:.4f} > |difference - min_effect| {p.gap:.4f}"


def describe(p: Power | None) -> str:
    """The details line: the MDE against the margin, its formula's inputs, and the design that would decide it."""
    if p is None:
        return "not computed (no standard error of the difference: no CI)"
    if p.bound is not None:
        return describe_bound(p)
    q = f"t({p.df:.3g})" if p.df is not None and math.isfinite(p.df) else "normal"
    text = (
        f"{p.mde:.4f} = min_effect {p.min_effect:g} + {p.reach:.4f} at {p.power:.0%} power, two-sided alpha "
        f"{p.alpha:.3g} (Holm's first step: alpha / m, m the family's declared size; {q} quantiles; SE {p.se:.4f} "
        f"over {p.n} {p.unit}; Bloom 1995)"
    )
    if p.gap == 0:
        return text
    if p.detectable:
        return text + f"; the observed |difference - min_effect| {p.gap:.4f} is within reach"
    designs, note = p.design()
    if note:
        return text + f"; |difference - min_effect| {p.gap:.4f} is not within reach: {note}"
    return text + (
        f"; |difference - min_effect| {p.gap:.4f} is not within reach: about {p.n_needed} {p.unit} would make it so "
        "(SE scaled by 1/sqrt(n), only this unit)"
    )


def describe_components(p: Power | None) -> str:
    """The details line of the variance components: each level's contribution to the variance of the difference
    (metric units squared) and share, with the SE and Satterthwaite's df; ``""`` without components."""
    if p is None or p.parts is None:
        return ""
    shares = p.parts.shares()
    levels = ", ".join(f"{k.replace('_', ' ')} {v:.2e} ({shares[k]:.0%})" for k, v in p.parts.as_dict().items())
    return f"{levels}; SE {p.parts.se:.4f} on Satterthwaite df {p.parts.df:.3g}"


def tost_reach(p: Power | None) -> str:
    """For a positive margin: ``""`` when equivalence within +-``min_effect`` is reachable at this SE, else a note
    with numbers: TOST at ``alpha`` finds a true difference of 0 equivalent with ``power`` only when
    ``(q(1 - alpha) + q((1 + power) / 2)) * SE <= min_effect`` (Schuirmann 1987; Chow & Liu 2008, sec. 5.3)."""
    if p is None or p.bound is not None or p.min_effect <= 0:
        return ""
    dist = stats.norm if p.df is None or not math.isfinite(p.df) else stats.t(p.df)
    need = float(dist.ppf(1 - p.alpha) + dist.ppf((1 + p.power) / 2)) * p.se
    if need <= p.min_effect:
        return ""
    return (
        f"equivalent is unreachable at this SE: within +-{p.min_effect:g} needs SE <= "
        f"{p.se * p.min_effect / need:.4f} (it is {p.se:.4f}), or a margin of at least {need:.4f}"
    )


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
