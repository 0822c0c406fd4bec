"""Evaluating a claim: resolve both arms, estimate them and their difference, give the verdict, measure the
confounders and record the data md5s behind it. A claim whose inputs are missing gets a ``not run`` row with
the reason; it never disappears from the table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from tasks.common.provenance import Lock
from tasks.report.claims import MALFORMED, Claim, ClaimsFile, Metrics, NotRun, Sample, resolve
from tasks.report.confounders import measure_confounders
from tasks.report.statistics import (
    Estimate,
    StatsConfig,
    Verdict,
    bound_verdict,
    difference_verdict,
    mean_ci,
    paired_ci,
    proportion_ci,
    welch_ci,
)


@dataclass
class Row:
    """One evaluated claim: what the tables and figures show. ``verdict == "not run"`` leaves stats empty."""

    claim: Claim
    verdict: Verdict
    reason: str
    treatment: Estimate | None = None
    baseline: Estimate | None = None
    difference: Estimate | None = None
    pairing: str = ""
    confounders: list[str] = field(default_factory=list)
    run_ids: list[str] = field(default_factory=list)
    data_md5: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def evaluate(claim: Claim, metrics: Metrics, lock: Lock, cfg: StatsConfig) -> Row:
    """Evaluate one claim; a missing input yields a ``not run`` row (never an exception)."""
    confounders = measure_confounders(claim, metrics)
    md5s = data_md5(claim, lock)
    try:
        treat = resolve(claim.treatment, claim.metric, metrics)
        base = resolve(claim.baseline, claim.metric, metrics)
    except NotRun as why:
        return Row(claim, "not run", f"not run: {why}", confounders=confounders, data_md5=md5s)
    except MALFORMED as err:
        why = f"not run: malformed metrics for {claim.treatment} / {claim.baseline}: {type(err).__name__}: {err}"
        return Row(claim, "not run", why, confounders=confounders, data_md5=md5s)
    row = _estimate(claim, treat, base, cfg)
    failed = failed_preconditions(claim, metrics)
    if failed:
        row.verdict, row.reason = "not resolvable", "not resolvable: " + "; ".join(failed)
    row.confounders, row.data_md5 = confounders, md5s
    row.run_ids = sorted(set(treat.run_ids) | set(base.run_ids))
    row.notes += [f"treatment: {n}" for n in treat.notes] + [f"baseline: {n}" for n in base.notes]
    return row


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


def _estimate(claim: Claim, treat: Sample, base: Sample, cfg: StatsConfig) -> Row:
    if claim.kind == "upper_bound":
        t_est, b_est = (_arm_estimate(s, cfg.level) for s in (treat, base))
        diff = Estimate(t_est.mean - b_est.mean, math.nan, math.nan, t_est.n, "point difference")
        verdict, reason = bound_verdict(t_est, claim.min_effect)
        return Row(claim, verdict, reason, t_est, b_est, diff, pairing="treatment CI against the bound")
    t_vals, b_vals, paired = align(treat, base)
    t_est, b_est = mean_ci(t_vals, cfg.level), mean_ci(b_vals, cfg.level)
    if paired:
        diff = paired_ci(t_vals, b_vals, cfg.level, cfg.paired_method, cfg.resamples, cfg.seed)
        pairing = f"paired by {treat.unit_name} ({diff.method})"
    else:
        diff = welch_ci(t_vals, b_vals, cfg.level)
        pairing = f"unpaired ({diff.method})"
    verdict, reason = difference_verdict(diff, claim.min_effect)
    return Row(claim, verdict, reason, t_est, b_est, diff, pairing=pairing)


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


def evaluate_all(claims: ClaimsFile, metrics: Metrics, lock: Lock, cfg: StatsConfig) -> list[Row]:
    """Evaluate every claim, in file order."""
    return [evaluate(c, metrics, lock, cfg) for c in claims.claims]
