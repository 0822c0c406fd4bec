"""A claim's statement with what was computed: the arms, the comparator and their data, written from the values the
verdict used, so the text cannot drift from the numbers (issue 58: a hand-written "whole train split" stood over a
baseline fitted on 400 sentences).

``resolved`` appends one sentence to a fine-tuning claim's hand-written statement, from the two samples the
verdict read (``Sample.run_key``: ``best-arm``/``best-baseline`` already resolved to runs) and the finetune
stage's metrics of those runs (``metrics/finetune/<task>.json`` ``runs``): per side the run key, what chose it
(the dev selection), a baseline's model and input (``described_as``, ``input``), its seeds and the train docs or
sentences each seed was fitted on (``details.per_seed.<seed>.train_docs``), and the scored metric. Every other
claim (pretraining, probe, leakage) keeps its statement as written.
"""

from __future__ import annotations

from tasks.report.claims.grammar import MALFORMED, SELECTED, Claim, Metrics, NotRun, Sample
from tasks.report.claims.tasks_run import task_module

#: How a selected reference's choice reads.
CHOSEN = {"best-arm": "the best arm on dev", "best-baseline": "the best baseline on dev"}


def resolved(claim: Claim, treat: Sample, base: Sample, metrics: Metrics) -> str:
    """``claim.statement`` followed by ``Computed: ...`` (the module docstring) for a claim whose two references
    are finetune runs of one task; the statement unchanged otherwise, or when the task's metrics are missing."""
    refs = (claim.treatment, claim.baseline)
    if not all(ref.startswith("finetune/") and " - " not in ref for ref in refs) or not treat.run_key:
        return claim.statement
    task = claim.treatment.split("/")[1]
    try:
        runs = metrics.get(f"finetune/{task}").get("runs") or {}
        unit = "docs" if task_module(metrics, task) == "cls" else "sentences"
    except (NotRun, KeyError):
        return claim.statement
    sides = [
        _side(ref, sample, runs.get(sample.run_key) or {}, unit)
        for ref, sample in zip(refs, (treat, base), strict=True)
    ]
    return f"{claim.statement.rstrip()} Computed: {sides[0]} against {sides[1]}, scored by {claim.metric}."


def _side(ref: str, sample: Sample, run: dict, unit: str) -> str:
    """One side in words: ``<run key>`` (its choice, model and input; seeds x train size)."""
    name = ref.split("/", 2)[2]
    facts = [CHOSEN[name]] if name in SELECTED else []
    if run.get("baseline"):
        facts.append(str(run.get("described_as") or run["baseline"]))
        facts += [str(run["input"])] if run.get("input") else []
    facts.append(_data(run, sample, unit))
    return f"`{sample.run_key}` ({'; '.join(facts)})"


def _data(run: dict, sample: Sample, unit: str) -> str:
    """``<k> seeds, <n> train <unit> each`` from the run's per-seed records (a range when the draws differ)."""
    per_seed = (run.get("details") or {}).get("per_seed") or {}
    seeds = len(per_seed) or len(sample.units)
    sizes = sorted({int(s["train_docs"]) for s in per_seed.values() if isinstance(s, dict) and "train_docs" in s})
    plural = "s" if seeds != 1 else ""
    if not sizes:
        return f"{seeds} seed{plural}"
    size = f"{sizes[0]:,}" if len(sizes) == 1 else f"{sizes[0]:,}-{sizes[-1]:,}"
    return f"{seeds} seed{plural}, {size} train {unit}{' each' if seeds > 1 else ''}"


def baselines_above(claim: Claim, treat: Sample, metrics: Metrics, arm, estimate) -> list[dict]:
    """Every baseline run of the task (comparator or all-data reference, ``runs[<key>].baseline`` set) whose mean
    test score is above the treatment's, for a claim whose treatment is the best arm (the shipped one) on all
    test items: ``{run, described_as, input, mean, best_arm, best_arm_mean, difference, ci_low, ci_high}``, the
    difference (best arm - baseline) and its interval from ``estimate(claim_on_that_baseline, treat,
    baseline_sample).difference`` (paired by test item as the claim; None, with ``why``, when it cannot be
    computed). ``arm(ref, claim, metrics)`` resolves a reference (``evaluation.arm``). Empty for other claims."""
    if not claim.treatment.endswith("/best-arm") or claim.kind != "difference" or claim.items != "all":
        return []
    task = claim.treatment.split("/")[1]
    runs = metrics.get(f"finetune/{task}").get("runs") or {}
    shipped = ((runs.get(treat.run_key) or {}).get(claim.metric) or {}).get("mean")
    out = []
    for key, run in sorted(runs.items()):
        mean = (run.get(claim.metric) or {}).get("mean")
        if not run.get("baseline") or mean is None or shipped is None or mean <= shipped:
            continue
        found = {"run": key, "described_as": run.get("described_as") or run["baseline"], "input": run.get("input", "")}
        found |= {"mean": mean, "best_arm": treat.run_key, "best_arm_mean": shipped}
        other = claim.model_copy(update={"baseline": f"finetune/{task}/{key}"})
        try:
            diff = estimate(other, treat, arm(other.baseline, other, metrics)).difference
            found |= {"difference": diff.mean, "ci_low": diff.low, "ci_high": diff.high}
        except (NotRun, *MALFORMED) as why:
            found |= {"difference": None, "ci_low": None, "ci_high": None, "why": str(why)}
        out.append(found)
    return out


def above_note(found: dict, metric: str) -> str:
    """One ``baselines_above`` record as a note of the claim."""
    interval = (
        f"{found['difference']:+.3f} [{found['ci_low']:+.3f}, {found['ci_high']:+.3f}]"
        if found["difference"] is not None
        else f"not computed ({found['why']})"
    )
    return (
        f"a baseline scores above the best arm (the shipped one) on this test set: `{found['run']}` "
        f"({found['described_as']}; {found['input']}) {metric} {found['mean']:.4f} against `{found['best_arm']}` "
        f"{found['best_arm_mean']:.4f}; best arm - baseline {interval}"
    )
