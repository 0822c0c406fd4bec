"""Stage ``finetune`` (DVC foreach item ``cls`` | ``ner``): fine-tune encoders over seeds and compare them.

Every configuration ``variant/mode/head`` of ``params.finetune.<task>.configs`` trains once per seed on the
same docs, with the same budget; each run selects its epoch on dev (early stopping) and scores test once.
Per configuration the stage reports mean, std and a Student-t interval over seeds, the per-seed values, and
the seeds whose dev score stayed at chance (``diverged_seeds``). Test predictions go to
``data/finetune/<task>/<variant>/<mode>/<head>/seed<k>.test.jsonl`` (``doc_id, gold, pred``).
MLflow: one child run per configuration under the stage run, with one nested run per seed.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import datasets
import torch
from tqdm import tqdm
from transformers import get_linear_schedule_with_warmup

from tasks.common.encoders import model_dir, pad_token_id, pretrained_dir, snapshot_dirs, tokenization
from tasks.common.stats import summarize
from tasks.config.finetune import FinetuneParams, RunSpec, TaskParams
from tasks.finetune import cls as cls_task
from tasks.finetune import ner as ner_task
from tasks.finetune.model import build_model, optimizer_for

TASKS = {"cls": cls_task, "ner": ner_task}
SPLITS = ("train", "dev", "test")
#: Variants whose encoder is fully trained (MiniLM, or MiniLM continued): the BERT fine-tuning LR applies.
TRAINED_ENCODERS = ("reference", "adapted")


def run(cfg: FinetuneParams, paths, log, item: str) -> dict:
    """Fine-tune every configuration of task ``item`` over ``cfg.seeds``; returns the metrics of the contract.

    Reads ``data/tokenize/<item>/<tok>/`` and the variants' model folders; writes ``data/finetune/<item>/``.
    Raises ``FileNotFoundError``/``ValueError`` naming the folder or key when an input is missing or bad.
    """
    started = time.perf_counter()
    tcfg = cfg.task(item)
    torch.set_num_threads(cfg.torch_threads)
    out_dir = fresh_dir(paths.stage_data("finetune") / item)
    tok_of = {spec.variant: tokenization(spec.variant, paths.models) for spec in tcfg.configs}
    toks = sorted(set(tok_of.values()))
    data = {tok: load_task_data(paths.stage_data("tokenize") / item / tok, cfg.data_seed, tcfg) for tok in toks}
    labels = same_labels(data, item)
    jobs = [make_job(item, spec, tcfg, data[tok_of[spec.variant]]["rows"], labels, paths.models)
            for spec in tcfg.configs]  # fmt: skip
    dose = dose_jobs(item, tcfg, data[tok_of["pretrained"]]["rows"], labels, paths.models) if tcfg.dose_response else {}
    runs = {}
    for job in jobs + list(dose.values()):
        with log.child(f"{item}/{job.key}") as parent:
            runs[job.key] = run_config(job, cfg, out_dir, parent)
    steps = {step: job.key for step, job in dose.items()}
    extra = {"dose_response": {"config": tcfg.dose_response, "runs": steps}} if dose else {}
    return {"task": item, "labels": labels, "docs": {tok: data[tok]["counts"] for tok in toks}, "runs": runs, **extra,
            "metric_implementations": TASKS[item].METRIC_IMPLEMENTATIONS,
            "elapsed_minutes": round((time.perf_counter() - started) / 60, 2)}


def fresh_dir(folder: Path) -> Path:
    """Empty ``folder`` (a DVC out: stale predictions of removed configurations must not linger)."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


