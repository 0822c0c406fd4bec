"""The claims' grammar for the learning curve of a finetune task (``learning_curve`` of
``metrics/finetune/<task>.json``; the figure is ``tasks.report.render.curve_figure``), applied by ``claim_refs``
before ``tasks.report.claims.arms.resolve``:

- ``finetune/<task>/best-arm@n<docs>`` / ``best-baseline@n<docs>``: the run chosen on dev among the curve's runs
  at ``<docs>`` train docs (``learning_curve.selection.n<docs>``);
- a gap ``finetune/<task>/<run key> - <run key>`` as treatment and as baseline: the claim's difference is
  ``(T1 - T2) - (B1 - B2)``, a difference of two paired differences (e.g. "(pretrained - random) at 32 docs
  exceeds (pretrained - random) at 160"), from one hierarchical bootstrap of all four runs
  (``gap_estimate``).
"""

from __future__ import annotations

from tasks.report.claims.arms.items import metric_function
from tasks.report.claims.arms.nested_seeds import fine_seeds
from tasks.report.claims.estimation import contrast
from tasks.report.claims.grammar import Claim, Metrics, NotRun, Sample, dig
from tasks.report.stats import bootstrap as bs
from tasks.report.stats.estimates import Estimate, StatsConfig, difference_verdict

GAP = " - "  # separates the two runs of a gap reference


def claim_refs(claim: Claim, metrics: Metrics) -> list[str]:
    """The references a claim's arms resolve (``tasks.report.claims.arms.resolve``): ``[treatment, baseline]``, or
    for a gap claim ``[T1, T2, B1, B2]``; ``best-arm@n<docs>`` / ``best-baseline@n<docs>`` become the run chosen
    at that size. Raises ``NotRun`` when one side is a gap and the other is not, or a size was not run."""
    sides = [ref.split(GAP) for ref in (claim.treatment, claim.baseline)]
    if len(sides[0]) != len(sides[1]) or len(sides[0]) > 2:
        raise NotRun(f"a gap claim needs '<run> - <run>' on both sides, got {claim.treatment!r} / {claim.baseline!r}")
    prefix = f"finetune/{claim.task}/"
    refs = [ref if i == 0 else prefix + ref for side in sides for i, ref in enumerate(side)]  # the 2nd: a run key
    return [sized(ref, metrics) for ref in refs]


def sized(ref: str, metrics: Metrics) -> str:
    """``finetune/<task>/best-arm@n<docs>`` (or ``best-baseline``) as ``finetune/<task>/<run key>`` of the run
    chosen on dev at that size; any other reference unchanged. Raises ``NotRun`` naming the missing key."""
    parts = ref.split("/")
    name, _, at = parts[-1].partition("@")
    if parts[0] != "finetune" or len(parts) != 3 or not at or name not in ("best-arm", "best-baseline"):
        return ref
    where = f"metrics/finetune/{parts[1]}.json"
    chosen = dig(metrics.get(f"finetune/{parts[1]}"), ["learning_curve", "selection", at], where)
    key = dig(chosen, [name.replace("-", "_")], f"{where} learning_curve.selection.{at}")
    return f"finetune/{parts[1]}/{key}"


def gap_estimate(claim: Claim, arms: list[Sample], cfg: StatsConfig) -> dict:
    """The ``Row`` fields (``tasks.report.claims.row.Row``: verdict, reason, the two gaps, their difference,
    tests, power) of a gap claim: ``(T1 - T2) - (B1 - B2)`` for ``arms`` = [T1, T2, B1, B2] (``claim_refs``),
    each a finetune sample with test items.

    One paired hierarchical bootstrap (``bootstrap.hierarchical_bootstrap``) of the four runs: the same item
    weights for all four (they score the same test docs), the same seed draw for all four when they ran the same
    seeds (else per run). ``treatment``/``baseline`` of the result are ``T1 - T2`` and ``B1 - B2`` with their
    percentile intervals; ``difference`` their difference, with the t interval on Satterthwaite's df over its
    variance components (``estimation.contrast``), tested against ``claim.min_effect`` like any difference claim.
    Raises ``NotRun`` when a run has no test predictions or the runs scored different docs.
    """
    items = [sample.items for sample in arms]
    if len(arms) != 4 or any(item is None for item in items):
        raise NotRun("a gap claim needs four finetune runs with test predictions")
    if any(item.doc_ids != items[0].doc_ids for item in items):
        raise NotRun(f"the gap claim's runs scored different test items ({', '.join(a.run_key for a in arms)})")
    function, shared = metric_function(claim.metric), all(fine_seeds(item) == fine_seeds(items[0]) for item in items)
    reps = bs.hierarchical_bootstrap(
        [item.headline for item in items],
        function,
        cfg.resamples,
        cfg.seed,
        shared,
        [item.pretrain for item in items],
        items[0].clusters,
    )  # pretraining seeds first, where several; clusters of items drawn whole
    points = [bs.point_estimate(item.headline, function) for item in items]
    first, second = reps[:, 0] - reps[:, 1], reps[:, 2] - reps[:, 3]
    n, method = len(items[0].doc_ids), f"hierarchical bootstrap ({cfg.resamples} resamples)"
    t_est = Estimate(points[0] - points[1], *bs.percentile_ci(first, cfg.level, (-1.0, 1.0)), n, method)
    b_est = Estimate(points[2] - points[3], *bs.percentile_ci(second, cfg.level, (-1.0, 1.0)), n, method)
    diff, tests, power = contrast(claim, items, (1.0, -1.0, -1.0, 1.0), t_est.mean - b_est.mean, cfg)
    verdict, reason, p = difference_verdict(diff, claim.min_effect, tests, cfg.alpha)
    keys = [a.run_key for a in arms]
    seeds = "the same seeds, resampled jointly" if shared else "seeds resampled per run"
    return {
        "verdict": verdict,
        "reason": reason,
        "treatment": t_est,
        "baseline": b_est,
        "difference": diff,
        "p_value": p,
        "power": power,
        "pairing": f"({keys[0]} - {keys[1]}) - ({keys[2]} - {keys[3]}), paired by test item ({n} "
        f"{claim.items} items), {seeds}; gaps: {method}; difference: {diff.method}",
        "items": f"{n} test items ({claim.items}) x {len(fine_seeds(items[0]))} seeds",
        "difference_label": "treatment gap - baseline gap",
        "notes": [f"baseline gap: {note}" for sample in arms[2:] for note in sample.notes],
    }  # e.g. diverged seeds
