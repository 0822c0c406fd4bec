"""The finetune stage's records: prediction files and the per-configuration metrics entry (arms and baselines)."""

from __future__ import annotations

import json
from pathlib import Path

from tasks.common.stats import summarize
from tasks.config.model.finetune import FinetuneParams
from tasks.finetune import cls as cls_task
from tasks.finetune import ner as ner_task

TASKS = {"cls": cls_task, "ner": ner_task}  # TaskSpec.module -> the code of that kind


def write_predictions(path: Path, recs: list[dict]) -> Path:
    """JSONL of ``{doc_id, gold, pred, probs, probs_scaled}`` (cls also ``seen_fraction``) sorted by ``doc_id``
    (stable bytes for DVC). ``probs`` (cls: the distribution over labels; ner: per word, its tag's probability)
    and ``probs_scaled`` (the same after temperature scaling on dev, ``tasks.finetune.temperature``) are
    rounded to 6 decimals: far below any calibration difference, and it keeps the files short. A ner record's
    ``tag_probs`` (per word, a distribution) is not written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    keys = ("doc_id", "gold", "pred", "probs", "probs_scaled", "seen_fraction")
    rounded = ({**r, **{k: [round(p, 6) for p in r[k]] for k in ("probs", "probs_scaled") if k in r}} for r in recs)
    lines = [json.dumps({k: r[k] for k in keys if k in r}, ensure_ascii=False) for r in rounded]
    path.write_text("".join(line + "\n" for line in sorted(lines)), encoding="utf-8")
    return path


def aggregate(task, seeds: list[dict], cfg: FinetuneParams, log) -> dict:
    """The contract's entry for one configuration: a ``summarize`` per test metric, ``diverged_seeds``,
    ``mlflow_run_id``, ``mlflow_run_name`` and ``mlflow_experiment_id`` of the arm's run ``log`` (None without
    tracking), and ``details``: seed-pooled tables (``task.pool_details``: confusion matrix or
    span errors summed over seeds) and, under ``per_seed``, each seed's tables and training facts."""
    seed_ids = [s["seed"] for s in seeds]
    metrics = {
        name: summarize([s["test"][name] for s in seeds], seed_ids, cfg.confidence_level, bounds=(0.0, 1.0))
        for name in seeds[0]["test"]
    }
    hidden = ("seed", "test", "test_records")  # a seed's ``temperature`` facts stay, under per_seed
    per_seed = {str(s["seed"]): {k: v for k, v in s.items() if k not in hidden} for s in seeds}
    pooled = task.pool_details([s["details"] for s in seeds])
    return {
        **metrics,
        "diverged_seeds": [s["seed"] for s in seeds if s["diverged"]],
        "mlflow_run_id": log.run_id,
        "mlflow_run_name": log.run_name,
        "mlflow_experiment_id": log.experiment_id,
        "details": {**pooled, "pooled_over_seeds": len(seeds), "per_seed": per_seed},
    }
