"""Stage ``finetune`` (DVC foreach item: a task of ``params.tasks``): fine-tune encoders over seeds, fit
baselines, compare.

A task's kind picks its code: ``cls`` (classification, and pair classification on ``[CLS] a [SEP] b [SEP]``) or ``ner``
(token classification). Every configuration (arm) ``variant/mode/head`` of its recipe
(``params.finetune.recipes[tasks.<task>.recipe].configs``) picks its own learning rate on dev from ``lr_grid`` with
``sweep_seed`` (``arms/sweep``), then trains once per seed on the same docs with the same budget (every seed of
``seeds`` for the tiny arms and the baselines; the first ``variant_seed_counts[variant]`` for a costly variant, the
reference MiniLM); each run selects its epoch on dev (early stopping) and scores test once (``arms/training``). Each
seed draws its own training subset (``draw``: ``max_train_docs`` docs by a hash rank salted with ``data_seed`` and the
seed; dev and test are one sample for every seed), so the seed level of the report's bootstrap carries the draw's
variance. The comparator baselines (``baselines/``: majority, TF-IDF + logistic regression, word memorisation) are
fitted once per seed on that seed's train docs and the arms' input (deterministic given the subset: seed ``k`` of an arm
pairs with the baseline fitted on seed ``k``'s docs), choose their setting on the arms' dev docs, and score the same
test docs; each also has one reference row ``baseline/<name>/all-data`` (every train doc, full text) that is never
chosen as the best baseline. With several pretraining seeds, the arms on our pretrained encoder, at full size and on the
learning curve, also run from each further seed's model (``reruns/from_pretraining_seeds``: the ``pretraining_seeds``
section); with ``ablation_config``, that arm also runs from each pretraining ablation arm's model
(``reruns/from_ablations``). With ``train_sizes``, the ``curve_configs`` arms and the comparators also run on fewer
train docs (``reruns/at_train_sizes``: the ``learning_curve`` section; never the exported model). Per arm the stage
reports mean, std and a Student-t interval over seeds, the per-seed values, the seeds whose dev score stayed at chance
(``diverged_seeds``) and the sweep; ``selection`` names the best arm and the best baseline on dev. ``arms/operational``
(``params.finetune.operational``) measures each arm's model, as its first reported seed saved it, and tfidf-lr after all
training: latency per document at each batch size of ``timed_batches``, peak memory, parameters and size on disk. Test
predictions go to ``data/finetune/<task>/<run key>/seed<k>.test.jsonl`` (``doc_id, gold, pred, probs``, cls also
``seen_fraction``; ``probs``: cls the predicted distribution in label order, ner per word the probability of its
predicted tag, for the report's calibration), and ``data/finetune/<task>/test_items.jsonl`` holds each test doc's slices
(``n_words, train_overlap``).
MLflow: one child run per arm and baseline under the stage run, with one nested run per seed. On CUDA the baselines
(TF-IDF, memorisation, majority: CPU work) are fitted while the GPU sweep trains (``arms/sweep.alongside``), their
tfidf-lr timing waiting until training ends; on the CPU they follow the sweep as before, since the workers already
hold the cores (``workers`` x ``torch_threads``).

This module holds ``run``, the task data it reads, the run records and ``select_best``; beside it:

- ``cls``: the classification kind, single docs and pairs (examples, batches, predictions, scores);
- ``ner``: the token-classification kind, word-level IOB2 (examples, batches, predictions, scores);
- ``draw``: which docs a run sees (the seeded hash samples behind ``max_*_docs`` and ``train_sizes``);
- ``jobs``: ``Job``, what every seed of one arm shares, made from the task's rows (``make_job``, ``dose_jobs``);
- ``records``: prediction files and the per-configuration metrics entry;
- ``temperature``: temperature scaling of every run's probabilities, fitted on dev (the test files' ``probs_scaled``);
- ``selected``: the arm and seed chosen on dev (or the tfidf-lr baseline) kept for the export stage;
- ``cost``: runs and train minutes by group of arms (the metrics' ``cost`` section, one log line);
- ``arms/``: fine-tuning the arms (model, one training run, the frozen probe, the LR sweep, operational timing);
- ``baselines/``: the comparator and reference baselines (majority, tfidf-lr, memorise, crf) and their runs;
- ``reruns/``: the arms run again at fewer train docs, from further pretraining seeds, from the ablation arms.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import datasets

from tasks.common.files.ioerrors import reading
from tasks.common.models.encoders import (
    load_tokenizer,
    model_dir,
    tokenization,
)
from tasks.common.runtime.device import PREDICTION_PRECISION, cpu_bf16, resolve
from tasks.config.model.finetune import FinetuneParams, TaskParams
from tasks.config.paths import Paths
from tasks.finetune import cost, selected
from tasks.finetune.arms import operational
from tasks.finetune.arms.sweep import Runner, alongside, log_job, slots, sweep_and_train
from tasks.finetune.baselines import fitting
from tasks.finetune.baselines.runs import run_baseline
from tasks.finetune.draw import Draw, kept_doc_ids
from tasks.finetune.jobs import SPLITS, Job, dose_jobs, make_job
from tasks.finetune.records import TASKS, aggregate, write_predictions
from tasks.finetune.reruns import at_train_sizes, from_ablations, from_pretraining_seeds


def run(cfg: FinetuneParams, paths: Paths, log: Any, item: str) -> dict:
    """Fine-tune every configuration of task ``item`` over ``cfg.seeds`` and fit its baselines; returns the
    metrics of the contract.

    Reads ``data/tokenize/<item>/<tok>/`` and the variants' model folders; writes ``data/finetune/<item>/``.
    Raises ``FileNotFoundError``/``ValueError`` naming the folder or key when an input is missing or bad.
    """
    started = time.perf_counter()
    spec, tcfg = cfg.spec(item), cfg.task(item)
    out_dir = fresh_dir(paths.stage_data("finetune") / item)
    tok_of: dict[str, str] = {arm.variant: tokenization(arm.variant, paths.models) for arm in tcfg.configs}
    toks = sorted(set(tok_of.values()))
    data = {tok: load_task_data(paths.stage_data("tokenize") / item / tok, cfg.data_seed, tcfg) for tok in toks}
    labels, draw = same_labels(data, item), Draw(tcfg.max_train_docs, cfg.data_seed)
    log_caps(log, item, spec.recipe, data[toks[0]]["counts"])
    jobs = [
        make_job(item, spec.module, arm, tcfg, data[tok_of[arm.variant]]["rows"], labels, paths.models, draw)
        for arm in tcfg.configs
    ]
    dose = (
        dose_jobs(item, spec.module, tcfg, data[tok_of["pretrained"]]["rows"], labels, paths.models, draw)
        if tcfg.dose_response
        else {}
    )
    full_docs, curve_jobs = data[toks[0]]["counts"]["train"]["docs_kept"], []  # the curve ends at the full size
    curve = at_train_sizes.points(tcfg, full_docs, item)
    for point in curve:
        curve_jobs.append(
            make_job(
                item,
                spec.module,
                point.spec,
                tcfg,
                data[tok_of[point.spec.variant]]["rows"],
                labels,
                paths.models,
                Draw(point.size, cfg.data_seed),
                key=point.key,
            )
        )
    further = from_pretraining_seeds.arms(tcfg, paths.models, curve)  # our arms (and curve) from each further seed
    masking = from_ablations.arms(tcfg, paths.models, item)  # ablation_config from each pretraining ablation arm
    reruns = [(r.spec, r.folder, r.key, draw if r.size is None else Draw(r.size, cfg.data_seed)) for r in further]
    seed_jobs = [
        make_job(
            item,
            spec.module,
            arm,
            tcfg,
            data[tok_of[arm.variant]]["rows"],
            labels,
            paths.models,
            arm_draw,
            folder=folder,
            key=key,
        )
        for arm, folder, key, arm_draw in [*reruns, *[(*m, draw) for m in masking]]
    ]
    timed_arms = jobs + list(dose.values())  # curve, further-seed and ablation arms are scored, not timed
    arms = timed_arms + curve_jobs + seed_jobs
    measure = cfg.operational.enabled
    save_to = {job.key: operational.folder_for(out_dir, job.key) for job in timed_arms} if measure else {}
    device = resolve(cfg.hardware.device)
    runner = Runner(
        cfg.torch_threads,
        slots(cfg.hardware.device, device, cfg.workers, cfg.runs_per_gpu),
        cfg.hardware.deterministic,
        device.type == "cpu" and cpu_bf16(cfg.cpu_train_precision),
    )
    precision = "bf16 autocast" if runner.cpu_bf16 or device.type == "cuda" else "fp32"
    seeds = {job.key: cfg.seeds_for(job.spec.variant) for job in arms}  # the reference MiniLM: its first seeds
    log.info(
        f"finetune[{item}]: {len(arms)} arms on {device} ({runner.workers} at once; train steps {precision}, "
        f"predictions {PREDICTION_PRECISION}); seeds per arm: {seed_counts(arms, seeds)}"
    )
    any_tok = data[toks[0]]
    folders = {tok_of[arm.variant]: model_dir(arm.variant, paths.models) for arm in reversed(tcfg.configs)}
    planned = fitting.plan(tcfg.baselines, toks)
    overlap = device.type == "cuda"  # CPU work beside the GPU's; on the CPU it would take the workers' cores

    def fit_baselines() -> dict[str, tuple]:
        """``{row key: run_baseline's (entry, timed, kept fit)}``; with ``overlap`` the tfidf-lr timing is a
        callable, run after the sweep (timed on an idle host, not beside the GPU workers)."""
        out = {}
        for size, row in [(None, row) for row in planned] + at_train_sizes.baseline_rows(planned, tcfg):
            tokenizer = load_tokenizer(folders[row.tok]) if row.tok else None  # the tokenizer of the arms it matches
            source = data[row.tok or toks[0]]  # a curve row: fewer train docs per seed, scored but not timed
            row_cfg, row_draw = (
                (cfg, draw) if size is None else (at_train_sizes.untimed(cfg), Draw(size, cfg.data_seed))
            )
            with log.child(f"{item}/{row.key}") as child:
                out[row.key] = run_baseline(
                    item,
                    spec.module,
                    row,
                    source,
                    tokenizer,
                    labels,
                    tcfg,
                    row_cfg,
                    out_dir,
                    child,
                    row_draw,
                    defer_timing=overlap,
                )
        return out

    def sweep() -> dict[str, dict]:
        grids = {job.key: cfg.lr_grid_for(job.spec.variant, tcfg.lr_grid) for job in arms}
        return sweep_and_train(arms, seeds, cfg.sweep_seed, grids, runner, save_to)

    results, fits = alongside(sweep, fit_baselines) if overlap else (sweep(), None)
    measured = operational.measure_arms(timed_arms, out_dir, cfg.operational, device, log) if save_to else {}
    spent = cost.section(results)
    log.info(cost.log_line(item, spent))
    runs, fitted = {}, {}
    for job in arms:
        with log.child(f"{item}/{job.key}") as parent:
            runs[job.key] = record_job(job, results[job.key], cfg, out_dir, parent, measured.get(job.key))
    for key, (entry, timed, fit) in (fits if fits is not None else fit_baselines()).items():
        timed = timed() if callable(timed) else timed  # a deferred timing runs now, after all training
        runs[key], fitted[key] = entry, fit
        measured |= {key: timed} if timed else {}
    comparators = {row.key: row.tok for row in planned if not row.reference}
    selection = select_best(runs, {j.key: tok_of[j.spec.variant] for j in jobs}, comparators, spec.module)
    selection = from_ablations.in_selection(selection, masking, runs, f"dev_best_{TASKS[spec.module].SELECT_METRIC}")
    best = next(job for job in jobs if job.key == selection["best_arm"])  # the export stage's model (selected.py)
    kept = selected.keep_selected(best, results[best.key], selection, cfg, out_dir, runner, log)
    kept |= selected.keep_baseline(selection, fitted, labels, out_dir)  # when a baseline won on dev
    operational.remove_scratch(out_dir)
    write_test_items(out_dir / "test_items.jsonl", any_tok["rows"]["test"])
    steps = {step: job.key for step, job in dose.items()}
    extra: dict[str, Any] = {"dose_response": {"config": tcfg.dose_response, "runs": steps}} if dose else {}
    extra |= {"operational": measured} if cfg.operational.enabled else {}
    extra |= {"pretraining_seeds": from_pretraining_seeds.summary(further)} if further else {}
    extra |= {"ablations": from_ablations.summary(masking)} if masking else {}
    if tcfg.train_sizes:
        extra["learning_curve"] = at_train_sizes.summary(
            tcfg, full_docs, runs, tok_of, comparators, lambda r, a, c: select_best(r, a, c, spec.module), item
        )
    extra |= {"train_precision": precision, "prediction_precision": PREDICTION_PRECISION}  # dev and test predictions
    extra["cost"] = {"seeds": {variant: len(cfg.seeds_for(variant)) for variant in tok_of}, "groups": spent}
    return {
        "task": item,
        "kind": spec.kind,
        "source": spec.source,
        "metric": spec.headline,
        "labels": labels,
        "docs": {tok: data[tok]["counts"] for tok in toks},
        "runs": runs,
        "selection": selection,
        "export": kept,
        **extra,
        "metric_implementations": TASKS[spec.module].METRIC_IMPLEMENTATIONS,
        "elapsed_minutes": round((time.perf_counter() - started) / 60, 2),
    }


def seed_counts(jobs: list[Job], seeds: dict[str, list[int]]) -> str:
    """``"20 (9 arms), 5 (2 arms)"``: how many arms report each number of seeds (``FinetuneParams.seeds_for``)."""
    by_count: dict[int, int] = {}
    for job in jobs:
        by_count[len(seeds[job.key])] = by_count.get(len(seeds[job.key]), 0) + 1
    return ", ".join(f"{n} ({k} arm{'s' if k != 1 else ''})" for n, k in sorted(by_count.items(), reverse=True))


def fresh_dir(folder: Path) -> Path:
    """Empty ``folder`` (a DVC out: stale predictions of removed configurations must not linger)."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


def load_task_data(folder: Path, data_seed: int, tcfg: TaskParams) -> dict:
    """Rows of each split (``datasets.load_from_disk``): ``rows`` (dev, test: the kept docs; train: every doc,
    from which each seed draws its ``max_train_docs``, ``draw.Draw``), ``all_rows`` (every doc, for the
    reference baselines), label names, and kept/available doc counts (train: the docs each seed keeps).

    Dev and test docs are kept by a seeded hash sample of ``doc_id`` (``draw.kept_doc_ids``), so both
    tokenizations of a task keep the same docs. Raises ``FileNotFoundError`` naming the missing folder or
    ``labels.json``.
    """
    labels_file = folder / "labels.json"
    if not labels_file.exists():
        raise FileNotFoundError(f"finetune: {labels_file} not found (run the tokenize stage first)")
    caps = {"train": tcfg.max_train_docs, "dev": tcfg.max_dev_docs, "test": tcfg.max_test_docs}
    rows, all_rows, counts = {}, {}, {}
    for split in SPLITS:
        if not (folder / split).exists():
            raise FileNotFoundError(f"finetune: {folder / split} not found (run the tokenize stage first)")
        with reading(folder / split):  # a damaged Arrow file: one line naming it and the stage that writes it
            table = datasets.load_from_disk(str(folder / split)).to_list()
        keep = kept_doc_ids([r["doc_id"] for r in table], caps[split], data_seed)  # train: the count per seed
        rows[split], all_rows[split] = table if split == "train" else [r for r in table if r["doc_id"] in keep], table
        available = len({r["doc_id"] for r in table})
        counts[split] = {
            "docs_available": available,
            "docs_kept": len(keep),
            "docs_dropped_by_cap": available - len(keep),
        }
    with reading(labels_file):
        labels = json.loads(labels_file.read_text(encoding="utf-8"))
    return {"rows": rows, "all_rows": all_rows, "labels": labels, "counts": counts}


def log_caps(log: Any, item: str, recipe: str, counts: dict) -> None:
    """One INFO line per split the recipe's ``max_<split>_docs`` cuts (a user's larger task set is sampled,
    not read whole), naming the key that sets it."""
    for split, count in counts.items():
        if count["docs_dropped_by_cap"]:
            log.info(
                f"finetune[{item}]: {split} keeps {count['docs_kept']} of {count['docs_available']} docs "
                f"(a seeded sample: finetune.recipes.{recipe}.max_{split}_docs; null keeps every doc)"
            )


def same_labels(data: dict, item: str) -> list[str]:
    """The label names, which every tokenization of a task must share; raises ``ValueError`` otherwise."""
    names = {tok: d["labels"] for tok, d in data.items()}
    first = next(iter(names.values()))
    if any(v != first for v in names.values()):
        raise ValueError(f"finetune[{item}]: labels.json differs between tokenizations: {names}")
    return first


def record_job(job: Job, result: dict, cfg: FinetuneParams, out_dir: Path, log: Any, measured: dict | None) -> dict:
    """Write each seed's test predictions, log the arm (``sweep.log_job``) and its ``measured`` operational
    numbers (``operational/...`` metrics; None: not measured); returns its ``metrics.runs`` entry."""
    predictions = {
        res["seed"]: write_predictions(out_dir / job.key / f"seed{res['seed']}.test.jsonl", res["test_records"])
        for res in result["seeds"]
    }
    log_job(log, job, result, cfg.seeds_for(job.spec.variant), predictions)
    if measured is not None:
        log.metrics({"operational": measured})
    entry = aggregate(job.task, result["seeds"], cfg, log)
    select = f"dev_best_{job.task.SELECT_METRIC}"
    entry["lr_sweep"] = {
        "seed": cfg.sweep_seed,
        "chosen_scale": result["scale"],
        "metric": select,
        "dev": {f"{scale:g}": res[select] for scale, res in result["sweep"].items()},
    }
    seen = [r["seen_fraction"] for r in result["seeds"][0]["test_records"] if "seen_fraction" in r]
    if seen:  # cls: the share of each test doc's tokens the model saw (the same cut for every seed)
        entry["test_seen_fraction_mean"] = sum(seen) / len(seen)
    return entry


def write_test_items(path: Path, rows: list[dict]) -> Path:
    """``test_items.jsonl``: per test doc ``{doc_id, n_words, train_overlap}``, the slices the report cuts."""
    lines = []
    for row in fitting.documents(rows):
        n_words = int(row["n_words"]) if "n_words" in row else len(row["words"])
        lines.append(
            json.dumps({"doc_id": row["doc_id"], "n_words": n_words, "train_overlap": bool(row["train_overlap"])})
        )
    path.write_text("".join(line + "\n" for line in sorted(lines)), encoding="utf-8")
    return path


def select_best(runs: dict, arms: dict[str, str], comparators: dict[str, str | None], module: str) -> dict:
    """The arm and the baseline with the best mean dev score (``SELECT_METRIC``): what the claims
    ``finetune/<task>/best-arm`` and ``best-baseline`` name. Chosen on dev, so test stays unseen.

    ``arms``: arm key -> its tokenization; ``comparators``: comparator baseline key -> the tokenization whose cut
    it reads (None: no cut). The best baseline is chosen among the comparators that read the best arm's input
    (its tokenization's cut, or no cut), so a claim compares the same docs and input; reference rows
    (``baseline/<name>/all-data``) are never passed here. ``comparator_of`` names, for every arm, the best
    comparator reading that arm's input (the report's floor gate). Ties: the key that sorts last.
    """
    metric = f"dev_best_{TASKS[module].SELECT_METRIC}"

    def dev_mean(key: str) -> float:
        per_seed = runs[key]["details"]["per_seed"].values()
        return sum(s[metric] for s in per_seed) / len(per_seed)

    scores = {key: dev_mean(key) for key in [*arms, *comparators]}
    out: dict[str, Any] = {
        "metric": f"mean over seeds of {metric}",
        "dev": scores,
        "baseline_rule": "best comparator on dev among those reading the best arm's docs and input",
    }
    if arms:
        out["best_arm"] = max(arms, key=lambda k: (scores[k], k))
    if comparators:

        def best_reading(tok: str | None) -> str:
            same = [k for k, t in comparators.items() if t is None or t == tok] or list(comparators)
            return max(same, key=lambda k: (scores[k], k))

        out["best_baseline"] = best_reading(arms[out["best_arm"]] if arms else None)  # no arms: no best arm, None
        out["comparator_of"] = {arm: best_reading(tok) for arm, tok in arms.items()}
        out["baselines"] = {k: runs[k]["setting"] for k in comparators}  # what each comparator chose on dev
    return out
