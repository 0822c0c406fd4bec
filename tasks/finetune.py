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
from pathlib import Path

import datasets
import torch
from tqdm import tqdm
from transformers import get_linear_schedule_with_warmup

from tasks import finetune_cls, finetune_ner
from tasks.config.finetune import FinetuneParams, RunSpec, TaskParams
from tasks.finetune_model import TOKENIZATION, build_model, model_dir, optimizer_for, pad_token_id
from tasks.seedstats import summarize

TASKS = {"cls": finetune_cls, "ner": finetune_ner}
SPLITS = ("train", "dev", "test")


def run(cfg: FinetuneParams, paths, log, item: str) -> dict:
    """Fine-tune every configuration of task ``item`` over ``cfg.seeds``; returns the metrics of the contract.

    Reads ``data/tokenize/<item>/<tok>/`` and the variants' model folders; writes ``data/finetune/<item>/``.
    Raises ``FileNotFoundError``/``ValueError`` naming the folder or key when an input is missing or bad.
    """
    tcfg = cfg.task(item)
    torch.set_num_threads(cfg.torch_threads)
    out_dir = fresh_dir(paths.stage_data("finetune") / item)
    toks = sorted({TOKENIZATION[spec.variant] for spec in tcfg.configs})
    data = {tok: load_task_data(paths.stage_data("tokenize") / item / tok, cfg.data_seed, tcfg) for tok in toks}
    labels = same_labels(data, item)
    runs = {}
    for spec in tcfg.configs:
        with log.child(f"{item}/{spec.key}") as parent:
            runs[spec.key] = run_config(item, spec, cfg, tcfg, data[TOKENIZATION[spec.variant]], labels, paths, out_dir, parent)
    return {"task": item, "labels": labels, "docs": {tok: data[tok]["counts"] for tok in toks}, "runs": runs}


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
        counts[split] = {"docs_available": available, "docs_kept": len(keep), "docs_dropped_by_cap": available - len(keep)}
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


def run_config(item, spec: RunSpec, cfg, tcfg, data, labels, paths, out_dir, log) -> dict:
    """Train and test ``spec`` once per seed; returns its entry of ``metrics.runs``."""
    task = TASKS[item]
    folder = model_dir(spec.variant, paths.models)
    pad_id = pad_token_id(folder)
    exs = {split: task.examples(data["rows"][split], tcfg.max_seq_len_tokens, spec.head) for split in SPLITS}
    log.params({"task": item, "variant": spec.variant, "mode": spec.mode, "head": spec.head, "model_dir": folder,
                "seeds": cfg.seeds, **{f"{s}_examples": len(e) for s, e in exs.items()}})
    seeds = []
    for seed in cfg.seeds:
        with log.child(f"{item}/{spec.key}/seed{seed}") as child:
            seeds.append(run_seed(task, spec, seed, tcfg, exs, labels, folder, pad_id, out_dir, child))
    return aggregate(task, seeds, cfg, log.run_id)


def run_seed(task, spec, seed, tcfg, exs, labels, folder, pad_id, out_dir, log) -> dict:
    """One run: seeded model, training with early stopping on dev, one test evaluation, predictions file."""
    log.params({"seed": seed})
    model = build_model(spec.variant, folder, spec.head, len(labels), spec.mode, tcfg.head_dropout, seed)
    started = time.perf_counter()
    fit = train(model, task, exs, tcfg, labels, pad_id, seed, log, desc=f"{spec.key} seed {seed}")
    test_recs = task.records(exs["test"], predict(model, task, exs["test"], pad_id, tcfg.batch_size), labels)
    scores = task.score(test_recs, labels)
    pred_file = write_predictions(out_dir / spec.key / f"seed{seed}.test.jsonl", test_recs)
    log.artifact(pred_file, "predictions")
    log.metrics(task.headline(scores))
    return {"seed": seed, "test": task.headline(scores), "details": task.details(scores),
            **fit, "train_seconds": round(time.perf_counter() - started, 1)}


def train(model, task, exs, tcfg: TaskParams, labels, pad_id, seed, log, desc) -> dict:
    """AdamW with linear warmup/decay for at most ``max_epochs``; after each epoch the dev score decides
    (early stopping with ``patience_epochs``). Restores the best epoch's weights into ``model``.

    A non-finite training loss stops the run. Returns ``best_epoch``, ``epochs_run``, ``dev_best``,
    ``dev_chance`` and ``diverged`` (non-finite loss, or best dev score <= chance + divergence_margin).
    """
    train_exs = exs["train"]
    steps_per_epoch = math.ceil(len(train_exs) / tcfg.batch_size)
    optimizer = optimizer_for(model, tcfg.lr_encoder, tcfg.lr_head, tcfg.weight_decay)
    total = steps_per_epoch * tcfg.max_epochs
    schedule = get_linear_schedule_with_warmup(optimizer, int(tcfg.warmup_fraction * total), total)
    generator = torch.Generator().manual_seed(seed)
    best = {"score": -math.inf, "epoch": 0, "state": None, "divergence_score": -math.inf}
    finite, epoch = True, 0
    for epoch in range(1, tcfg.max_epochs + 1):
        loss = train_epoch(model, task, train_exs, optimizer, schedule, generator, tcfg, pad_id, f"{desc} epoch {epoch}")
        dev = task.score(task.records(exs["dev"], predict(model, task, exs["dev"], pad_id, tcfg.batch_size), labels), labels)
        log.metrics({"train_loss": loss, f"dev_{task.SELECT_METRIC}": dev[task.SELECT_METRIC]}, step=epoch)
        finite = math.isfinite(loss)
        if dev[task.SELECT_METRIC] > best["score"]:
            best = {"score": dev[task.SELECT_METRIC], "epoch": epoch, "divergence_score": task.divergence_score(dev),
                    "state": {k: v.detach().clone() for k, v in model.state_dict().items()}}
        if not finite or epoch - best["epoch"] >= tcfg.patience_epochs:
            break
    model.load_state_dict(best["state"])
    chance = task.chance(exs["dev"])
    diverged = not finite or best["divergence_score"] <= chance + tcfg.divergence_margin
    return {"best_epoch": best["epoch"], "epochs_run": epoch, f"dev_best_{task.SELECT_METRIC}": best["score"],
            "dev_chance": chance, "dev_divergence_score": best["divergence_score"], "diverged": diverged}


def train_epoch(model, task, train_exs, optimizer, schedule, generator, tcfg, pad_id, desc) -> float:
    """One shuffled pass (order from ``generator``); returns the mean training loss (nan if it blew up)."""
    model.train()
    order = torch.randperm(len(train_exs), generator=generator).tolist()
    losses = []
    for start in tqdm(range(0, len(order), tcfg.batch_size), desc=desc, leave=False, mininterval=5):
        batch = task.collate([train_exs[i] for i in order[start : start + tcfg.batch_size]], pad_id)
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


@torch.no_grad()
def predict(model, task, exs: list[dict], pad_id: int, batch_size: int) -> list:
    """Predictions per example in input order (eval mode, no gradients); batches are length-sorted so
    little padding is computed, which cannot change results because padding is masked."""
    model.eval()
    order = sorted(range(len(exs)), key=lambda i: len(exs[i]["input_ids"]))
    out: list = [None] * len(exs)
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        batch_exs = [exs[i] for i in idx]
        batch = task.collate(batch_exs, pad_id)
        for i, pred in zip(idx, task.decode(model(batch["input_ids"], batch["attention_mask"]), batch_exs), strict=True):
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
