"""What the finetune stage hands to the export stage: the model of the arm and seed chosen on dev, kept.

The arm is ``selection.best_arm`` (the best mean dev score over seeds, what the claims' ``best-arm`` names); its seed is
the one with the best dev score of that arm (``dev_best_<SELECT_METRIC>``; a tie goes to the earlier seed of the arm's
seeds, ``FinetuneParams.seeds_for``). Test never chooses. The model is the one that seed's run saved for the operational
measurement when that seed is the first reported one (``operational.folder_for``; ``saved_model`` also finds a model
saved for another seed); otherwise the run is trained again in this process: ``training.train_and_test`` is a pure
function of its ``Run``, so the same job, seed, learning-rate multiplier and thread count give the same weights and the
same test predictions on the CPU (the export stage checks the predictions, which is how a difference would show).

``data/finetune/<task>/selected/`` then holds the model as ``model.save_model`` writes it (the encoder's
``config.json`` + ``model.safetensors``, ``head.safetensors``, ``head.json``), the tokenizer of the arm's variant
and ``selected.json`` (``SELECTED_RECORD``): task, kind, run key, seed and how it was chosen, the dev scores,
the label names and the input cut the model was trained and tested with (``max_seq_len_tokens``,
``truncation``, ``head_tokens``), the test predictions file of that run and the precision its predictions were
computed in (``prediction_precision``: fp32, the export's), and the best run on dev overall when
that is a baseline (no encoder then beats it on dev; the export stage says so).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import torch

from tasks.common.models.encoders import load_tokenizer
from tasks.common.runtime.device import PREDICTION_PRECISION, configure
from tasks.finetune.arms import operational
from tasks.finetune.arms.training import Run, train_and_test

SELECTED = "selected"  # the folder under data/finetune/<task>/
SELECTED_BASELINE = "selected_baseline"  # the TF-IDF baseline, when it is the best run on dev (skops, never pickle)
SELECTED_RECORD = "selected.json"
MODEL_FILES = ("config.json", "model.safetensors", "head.safetensors", "head.json")


def chosen_seed(result: dict, seeds: list[int], metric: str) -> tuple[int, dict[str, float]]:
    """The seed of ``seeds`` whose run scored best on dev (``dev_best_<metric>``; ties: the earlier seed), and
    every seed's dev score."""
    dev = {res["seed"]: float(res[f"dev_best_{metric}"]) for res in result["seeds"]}
    return max(seeds, key=lambda s: (dev[s], -seeds.index(s))), {str(s): dev[s] for s in seeds}


def saved_model(out_dir: Path, key: str, seed: int, seeds: list[int]) -> Path:
    """Where a run of arm ``key`` saved its model: ``operational.folder_for`` for the first reported seed, and
    ``<that folder>@seed<k>`` for another seed (where ``sweep`` saves one, no retraining is needed)."""
    return operational.seed_folder(operational.folder_for(out_dir, key), seed, seeds)


