"""``Row``, one evaluated claim as the tables and figures show it: its arms' and difference's estimates, the
verdict and its p-values, power, confounders, MLflow runs and data md5s.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tasks.report.claims.arms.seed_scores import SeedComparison
from tasks.report.claims.grammar import Claim
from tasks.report.stats.estimates import Estimate, Verdict
from tasks.report.stats.power import Power


@dataclass
class Row:
    """One evaluated claim: what the tables and figures show. ``verdict == "not run"`` leaves stats empty.

    ``p_value`` is the p-value of the verdict's test and ``p_adjusted`` its Holm adjustment within the claim's
    family (``claim.family``); ``unadjusted`` the verdict before Holm; ``best_baseline`` is the task's best
    baseline on dev (finetune claims), ``effect_size`` Cohen's d over the units the difference's CI rests on
    (seeds or probe words; None when the CI resamples test items), ``power`` the MDE of the difference
    (``tasks.report.stats.power``), ``steps`` the optimiser steps of each fine-tuned arm, ``difference_label`` what
    the difference subtracts (a calibration claim: baseline - treatment, as lower is better), ``items`` how
    many test items and seeds the numbers rest on, ``comparison`` the probability of improvement and ASO of the
    arms' per-run scores (a fine-tuning difference claim, ``tasks.report.claims.arms.seed_scores``),
    ``baselines_above`` the baselines scoring above the best arm (``tasks.report.claims.arms.statements``),
    ``at_floor`` the floor gate's arms at floor on test (``gates.Floor.text``), which the notes scope the verdict by.
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
    comparison: SeedComparison | None = None
    baselines_above: list[dict] = field(default_factory=list)
    at_floor: list[str] = field(default_factory=list)
