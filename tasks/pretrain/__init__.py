"""``pretrain``: BERT masked-language-model pretraining from scratch on the packed blocks of ``tokenize``.

Reads ``data/tokenize/pretrain/{train,heldout}`` and ``models/tokenizer/``; writes ``models/pretrained/``
(``save_pretrained`` of ``BertForMaskedLM`` + tokenizer), ``models/checkpoints/pretrain/`` and
``metrics/pretrain_curve.tsv``. One process, or several under ``torchrun`` (DDP; gloo on CPU, nccl on CUDA).
The training loop is ``tasks/pretrain/trainer.py``, masking and the masked-only loss ``mlm.py``, checkpoint
files ``checkpoint.py``.

Resuming: the data order of epoch ``e`` is a permutation seeded by ``seed + e`` and the mask of each
micro-batch is seeded by ``(seed, step, micro-batch, rank)``, so a run resumed from a checkpoint sees exactly
the batches and masks of an uninterrupted one; on CPU with ``budget_minutes: null`` the final weights are
equal. With ``budget_minutes`` set, the schedule follows the wall clock and runs are not reproducible.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from datasets import load_from_disk
from transformers import BertConfig, BertForMaskedLM, pipeline

from tasks.common.encoders import load_tokenizer, pretrained_dir, tokenizer_dir
from tasks.config import Paths
from tasks.config.pretrain import PretrainParams
from tasks.pretrain.mlm import MaskingVocab
from tasks.pretrain.trainer import Dist, Trainer, count_params, setup_distributed


def run(cfg: PretrainParams, paths: Paths, log) -> dict[str, Any]:
    """Train, evaluate and save the MLM; returns the metrics (``metrics/pretrain.json``)."""
    env = setup_distributed()
    try:
        return _train_and_save(cfg, paths, log, env)
    finally:
        if env.world > 1:
            dist.destroy_process_group()


def _train_and_save(cfg: PretrainParams, paths: Paths, log, env: Dist) -> dict[str, Any]:
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    torch.manual_seed(cfg.seed)
    tokenizer = load_tokenizer(tokenizer_dir(paths))
    vocab = MaskingVocab.from_tokenizer(tokenizer)
    train = load_blocks(paths.data / "tokenize" / "pretrain" / "train")
    heldout = load_blocks(paths.data / "tokenize" / "pretrain" / "heldout", cfg.eval_max_blocks)
    model = build_model(cfg, len(tokenizer), train["input_ids"].shape[1], tokenizer.pad_token_id).to(env.device)
    log.info(f"pretrain: {count_params(model) / 1e6:.2f}M params, {len(train['input_ids'])} train blocks")
    trainer = Trainer(cfg, model, vocab, train, heldout, env, log, paths.models / "checkpoints" / "pretrain")
    summary = trainer.fit()
    if env.main:
        out = pretrained_dir(paths.models)
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
        write_curve(paths.metrics / "pretrain_curve.tsv", trainer.curve)
        summary["fill_mask"] = fill_mask(model, tokenizer, cfg.fill_mask, cfg.fill_mask_top_k, env.device)
    return summary


def load_blocks(folder: Path, max_blocks: int | None = None) -> dict[str, torch.Tensor]:
    """Packed blocks as tensors ``input_ids``, ``attention_mask``, ``maskable`` (not special, not pad), each
    ``(n_blocks, seq_len)``.

    Raises ``FileNotFoundError``/``ValueError`` naming ``folder`` if it is missing, empty or ragged.
    """
    if not folder.exists():
        raise FileNotFoundError(f"{folder}: no tokenized blocks (run the tokenize stage)")
    data = load_from_disk(str(folder)).with_format("torch")
    if max_blocks is not None:
        data = data.select(range(min(max_blocks, len(data))))
    if len(data) == 0:
        raise ValueError(f"{folder}: no blocks")
    try:
        input_ids = data["input_ids"][:].long()
        attention_mask = data["attention_mask"][:].long()
        maskable = (attention_mask == 1) & (data["special_tokens_mask"][:] == 0)
    except (RuntimeError, ValueError) as err:  # rows of different lengths cannot stack
        raise ValueError(f"{folder}: rows must all have the same length (packed blocks): {err}") from err
    return {"input_ids": input_ids, "attention_mask": attention_mask, "maskable": maskable}


def build_model(cfg: PretrainParams, vocab_size: int, block_len: int, pad_token_id: int) -> BertForMaskedLM:
    """A freshly initialised ``BertForMaskedLM`` of preset ``cfg.size``.

    Raises ``ValueError`` if blocks are longer than ``max_position_embeddings``.
    """
    if block_len > cfg.max_position_embeddings:
        raise ValueError(f"blocks of {block_len} tokens exceed pretrain.max_position_embeddings")
    preset = cfg.preset
    config = BertConfig(
        vocab_size=vocab_size,
        hidden_size=preset.hidden_size,
        num_hidden_layers=preset.num_hidden_layers,
        num_attention_heads=preset.num_attention_heads,
        intermediate_size=preset.intermediate_size,
        max_position_embeddings=cfg.max_position_embeddings,
        hidden_dropout_prob=cfg.dropout_prob,
        attention_probs_dropout_prob=cfg.dropout_prob,
        pad_token_id=pad_token_id,
    )
    return BertForMaskedLM(config)


def write_curve(path: Path, rows: list[list[float]]) -> None:
    """``step, train_loss, lr, eval_loss`` as TSV (a DVC plot); unmeasured cells are empty."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["step\ttrain_loss\tlr\teval_loss"]
    for step, train_loss, lr, eval_loss in rows:
        cells = [str(int(step))] + ["" if math.isnan(v) else f"{v:.6g}" for v in (train_loss, lr, eval_loss)]
        lines.append("\t".join(cells))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def fill_mask(model, tokenizer, sentences: list[str], top_k: int, device: torch.device) -> dict[str, Any]:
    """Top-k predictions of the final model for each sentence's ``[MASK]`` (HF fill-mask pipeline)."""
    model.eval()
    fill = pipeline("fill-mask", model=model, tokenizer=tokenizer, device=device, top_k=top_k)
    out = {}
    for sentence in sentences:
        preds = fill(sentence.replace("[MASK]", tokenizer.mask_token))
        out[sentence] = {"tokens": [p["token_str"] for p in preds], "scores": [round(p["score"], 6) for p in preds]}
    return out