def load_task_data(folder: Path, data_seed: int, tcfg: TaskParams) -> dict:
    """Rows of each split (``datasets.load_from_disk``), label names, and kept/available doc counts.

    Docs are kept by a seeded hash sample of ``doc_id`` (``kept_doc_ids``), so both tokenizations of a task
    keep the same docs. Raises ``FileNotFoundError`` naming the missing folder or ``labels.json``.
    """
    labels_file = folder / "labels.json"
    if not labels_file.exists():
        raise FileNotFoundError(f"finetune: {labels_file} not found (run the tokenize stage first)")
    caps = {"train": tcfg.max_train_docs, "dev": tcfg.max_dev_docs, "test": tcfg.max_test_docs}
    rows, counts = {}, {}
    for split in SPLITS:
        if not (folder / split).exists():
            raise FileNotFoundError(f"finetune: {folder / split} not found (run the tokenize stage first)")
        table = datasets.load_from_disk(str(folder / split)).to_list()
        keep = kept_doc_ids([r["doc_id"] for r in table], caps[split], data_seed)
        rows[split] = [r for r in table if r["doc_id"] in keep]
        available = len({r["doc_id"] for r in table})
        counts[split] = {"docs_available": available, "docs_kept": len(keep),
                         "docs_dropped_by_cap": available - len(keep)}
    return {"rows": rows, "labels": json.loads(labels_file.read_text(encoding="utf-8")), "counts": counts}


def kept_doc_ids(doc_ids: list[str], cap: int | None, data_seed: int) -> set[str]:
    """The ``cap`` doc ids with the smallest ``sha256(f"{data_seed}:{doc_id}")`` (all when ``cap`` is None).

    A hash rank, not a shuffle: the sample of a doc set is the same whatever else the set holds.
    """
    unique = sorted(set(doc_ids))
    if cap is None or cap >= len(unique):
        return set(unique)
    ranked = sorted(unique, key=lambda d: hashlib.sha256(f"{data_seed}:{d}".encode()).hexdigest())
    return set(ranked[:cap])


def same_labels(data: dict, item: str) -> list[str]:
    """The label names, which every tokenization of a task must share; raises ``ValueError`` otherwise."""
    names = {tok: d["labels"] for tok, d in data.items()}
    first = next(iter(names.values()))
    if any(v != first for v in names.values()):
        raise ValueError(f"finetune[{item}]: labels.json differs between tokenizations: {names}")
    return first


@dataclass(frozen=True)
class Job:
    """What every seed of one configuration shares: task module, spec, params, examples and model folder."""

    item: str
    task: ModuleType  # tasks.finetune.cls or tasks.finetune.ner
    spec: RunSpec
    tcfg: TaskParams
    exs: dict[str, list[dict]]  # split -> examples
    labels: list[str]
    folder: Path
    pad_id: int
    key: str  # the run's name in metrics and MLflow: spec.key, or pretrained@step_<N>/... for a snapshot


def make_job(item: str, spec: RunSpec, tcfg: TaskParams, rows: dict, labels: list[str], models: Path,
             folder: Path | None = None, key: str | None = None) -> Job:  # fmt: skip
    """Examples for ``spec`` (its tokenization, its label scheme) and its model folder (default: the
    variant's) and pad id; ``key`` names the run (default ``spec.key``)."""
    task = TASKS[item]
    folder = folder or model_dir(spec.variant, models)
    exs = {split: task.examples(rows[split], tcfg.max_seq_len_tokens, spec.head) for split in SPLITS}
    return Job(item, task, spec, tcfg, exs, labels, folder, pad_token_id(folder), key or spec.key)


def dose_jobs(item: str, tcfg: TaskParams, rows: dict, labels: list[str], models: Path) -> dict[int, Job]:
    """``{pretraining step: job}``: the ``dose_response`` config from each snapshot in
    ``<models>/pretrained/snapshots/step_<N>``, run key ``pretrained@step_<N>/<mode>/<head>``.

    Raises ``FileNotFoundError`` when pretrain saved no snapshots.
    """
    spec = next(s for s in tcfg.configs if s.key == tcfg.dose_response)
    folders = snapshot_dirs(models)
    if not folders:
        raise FileNotFoundError(f"finetune.{item}.dose_response: no snapshots in {pretrained_dir(models)}/snapshots "
                                "(set pretrain.dose_snapshot_fractions)")  # fmt: skip
    jobs = {}
    for folder in folders:
        step = int(folder.name.removeprefix("step_"))
        key = f"{spec.variant}@{folder.name}/{spec.mode}/{spec.head}"
        jobs[step] = make_job(item, spec, tcfg, rows, labels, models, folder=folder, key=key)
    return jobs


