"""Evaluating a claim: resolve both arms, estimate them and their difference, give the verdict, measure the
confounders and record the data md5s behind it. A claim whose inputs are missing gets a ``not run`` row with
the reason; it never disappears from the table.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from tasks.common.provenance import Lock
from tasks.report.claims.arms.calibration_arms import CALIBRATION_METRICS, pooled_calibration
from tasks.report.claims.arms.items import with_items
from tasks.report.claims.arms.nested_seeds import notes as pretraining_seed_notes
from tasks.report.claims.arms.nested_seeds import with_pretraining_seeds
from tasks.report.claims.arms.resolve import resolve
from tasks.report.claims.arms.seed_scores import compare_runs
from tasks.report.claims.arms.statements import above_note, baselines_above, resolved
from tasks.report.claims.confounders import measure_confounders
from tasks.report.claims.curve_claims import claim_refs, gap_estimate
from tasks.report.claims.estimation import arm_estimate, estimate_claim
from tasks.report.claims.gates import PRETRAINED, export_gates, floor_gate, lineage_gate, training_steps
from tasks.report.claims.grammar import FAMILIES, MALFORMED, Claim, ClaimsFile, Metrics, NotRun, Sample
from tasks.report.claims.row import Row
from tasks.report.claims.tasks_run import task_headline
from tasks.report.stats import bootstrap as bs
from tasks.report.stats.estimates import DECISIVE, Estimate, StatsConfig, holm_verdicts
from tasks.report.stats.power import tost_reach


def evaluate(claim: Claim, metrics: Metrics, lock: Lock, cfg: StatsConfig, loaded: dict | None = None) -> Row:
    """Evaluate one claim; a missing input yields a ``not run`` row (never an exception). ``loaded`` caches the
    arms the floor gate reads across claims (``(ref, metric, items)`` -> sample)."""
    confounders = measure_confounders(claim, metrics)
    md5s = data_md5(claim, lock)
    try:
        samples = [arm(ref, claim, metrics) for ref in claim_refs(claim, metrics)]  # curve_claims
        treat, base, *gap = samples
        row = Row(claim, **gap_estimate(claim, samples, cfg)) if gap else estimate_claim(claim, treat, base, cfg)
    except NotRun as why:
        return Row(claim, "not run", f"not run: {why}", confounders=confounders, data_md5=md5s)
    except MALFORMED as err:
        why = f"not run: malformed metrics for {claim.treatment} / {claim.baseline}: {type(err).__name__}: {err}"
        return Row(claim, "not run", why, confounders=confounders, data_md5=md5s)
    at_floor, floor_notes = floor_gate(claim, samples, metrics, cfg, cached_arm(metrics, loaded))
    floor_notes = floor_scope(at_floor, row.verdict in DECISIVE) + floor_notes  # it scopes, never hides
    failed = (
        failed_preconditions(claim, metrics)
        + diverged_gates(treat, base, cfg)
        + export_gates(claim, metrics)
        + lineage_gate(claim, treat, base, metrics)
    )
    if failed:
        row.verdict, row.reason, row.p_value = "not resolvable", "not resolvable: " + "; ".join(failed), None
    row.confounders, row.data_md5, row.unadjusted, row.at_floor = confounders, md5s, row.verdict, at_floor
    row.runs = sorted(set(treat.runs) | set(base.runs))
    row.notes += [f"treatment: {n}" for n in treat.notes] + [f"baseline: {n}" for n in base.notes]
    row.notes += few_seeds_notes(treat, base) + floor_notes + pretraining_seed_notes(claim, treat, base)
    row.notes += draw_notes(claim) + ([] if row.verdict in DECISIVE else [n for n in [tost_reach(row.power)] if n])
    row.steps = training_steps(claim, treat, base, metrics, lock)
    row.claim = claim.model_copy(update={"statement": resolved(claim, treat, base, metrics)})  # what was computed
    row.comparison, comparison_notes = compare_runs(claim, [treat, base, *gap], cfg)  # PoI and ASO
    row.notes += comparison_notes
    # Cohen's d over the units the CI rests on; an item-level CI (test items x seeds) has no seed-only d
    same_units = claim.kind == "difference" and treat.items is None and base.items is None
    row.effect_size = bs.cohens_d(treat.values, base.values) if same_units else None
    if claim.treatment.startswith("finetune/") and claim.kind == "difference":
        row.best_baseline_key, row.best_baseline = best_baseline(claim, metrics, cfg)
        row.baselines_above = baselines_above(claim, treat, metrics, arm, lambda c, t, b: estimate_claim(c, t, b, cfg))
        row.notes += [above_note(found, claim.metric) for found in row.baselines_above]
    return row


def floor_scope(at_floor: list[str], decided: bool) -> list[str]:
    """The scope notes of the floor gate (``gates.floor_gate``'s arms at floor): the verdict, decided or not, stands;
    the note says what it covers (an encoder that does no better than a fitted baseline)."""
    tail = (
        "the verdict holds for encoders at this scale"
        if decided
        else "undecided, and about an encoder that does no better than a fitted baseline here"
    )
    return [f"scope: {why}: {tail}" for why in at_floor]


def cached_arm(metrics: Metrics, loaded: dict | None):
    """``load(ref, claim)`` for the floor gate: ``arm``, memoised in ``loaded`` by reference, metric and items."""
    memo = {} if loaded is None else loaded

    def load(ref: str, claim: Claim) -> Sample:
        key = (ref, claim.metric, claim.items)
        if key not in memo:
            memo[key] = arm(ref, claim, metrics)
        return memo[key]

    load.memo = memo  # type: ignore[attr-defined]  # the floor gate memoises its comparisons here too
    return load


def arm(ref: str, claim: Claim, metrics: Metrics) -> Sample:
    """The sample of one arm, with its test items (restricted to ``claim.items``) for a finetune reference.

    A calibration metric (``test_ece``, ``test_brier``) resolves the arm by its task's headline metric (seeds,
    diverged seeds, run ids) and carries its ``calibration.ArmCalibration`` as ``items``."""
    if claim.metric in CALIBRATION_METRICS and ref.startswith("finetune/"):
        task = ref.split("/")[1]
        sample = resolve(ref, task_headline(metrics, task), metrics)
        return replace(sample, items=pooled_calibration(task, sample.run_key, metrics))
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


def apply_holm(rows: list[Row], alpha: float) -> None:
    """Holm-adjust the p-values of the rows that have one (``estimates.holm_verdicts``) within each family
    (``grammar.FAMILIES``), in place, with ``m`` the family's declared size: every claim of the family counts,
    also one that is ``not resolvable`` or ``not run``, so ``m`` is fixed before the data. A decisive verdict
    that does not survive the correction becomes ``inconclusive``, with the reason; ``row.unadjusted`` keeps it."""
    for family in FAMILIES:
        size = sum(row.claim.family == family for row in rows)
        tested = {
            row.claim.id: (row.verdict, row.p_value)
            for row in rows
            if row.p_value is not None and row.claim.family == family
        }
        adjusted = holm_verdicts(tested, alpha, size)
        for row in (r for r in rows if r.claim.id in adjusted):
            verdict, row.p_adjusted = adjusted[row.claim.id]
            row.unadjusted = row.verdict
            if verdict != row.verdict:
                row.reason = (
                    f"{row.verdict} before Holm ({row.reason}), but the Holm-adjusted p "
                    f"{row.p_adjusted:.3g} > {alpha:g} within the {family} family (m = {size} claims declared)"
                )
                row.verdict = verdict


def failed_integrity(rows: list[Row]) -> list[Row]:
    """The integrity checks (family ``integrity``) that did not pass: every verdict but ``supported``."""
    return [r for r in rows if r.claim.family == "integrity" and r.verdict != "supported"]


def affects(check: Claim, claim: Claim) -> bool:
    """Whether a failed integrity check undermines ``claim``: a leakage check every claim scored on the eval sets
    (finetune, pretrain), the MLM sanity check every claim on our pretrained encoder, a probe control every probe
    claim."""
    refs = (claim.treatment, claim.baseline)
    source = check.treatment.split("/")[0]
    if source == "leakage":
        return any(ref.startswith(("finetune/", "pretrain/")) for ref in refs)
    if source == "pretrain":
        return any(part.split("@")[0] in PRETRAINED for ref in refs for part in ref.split("/"))
    return source == "probe" and any(ref.startswith("probe/") for ref in refs)


def integrity_notes(rows: list[Row]) -> None:
    """Name each failed integrity check on the primary and findings claims it affects (``affects``), in place."""
    for check in failed_integrity(rows):
        for row in rows:
            if row.claim.family != "integrity" and affects(check.claim, row.claim):
                row.notes.append(f"integrity check {check.claim.id} is {check.verdict}: this claim rests on it")


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
    """Evaluate every claim, in file order (its MDE at Holm's first step in its family, ``alpha / m``), then
    Holm-correct the verdicts within each family (family-wise alpha per family) and name the failed integrity
    checks on the claims they affect. A claim in ``off`` (id -> ``off (enable with ...)``,
    ``tasks.report.claims.switches``) is a ``not run`` row with that reason, its metrics not read."""
    off = off or {}
    sizes = Counter(c.family for c in claims.claims)
    loaded: dict = {}
    rows = [
        Row(
            c,
            "not run",
            f"not run: {off[c.id]}",
            confounders=measure_confounders(c, metrics),
            data_md5=data_md5(c, lock),
        )
        if c.id in off
        else evaluate(c, metrics, lock, replace(cfg, family_size=sizes[c.family]), loaded)
        for c in claims.claims
    ]
    apply_holm(rows, cfg.alpha)
    integrity_notes(rows)
    return rows
