"""A claim's numbers from its two arms' samples: each arm's estimate (t, Clopper-Pearson or the hierarchical
bootstrap over seeds and test items), their difference's interval, the verdict's tests and the MDE; one function
per kind of sample (an upper bound, calibration, sense cosines, test items, two rates, units paired or not).
"""

from __future__ import annotations

import math

import numpy as np

from tasks.report.claims.arms.calibration_arms import CALIBRATION_METRICS, beside_notes, calibration_estimates
from tasks.report.claims.arms.items import Items, metric_function
from tasks.report.claims.arms.nested_seeds import describe, fine_seeds, pretraining_seeds
from tasks.report.claims.arms.resolve import BlockHits
from tasks.report.claims.grammar import Claim, NotRun, Sample
from tasks.report.claims.row import Row
from tasks.report.stats import bootstrap as bs
from tasks.report.stats import components as vc
from tasks.report.stats.calibration import difference_range
from tasks.report.stats.estimates import (
    Estimate,
    StatsConfig,
    Tests,
    binomial_tests,
    bound_verdict,
    difference_verdict,
    mean_ci,
    paired_ci,
    proportion_ci,
    t_tests,
    two_proportion_ci,
    two_proportion_tests,
    untestable,
    welch_ci,
    welch_tests,
)
from tasks.report.stats.power import Power, bound_power, power_of, se_from_ci
from tasks.report.stats.probe_bootstrap import SenseCosines, sense_estimate

#: The range of a metric or of a difference of two, to which every interval is clipped.
UNIT_RANGE, DIFF_RANGE = (0.0, 1.0), (-1.0, 1.0)


def arm_estimate(sample: Sample, metric: str, cfg: StatsConfig) -> Estimate:
    """One arm's estimate: the hierarchical bootstrap over its seeds and test items when it has items,
    else the t-interval over its units (or Clopper-Pearson for a rate)."""
    if sample.items is None:
        return _arm_estimate(sample, cfg.level)
    if metric in CALIBRATION_METRICS:
        return calibration_estimates([sample.items], CALIBRATION_METRICS[metric], cfg, cfg.resamples)[0][0]
    items = sample.items
    return counts_estimate(items.headline, metric_function(metric), cfg, cfg.resamples, items.pretrain, items.clusters)


def counts_estimate(
    counts: np.ndarray,
    function,
    cfg: StatsConfig,
    resamples: int,
    pretrain: tuple[str, ...] | None = None,
    clusters: np.ndarray | None = None,
) -> Estimate:
    """Point estimate (mean over runs) and percentile CI, clipped to [0, 1], of ``function`` on one arm's
    ``counts`` (n_runs, n_items, K) from ``resamples`` draws of the hierarchical bootstrap (``pretrain``: the
    pretraining seed of each run, drawn first; None: one pretraining seed; ``clusters``: the items' clusters,
    drawn whole)."""
    reps = bs.hierarchical_bootstrap([counts], function, resamples, cfg.seed, True, [pretrain], clusters)[:, 0]
    low, high = bs.percentile_ci(reps, cfg.level, UNIT_RANGE)
    runs = (
        f"{len(set(pretrain))} pretraining x {counts.shape[0] // len(set(pretrain))}" if pretrain else counts.shape[0]
    )
    method = f"hierarchical bootstrap over {runs} seed(s) and {counts.shape[1]} test items"
    return Estimate(bs.point_estimate(counts, function), low, high, counts.shape[1], method)


