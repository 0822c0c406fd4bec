"""The report's figures (matplotlib, Agg backend, PNG): each function draws one figure from metrics and
returns its path, or raises ``NotRun`` saying which input is missing. PNG metadata is pinned so the same
metrics give byte-identical files.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
from matplotlib.ticker import MaxNLocator  # noqa: E402

from tasks.report.claims.grammar import Metrics, NotRun, dig  # noqa: E402
from tasks.report.stats.calibration import reliability  # noqa: E402
from tasks.report.stats.estimates import mean_ci  # noqa: E402
from tasks.report.tables.leakage_recall import LABELS  # noqa: E402

SPAN_ORDER = ("exact", "boundary", "type", "boundary_and_type", "missed", "spurious")  # best to worst
PNG_METADATA = {"Software": None}  # no library version in the file: stable bytes across upgrades
#: Title of ``recall_figure``.
RECALL_FIGURE = "Leakage audit: recall against edit strength"


def save_png(fig, path: Path, dpi: int) -> Path:
    """Write ``fig`` to ``path`` (PNG at ``dpi``, pinned metadata), close it and return ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi, format="png", metadata=PNG_METADATA)
    plt.close(fig)
    return path


def read_curve(path: Path) -> dict[str, list[tuple[float, float]]]:
    """``metrics/pretrain_curve.tsv`` (``step, train_loss, lr, eval_loss, unigram_ce``) as ``{column: [(step,
    value)]}``.

    Empty or ``nan`` cells (eval_loss is only logged at eval steps) are skipped. Raises ``NotRun`` if the
    file is missing or has no ``step`` column.
    """
    if not path.exists():
        raise NotRun(f"{path} is missing (pretrain not run)")
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle, delimiter="\t")
        if "step" not in (reader.fieldnames or []):
            raise NotRun(f"{path} has no 'step' column (columns: {reader.fieldnames})")
        columns = ("train_loss", "eval_loss", "lr", "unigram_ce")
        series: dict[str, list[tuple[float, float]]] = {c: [] for c in columns}
        for row in reader:
            for column, points in series.items():
                cell = (row.get(column) or "").strip()
                if cell and math.isfinite(float(cell)):
                    points.append((float(row["step"]), float(cell)))
    return series


def loss_curve(curve_path: Path, out: Path, dpi: int) -> Path:
    """Pretraining train/eval MLM loss against optimizer step, learning rate on a second axis, and the unigram
    baseline's held-out cross-entropy as a horizontal line (below it, the model uses context)."""
    series = read_curve(curve_path)
    if not series["train_loss"] and not series["eval_loss"]:
        raise NotRun(f"{curve_path} has no loss values")
    fig, ax = plt.subplots(figsize=(7, 4))
    for column, style in (("train_loss", "-"), ("eval_loss", "o-")):
        if series[column]:
            ax.plot(*zip(*series[column]), style, label=column.replace("_", " "), markersize=3)
    if series["unigram_ce"]:
        unigram = series["unigram_ce"][-1][1]
        ax.axhline(unigram, color="tab:red", linestyle="--", linewidth=1, label=f"unigram baseline ({unigram:.2f})")
    ax.set(xlabel="optimizer step", ylabel="MLM cross-entropy (nats/token)", title="Pretraining loss")
    ax.legend(loc="upper left")
    if series["lr"]:
        lr_ax = ax.twinx()
        lr_ax.plot(*zip(*series["lr"]), color="grey", alpha=0.4, linewidth=1)
        lr_ax.set_ylabel("learning rate", color="grey")
    return save_png(fig, out, dpi)


def dose_response(metrics: Metrics, task: str, metric: str, level: float, out: Path, dpi: int) -> Path:
    """Dose-response: the test score (mean and t-CI over seeds) of the ``dose_response`` configuration of
    ``metrics/finetune/<task>.json`` fine-tuned from each pretraining snapshot and from the final model,
    against pretraining steps. A monotone rise is stronger evidence for pretraining than one endpoint."""
    where = f"metrics/finetune/{task}.json"
    tree = metrics.get(f"finetune/{task}")
    dose = dig(tree, ["dose_response"], where)
    final_step = int(dig(metrics.get("pretrain"), ["steps"], "metrics/pretrain.json"))
    points = sorted([(int(step), key) for step, key in dose["runs"].items()] + [(final_step, dose["config"])])
    xs, estimates = [], []
    for step, key in points:
        values = dig(tree, ["runs", key, metric, "per_seed"], where)
        xs.append(step)
        estimates.append(mean_ci(tuple(float(v) for v in values), level))
    fig, ax = plt.subplots(figsize=(6.5, 4))
    means = [e.mean for e in estimates]
    low = [e.mean - e.low if e.has_ci else 0.0 for e in estimates]
    high = [e.high - e.mean if e.has_ci else 0.0 for e in estimates]
    ax.errorbar(xs, means, yerr=[low, high], fmt="o-", capsize=4)
    ax.set(xlabel="pretraining steps", ylabel=metric, title=f"{task}: {dose['config']} against pretraining steps")
    return save_png(fig, out, dpi)