def run_config(job: Job, cfg: FinetuneParams, out_dir: Path, log) -> dict:
    """Train and test ``job`` once per seed, each in a nested run; returns its entry of ``metrics.runs``."""
    spec = job.spec
    log.params({"task": job.item, "variant": spec.variant, "mode": spec.mode, "head": spec.head,
                "model_dir": job.folder, "seeds": cfg.seeds, **{f"{s}_examples": len(e) for s, e in job.exs.items()}})
    seeds = []
    for seed in cfg.seeds:
        with log.child(f"{job.item}/{job.key}/seed{seed}") as child:
            seeds.append(run_seed(job, seed, out_dir, child))
    return aggregate(job.task, seeds, cfg, log.run_id)


def run_seed(job: Job, seed: int, out_dir: Path, log) -> dict:
    """One run: seeded model, training with early stopping on dev, one test evaluation, predictions file."""
    log.params({"seed": seed})
    spec = job.spec
    model = build_model(spec.variant, job.folder, spec.head, len(job.labels), spec.mode, job.tcfg.head_dropout, seed)
    started = time.perf_counter()
    fit = train(model, job, seed, log)
    test_recs, scores = evaluate(model, job, "test")
    log.artifact(write_predictions(out_dir / job.key / f"seed{seed}.test.jsonl", test_recs), "predictions")
    log.metrics(job.task.headline(scores))
    return {"seed": seed, "test": job.task.headline(scores), "details": job.task.details(scores),
            **fit, "train_seconds": round(time.perf_counter() - started, 1)}


def train(model, job: Job, seed: int, log) -> dict:
    """AdamW with linear warmup/decay for at most ``max_epochs``; after each epoch the dev score decides
    (early stopping with ``patience_epochs``). Restores the best epoch's weights into ``model``.

    A non-finite training loss stops the run. Returns ``best_epoch``, ``epochs_run``, the best dev score,
    ``dev_chance`` and ``diverged`` (non-finite loss, or best dev score <= chance + divergence_margin).
    """
    tcfg, task, select = job.tcfg, job.task, job.task.SELECT_METRIC
    total_steps = math.ceil(len(job.exs["train"]) / tcfg.batch_size) * tcfg.max_epochs
    # MiniLM is a fully trained encoder: it takes the usual BERT fine-tuning LR, not our small models' one
    lr_encoder = tcfg.lr_encoder_reference if job.spec.variant in TRAINED_ENCODERS else tcfg.lr_encoder
    optimizer = optimizer_for(model, lr_encoder, tcfg.lr_head, tcfg.weight_decay)
    schedule = get_linear_schedule_with_warmup(optimizer, int(tcfg.warmup_fraction * total_steps), total_steps)
    generator = torch.Generator().manual_seed(seed)
    best = {"score": -math.inf, "epoch": 0, "state": None, "divergence_score": -math.inf}
    finite, epoch = True, 0
    for epoch in range(1, tcfg.max_epochs + 1):
        loss = train_epoch(model, job, optimizer, schedule, generator, f"{job.key} seed {seed} epoch {epoch}")
        _, dev = evaluate(model, job, "dev")
        log.metrics({"train_loss": loss, f"dev_{select}": dev[select]}, step=epoch)
        finite = math.isfinite(loss)
        if dev[select] > best["score"]:
            best = {"score": dev[select], "epoch": epoch, "divergence_score": task.divergence_score(dev),
                    "state": {k: v.detach().clone() for k, v in model.state_dict().items()}}
        if not finite or epoch - best["epoch"] >= tcfg.patience_epochs:
            break
    model.load_state_dict(best["state"])
    chance = task.chance(job.exs["dev"])
    diverged = not finite or best["divergence_score"] <= chance + tcfg.divergence_margin
    return {"best_epoch": best["epoch"], "epochs_run": epoch, f"dev_best_{select}": best["score"],
            "dev_chance": chance, "dev_divergence_score": best["divergence_score"], "diverged": diverged}