def estimate_claim(claim: Claim, treat: Sample, base: Sample, cfg: StatsConfig) -> Row:
    """The ``Row`` of a claim's numbers from its two arms (arms and difference with CIs, verdict, p-value, power),
    by the kind of sample; ``evaluate`` adds the gates, notes, confounders and provenance."""
    if claim.kind == "upper_bound":
        t_est, b_est = (_arm_estimate(s, cfg.level) for s in (treat, base))
        diff = Estimate(t_est.mean - b_est.mean, math.nan, math.nan, t_est.n, "point difference")
        tests = binomial_tests(*treat.proportion) if treat.proportion else t_tests(np.asarray(treat.values))
        verdict, reason, p = bound_verdict(t_est, claim.min_effect, tests)
        return Row(
            claim,
            verdict,
            reason,
            t_est,
            b_est,
            diff,
            pairing="treatment CI against the bound",
            p_value=p,
            power=_bound_power(treat, t_est, claim.min_effect, cfg),
        )
    if claim.metric in CALIBRATION_METRICS:
        return _calibration_estimate(claim, treat, base, cfg)
    if isinstance(treat.items, SenseCosines) and isinstance(base.items, SenseCosines):  # words, then sentences
        return Row(claim, **sense_estimate(claim, treat.items, base.items, cfg))
    if isinstance(treat.items, BlockHits) and isinstance(base.items, BlockHits):
        return _blocks_estimate(claim, treat.items, base.items, cfg)
    if treat.items is not None and base.items is not None:
        return _item_estimate(claim, treat, base, cfg)
    if treat.proportion and base.proportion and len(treat.units) == len(base.units) == 1:
        return _rates_estimate(claim, treat, base, cfg)
    t_vals, b_vals, paired = align(treat, base)
    t_est, b_est = _arm_estimate(treat, cfg.level), _arm_estimate(base, cfg.level)  # a rate: Clopper-Pearson
    if paired:
        diff = paired_ci(t_vals, b_vals, cfg.level, cfg.paired_method, cfg.resamples, cfg.seed)
        pairing = f"paired by {treat.unit_name} ({diff.method})"
        tests = t_tests(np.asarray(t_vals) - np.asarray(b_vals)) if diff.has_ci else untestable()
    else:
        diff = welch_ci(t_vals, b_vals, cfg.level)
        pairing = f"unpaired ({diff.method})"
        tests = welch_tests(t_vals, b_vals) if diff.has_ci else untestable()
    verdict, reason, p = difference_verdict(diff, claim.min_effect, tests, cfg.alpha)
    se, df = unit_se(t_vals, b_vals, paired)
    power = power_of(
        se, diff.n, f"{treat.unit_name}s", claim.min_effect, cfg.first_step_alpha, cfg.power, df, diff.mean
    )
    return Row(claim, verdict, reason, t_est, b_est, diff, pairing=pairing, p_value=p, power=power)


def _bound_power(treat: Sample, t_est: Estimate, bound: float, cfg: StatsConfig) -> Power | None:
    """The MDE of an ``upper_bound`` claim: over the rate's trials, or the SD of its units (``power.bound_power``)."""
    units = treat.unit_name if treat.unit_name.endswith("s") else treat.unit_name + "s"
    if treat.proportion:
        return bound_power(t_est.mean, bound, treat.proportion[1], units, cfg.first_step_alpha, cfg.power)
    sd = float(np.std(treat.values, ddof=1)) if len(treat.values) > 1 else math.nan
    return bound_power(t_est.mean, bound, len(treat.values), units, cfg.first_step_alpha, cfg.power, sd)


def unit_se(treatment: tuple[float, ...], baseline: tuple[float, ...], paired: bool) -> tuple[float, float | None]:
    """``(SE, df)`` of the difference of means over units, as its t interval has it: paired, ``sd(deltas) /
    sqrt(n)`` on ``n - 1`` df; unpaired, Welch's ``sqrt(s1^2/n1 + s2^2/n2)`` on Welch-Satterthwaite df (Welch
    1947). ``(nan, None)`` when a side has fewer than 2 units or the SE is 0 (no spread: no power to speak of)."""
    t, b = np.asarray(treatment, dtype=float), np.asarray(baseline, dtype=float)
    if paired and t.size >= 2:
        se = float(np.std(t - b, ddof=1) / math.sqrt(t.size))
        return (se, t.size - 1.0) if se > 0 else (math.nan, None)
    if t.size < 2 or b.size < 2:
        return math.nan, None
    v1, v2 = np.var(t, ddof=1) / t.size, np.var(b, ddof=1) / b.size
    if v1 + v2 == 0:
        return math.nan, None
    df = (v1 + v2) ** 2 / (v1**2 / (t.size - 1) + v2**2 / (b.size - 1))
    return float(math.sqrt(v1 + v2)), float(df)


