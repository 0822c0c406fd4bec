"""What users see of a report without opening it: the curated metrics of ``dvc exp show``, the data of
``dvc plots show`` and the run description on MLflow's run page.

- ``metrics/summary.json`` is the one file ``dvc.yaml`` declares as metrics, so ``dvc exp show`` and
  ``dvc metrics diff`` list a few columns: the verdict counts, each task's headline test metric for the arm
  and the baseline the finetune stage chose on dev and for the best of our pretrained arms, and the
  pretraining gap to the unigram baseline. The stages' own ``metrics/<stage>.json`` stay plain outputs.
- ``<reports>/plots/forest.csv`` (one line per claim with a difference), ``seeds_<task>.csv`` (one line per
  arm and seed), ``pretrain_train.csv`` and ``pretrain_heldout.csv`` (the logged and the eval steps of the
  pretraining curve) are the data of the forest plot, the per-seed scores and the pretraining curve that
  ``dvc.yaml``'s ``plots`` draw.
- ``<reports>/summary.md`` is the verdict counts and one line per claim, set as the MLflow run description.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from tasks.report.claims.grammar import MALFORMED, Metrics, NotRun
from tasks.report.claims.row import Row
from tasks.report.claims.tasks_run import finetune_tasks
from tasks.report.render.answer import answer, integrity_line
from tasks.report.render.figures import read_curve
from tasks.report.render.pages import by_evidence, fmt_estimate, verdict_summary, verdict_text

SUMMARY_FILE = "summary.json"
PRETRAIN_KEYS = ("heldout_perplexity", "heldout_gap_to_unigram_nats", "heldout_mlm_accuracy")


def summary_metrics(rows: list[Row], verdicts: dict[str, int], metrics: Metrics) -> dict:
    """The curated metrics (``metrics/summary.json``); a task or stage whose metrics are missing is left out."""
    out: dict = {"verdicts": verdicts, "claims": len(rows)}
    for task in finetune_tasks(metrics):
        headline = task_summary(task, metrics)
        out |= {task: headline} if headline else {}
    pretrain = metrics.optional("pretrain") or {}
    kept = {key: pretrain[key] for key in PRETRAIN_KEYS if isinstance(pretrain.get(key), int | float)}
    return out | ({"pretrain": kept} if kept else {})


def task_summary(task: str, metrics: Metrics) -> dict:
    """``{best_arm, best_arm_<metric>, best_baseline, best_baseline_<metric>, pretrained_arm, ...}``: the mean
    over seeds of the task's headline test metric (``tasks.<task>.metric``) for the dev-selected arms and the
    best pretrained arm on dev; empty when the finetune metrics are missing."""
    data = metrics.optional(f"finetune/{task}") or {}
    selection, runs, metric = data.get("selection") or {}, data.get("runs") or {}, data.get("metric")
    dev = selection.get("dev") or {}
    ours = max((key for key in dev if key.startswith("pretrained/")), key=dev.get, default=None)
    out = {}
    for role, key in (
        ("best_arm", selection.get("best_arm")),
        ("best_baseline", selection.get("best_baseline")),
        ("pretrained_arm", ours),
    ):
        value = (runs.get(key) or {}).get(metric, {}).get("mean") if key else None
        if isinstance(value, int | float):
            out |= {role: key, f"{role}_{metric}": value}
    return out


def write_summary(path: Path, summary: dict) -> None:
    """Write the curated metrics as sorted, indented JSON (stable bytes for DVC)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def write_plot_data(folder: Path, rows: list[Row], metrics: Metrics) -> list[Path]:
    """Write ``forest.csv`` (claim, difference, ci_low, ci_high, verdict; claims with an interval),
    ``pretrain_train.csv`` / ``pretrain_heldout.csv`` (``loss_curves``; when the curve has such points) and
    ``seeds.csv`` (arm as ``<task> <arm>``, seed, score = the task's headline metric, task, metric; every task
    with finetune metrics, one file, as DVC's top-level plots cannot loop over tasks); returns the files
    written."""
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob("*.csv"):
        stale.unlink()  # a task that vanished must not leave its plot data behind
    forest = [
        {
            "claim": r.claim.id,
            "difference": r.difference.mean,
            "ci_low": r.difference.low,
            "ci_high": r.difference.high,
            "verdict": r.verdict,
        }
        for r in rows
        if r.difference is not None and r.difference.has_ci
    ]
    written = [_write_csv(folder / "forest.csv", ["claim", "difference", "ci_low", "ci_high", "verdict"], forest)]
    curve = loss_curves(metrics.folder / "pretrain_curve.tsv")
    for name, (header, points) in curve.items():
        written += [_write_csv(folder / name, header, points)] if points else []
    seeds = [row for task in finetune_tasks(metrics) for row in seed_scores(task, metrics)]
    if seeds:
        written.append(_write_csv(folder / "seeds.csv", ["arm", "seed", "score", "task", "metric"], seeds))
    return written


