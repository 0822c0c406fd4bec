"""The learning curve of a finetune task (``learning_curve`` of ``metrics/finetune/<task>.json``, written by
``tasks/finetune/curve.py``): the test score of the curve arms and of the best baseline at each number of
train docs.

Whether pretraining helps is sharpest when labels are few: the figure shows the pretrained, random-init and
reference encoders (``learning_curve.configs``) and, at each size, the comparator baseline chosen on dev at that
size (``learning_curve.selection.n<docs>.best_baseline``) against the train docs on a log axis.

The claims' grammar for the curve (``claim_refs``, before ``tasks.report.claims.resolve``):

- ``finetune/<task>/best-arm@n<docs>`` / ``best-baseline@n<docs>``: the run chosen on dev among the curve's runs
  at ``<docs>`` train docs (``learning_curve.selection.n<docs>``);
- a gap ``finetune/<task>/<run key> - <run key>`` as treatment and as baseline: the claim's difference is
  ``(T1 - T2) - (B1 - B2)``, a difference of two paired differences (e.g. "(pretrained - random) at 32 docs
  exceeds (pretrained - random) at 160"), from one hierarchical bootstrap of all four runs
  (``gap_estimate``).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

import numpy as np  # noqa: E402

from tasks.report import bootstrap as bs  # noqa: E402
from tasks.report.claims import Claim, Metrics, NotRun, Sample, dig  # noqa: E402
from tasks.report.figures import _save  # noqa: E402
from tasks.report.items import metric_function  # noqa: E402
from tasks.report.power import power_of  # noqa: E402
from tasks.report.pretrain_seeds import fine_seeds  # noqa: E402
from tasks.report.statistics import Estimate, StatsConfig, Tests, difference_verdict, mean_ci  # noqa: E402


def series(metrics: Metrics, task: str, metric: str, level: float) -> dict[str, list[tuple[int, Estimate]]]:
    """``{line: [(train docs, estimate)]}``: one line per curve arm (its full-size key) and ``best baseline``;
    each estimate is the mean and two-sided ``level`` Student-t interval over the run's seeds (a one-seed run,
    such as a deterministic baseline: the value, no interval). Raises ``NotRun`` when the task records no
    learning curve or a run it names."""
    where = f"metrics/finetune/{task}.json"
    tree = metrics.get(f"finetune/{task}")
    curve = dig(tree, ["learning_curve"], where)

    def estimate(key: str) -> Estimate:
        values = dig(tree, ["runs", key, metric, "per_seed"], where)
        return mean_ci(tuple(float(v) for v in values), level)

    lines: dict[str, list[tuple[int, Estimate]]] = {arm: [] for arm in curve["configs"]}
    lines["best baseline"] = []
    for size in curve["sizes"]:
        at = f"n{size}"
        for arm, key in curve["runs"][at].items():
            lines[arm].append((int(size), estimate(key)))
        lines["best baseline"].append((int(size), estimate(curve["selection"][at]["best_baseline"])))
    return lines


def learning_curve(metrics: Metrics, task: str, metric: str, level: float, out: Path, dpi: int) -> Path:
    """Draw ``series`` to ``out`` (PNG): ``metric`` against train docs (log x), mean and t-CI bars over seeds;
    the best baseline's points are labelled with the comparator chosen on dev at each size."""
    lines = series(metrics, task, metric, level)
    if not any(lines.values()):
        raise NotRun(f"metrics/finetune/{task}.json learning_curve has no sizes")
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for index, (name, points) in enumerate(lines.items()):
        xs = [size * (1 + 0.02 * (index - 1)) for size, _ in points]  # a small dodge so bars do not overlap
        means = [e.mean for _, e in points]
        low = [e.mean - e.low if e.has_ci else 0.0 for _, e in points]
        high = [e.high - e.mean if e.has_ci else 0.0 for _, e in points]
        style = "s--" if name == "best baseline" else "o-"
        ax.errorbar(xs, means, yerr=[low, high], fmt=style, capsize=4, label=name)
    chosen = dig(metrics.get(f"finetune/{task}"), ["learning_curve", "selection"], f"metrics/finetune/{task}.json")
    for size, est in lines["best baseline"]:
        name = chosen[f"n{size}"]["best_baseline"].split("/")[1]
        ax.annotate(name, (size, est.mean), textcoords="offset points", xytext=(4, -12), fontsize=7)
    sizes = [size for size, _ in lines["best baseline"]]
    ax.set_xscale("log")
    ax.set_xticks(sizes, [str(s) for s in sizes])
    ax.minorticks_off()
    ax.set(xlabel="train docs (log scale)", ylabel=metric)
    ax.set_title(f"{task}: {metric} against train docs,\nmean and {level:.0%} t-CI over seeds", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3)
    return _save(fig, out, dpi)