def _calibration_estimate(claim: Claim, treat: Sample, base: Sample, cfg: StatsConfig) -> Row:
    """ECE or Brier score of each arm from its own bootstrap (``arm_estimate``, as the calibration table and the
    best-baseline cell show it), and their difference from one paired hierarchical bootstrap
    (``calibration_arms.calibration_estimates``). Lower is better calibrated, so the difference is
    ``baseline - treatment``: positive favours the treatment, as in every other claim, and a negative
    ``min_effect`` is a non-inferiority margin."""
    if treat.items is None or base.items is None:
        raise NotRun(f"{claim.metric} needs finetune references with test predictions")
    statistic = CALIBRATION_METRICS[claim.metric]
    t_est, b_est = arm_estimate(treat, claim.metric, cfg), arm_estimate(base, claim.metric, cfg)
    _, reps = calibration_estimates([treat.items, base.items], statistic, cfg, cfg.resamples)
    gains = reps[:, 1] - reps[:, 0]
    low, high = bs.percentile_ci(gains, cfg.level, difference_range(statistic))
    diff = Estimate(b_est.mean - t_est.mean, low, high, t_est.n, t_est.method)
    tests = Tests(
        lambda m: bs.p_value(gains, m, "greater"),
        lambda m: bs.p_value(gains, m, "less"),
        lambda m: bs.tost_p_value(gains, abs(m)),
    )
    verdict, reason, p = difference_verdict(diff, claim.min_effect, tests, cfg.alpha)
    seeds = f"{len(treat.items.seeds)} vs {len(base.items.seeds)} seeds"
    power = power_of(
        float(np.std(gains, ddof=1)),
        t_est.n,
        "test items",
        claim.min_effect,
        cfg.first_step_alpha,
        cfg.power,
        difference=diff.mean,
    )
    pairing = (
        f"difference = baseline {claim.metric} - treatment {claim.metric} (lower is better calibrated); "
        f"paired by test item, {seeds}; {t_est.method}; {cfg.calibration_bins} equal-mass bins"
    )
    return Row(
        claim,
        verdict,
        reason,
        t_est,
        b_est,
        diff,
        pairing=pairing,
        p_value=p,
        power=power,
        items=f"{t_est.n} test items x {seeds}",
        difference_label="baseline - treatment (lower is better)",
        notes=beside_notes(claim.metric, {"treatment": treat.items, "baseline": base.items}, cfg.calibration_bins),
    )