def loss_curves(curve: Path) -> dict[str, tuple[list[str], list[dict]]]:
    """The pretraining curve as two plot files without empty cells (DVC's line template draws an empty cell
    as 0): ``pretrain_train.csv`` (step, train_loss, unigram_ce: the logged steps) and ``pretrain_heldout.csv``
    (step, eval_loss: the eval steps), both in nats; ``{}`` when the curve is missing or malformed."""
    try:
        series = read_curve(curve)
    except (NotRun, *MALFORMED):
        return {}
    unigram = dict(series["unigram_ce"])
    train = [
        {"step": int(step), "train_loss": loss, "unigram_ce": unigram[step]}
        for step, loss in series["train_loss"]
        if step in unigram
    ]
    heldout = [{"step": int(step), "eval_loss": loss} for step, loss in series["eval_loss"]]
    return {
        "pretrain_train.csv": (["step", "train_loss", "unigram_ce"], train),
        "pretrain_heldout.csv": (["step", "eval_loss"], heldout),
    }


def seed_scores(task: str, metrics: Metrics) -> list[dict]:
    """One ``{arm: "<task> <arm>", seed, score, task, metric}`` per arm and seed of
    ``metrics/finetune/<task>.json``; score is the task's headline metric."""
    data = metrics.optional(f"finetune/{task}") or {}
    metric, out = data.get("metric"), []
    for arm, run in sorted((data.get("runs") or {}).items()):
        entry = run.get(metric) or {}
        out += [
            {"arm": f"{task} {arm}", "seed": seed, "score": value, "task": task, "metric": metric}
            for seed, value in zip(entry.get("seeds") or [], entry.get("per_seed") or [], strict=False)
        ]
    return out


def _write_csv(path: Path, header: list[str], rows: list[dict]) -> Path:
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=header, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return path


#: MLflow keeps at most 8,000 characters of a tag (``MAX_TAG_VAL_LENGTH``), the run description included, and cuts
#: a longer one mid-line: the summary stays within it.
NOTE_CHARS = 8000


def summary_md(rows: list[Row]) -> str:
    """The run description, at most ``NOTE_CHARS`` characters: the answer (the primary family's decided verdicts
    first, then the findings), the integrity checks on a line of their own, the verdict counts, then one line per claim
    (difference [CI] and verdict) in the claim table's order (grouped by kind of evidence); when they do not all
    fit, the first ones and a line saying how many more the claim table holds."""
    head = [
        f"**clozeline claim table**: {answer(rows)}",
        "",
        f"**Integrity.** {integrity_line(rows)}",
        "",
        f"**Verdicts.** {verdict_summary(rows)}",
        "",
        "| claim | difference [CI] | verdict |",
        "|---|---|---|",
    ]
    claims = [
        f"| {r.claim.id} | {fmt_estimate(r.difference, False)} | {verdict_text(r)} |"
        for _, group in by_evidence(rows)
        for r in group
    ]  # the claim table's order
    tail = ["", "The full table, with arms, confounders and provenance: the run's artifact `report/claims.html`."]
    kept = len(claims)
    while True:
        left = len(claims) - kept
        more = [f"| ... and {left} more claims | | in `report/claims.html` |"] if left else []
        text = "\n".join(head + claims[:kept] + more + tail) + "\n"
        if len(text) <= NOTE_CHARS or kept == 0:
            return text
        kept -= 1
