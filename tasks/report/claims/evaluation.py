"""Evaluating a claim: resolve both arms, estimate them and their difference, give the verdict, measure the
confounders and record the data md5s behind it. A claim whose inputs are missing gets a ``not run`` row with
the reason; it never disappears from the table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from tasks.common.provenance import Lock
from tasks.report.claims.arms.calibration_arms import CALIBRATION_METRICS, arm_calibration, calibration_estimates
from tasks.report.claims.arms.items import metric_function, with_items
from tasks.report.claims.arms.nested_seeds import describe, fine_seeds, with_pretraining_seeds
from tasks.report.claims.arms.nested_seeds import notes as pretraining_seed_notes
from tasks.report.claims.arms.resolve import resolve
from tasks.report.claims.confounders import measure_confounders
from tasks.report.claims.curve_claims import claim_refs, gap_estimate
from tasks.report.claims.gates import export_gates, floor_gate, lineage_gate, training_steps
from tasks.report.claims.grammar import FAMILIES, MALFORMED, Claim, ClaimsFile, Metrics, NotRun, Sample
from tasks.report.claims.tasks_run import task_headline
from tasks.report.stats import bootstrap as bs
from tasks.report.stats.estimates import (
    Estimate,
    StatsConfig,
    Tests,
    Verdict,
    binomial_tests,
    bound_verdict,
    difference_verdict,
    holm_verdicts,
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


@dataclass
class Row:
    """One evaluated claim: what the tables and figures show. ``verdict == "not run"`` leaves stats empty.

    ``p_value`` is the p-value of the verdict's test and ``p_adjusted`` its Holm adjustment within the claim's
    family (``claim.family``); ``unadjusted`` the verdict before Holm; ``best_baseline`` is the task's best
    baseline on dev (finetune claims), ``effect_size`` Cohen's d over the units the difference's CI rests on
    (seeds or probe words; None when the CI resamples test items), ``power`` the MDE of the difference
    (``tasks.report.stats.power``), ``steps`` the optimiser steps of each fine-tuned arm, ``difference_label`` what
    the difference subtracts (a calibration claim: baseline - treatment, as lower is better), ``items`` how
    many test items and seeds the numbers rest on.
    """

    claim: Claim
    verdict: Verdict
    reason: str
    treatment: Estimate | None = None
    baseline: Estimate | None = None
    difference: Estimate | None = None
    pairing: str = ""
    confounders: list[str] = field(default_factory=list)
    runs: list[tuple[str, str, str]] = field(default_factory=list)  # (name, id, experiment id) of MLflow runs
    data_md5: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    best_baseline: Estimate | None = None
    best_baseline_key: str = ""
    effect_size: float | None = None
    p_value: float | None = None
    p_adjusted: float | None = None
    items: str = ""
    difference_label: str = "treatment - baseline"
    unadjusted: Verdict | None = None
    power: Power | None = None
    steps: list[str] = field(default_factory=list)


def evaluate(claim: Claim, metrics: Metrics, lock: Lock, cfg: StatsConfig) -> Row:
    """Evaluate one claim; a missing input yields a ``not run`` row (never an exception)."""
    confounders = measure_confounders(claim, metrics)
    md5s = data_md5(claim, lock)
    try:
        treat, base, *gap = (arm(ref, claim, metrics) for ref in claim_refs(claim, metrics))  # curve_claims
        row = Row(claim, **gap_estimate(claim, [treat, base, *gap], cfg)) if gap else _estimate(claim, treat, base, cfg)
    except NotRun as why:
        return Row(claim, "not run", f"not run: {why}", confounders=confounders, data_md5=md5s)
    except MALFORMED as err:
        why = f"not run: malformed metrics for {claim.treatment} / {claim.baseline}: {type(err).__name__}: {err}"
        return Row(claim, "not run", why, confounders=confounders, data_md5=md5s)
    floor_failed, floor_notes = floor_gate(claim, treat, base, metrics, cfg)
    failed = (
        failed_preconditions(claim, metrics)
        + diverged_gates(treat, base, cfg)
        + floor_failed
        + export_gates(claim, metrics)
        + lineage_gate(claim, treat, base, metrics)
    )
    if failed:
        row.verdict, row.reason, row.p_value = "not resolvable", "not resolvable: " + "; ".join(failed), None
    row.confounders, row.data_md5, row.unadjusted = confounders, md5s, row.verdict
    row.runs = sorted(set(treat.runs) | set(base.runs))
    row.notes += [f"treatment: {n}" for n in treat.notes] + [f"baseline: {n}" for n in base.notes]
    row.notes += few_seeds_notes(treat, base) + floor_notes + pretraining_seed_notes(claim, treat, base)
    row.notes += draw_notes(claim)
    row.steps = training_steps(claim, treat, base, metrics, lock)
    # Cohen's d over the units the CI rests on; an item-level CI (test items x seeds) has no seed-only d
    same_units = claim.kind == "difference" and treat.items is None and base.items is None
    row.effect_size = bs.cohens_d(treat.values, base.values) if same_units else None
    if claim.treatment.startswith("finetune/") and claim.kind == "difference":
        row.best_baseline_key, row.best_baseline = best_baseline(claim, metrics, cfg)
    return row


def arm(ref: str, claim: Claim, metrics: Metrics) -> Sample:
    """The sample of one arm, with its test items (restricted to ``claim.items``) for a finetune reference.

    A calibration metric (``test_ece``, ``test_brier``) resolves the arm by its task's headline metric (seeds,
    diverged seeds, run ids) and carries its ``calibration.ArmCalibration`` as ``items``."""
    if claim.metric in CALIBRATION_METRICS and ref.startswith("finetune/"):
        task = ref.split("/")[1]
        sample = resolve(ref, task_headline(metrics, task), metrics)
        return replace(sample, items=arm_calibration(task, sample.run_key, metrics))
    sample = resolve(ref, claim.metric, metrics)
    if ref.startswith("finetune/"):
        task = ref.split("/")[1]  # an arm on our encoder also brings its runs from the further pretraining seeds
        return with_pretraining_seeds(
            with_items(sample, task, claim.metric, metrics, claim.items), task, claim, metrics
        )
    return sample


def failed_preconditions(claim: Claim, metrics: Metrics) -> list[str]:
    """Why each failed precondition of ``claim`` failed (empty: all hold); an absent value counts as failed."""
    failed = []
    for pre in claim.preconditions:
        try:
            why = pre.check(metrics)
        except (NotRun, *MALFORMED) as err:
            why = f"{pre.what} ({pre.value}): not measured: {err}"
        if why:
            failed.append(why)
    return failed


def diverged_gates(treat: Sample, base: Sample, cfg: StatsConfig) -> list[str]:
    """An arm with more diverged seeds (dev score at chance) than ``max_diverged_fraction`` of its seeds did not
    produce the model the claim is about: the claim is then not resolvable, like a failed precondition."""
    out = []
    for side, sample in (("treatment", treat), ("baseline", base)):
        if sample.diverged and len(sample.diverged) / len(sample.units) > cfg.max_diverged_fraction:
            out.append(
                f"{side} {sample.run_key}: {len(sample.diverged)} of {len(sample.units)} seeds diverged "
                f"(dev score at chance; at most {cfg.max_diverged_fraction:.0%} allowed)"
            )
    return out


def few_seeds_notes(treat: Sample, base: Sample) -> list[str]:
    """A trained arm with fewer than 3 seeds cannot estimate seed variance: its interval is not informative."""
    return [
        f"{side}: only {len(s.units)} seed(s); the seed part of its interval is not informative"
        for side, s in (("treatment", treat), ("baseline", base))
        if s.unit_name == "seed" and len(s.units) < 3 and not s.run_key.startswith("baseline/")
    ]


def draw_notes(claim: Claim) -> list[str]:
    """A fine-tuning claim: each seed trained on its own draw of the train docs (``tasks/finetune/draw.py``), so the
    seed level of its CI carries the variance of that draw."""
    if not claim.treatment.startswith("finetune/"):
        return []
    return [
        "each seed draws its own training subset (finetune.data_seed with the seed; a comparator baseline is "
        "fitted on each seed's draw): the seed level of the CI carries the draw's variance"
    ]


def best_baseline(claim: Claim, metrics: Metrics, cfg: StatsConfig) -> tuple[str, Estimate | None]:
    """The run key and estimate of the task's best baseline on dev, on the claim's items (``("", None)``
    when the finetune stage fitted none; ``(key, None)`` when its estimate is undefined, e.g. a calibration
    metric of a NER baseline seed that predicted no entity span)."""
    try:
        sample = arm(f"finetune/{claim.task}/best-baseline", claim, metrics)
    except (NotRun, *MALFORMED):
        return "", None
    try:
        return sample.run_key, arm_estimate(sample, claim.metric, cfg)
    except (NotRun, *MALFORMED):
        return sample.run_key, None


def arm_estimate(sample: Sample, metric: str, cfg: StatsConfig) -> Estimate:
    """One arm's estimate: the hierarchical bootstrap over its seeds and test items when it has items,
    else the t-interval over its units (or Clopper-Pearson for a rate)."""
    if sample.items is None:
        return _arm_estimate(sample, cfg.level)
    if metric in CALIBRATION_METRICS:
        return calibration_estimates([sample.items], CALIBRATION_METRICS[metric], cfg, cfg.resamples)[0][0]
    return counts_estimate(sample.items.headline, metric_function(metric), cfg, cfg.resamples, sample.items.pretrain)


def counts_estimate(
    counts: np.ndarray, function, cfg: StatsConfig, resamples: int, pretrain: tuple[str, ...] | None = None
) -> Estimate:
    """Point estimate (mean over runs) and percentile CI, clipped to [0, 1], of ``function`` on one arm's
    ``counts`` (n_runs, n_items, K) from ``resamples`` draws of the hierarchical bootstrap (``pretrain``: the
    pretraining seed of each run, drawn first; None: one pretraining seed)."""
    reps = bs.hierarchical_bootstrap([counts], function, resamples, cfg.seed, True, [pretrain])[:, 0]
    low, high = bs.percentile_ci(reps, cfg.level, UNIT_RANGE)
    runs = (
        f"{len(set(pretrain))} pretraining x {counts.shape[0] // len(set(pretrain))}" if pretrain else counts.shape[0]
    )
    method = f"hierarchical bootstrap over {runs} seed(s) and {counts.shape[1]} test items"
    return Estimate(bs.point_estimate(counts, function), low, high, counts.shape[1], method)


def _estimate(claim: Claim, treat: Sample, base: Sample, cfg: StatsConfig) -> Row:
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
    power = power_of(se, diff.n, f"{treat.unit_name}s", claim.min_effect, cfg.alpha, cfg.power, df)
    return Row(claim, verdict, reason, t_est, b_est, diff, pairing=pairing, p_value=p, power=power)


def _bound_power(treat: Sample, t_est: Estimate, bound: float, cfg: StatsConfig) -> Power | None:
    """The MDE of an ``upper_bound`` claim: over the rate's trials, or the SD of its units (``power.bound_power``)."""
    units = treat.unit_name if treat.unit_name.endswith("s") else treat.unit_name + "s"
    if treat.proportion:
        return bound_power(t_est.mean, bound, treat.proportion[1], units, cfg.alpha, cfg.power)
    sd = float(np.std(treat.values, ddof=1)) if len(treat.values) > 1 else math.nan
    return bound_power(t_est.mean, bound, len(treat.values), units, cfg.alpha, cfg.power, sd)


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
    low, high = bs.percentile_ci(gains, cfg.level, (-1.0, 1.0) if statistic == "ece" else (-2.0, 2.0))
    diff = Estimate(b_est.mean - t_est.mean, low, high, t_est.n, t_est.method)
    tests = Tests(
        lambda m: bs.p_value(gains, m, "greater"),
        lambda m: bs.p_value(gains, m, "less"),
        lambda m: bs.tost_p_value(gains, abs(m)),
    )
    verdict, reason, p = difference_verdict(diff, claim.min_effect, tests, cfg.alpha)
    seeds = f"{len(treat.items.seeds)} vs {len(base.items.seeds)} seeds"
    power = power_of(float(np.std(gains, ddof=1)), t_est.n, "test items", claim.min_effect, cfg.alpha, cfg.power)
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
    )


