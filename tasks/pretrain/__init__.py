"""``pretrain``: BERT masked-language-model pretraining on the packed blocks of ``tokenize``, from scratch or
continued from an existing encoder (``pretrain.init_from``, see ``init.py``).

Reads ``data/tokenize/pretrain/<tok>/{train,heldout}`` and ``models/tokenizer/`` (or the initial model's
folder); writes ``models/pretrained/`` (``save_pretrained`` of the masked LM + tokenizer + ``pretraining.json``
naming the variant: ``pretrained`` from scratch, ``adapted`` continued, and the model's lineage: the md5 of each
``data/leakage/<source>.parquet`` its blocks came from and the ancestry of ``init_from``, ``lineage_fields.py``),
``models/checkpoints/pretrain/`` and
``metrics/pretrain_curve.tsv``. Those are the first seed's of ``pretrain.seeds``; each further seed trains the same
recipe from its own initialisation, data order and masks into ``models/pretrained/seeds/<seed>/`` (checkpoints in
``models/checkpoints/pretrain/seeds/<seed>/``, MLflow child run ``pretrain/seed<seed>``), which finetune fine-tunes
like the first so that the report resamples pretraining seeds; ``metrics/pretrain.json`` keeps the first seed's
numbers at its top level and every seed's headline under ``seeds``. Then each masking ablation arm of
``pretrain.ablations`` (the same recipe with some masking keys changed) trains from the first seed into
``models/pretrained/ablations/<name>/``, its headline under ``ablations``. One process, or several under ``torchrun``
(DDP; gloo on CPU, nccl on CUDA). The training loop is ``trainer.py``, its held-out evaluation ``heldout.py``,
masking, the masked-only loss and the unigram baseline ``mlm.py``, blocks ``blocks.py``, checkpoint files and the
fingerprint that decides whether one resumes ``checkpoint.py``, devices and MFU ``hardware.py``.

Resuming: the data order of epoch ``e`` is a permutation seeded by ``seed + e`` and the mask of each
micro-batch is seeded by ``(seed, step, micro-batch, rank)``, so a run resumed from a checkpoint (each seed from
its own) sees exactly the batches and masks of an uninterrupted one; on CPU with ``budget_minutes: null`` the final
weights are equal. With ``budget_minutes`` set, the schedule follows the wall clock and runs are not reproducible.

Also: ``attention`` (whether SDPA's flash kernel can run), ``feed`` (the blocks each step takes, masked, prefetched),
``schedule`` (the learning rate: its peak and shape).
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from transformers import pipeline

from tasks.common.models.encoders import ABLATIONS, SEEDS, SNAPSHOTS, pretrained_dir, write_pretraining_record
from tasks.config import Paths
from tasks.config.model.pretrain import PretrainParams
from tasks.pretrain import checkpoint
from tasks.pretrain.blocks import blocks_dir, load_blocks, open_blocks
from tasks.pretrain.hardware import Dist, setup_distributed
from tasks.pretrain.init import Start, initial_model, resolve_start
from tasks.pretrain.lineage_fields import record_fields
from tasks.pretrain.mlm import MaskingVocab
from tasks.pretrain.trainer import Trainer, count_params


def run(cfg: PretrainParams, paths: Paths, log: Any) -> dict[str, Any]:
    """Train, evaluate and save the MLM; returns the metrics (``metrics/pretrain.json``)."""
    env = setup_distributed(cfg.hardware, cfg.nproc_per_node)
    try:
        return _train_and_save(cfg, paths, log, env)
    finally:
        if env.world > 1:
            dist.destroy_process_group()


def _train_and_save(cfg: PretrainParams, paths: Paths, log: Any, env: Dist) -> dict[str, Any]:
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    start = resolve_start(cfg, paths)
    data: dict[str, Any] = {
        "vocab": MaskingVocab.from_tokenizer(start.tokenizer),
        "train": open_blocks(blocks_dir(paths.data, start.tokenization, "train")),
        "heldout": load_blocks(blocks_dir(paths.data, start.tokenization, "heldout"), cfg.eval_max_blocks),
    }
    cfg = cfg.model_copy(update={"max_steps": planned_steps(cfg, data["train"]["input_ids"].shape, env.world, log)})
    summary = _train_seed(cfg, cfg.seed, start, data, paths, log, env)
    seeds = {cfg.seed: summary}
    for seed in cfg.seeds[1:]:  # the further seeds: same recipe, own init, order and masks; no dose snapshots
        with log.child(f"pretrain/seed{seed}") as child:
            further = cfg.model_copy(update={"dose_snapshot_fractions": []})
            seeds[seed] = _train_seed(further, seed, start, data, paths, child, env)
    out = summary | {"seeds": {str(seed): seed_headline(found) for seed, found in seeds.items()}}
    ablations = _train_ablations(cfg, start, data, paths, log, env)  # {} without arms
    return out | ({"ablations": ablations} if ablations else {})


def _train_ablations(cfg: PretrainParams, start: Start, data: dict, paths: Paths, log: Any, env: Dist) -> dict:
    """Each arm of ``pretrain.ablations``: the main recipe with the arm's masking keys, from the first seed (same
    steps, model and data; no snapshots) into ``models/pretrained/ablations/<name>/`` (checkpoints in
    ``models/checkpoints/pretrain/ablations/<name>/``, MLflow child run ``pretrain/ablation-<name>``). Returns
    ``{name: its headline (seed_headline) and the keys it changed}``; the held-out masks stay the main
    recipe's (80/10/10 at eval_mlm_probability), so the held-out losses compare."""
    if env.main:  # a removed arm's model must not linger for finetune (ablation_dirs)
        shutil.rmtree(pretrained_dir(paths.models) / ABLATIONS, ignore_errors=True)
    out = {}
    for arm in cfg.ablations:
        with log.child(f"pretrain/ablation-{arm.name}") as child:
            found = _train_seed(
                cfg.ablation(arm.name), cfg.seed, start, data, paths, child, env, sub=Path(ABLATIONS) / arm.name
            )
        out[arm.name] = {"changes": arm.changes(), "seed": cfg.seed, **seed_headline(found)}
    return out