def seed_points(metrics: Metrics, task: str, metric: str, level: float, out: Path, dpi: int) -> Path:
    """Per-seed scores of every run of ``metrics/finetune/<task>.json`` as points, with mean and t-CI bars."""
    runs = dig(metrics.get(f"finetune/{task}"), ["runs"], f"metrics/finetune/{task}.json")
    keys = sorted(k for k in runs if isinstance(runs[k], dict) and metric in runs[k])
    if not keys:
        raise NotRun(f"metrics/finetune/{task}.json has no run with {metric!r}")
    fig, ax = plt.subplots(figsize=(max(6.5, 1.2 * len(keys)), 4.5))
    for x, key in enumerate(keys):
        values = [float(v) for v in runs[key][metric].get("per_seed") or []]
        if not values:
            continue
        est = mean_ci(tuple(values), level)
        ax.scatter([x] * len(values), values, s=18, alpha=0.6, color="tab:blue", zorder=3)
        if est.has_ci:
            ax.errorbar(
                [x + 0.15],
                [est.mean],
                yerr=[[est.mean - est.low], [est.high - est.mean]],
                fmt="s",
                color="black",
                capsize=4,
                zorder=4,
            )
        else:
            ax.plot([x + 0.15], [est.mean], "s", color="black")
    best = (metrics.get(f"finetune/{task}").get("selection") or {}).get("best_baseline")
    if best in runs and metric in runs[best]:
        ax.axhline(
            runs[best][metric]["mean"],
            color="tab:red",
            linestyle="--",
            linewidth=1,
            label=f"best baseline on dev: {best}",
        )
        ax.legend(loc="lower right", fontsize=8)
    ax.set_xticks(range(len(keys)), keys, rotation=30, ha="right", fontsize=8)
    ax.set(ylabel=metric)
    ax.set_title(f"{task}: {metric} per seed (dots),\nmean and {level:.0%} t-CI over seeds (squares)", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    return save_png(fig, out, dpi)


def confusion_matrix(metrics: Metrics, task: str, run_key: str, out: Path, dpi: int) -> Path:
    """The classification confusion matrix (rows = gold, columns = predicted) of one run's ``details``.

    Accepts ``details.confusion_matrix`` as ``{"labels": [..], "matrix": [[..]]}`` or as a list of rows with
    the names in ``details.labels``.
    """
    where = f"metrics/finetune/{task}.json"
    details = dig(metrics.get(f"finetune/{task}"), ["runs", run_key, "details"], where)
    matrix, labels = _matrix_and_labels(
        dig(details, ["confusion_matrix"], f"{where} runs[{run_key!r}].details"), details
    )
    fig, ax = plt.subplots(figsize=(max(5.5, 1.0 * len(labels) + 2), max(5.0, 1.0 * len(labels) + 1.5)))
    image = ax.imshow(matrix, cmap="Blues")
    for i, row in enumerate(matrix):
        for j, count in enumerate(row):
            ax.text(
                j,
                i,
                f"{count:g}",
                ha="center",
                va="center",
                color="white" if count > max(map(max, matrix)) / 2 else "black",
            )
    ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right")
    ax.set_yticks(range(len(labels)), labels)
    ax.set(xlabel="predicted", ylabel="gold")
    ax.set_title(f"{task} confusion matrix\n{run_key}, counts summed over seeds", fontsize=10)
    fig.colorbar(image, ax=ax, fraction=0.046)
    return save_png(fig, out, dpi)


def _matrix_and_labels(raw, details: dict) -> tuple[list[list[float]], list[str]]:
    if isinstance(raw, dict):
        matrix, labels = raw.get("matrix"), raw.get("labels")
    else:
        matrix, labels = raw, details.get("labels")
    if not matrix or not all(isinstance(r, list) and len(r) == len(matrix) for r in matrix):
        raise NotRun("confusion_matrix is not a square list of rows")
    labels = [str(x) for x in labels] if labels and len(labels) == len(matrix) else [str(i) for i in range(len(matrix))]
    return [[float(c) for c in r] for r in matrix], labels


def span_errors(metrics: Metrics, task: str, run_key: str, out: Path, dpi: int) -> Path:
    """NER span-error counts (exact, boundary, type, boundary_and_type, missed, spurious) of one run as bars,
    summed over seeds as ``finetune`` pools them."""
    where = f"metrics/finetune/{task}.json"
    raw = dig(metrics.get(f"finetune/{task}"), ["runs", run_key, "details", "span_errors"], where)
    counts = span_counts(raw)
    if not counts:
        raise NotRun(f"{where} runs[{run_key!r}].details.span_errors holds no counts")
    fig, ax = plt.subplots(figsize=(6, 3.5))
    bars = ax.bar(list(counts), list(counts.values()), color="tab:orange")
    ax.bar_label(bars, fmt="%g")
    ax.set(ylabel="entities (summed over seeds)", title=f"{task} span errors ({run_key})")
    plt.setp(ax.get_xticklabels(), rotation=30, ha="right")
    return save_png(fig, out, dpi)


def span_counts(raw) -> dict[str, float]:
    """The numeric entries of a span-error table, known classes in ``SPAN_ORDER`` first, others by name."""
    numeric = {str(k): float(v) for k, v in raw.items() if isinstance(v, int | float)} if isinstance(raw, dict) else {}
    rank = {name: i for i, name in enumerate(SPAN_ORDER)}
    return {k: numeric[k] for k in sorted(numeric, key=lambda k: (rank.get(k, len(rank)), k))}


def sense_separation(metrics: Metrics, out: Path, dpi: int) -> Path:
    """Sense separation (within - across mean cosine) and 1-NN sense accuracy by layer, one line per model, and
    dashed in the same colour the shuffled-context control of that model (``shuffled_control``) when probed."""
    probe = metrics.get("probe")
    models = dig(probe, ["models"], "metrics/probe.json")
    if not models:
        raise NotRun("metrics/probe.json lists no models")
    control = (probe.get("shuffled_control") or {}).get("models") or {}
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for colour, variant in enumerate(sorted(models)):
        for ax, key in zip(axes, ("separation", "knn_accuracy")):
            for scores, style, label in (
                (models[variant], "o-", variant),
                (control.get(variant, {}), "x--", f"{variant}, shuffled context"),
            ):
                values = scores.get(key) or []
                if values:
                    ax.plot(range(len(values)), values, style, color=f"C{colour}", label=label, markersize=4)
    axes[0].set(xlabel="layer (0 = embeddings)", ylabel="within - across cosine", title="Sense separation by layer")
    axes[1].set(xlabel="layer (0 = embeddings)", ylabel="leave-one-out 1-NN accuracy", title="Sense 1-NN accuracy")
    for ax in axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend()
        ax.grid(alpha=0.3)
    return save_png(fig, out, dpi)


def forest(rows: list, out: Path, dpi: int) -> Path:
    """Forest plot of every claim: the difference (an upper_bound claim: the treatment) with its CI as a bar,
    the claim's ``min_effect`` as a red tick, zero as a grey line, coloured by verdict. ``rows`` are
    ``claims.row.Row``; raises ``NotRun`` when no claim has an estimate."""
    shown = [r for r in rows if (r.treatment if r.claim.kind == "upper_bound" else r.difference) is not None]
    if not shown:
        raise NotRun("no claim has an estimate")
    fig, ax = plt.subplots(figsize=(8, 0.42 * len(shown) + 1.2))
    for y, row in enumerate(reversed(shown)):
        est = row.treatment if row.claim.kind == "upper_bound" else row.difference
        color = VERDICT_COLORS.get(row.verdict, "grey")
        if est.has_ci:
            ax.plot([est.low, est.high], [y, y], color=color, linewidth=2.5)
        ax.plot([est.mean], [y], "o", color=color, markersize=5)
        ax.plot([row.claim.min_effect], [y], "|", color="tab:red", markersize=14, markeredgewidth=2)
    ax.axvline(0.0, color="grey", linewidth=0.8)
    labels = [
        f"{r.claim.id} ({r.verdict})" + ("" if r.difference_label == "treatment - baseline" else " *")
        for r in reversed(shown)
    ]
    ax.set_yticks(range(len(shown)), labels, fontsize=8)
    ax.set_xlabel(
        "treatment - baseline (upper_bound: the treatment's rate)\n*: baseline - treatment (lower is "
        "better); red tick: min_effect",
        fontsize=9,
    )
    ax.set_title("Every claim with its CI", fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    return save_png(fig, out, dpi)


VERDICT_COLORS = {
    "supported": "tab:green",
    "equivalent": "tab:cyan",
    "ruled out": "tab:orange",
    "inconclusive": "goldenrod",
    "contradicted": "tab:red",
    "not resolvable": "tab:purple",
}


def reliability_diagram(curves: dict[str, tuple], out: Path, n_bins: int, dpi: int) -> Path:
    """Reliability diagram: per arm (``curves``: name -> ``(confidence, correct)`` of its units, seeds pooled,
    e.g. ``calibration.ArmCalibration.pooled()``), accuracy against mean confidence in each of ``n_bins``
    equal-mass bins (``calibration.reliability``), one line per arm over the diagonal of perfect calibration.
    Raises ``NotRun`` when ``curves`` is empty, ValueError on bad confidences (``calibration.reliability``)."""
    if not curves:
        raise NotRun("no arm to draw a reliability diagram for")
    fig, ax = plt.subplots(figsize=(5.5, 5))
    ax.plot([0, 1], [0, 1], color="grey", linestyle="--", linewidth=1, label="perfect calibration")
    for name, (confidence, correct) in curves.items():
        mean_conf, accuracy, _ = reliability(confidence, correct, n_bins)
        ax.plot(mean_conf, accuracy, "o-", markersize=3, label=name)
    ax.set(
        xlim=(0, 1),
        ylim=(0, 1),
        xlabel="mean confidence in bin",
        ylabel="accuracy in bin",
        title=f"Reliability ({n_bins} equal-mass bins, seeds pooled)",
    )
    ax.set_aspect("equal")
    ax.legend(loc="upper left", fontsize="small")
    return save_png(fig, out, dpi)


def recall_figure(metrics: Metrics, out: Path, dpi: int) -> Path:
    """Recall (with 95% Clopper-Pearson bars) against strength, one panel per family with two or more
    variants plus one for the rest, one line per detector."""
    planted = dig(metrics.get("leakage"), ["planted"], "metrics/leakage.json")
    variants = planted["variants"]
    if not variants or "by_detector" not in next(iter(variants.values())):
        raise NotRun("metrics/leakage.json planted has no per-detector recall")
    families: dict[str, list[str]] = {}
    for name, v in variants.items():
        families.setdefault(
            v["family"] if v["family"] in ("replaced", "synonyms", "quoted") else "format and order", []
        ).append(name)
    fig, axes = plt.subplots(1, len(families), figsize=(4.2 * len(families), 3.8), sharey=True, squeeze=False)
    for ax, (family, names) in zip(axes[0], families.items()):
        x = list(range(len(names)))
        for d in planted["detectors"]:
            cells = [variants[n]["by_detector"][d] for n in names]
            y = [c["recall"] if c["recall"] is not None else float("nan") for c in cells]
            err = [
                [max(r - (c["ci_low"] or r), 0) for r, c in zip(y, cells)],
                [max((c["ci_high"] or r) - r, 0) for r, c in zip(y, cells)],
            ]
            style = {"linewidth": 2.5, "color": "black"} if d == "audit" else {"linewidth": 1.2}
            ax.errorbar(x, y, yerr=err, marker="o", markersize=3, capsize=2, label=LABELS.get(d, d), **style)
        ax.axhline(0.95, color="grey", linestyle=":", linewidth=1)
        ax.set_xticks(
            x,
            [n.replace("_every_", " /").replace("fragment_", "quote ") for n in names],
            rotation=40,
            ha="right",
            fontsize=8,
        )
        ax.set_title(family)
        ax.set_ylim(-0.02, 1.02)
    axes[0][0].set_ylabel("recall on planted copies")
    axes[0][-1].legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=dpi)
    plt.close(fig)
    return out