def _rates_estimate(claim: Claim, treat: Sample, base: Sample, cfg: StatsConfig) -> Row:
    """Two single rates (e.g. masked-token accuracy of the MLM and of the unigram baseline): Newcombe's
    interval of their difference and z-tests against ``min_effect``."""
    (e1, n1), (e2, n2) = treat.proportion, base.proportion
    diff = two_proportion_ci((e1, e2), (n1, n2), cfg.level)
    verdict, reason, p = difference_verdict(diff, claim.min_effect, two_proportion_tests((e1, e2), (n1, n2)), cfg.alpha)
    t_est, b_est = _arm_estimate(treat, cfg.level), _arm_estimate(base, cfg.level)  # Clopper-Pearson
    power = power_of(
        se_from_ci(diff.low, diff.high, cfg.alpha), min(n1, n2), treat.unit_name, claim.min_effect, cfg.alpha, cfg.power
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


def _item_estimate(claim: Claim, treat: Sample, base: Sample, cfg: StatsConfig) -> Row:
    """Both arms from one paired hierarchical bootstrap: pretraining seeds resampled when an arm has runs from
    several (jointly for arms that share them), then fine-tuning seeds (jointly when both arms ran the same seeds:
    each seed drew its own training subset), then test items, with the same item draw for both arms
    (``bootstrap.hierarchical_bootstrap``; the Multi-Bootstrap of Sellam et al. 2022)."""
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
    )
    n, deltas = len(t_items.doc_ids), reps[:, 0] - reps[:, 1]
    method = f"hierarchical bootstrap ({cfg.resamples} resamples)"
    t_est, b_est = (
        Estimate(bs.point_estimate(x.headline, function), *bs.percentile_ci(r, cfg.level, UNIT_RANGE), n, method)
        for x, r in ((t_items, reps[:, 0]), (b_items, reps[:, 1]))
    )
    diff = Estimate(t_est.mean - b_est.mean, *bs.percentile_ci(deltas, cfg.level, DIFF_RANGE), n, method)
    tests = Tests(
        lambda m: bs.p_value(deltas, m, "greater"),
        lambda m: bs.p_value(deltas, m, "less"),
        lambda m: bs.tost_p_value(deltas, abs(m)),
    )
    verdict, reason, p = difference_verdict(diff, claim.min_effect, tests, cfg.alpha)
    power = power_of(float(np.std(deltas, ddof=1)), n, "test items", claim.min_effect, cfg.alpha, cfg.power)
    seeds = "the same seeds, resampled jointly" if shared else "seeds resampled per arm"
    pairing = (
        f"paired by test item ({n} {claim.items} items, the same draw for both arms), {seeds} "
        f"({describe(t_items)} vs {describe(b_items)}); {method}"
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


def apply_holm(rows: list[Row], alpha: float) -> None:
    """Holm-adjust the p-values of the rows that have one (``estimates.holm_verdicts``) within each family
    (``grammar.FAMILIES``: the primary claims, then the secondary ones), in place; a decisive verdict that does
    not survive the correction becomes ``inconclusive``, with the reason, and ``row.unadjusted`` keeps it."""
    for family in FAMILIES:
        tested = {
            row.claim.id: (row.verdict, row.p_value)
            for row in rows
            if row.p_value is not None and row.claim.family == family
        }
        adjusted = holm_verdicts(tested, alpha)
        for row in (r for r in rows if r.claim.id in adjusted):
            verdict, row.p_adjusted = adjusted[row.claim.id]
            row.unadjusted = row.verdict
            if verdict != row.verdict:
                row.reason = (
                    f"{row.verdict} before Holm ({row.reason}), but the Holm-adjusted p "
                    f"{row.p_adjusted:.3g} > {alpha:g} within the {family} family ({len(tested)} tests)"
                )
                row.verdict = verdict


# ---------------------------------------------------------------- provenance


def dvc_stage_of(ref: str) -> str:
    """The dvc.lock stage that produced a reference's metrics (``finetune@cls``, ``probe``, ``leakage``)."""
    parts = ref.split("/")
    return f"finetune@{parts[1]}" if parts[0] == "finetune" else parts[0]


def data_md5(claim: Claim, lock: Lock) -> dict[str, str]:
    """``{path: md5}`` of the data and model deps (not code) of the stages behind the claim, from dvc.lock."""
    out: dict[str, str] = {}
    for stage in sorted({dvc_stage_of(claim.treatment), dvc_stage_of(claim.baseline)}):
        for path, md5 in lock.dep_md5s(stage).items():
            if path.startswith(("data/", "models/")) or path.endswith((".jsonl", ".parquet")):
                out[path] = md5
    return dict(sorted(out.items()))


def evaluate_all(
    claims: ClaimsFile, metrics: Metrics, lock: Lock, cfg: StatsConfig, off: dict[str, str] | None = None
) -> list[Row]:
    """Evaluate every claim, in file order, then Holm-correct the verdicts within each family (family-wise
    alpha per family). A claim in ``off`` (id -> ``off (enable with ...)``, ``tasks.report.claims.switches``) is a
    ``not run`` row with that reason, its metrics not read."""
    off = off or {}
    rows = [
        Row(
            c,
            "not run",
            f"not run: {off[c.id]}",
            confounders=measure_confounders(c, metrics),
            data_md5=data_md5(c, lock),
        )
        if c.id in off
        else evaluate(c, metrics, lock, cfg)
        for c in claims.claims
    ]
    apply_holm(rows, cfg.alpha)
    return rows
