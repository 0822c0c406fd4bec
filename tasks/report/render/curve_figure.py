"""The learning curve of a finetune task (``learning_curve`` of ``metrics/finetune/<task>.json``, written by
``tasks/finetune/reruns/at_train_sizes.py``): the test score of the curve arms and of the best baseline at each
number of train docs.

Whether pretraining helps is sharpest when labels are few: the figure shows the pretrained, random-init and
reference encoders (``learning_curve.configs``) and, at each size, the comparator baseline chosen on dev at that
size (``learning_curve.selection.n<docs>.best_baseline``) against the train docs on a log axis. Its claims are
``tasks.report.claims.curve_claims``.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

from tasks.report.claims.grammar import Metrics, NotRun, dig  # noqa: E402
from tasks.report.render.figures import save_png  # noqa: E402
from tasks.report.stats.estimates import Estimate, mean_ci  # noqa: E402


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
    return save_png(fig, out, dpi)