GAP = " - "  # separates the two runs of a gap reference


def claim_refs(claim: Claim, metrics: Metrics) -> list[str]:
    """The references a claim's arms resolve (``tasks.report.claims.resolve``): ``[treatment, baseline]``, or
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
    """The ``Row`` fields (``tasks.report.evaluation.Row``: verdict, reason, the two gaps, their difference,
    tests, power) of a gap claim: ``(T1 - T2) - (B1 - B2)`` for ``arms`` = [T1, T2, B1, B2] (``claim_refs``),
    each a finetune sample with test items.

    One paired hierarchical bootstrap (``bootstrap.hierarchical_bootstrap``) of the four runs: the same item
    weights for all four (they score the same test docs), the same seed draw for all four when they ran the same
    seeds (else per run). ``treatment``/``baseline`` of the result are ``T1 - T2`` and ``B1 - B2`` with their
    percentile intervals; ``difference`` their difference, tested against ``claim.min_effect`` like any
    difference claim. Raises ``NotRun`` when a run has no test predictions or the runs scored different docs.
    """
    items = [sample.items for sample in arms]
    if len(arms) != 4 or any(item is None for item in items):
        raise NotRun("a gap claim needs four finetune runs with test predictions")
    if any(item.doc_ids != items[0].doc_ids for item in items):
        raise NotRun(f"the gap claim's runs scored different test items ({', '.join(a.run_key for a in arms)})")
    function, shared = metric_function(claim.metric), all(fine_seeds(item) == fine_seeds(items[0]) for item in items)
    reps = bs.hierarchical_bootstrap([item.headline for item in items], function, cfg.resamples, cfg.seed, shared,
                                     [item.pretrain for item in items])  # pretraining seeds first, where several
    points = [bs.point_estimate(item.headline, function) for item in items]
    first, second = reps[:, 0] - reps[:, 1], reps[:, 2] - reps[:, 3]
    n, method = len(items[0].doc_ids), f"hierarchical bootstrap ({cfg.resamples} resamples)"
    t_est = Estimate(points[0] - points[1], *bs.percentile_ci(first, cfg.level, (-1.0, 1.0)), n, method)
    b_est = Estimate(points[2] - points[3], *bs.percentile_ci(second, cfg.level, (-1.0, 1.0)), n, method)
    deltas = first - second
    diff = Estimate(t_est.mean - b_est.mean, *bs.percentile_ci(deltas, cfg.level, (-2.0, 2.0)), n, method)
    tests = Tests(lambda m: bs.p_value(deltas, m, "greater"), lambda m: bs.p_value(deltas, m, "less"),
                  lambda m: bs.tost_p_value(deltas, abs(m)))
    verdict, reason, p = difference_verdict(diff, claim.min_effect, tests, cfg.alpha)
    keys = [a.run_key for a in arms]
    seeds = "the same seeds, resampled jointly" if shared else "seeds resampled per run"
    return {"verdict": verdict, "reason": reason, "treatment": t_est, "baseline": b_est, "difference": diff,
            "p_value": p, "power": power_of(float(np.std(deltas, ddof=1)), n, "test items", claim.min_effect,
                                            cfg.alpha, cfg.power),
            "pairing": f"({keys[0]} - {keys[1]}) - ({keys[2]} - {keys[3]}), paired by test item ({n} "
                       f"{claim.items} items, the same draw for all four runs), {seeds}; {method}",
            "items": f"{n} test items ({claim.items}) x {len(fine_seeds(items[0]))} seeds",
            "difference_label": "treatment gap - baseline gap",
            "notes": [f"baseline gap: {note}" for sample in arms[2:] for note in sample.notes]}  # e.g. diverged seeds