def evaluate(model, job: Job, split: str) -> tuple[list[dict], dict]:
    """Prediction records and scores of ``split`` (``dev`` after each epoch, ``test`` once at the end)."""
    recs = job.task.records(job.exs[split], predict(model, job, job.exs[split]), job.labels)
    return recs, job.task.score(recs, job.labels)


def train_epoch(model, job: Job, optimizer, schedule, generator, desc: str) -> float:
    """One shuffled pass (order from ``generator``); returns the mean training loss (nan if it blew up)."""
    model.train()
    exs, tcfg = job.exs["train"], job.tcfg
    batches = length_grouped_batches([len(ex["input_ids"]) for ex in exs], tcfg.batch_size,
                                     tcfg.length_group_batches, generator)
    losses = []
    for batch_idx in tqdm(batches, desc=desc, leave=False, mininterval=5):
        batch = job.task.collate([exs[i] for i in batch_idx], job.pad_id)
        logits = model(batch["input_ids"], batch["attention_mask"])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, -2), batch["labels"].flatten(), ignore_index=-100)
        if not torch.isfinite(loss):
            return math.nan
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), tcfg.max_grad_norm)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
    return sum(losses) / len(losses)


def length_grouped_batches(lengths: list[int], batch_size: int, group_batches: int, generator) -> list[list[int]]:
    """Shuffled batches of example indices whose members have similar lengths, so little padding is computed.

    A random permutation is cut into groups of ``group_batches * batch_size`` examples, each group is sorted
    by length and cut into batches, and the batches are shuffled (the ``group_by_length`` megabatches of HF
    ``Trainer``). ``group_batches = 1`` is a plain shuffle. Every index appears exactly once.
    """
    order = torch.randperm(len(lengths), generator=generator).tolist()
    span = group_batches * batch_size
    batches = []
    for start in range(0, len(order), span):
        group = sorted(order[start : start + span], key=lambda i: lengths[i])
        batches += [group[i : i + batch_size] for i in range(0, len(group), batch_size)]
    return [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]


@torch.no_grad()
def predict(model, job: Job, exs: list[dict]) -> list:
    """Predictions per example in input order (eval mode, no gradients); batches are length-sorted so
    little padding is computed, which cannot change results because padding is masked."""
    model.eval()
    order = sorted(range(len(exs)), key=lambda i: len(exs[i]["input_ids"]))
    out: list = [None] * len(exs)
    for start in range(0, len(order), job.tcfg.batch_size):
        idx = order[start : start + job.tcfg.batch_size]
        batch_exs = [exs[i] for i in idx]
        batch = job.task.collate(batch_exs, job.pad_id)
        logits = model(batch["input_ids"], batch["attention_mask"])
        for i, pred in zip(idx, job.task.decode(logits, batch_exs), strict=True):
            out[i] = pred
    return out


def write_predictions(path: Path, recs: list[dict]) -> Path:
    """JSONL of ``{doc_id, gold, pred}`` sorted by ``doc_id`` (stable bytes for DVC)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({k: r[k] for k in ("doc_id", "gold", "pred")}, ensure_ascii=False) for r in recs]
    path.write_text("".join(line + "\n" for line in sorted(lines)), encoding="utf-8")
    return path


def aggregate(task, seeds: list[dict], cfg: FinetuneParams, run_id: str | None) -> dict:
    """The contract's entry for one configuration: a ``summarize`` per test metric, ``diverged_seeds``,
    ``mlflow_run_id`` and ``details``: seed-pooled tables (``task.pool_details``: confusion matrix or
    span errors summed over seeds) and, under ``per_seed``, each seed's tables and training facts."""
    seed_ids = [s["seed"] for s in seeds]
    metrics = {
        name: summarize([s["test"][name] for s in seeds], seed_ids, cfg.confidence_level) for name in seeds[0]["test"]
    }
    per_seed = {str(s["seed"]): {k: v for k, v in s.items() if k not in ("seed", "test")} for s in seeds}
    pooled = task.pool_details([s["details"] for s in seeds])
    return {**metrics, "diverged_seeds": [s["seed"] for s in seeds if s["diverged"]], "mlflow_run_id": run_id,
            "details": {**pooled, "pooled_over_seeds": len(seeds), "per_seed": per_seed}}