def keep_selected(job, result: dict, selection: dict, cfg, out_dir: Path, runner, log) -> dict:
    """Write ``<out_dir>/selected/`` for ``job`` (the best arm) and return what ``metrics.export`` records:
    ``run``, ``seed``, ``seed_rule``, ``dev`` (per seed), ``model`` (``saved``: the run's own saved model;
    ``retrained``: trained again) and ``dev_winner`` (the best run on dev of arms
    and baselines together).

    ``result`` is ``sweep.sweep_and_train``'s entry of the arm, ``selection`` the stage's ``select_best``,
    ``runner`` the stage's ``sweep.Runner`` (its first device slot and CPU precision are the retrain's)."""
    seeds = cfg.seeds_for(job.spec.variant)  # the arm's own seeds (the reference MiniLM: the first ones)
    seed, dev = chosen_seed(result, seeds, job.task.SELECT_METRIC)
    dest = out_dir / SELECTED
    shutil.rmtree(dest, ignore_errors=True)
    saved = saved_model(out_dir, job.key, seed, seeds)
    entry: dict = {
        "run": job.key,
        "seed": seed,
        "dev": dev,
        "seed_rule": f"best dev_best_{job.task.SELECT_METRIC} of the arm's seeds (ties: the earlier seed)",
    }
    if all((saved / name).is_file() for name in MODEL_FILES):
        shutil.copytree(saved, dest)
        entry["model"] = "saved"
    else:
        started = time.perf_counter()
        device = runner.slots[0]
        torch.set_num_threads(cfg.torch_threads)  # a worker's settings: the same weights as the reported run
        configure(torch.device(device), cfg.hardware.deterministic)
        if device.startswith("cuda"):
            torch.cuda.set_device(torch.device(device))  # pinned host memory on that GPU (``place``)
        train_and_test(
            Run(job, seed, result["scale"], save_to=dest, device=device, cpu_bf16=runner.cpu_bf16), show_progress=False
        )
        entry["model"] = "retrained"
        log.info(
            f"finetune[{job.item}]: retrained {job.key} seed {seed} for the export "
            f"({time.perf_counter() - started:.1f} s)"
        )
    load_tokenizer(job.folder).save_pretrained(dest)
    scores = selection.get("dev") or {}
    winner = max(scores, key=lambda k: (scores[k], k == job.key)) if scores else job.key
    entry["dev_winner"] = winner
    tcfg = job.tcfg
    record = {
        **entry,
        "task": job.item,
        "module": job.module,
        "labels": list(job.labels),
        "variant": job.spec.variant,
        "mode": job.spec.mode,
        "head": job.spec.head,
        "lr_scale": result["scale"],
        "metric": f"dev_best_{job.task.SELECT_METRIC}",
        "input": {
            "max_seq_len_tokens": tcfg.max_seq_len_tokens,
            "truncation": tcfg.truncation,
            "head_tokens": tcfg.head_tokens,
        },
        "predictions": f"{job.key}/seed{seed}.test.jsonl",
        "prediction_precision": PREDICTION_PRECISION,
        "dev_winner_score": scores.get(winner),
        "arm_dev_score": scores.get(job.key),
    }
    (dest / SELECTED_RECORD).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return entry


def keep_baseline(selection: dict, fitted: dict, labels: list[str], out_dir: Path) -> dict:
    """When the best run on dev of arms and comparator baselines together is a ``tfidf-lr`` row, write its fitted model
    (``fitted[key]``: ``run_baseline``'s kept fit, that of its best seed on dev, not fitted again) to
    ``<out_dir>/selected_baseline/``: ``model.skops`` (a scikit-learn ``Pipeline`` of the vectorizer and the classifier,
    skops format: no pickle) and ``baseline.json`` (run key, seed, label names, the classifier's label ids, its chosen
    setting, its input, that seed's predictions file, and ``cut``: the arms' cut it reads, applied by
    ``clozeline.baseline`` with the tokenizer saved beside it; null for the full text). Returns ``{"baseline": <run
    key>}``, or ``{}`` when no tfidf-lr row won on dev (another baseline that wins is not exported: ``majority`` is a
    constant, ``memorise`` a word list)."""
    import skops.io
    from sklearn.pipeline import Pipeline

    dest = out_dir / SELECTED_BASELINE
    shutil.rmtree(dest, ignore_errors=True)
    scores = selection.get("dev") or {}
    if not scores:
        return {}
    key = max(scores, key=lambda k: (scores[k], not k.startswith("baseline/")))
    if not fitted.get(key):
        return {}
    kept = fitted[key]
    vectorizer, model = kept["fitted"]
    dest.mkdir(parents=True)
    skops.io.dump(Pipeline([("tfidf", vectorizer), ("lr", model)]), dest / "model.skops")
    if kept["cut"] is not None:
        kept["tokenizer"].save_pretrained(dest)
    setting = {k: v for k, v in kept["setting"].items() if k != "dev_macro_f1_grid"}
    record = {
        "run": key,
        "labels": list(labels),
        "classes": [int(c) for c in model.classes_],
        "setting": setting,
        "input": kept["input"],
        "cut": kept["cut"],
        "predictions": f"{key}/seed{kept['seed']}.test.jsonl",
        "seed": kept["seed"],
    }
    (dest / "baseline.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return {"baseline": key}