def _blocks_estimate(claim: Claim, treat: BlockHits, base: BlockHits, cfg: StatsConfig) -> Row:
    """Two models' accuracy on the same held-out masks, resampled by block, not by token (the tokens of one block
    share its text): each arm's accuracy and their difference by the ratio estimator over blocks, with t intervals
    on ``blocks - 1`` df (``components.ratio_difference``)."""
    if treat.masked != base.masked:
        raise NotRun("the two held-out arms scored different masks (their per-block masked counts differ)")
    masked, n = np.asarray(treat.masked), len(treat.masked)
    method = f"ratio estimator over {n} held-out blocks (t, {n - 1} df)"
    (t_mean, t_low, t_high, _), (b_mean, b_low, b_high, _) = (
        vc.ratio_difference([np.asarray(x.hits)], masked, cfg.level) for x in (treat, base)
    )
    point, low, high, se = vc.ratio_difference([np.asarray(treat.hits), np.asarray(base.hits)], masked, cfg.level)
    diff = Estimate(point, max(low, -1.0), min(high, 1.0), n, method)
    parts = vc.Components(0.0, 0.0, se**2, ((se**2, n - 1.0),), 1, n)
    tests = Tests(
        lambda m: vc.t_p_value(point, parts, m, "greater"),
        lambda m: vc.t_p_value(point, parts, m, "less"),
        lambda m: max(vc.t_p_value(point, parts, -abs(m), "greater"), vc.t_p_value(point, parts, abs(m), "less")),
    )
    verdict, reason, p = difference_verdict(diff, claim.min_effect, tests, cfg.alpha)
    power = power_of(se, n, "held-out blocks", claim.min_effect, cfg.first_step_alpha, cfg.power, n - 1.0, point)
    return Row(
        claim,
        verdict,
        reason,
        Estimate(t_mean, max(t_low, 0.0), min(t_high, 1.0), n, method),
        Estimate(b_mean, max(b_low, 0.0), min(b_high, 1.0), n, method),
        diff,
        pairing=f"paired by masked token, resampled by held-out block ({int(masked.sum())} masks); {method}",
        p_value=p,
        items=f"{int(masked.sum())} masked tokens in {n} held-out blocks",
        power=power,
    )


def _rates_estimate(claim: Claim, treat: Sample, base: Sample, cfg: StatsConfig) -> Row:
    """Two single rates (e.g. masked-token accuracy of the MLM and of the unigram baseline): Newcombe's
    interval of their difference and z-tests against ``min_effect``."""
    (e1, n1), (e2, n2) = treat.proportion, base.proportion
    diff = two_proportion_ci((e1, e2), (n1, n2), cfg.level)
    verdict, reason, p = difference_verdict(diff, claim.min_effect, two_proportion_tests((e1, e2), (n1, n2)), cfg.alpha)
    t_est, b_est = _arm_estimate(treat, cfg.level), _arm_estimate(base, cfg.level)  # Clopper-Pearson
    se = se_from_ci(diff.low, diff.high, cfg.alpha)
    power = power_of(
        se, min(n1, n2), treat.unit_name, claim.min_effect, cfg.first_step_alpha, cfg.power, difference=diff.mean
    )
    return Row(
        claim,
        verdict,
        reason,
        t_est,
        b_est,
        diff,
        pairing=f"two rates ({diff.method})",
        p_value=p,
        items=f"{n1} vs {n2} {treat.unit_name}",
        power=power,
    )


def contrast(
    claim: Claim, items: list[Items], weights: tuple[float, ...], deltas_point: float, cfg: StatsConfig
) -> tuple[Estimate, Tests, Power | None]:
    """The difference ``sum_j weights[j] * arm_j`` of finetune arms with test items: its CI a t interval on
    Satterthwaite's df over the variance components (pretraining seed, seed, item;
    ``tasks.report.stats.components``), its t tests against the margin, and its ``Power`` with the components.
    The item part is a variance, not a tail quantile: ``cfg.slice_resamples`` draws estimate it (2,000: about 3% of
    the variance, 1.6% of the SE)."""
    function = metric_function(claim.metric)
    shared = all(fine_seeds(x) == fine_seeds(items[0]) for x in items)
    layouts = [(pretraining_seeds(x), len(fine_seeds(x))) for x in items]
    parts = vc.components(
        [x.headline for x in items],
        layouts,
        function,
        weights,
        shared,
        cfg.slice_resamples,
        cfg.seed,
        items[0].clusters,
    )
    width = float(sum(abs(w) for w in weights)) / 2  # a difference of two metrics in [0, 1] lies in [-1, 1]
    n = len(items[0].doc_ids)
    units = f"{parts.n_items} clusters of test items" if items[0].clusters is not None else "test items"
    method = f"t on Satterthwaite df {parts.df:.3g} over the variance components (seed, {units}, pretraining seed)"
    diff = Estimate(deltas_point, *vc.t_interval(deltas_point, parts, cfg.level, (-width, width)), n, method)
    tests = Tests(
        lambda m: vc.t_p_value(deltas_point, parts, m, "greater"),
        lambda m: vc.t_p_value(deltas_point, parts, m, "less"),
        lambda m: max(
            vc.t_p_value(deltas_point, parts, -abs(m), "greater"), vc.t_p_value(deltas_point, parts, abs(m), "less")
        ),
    )
    power = power_of(
        parts.se, n, "test items", claim.min_effect, cfg.first_step_alpha, cfg.power, parts.df, deltas_point, parts
    )
    return diff, tests, power