def _train_seed(
    cfg: PretrainParams, seed: int, start: Start, data: dict, paths: Paths, log: Any, env: Dist, sub: Path | None = None
) -> dict:
    """Train pretraining seed ``seed`` on ``data`` (``vocab``, ``train`` and ``heldout`` blocks) and save it
    (main rank): the first seed of ``pretrain.seeds`` into ``models/pretrained`` with its snapshots, the curve
    TSV and the fill-mask check; a further one into ``models/pretrained/seeds/<seed>/`` (``sub``, relative to
    ``models/pretrained`` and to the checkpoints: another folder, e.g. an ablation arm's). Returns its metrics."""
    sub = sub if sub is not None or seed == cfg.seeds[0] else Path(SEEDS) / str(seed)
    first = sub is None
    torch.manual_seed(seed)
    train, heldout = data["train"], data["heldout"]
    model = initial_model(cfg, start, train["input_ids"].shape[1]).to(env.device)
    log.info(
        f"pretrain: {start.variant} seed {seed} from {cfg.init_from}: {count_params(model) / 1e6:.2f}M params, "
        f"{len(train['input_ids'])} train blocks ({start.tokenization} tokenizer)"
    )
    ckpt = paths.models / "checkpoints" / "pretrain"
    trainer = Trainer(cfg, model, data["vocab"], train, heldout, env, log, ckpt if sub is None else ckpt / sub, seed)
    summary = {"variant": start.variant, "init_from": cfg.init_from, **trainer.fit()}
    if env.main:
        out = pretrained_dir(paths.models) if sub is None else pretrained_dir(paths.models) / sub
        model.save_pretrained(out)
        start.tokenizer.save_pretrained(out)
        fields = record_fields(paths.data, train["source_names"] + heldout["source_names"], cfg.init_from)
        write_pretraining_record(out, start.variant, cfg.init_from, start.tokenization, fields)
        if first:
            copy_snapshots(trainer, out, start, cfg.init_from, fields)
            write_curve(paths.metrics / "pretrain_curve.tsv", trainer.curve, summary["heldout_unigram_ce"])
            summary["fill_mask"] = fill_mask(model, start.tokenizer, cfg.fill_mask, cfg.fill_mask_top_k, env.device)
    return summary


