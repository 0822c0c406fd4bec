"""The recipe of a clozeline export and the evaluated model's head: the checked ``clozeline`` block of
config.json (``recipe``), the pipeline task each kind runs, and the logits the evaluated model computes (pooling,
then the head's linear layer; ``logits``). Raises ``ExportError`` naming the folder for a block that is missing
or incomplete."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification

from clozeline.errors import ExportError

#: The config.json key of the recipe, and the format version this module reads.
RECIPE_KEY, FORMAT = "clozeline", 1
TEXT_TASK, TOKEN_TASK = "clozeline-text-classification", "clozeline-token-classification"
#: Task kind (params.yaml ``tasks.<name>.kind``) -> the pipeline task that runs it.
PIPELINE_OF = {"classification": TEXT_TASK, "pair_classification": TEXT_TASK, "token_classification": TOKEN_TASK}
#: ``aggregation_strategy`` values the tagger takes (the stock names; a word is read at its first subword).
AGGREGATIONS = ("none", "simple", "first")
AUTO_CLASS = {TEXT_TASK: AutoModelForSequenceClassification, TOKEN_TASK: AutoModelForTokenClassification}


def recipe(config, folder: str | Path = "") -> dict[str, Any]:
    """The ``clozeline`` block of a model config, checked: ``kind``, ``pooling`` and the input cut
    (``max_seq_len_tokens``, ``truncation``, ``head_tokens``; token classification: ``window_tokens``,
    ``window_overlap_tokens``). Raises ``ExportError`` naming ``folder``."""
    block = getattr(config, RECIPE_KEY, None)
    where = f"{folder}: config.json" if folder else "config"
    if not isinstance(block, dict) or block.get("format") != FORMAT:
        raise ExportError(f"{where} has no {RECIPE_KEY!r} block of format {FORMAT} (not a clozeline export)")
    kind = block.get("kind")
    if kind not in PIPELINE_OF:
        raise ExportError(f"{where}: {RECIPE_KEY}.kind {kind!r} is not one of {sorted(PIPELINE_OF)}")
    needed = (
        ("window_tokens", "window_overlap_tokens")
        if kind == "token_classification"
        else ("pooling", "max_seq_len_tokens", "truncation", "head_tokens")
    )
    missing = [key for key in needed if key not in block]
    if missing:
        raise ExportError(f"{where}: {RECIPE_KEY} block lacks {missing}")
    return block


def head_layer(model) -> torch.nn.Linear:
    """The linear layer the evaluated head is: ``classifier``, or ``classifier.out_proj`` (RoBERTa-style heads)."""
    head = model.classifier
    return head if isinstance(head, torch.nn.Linear) else head.out_proj


def encoder_inputs(model, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``input_ids`` and ``attention_mask``, plus ``token_type_ids`` only for an encoder with segment embeddings
    (BERT's two; ModernBERT and RoBERTa read a pair from its ``[SEP]`` alone), as the evaluated model did."""
    out = {"input_ids": inputs["input_ids"], "attention_mask": inputs["attention_mask"]}
    if "token_type_ids" in inputs and getattr(model.config, "type_vocab_size", 1) > 1:
        out["token_type_ids"] = inputs["token_type_ids"]
    return out


def logits(model, inputs: dict[str, torch.Tensor], pooling: str) -> torch.Tensor:
    """The evaluated model's logits: the encoder's last hidden states, pooled (``mean`` over the real tokens,
    ``cls`` the first position, ``token`` none), then the head's linear layer."""
    hidden = model.base_model(**encoder_inputs(model, inputs)).last_hidden_state
    if pooling == "mean":
        weights = inputs["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        hidden = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)
    elif pooling == "cls":
        hidden = hidden[:, 0]
    return head_layer(model)(hidden)
