"""Where pretraining starts (``pretrain.init_from``): a fresh masked LM, or continued MLM from an existing
encoder (domain-adaptive pretraining, Gururangan et al. 2020, "Don't Stop Pretraining"; HF ``run_mlm.py``
with ``--model_name_or_path``).

- ``scratch``: a fresh ``BertForMaskedLM``, ``RobertaPreLayerNormForMaskedLM`` or ``ModernBertForMaskedLM``
  (``pretrain.architecture``) of preset ``pretrain.size`` with our tokenizer (``models/tokenizer``), trained
  on the ``clozeline`` blocks: the ``pretrained`` variant.
- ``reference``: the packaged MiniLM with its own tokenizer, on the ``reference`` blocks: the ``adapted``
  variant.
- a path: an HF folder (config, safetensors weights, fast tokenizer) whose vocabulary is that of our
  tokenizer or the reference's, so the tokenize stage has its blocks: the ``adapted`` variant.

A model loaded from a folder keeps its own config (size, LayerNorm placement) except dropout; an encoder
without an MLM head (MiniLM is a ``BertModel``) gets a fresh head whose decoder is tied to the input
embeddings (``AutoModelForMaskedLM.from_pretrained``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from transformers import (
    AutoConfig,
    AutoModelForMaskedLM,
    BertConfig,
    BertForMaskedLM,
    ModernBertConfig,
    ModernBertForMaskedLM,
    PreTrainedModel,
    PreTrainedTokenizerFast,
    RobertaPreLayerNormConfig,
    RobertaPreLayerNormForMaskedLM,
)

from tasks.common.deps import require_declared
from tasks.common.models.encoders import load_tokenizer, pretrained_dir, reference_model_dir, tokenizer_dir
from tasks.config import Paths
from tasks.config.model.pretrain import PretrainParams
from tasks.pretrain.attention import with_document_mask


@dataclass(frozen=True)
class Start:
    """What a run starts from: the tokenizer, which blocks it reads (``clozeline`` | ``reference``), the folder
    of initial weights (``None`` = fresh) and the variant name the result gets."""

    tokenizer: PreTrainedTokenizerFast
    tokenization: str
    folder: Path | None
    variant: str


def resolve_start(cfg: PretrainParams, paths: Paths) -> Start:
    """The tokenizer, blocks and initial folder for ``cfg.init_from``.

    Raises ``FileNotFoundError`` naming ``pretrain.init_from`` if the folder has no ``config.json``, and
    ``ValueError`` if its tokenizer's vocabulary matches neither tokenization the tokenize stage writes, or if a
    folder of one's own is not a dvc.yaml dep of the stage (``require_declared``).
    """
    if cfg.init_from == "scratch":
        return Start(load_tokenizer(tokenizer_dir(paths)), "clozeline", None, "pretrained")
    if cfg.init_from != "reference":
        require_declared("pretrain", pretrained_dir(paths.models), {"pretrain.init_from": cfg.init_from})
    folder = reference_model_dir() if cfg.init_from == "reference" else Path(cfg.init_from)
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"pretrain.init_from: {folder} has no config.json (an HF model folder)")
    tokenizer = load_tokenizer(folder)
    known = {"clozeline": tokenizer_dir(paths), "reference": reference_model_dir()}
    vocab = tokenizer.get_vocab()
    for name, other in known.items():
        if load_tokenizer(other).get_vocab() == vocab:
            return Start(tokenizer, name, folder, "adapted")
    raise ValueError(
        f"pretrain.init_from: the tokenizer in {folder} has a vocabulary of its own ({len(vocab)} tokens); "
        "the tokenize stage writes blocks only for models/tokenizer and the reference MiniLM"
    )


def initial_model(cfg: PretrainParams, start: Start, block_len: int) -> PreTrainedModel:
    """The masked LM training starts from: fresh (``start.folder is None``) or loaded from ``start.folder``.

    Raises ``ValueError`` if blocks are longer than the model's position table, or with ``cfg.document_mask`` if
    the model is not a ModernBERT.
    """
    if start.folder is None:
        tok = start.tokenizer
        model = build_model(cfg, len(tok), block_len, tok.pad_token_id, tok.cls_token_id, tok.sep_token_id)
    else:
        dropout = dropout_keys(AutoConfig.from_pretrained(start.folder).model_type, cfg.dropout_prob)
        model = AutoModelForMaskedLM.from_pretrained(
            start.folder, tie_word_embeddings=True, attn_implementation="sdpa", **dropout
        )
        if block_len > model.config.max_position_embeddings:
            raise ValueError(f"blocks of {block_len} tokens exceed {start.folder}'s max_position_embeddings")
    # pretrain.document_mask: attention within each document of a block (tasks/pretrain/attention.py)
    return with_document_mask(model, start.tokenizer.sep_token_id) if cfg.document_mask else model


def dropout_keys(model_type: str, p: float) -> dict[str, float]:
    """The config keys that set dropout probability ``p`` in an HF model of ``model_type``: ModernBERT has its own
    names (embedding, MLP, attention); BERT and RoBERTa-style configs take ``hidden_dropout_prob`` and
    ``attention_probs_dropout_prob`` (an unknown key would reach the model's ``__init__`` and raise)."""
    if model_type == "modernbert":
        return {"embedding_dropout": p, "mlp_dropout": p, "attention_dropout": p}
    return {"hidden_dropout_prob": p, "attention_probs_dropout_prob": p}


def build_model(
    cfg: PretrainParams,
    vocab_size: int,
    block_len: int,
    pad_token_id: int,
    cls_token_id: int | None = None,
    sep_token_id: int | None = None,
) -> PreTrainedModel:
    """A freshly initialised masked LM of preset ``cfg.size`` and ``cfg.architecture`` (an HF model class, so
    ``save_pretrained`` / ``AutoModel`` work downstream); input and output embeddings are tied. Its config names
    the tokenizer's ``[CLS]`` / ``[SEP]`` ids as cls/bos and sep/eos (None: unset; ModernBERT's own defaults are ids
    of its 50k vocabulary, outside ours, which transformers warns about at every load).

    Raises ``ValueError`` if blocks are longer than ``max_position_embeddings``.
    """
    if block_len > cfg.max_position_embeddings:
        raise ValueError(f"blocks of {block_len} tokens exceed pretrain.max_position_embeddings")
    preset = cfg.preset
    shape = dict(
        vocab_size=vocab_size,
        hidden_size=preset.hidden_size,
        num_hidden_layers=preset.num_hidden_layers,
        num_attention_heads=preset.num_attention_heads,
        intermediate_size=preset.intermediate_size,
        pad_token_id=pad_token_id,
        cls_token_id=cls_token_id,
        bos_token_id=cls_token_id,
        sep_token_id=sep_token_id,
        eos_token_id=sep_token_id,
        tie_word_embeddings=True,
        attn_implementation="sdpa",  # torch's fused attention; packed blocks pass no mask (its fastest kernel)
    )
    dropout = dict(hidden_dropout_prob=cfg.dropout_prob, attention_probs_dropout_prob=cfg.dropout_prob)
    if cfg.architecture == "bert":
        return BertForMaskedLM(BertConfig(max_position_embeddings=cfg.max_position_embeddings, **shape, **dropout))
    if cfg.architecture == "roberta-prelayernorm":
        # RoBERTa counts positions from pad_token_id + 1, so its table needs pad_token_id + 1 more rows
        positions = cfg.max_position_embeddings + pad_token_id + 1
        config = RobertaPreLayerNormConfig(max_position_embeddings=positions, type_vocab_size=1, **shape, **dropout)
        return RobertaPreLayerNormForMaskedLM(config)
    config = ModernBertConfig(
        max_position_embeddings=cfg.max_position_embeddings,
        # every layer global: the sliding window (128) would cover a whole block anyway, and a mask costs time
        layer_types=["full_attention"] * preset.num_hidden_layers,
        **dropout_keys("modernbert", cfg.dropout_prob),
        **shape,
    )
    return ModernBertForMaskedLM(config)