def _item_estimate(claim: Claim, treat: Sample, base: Sample, cfg: StatsConfig) -> Row:
    """Both arms from one paired hierarchical bootstrap: pretraining seeds resampled when an arm has runs from
    several (jointly for arms that share them), then fine-tuning seeds (jointly when both arms ran the same seeds:
    each seed drew its own training subset), then test items, with the same item draw for both arms
    (``bootstrap.hierarchical_bootstrap``; the Multi-Bootstrap of Sellam et al. 2022). The difference's CI is the
    t interval of ``contrast`` (a percentile bootstrap over 5 seeds understates the seed part)."""
    t_items, b_items = treat.items, base.items
    if t_items.doc_ids != b_items.doc_ids:
        raise NotRun(f"{treat.run_key} and {base.run_key} scored different test items")
    function, shared = metric_function(claim.metric), fine_seeds(t_items) == fine_seeds(b_items)
    reps = bs.hierarchical_bootstrap(
        [t_items.headline, b_items.headline],
        function,
        cfg.resamples,
        cfg.seed,
        shared,
        [t_items.pretrain, b_items.pretrain],
        t_items.clusters,
    )
    n = len(t_items.doc_ids)
    method = f"hierarchical bootstrap ({cfg.resamples} resamples)"
    t_est, b_est = (
        Estimate(bs.point_estimate(x.headline, function), *bs.percentile_ci(r, cfg.level, UNIT_RANGE), n, method)
        for x, r in ((t_items, reps[:, 0]), (b_items, reps[:, 1]))
    )
    diff, tests, power = contrast(claim, [t_items, b_items], (1.0, -1.0), t_est.mean - b_est.mean, cfg)
    verdict, reason, p = difference_verdict(diff, claim.min_effect, tests, cfg.alpha)
    seeds = "the same seeds, paired" if shared else "seeds per arm"
    pairing = (
        f"paired by test item ({n} {claim.items} items), {seeds} ({describe(t_items)} vs {describe(b_items)}); "
        f"arms: {method}; difference: {diff.method}"
    )
    return Row(
        claim,
        verdict,
        reason,
        t_est,
        b_est,
        diff,
        pairing=pairing,
        p_value=p,
        power=power,
        items=f"{n} test items ({claim.items}) x {describe(t_items)} vs {describe(b_items)} seeds",
    )


def _arm_estimate(sample: Sample, level: float) -> Estimate:
    if sample.proportion is not None:
        return proportion_ci(*sample.proportion, level)
    return mean_ci(sample.values, level)


def align(treat: Sample, base: Sample) -> tuple[tuple[float, ...], tuple[float, ...], bool]:
    """Values of both arms, ordered by shared unit when the arms are paired (same unit kind and unit set)."""
    same = treat.unit_name == base.unit_name and sorted(treat.units) == sorted(base.units)
    if not same or len(treat.units) < 2 or len(set(treat.units)) != len(treat.units):
        return treat.values, base.values, False
    order = sorted(treat.units)
    t_map, b_map = dict(zip(treat.units, treat.values)), dict(zip(base.units, base.values))
    return tuple(t_map[u] for u in order), tuple(b_map[u] for u in order), True
