"""The time model of ``make run`` on the 2-core reference machine (docs/pipeline.md "Time budget").

Predicts the pipeline's minutes for the current params.yaml from the last measured run: each fine-tuning run's
``train_seconds`` (which include its dev evaluations and its one test pass) per arm in
``metrics/finetune/<task>.json``, the stage's ``elapsed_minutes`` (what is not a run: data, baselines, operational
timing, the schedule's tail), and ``metrics/pretrain.json``'s train minutes per step. What the params change:

- runs: per arm, its sweep runs (as measured, widening included; a ``variant_lr_grids`` entry: its size) + its
  seeds (``finetune.seeds_for``), again for each further pretraining seed on every arm and curve arm of our encoder
  (``reruns/from_pretraining_seeds``); ``finetune.workers`` runs at a time;
- test items: each seed run predicts every test item once (a sweep run none), at the seconds per item of
  ``PER_ITEM_SECONDS`` (measured: one thread, fp32, AVX2 kernels, best of two passes; tiny 2x128 and MiniLM-L6 at
  128 tokens);
- baselines: ``BASELINE_SECONDS`` per comparator fit per seed (tfidf-lr's 6-configuration grid on 160 docs with one
  thread; memorise and crf on 400 sentences), one fit per seed and size;
- pretraining: ``len(pretrain.seeds)`` x ``max_steps`` at the measured seconds per step.

The other stages (ingest ... tokenize, probe, export, report, release) keep the measured run's minutes
(``PIPELINE_MINUTES`` minus its pretrain and finetune stages), plus the export's re-scoring of the added test
items. The fine-tuning runs' part assumes the workers stay busy (the costliest arms start first); a MiniLM run
left alone at the end adds up to one run's minutes. Usage::

    python scripts/time_model.py --test-items cls=1616 ner=1447 --other-extra 2.4   # the study split's test sets
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from tasks.config import load_params

ROOT = Path(__file__).resolve().parents[1]

#: Measured pipeline minutes of the run whose metrics/ are committed (ef74e30: fresh clone, quiet 2-core AVX2
#: machine, fp32 steps); after another measured run, pass its minutes with ``--pipeline-minutes``.
PIPELINE_MINUTES = 2120 / 60
#: Seconds of the pretrain stage that are not training steps (load, held-out evaluations' tail, fill-mask, saving).
PRETRAIN_OVERHEAD_MINUTES = 0.5
#: Seconds per test item of one prediction pass, per task and encoder size (reference: MiniLM; else tiny).
PER_ITEM_SECONDS = {"cls": {"tiny": 0.0016, "reference": 0.020}, "ner": {"tiny": 0.00045, "reference": 0.004}}
#: Seconds per comparator fit per seed and size (tfidf-lr: 6 fits and a test pass; memorise; crf: its c1 x c2 grid).
BASELINE_SECONDS = {"majority": 0.05, "tfidf-lr": 2.0, "memorise": 0.2, "crf": 4.0}
#: The export re-scores the test set with the shipped model twice (batch 1 and batch 32), at 2 threads.
EXPORT_PASSES = 2


def measured(task: str, metrics: Path) -> dict:
    """Per arm of the measured run: median ``train_seconds`` and sweep runs; the stage's minutes and test items."""
    data = json.loads((metrics / "finetune" / f"{task}.json").read_text(encoding="utf-8"))
    arms = {}
    for key, run in data["runs"].items():
        if key.startswith("baseline/"):
            continue
        seconds = [s["train_seconds"] for s in run["details"]["per_seed"].values()]
        arms[key] = (statistics.median(seconds), len(run["lr_sweep"]["dev"]), len(seconds))
    items = next(iter(data["docs"].values()))["test"]["docs_kept"]
    return {"arms": arms, "elapsed": data["elapsed_minutes"], "items": items}


def size(variant: str) -> str:
    return "reference" if variant == "reference" else "tiny"