def seed_headline(summary: dict) -> dict:
    """One seed's entry of ``metrics/pretrain.json``'s ``seeds``: its held-out MLM numbers, steps and minutes."""
    keys = (
        "heldout_loss",
        "heldout_perplexity",
        "heldout_mlm_accuracy",
        "heldout_gap_to_unigram_nats",
        "steps",
        "resumed_from_step",
        "train_minutes",
    )
    return {key: summary[key] for key in keys}


def planned_steps(cfg: PretrainParams, blocks: tuple[int, int], world: int, log: Any) -> int:
    """``max_steps``, or the steps of the token budget ``train_tokens`` on ``blocks`` = (n_blocks, seq_len) train
    blocks: budget / (world x batch_size_blocks x grad_accum_steps x seq_len tokens a step), at least 1, and at
    most ``max_epochs`` epochs (an epoch is n_blocks // blocks per step steps). Logs how it was derived."""
    if cfg.max_steps is not None:
        return cfg.max_steps
    assert cfg.train_tokens is not None  # the params model sets exactly one of max_steps and train_tokens
    per_step = world * cfg.batch_size_blocks * cfg.grad_accum_steps
    steps = max(1, math.ceil(cfg.train_tokens / (per_step * blocks[1])))
    per_epoch = max(1, blocks[0] // per_step)
    cap = math.inf if cfg.max_epochs is None else max(1, math.floor(cfg.max_epochs * per_epoch))
    log.info(
        f"pretrain: train_tokens {cfg.train_tokens:,} = {steps:,} steps of {per_step * blocks[1]:,} tokens; "
        f"the corpus is {per_epoch:,} steps an epoch"
        + (
            f", so max_epochs {cfg.max_epochs:g} caps it at {cap:,} steps ({cap * per_step * blocks[1]:,} tokens)"
            if cap < steps
            else ""
        )
    )
    return int(min(steps, cap))


def copy_snapshots(trainer: Trainer, out: Path, start: Start, init_from: str, fields: dict) -> None:
    """The dose-response snapshots of this run into ``<out>/snapshots/step_<N>/``, each a model folder that
    finetune loads like ``models/pretrained`` (weights, tokenizer, ``pretraining.json`` with the run's lineage
    ``fields``: a snapshot saw at most the run's data); older ones go."""
    shutil.rmtree(out / SNAPSHOTS, ignore_errors=True)
    for folder in checkpoint.snapshots(trainer.ckpt_dir):
        if int(folder.name.removeprefix(checkpoint.PREFIX)) not in trainer.snapshot_steps:
            continue
        dest = out / SNAPSHOTS / folder.name
        shutil.copytree(folder, dest, dirs_exist_ok=True)
        start.tokenizer.save_pretrained(dest)
        write_pretraining_record(dest, start.variant, init_from, start.tokenization, fields)


def write_curve(path: Path, rows: list[list[float]], unigram_ce: float) -> None:
    """``step, train_loss, lr, eval_loss, unigram_ce`` as TSV (a DVC plot); unmeasured cells are empty.
    ``unigram_ce`` (nats, the same on every row) is the held-out loss of the token-frequency baseline: the
    line a model that learned context must fall below."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["step\ttrain_loss\tlr\teval_loss\tunigram_ce"]
    for step, train_loss, lr, eval_loss in rows:
        values = (train_loss, lr, eval_loss, unigram_ce)
        cells = [str(int(step))] + ["" if math.isnan(v) else f"{v:.6g}" for v in values]
        lines.append("\t".join(cells))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def fill_mask(model: Any, tokenizer: Any, sentences: list[str], top_k: int, device: torch.device) -> dict[str, Any]:
    """Top-k predictions of the final model for each sentence's ``[MASK]`` (HF fill-mask pipeline)."""
    model.eval()
    fill = pipeline("fill-mask", model=model, tokenizer=tokenizer, device=device, top_k=top_k)
    out = {}
    for sentence in sentences:
        preds = fill(sentence.replace("[MASK]", tokenizer.mask_token))
        out[sentence] = {"tokens": [p["token_str"] for p in preds], "scores": [round(p["score"], 6) for p in preds]}
    return out