def planned(task: str, params, further: int) -> list[tuple[str, str, int]]:
    """``(measured arm key, variant, copies)`` of every arm the params run for ``task``."""
    recipe = params.finetune.task(task)
    arms = [(spec.key, spec.variant, 1) for spec in recipe.configs]
    curve = [
        (f"{s.variant}@n{n}/{s.mode}/{s.head}", s.variant, 1) for n in recipe.train_sizes for s in recipe.curve_configs
    ]
    ours = [(key, variant, further) for key, variant, _ in arms + curve if variant in ("pretrained", "adapted")]
    return arms + curve + [arm for arm in ours if further]


def finetune_minutes(task: str, params, before: dict, items: int) -> tuple[float, float]:
    """``(measured, predicted)`` minutes of ``finetune@task``."""
    workers = params.finetune.workers
    old_runs = sum(sec * (sweep + n) for sec, sweep, n in before["arms"].values())
    fixed = before["elapsed"] * 60 - old_runs / workers  # data, baselines at the measured seeds, timing, tail
    further, recipe = len(params.pretrain.seeds) - 1, params.finetune.task(task)
    total = 0.0
    for key, variant, copies in planned(task, params, further):
        seconds, sweep, _ = before["arms"][key]
        grid = params.finetune.lr_grid_for(variant, recipe.lr_grid)
        sweep = sweep if grid == recipe.lr_grid else len(grid)  # a variant's own grid: its size (1: no widening)
        per_item = PER_ITEM_SECONDS[task][size(variant)]
        per_run = seconds + (items - before["items"]) * per_item  # a seed run: its one test pass on the new items
        per_sweep_run = seconds - before["items"] * per_item  # a sweep run skips the test pass (Run.score_test)
        total += copies * (per_run * len(params.finetune.seeds_for(variant)) + per_sweep_run * sweep)
    seeds_before = max(n for _, _, n in before["arms"].values())  # the measured baselines' seeds are in ``fixed``
    fits = len(recipe.baselines) * (1 + len(recipe.train_sizes)) * (len(params.finetune.seeds) - seeds_before)
    baselines = fits * statistics.mean(BASELINE_SECONDS[b] for b in recipe.baselines)
    return before["elapsed"], (total / workers + fixed + baselines) / 60


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=Path, default=ROOT / "params.yaml")
    parser.add_argument("--metrics", type=Path, default=ROOT / "metrics", help="the measured run's metrics/")
    parser.add_argument("--test-items", nargs="*", default=[], help="task=items of the run to predict")
    parser.add_argument("--other-extra", type=float, default=0.0, help="minutes the other stages gained (measured)")
    parser.add_argument("--pipeline-minutes", type=float, default=PIPELINE_MINUTES, help="the measured run's minutes")
    args = parser.parse_args()
    params = load_params(args.params)
    pretrain = json.loads((args.metrics / "pretrain.json").read_text(encoding="utf-8"))
    step_minutes = pretrain["train_minutes"] / pretrain["steps"]
    rows = [("pretrain", pretrain["train_minutes"] + PRETRAIN_OVERHEAD_MINUTES, 0.0)]
    steps = params.pretrain.max_steps or pretrain["steps"]
    rows[0] = (rows[0][0], rows[0][1], len(params.pretrain.seeds) * (steps * step_minutes + PRETRAIN_OVERHEAD_MINUTES))
    new_items = dict(item.split("=") for item in args.test_items)
    export = 0.0
    for task in params.tasks:
        before = measured(task, args.metrics)
        items = int(new_items.get(task, before["items"]))
        rows.append((f"finetune@{task}", *finetune_minutes(task, params, before, items)))
        export += EXPORT_PASSES * (items - before["items"]) * PER_ITEM_SECONDS[task]["reference"] / 2 / 60
    other = args.pipeline_minutes - sum(old for _, old, _ in rows)
    rows.append(("other stages", other, other + export + args.other_extra))
    print(f"{'stage':<16}{'measured':>10}{'predicted':>11}   (minutes, 2-core reference machine)")
    for name, old, new in rows:
        print(f"{name:<16}{old:>10.1f}{new:>11.1f}")
    print(f"{'make run':<16}{sum(r[1] for r in rows):>10.1f}{sum(r[2] for r in rows):>11.1f}")


if __name__ == "__main__":
    main()
