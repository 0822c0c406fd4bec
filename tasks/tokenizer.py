"""Stage ``tokenizer``: a WordPiece vocab trained on the pretraining *train* split only, saved as an HF fast tokenizer.

Reads ``data/leakage/<source>.parquet`` (rows with ``is_duplicate == false``); writes ``models/tokenizer/``
(``tokenizer.json`` + ``tokenizer_config.json``; ``AutoTokenizer.from_pretrained`` loads it). Held-out and
dev text are only *measured* ([UNK] rate, fertility), never trained on.

The pipeline follows BERT's WordPiece setup (Devlin et al. 2019; the HF ``tokenizers`` ``BertWordPieceTokenizer``
recipe): BertNormalizer, BertPreTokenizer, ``##`` continuation prefix, ``[CLS] $A [SEP]`` post-processing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from tasks.common.deps import require_declared
from tasks.common.files.parquet import read_clean_source, read_pretraining_rows
from tasks.common.models import vocab_ledger
from tasks.common.models.encoders import reference_model_dir, tokenizer_dir
from tasks.config import Paths
from tasks.config.corpus.tokenizer import SpecialTokens, TokenizerParams

#: Columns of the DESIGN row contract that this stage and ``tokenize`` read.
CONTINUATION_PREFIX = "##"


def run(cfg: TokenizerParams, paths: Paths, log: Any) -> dict:
    """Build the tokenizer, save it to ``<models>/tokenizer``, and return its metrics.

    Raises ``ValueError`` first when ``vocab_file`` is not a dvc.yaml dep of the stage (``require_declared``).
    """
    if cfg.vocab_from == "file":
        assert cfg.vocab_file is not None  # TokenizerParams requires it with vocab_from: file
        require_declared("tokenizer", tokenizer_dir(paths), {"tokenizer.vocab_file": cfg.vocab_file})
    sources = cfg.pretrain_sources
    assert isinstance(sources, list)  # "all" becomes the names it stands for when params.yaml loads (resolve_pretrain)
    corpus = pretrain_texts(paths, sources)
    log.info(f"tokenizer: {len(corpus['train'])} train docs, {len(corpus['heldout'])} heldout docs")
    kept = kept_vocabulary(cfg, paths.stage_data("tokenizer_vocab"), corpus["train"], log)
    backend = build_backend(cfg, corpus["train"], kept["vocab"])
    fast = wrap_fast(backend, cfg.special_tokens)
    out = tokenizer_dir(paths)
    fast.save_pretrained(out)
    metrics = {
        "vocab_size": len(fast),
        "vocab_from": cfg.vocab_from,
        "train_docs": len(corpus["train"]),
        "vocab_train_docs": kept["train_docs"],
        "heldout": text_stats(fast, corpus["heldout"]),
        "dev": {src: text_stats(fast, task_texts(paths, src, "dev")) for src in sorted(cfg.unk_eval_sources)},
    }
    log.artifact(out, "tokenizer")
    return metrics


def kept_vocabulary(cfg: TokenizerParams, folder: Path, train_texts: list[str], log: Any) -> dict:
    """``{"vocab": {token: id} or None, "train_docs": docs it was trained on}``: with ``train_once`` the kept
    vocabulary (``tasks/common/models/vocab_ledger.py``), trained on ``train_texts`` and kept when there is none to
    use; with the other modes no vocabulary (``train_docs``: this run's when training), and the folder is left as it
    is."""
    if cfg.vocab_from != "train_once":
        folder.mkdir(parents=True, exist_ok=True)  # a DVC output: it must exist; a kept vocabulary is not erased
        return {"vocab": None, "train_docs": len(train_texts) if cfg.vocab_from == "train" else None}
    vocab, reason, trained = vocab_ledger.load(folder, cfg)
    log.info(f"tokenizer: vocab_from train_once: {reason}")
    log.tags({"tokenizer.vocab": "kept" if vocab is not None else "trained", "tokenizer.vocab_reason": reason})
    if vocab is None:
        vocab = train_wordpiece(train_texts, cfg)
        trained = vocab_ledger.save(folder, vocab, cfg, len(train_texts))
    return {"vocab": vocab, "train_docs": trained["train_docs"]}


def pretrain_texts(paths: Paths, sources: list[str]) -> dict[str, list[str]]:
    """``{"train": [...], "heldout": [...]}`` texts of the pretraining rows of ``sources`` (role=pretrain rows;
    a task source's train and dev split, ``parquet.read_pretraining_rows``), sorted by doc_id (determinism)."""
    rows = read_pretraining_rows(paths.data, sources)
    return {split: rows.loc[rows["split"] == split, "text"].tolist() for split in ("train", "heldout")}


def task_texts(paths: Paths, source: str, split: str) -> list[str]:
    """Texts of one split of a task source, sorted by doc_id."""
    rows = read_clean_source(paths.data, source)
    return rows.loc[rows["split"] == split].sort_values("doc_id", kind="stable")["text"].tolist()


def build_backend(cfg: TokenizerParams, train_texts: list[str], kept: dict[str, int] | None = None) -> Tokenizer:
    """A ``tokenizers.Tokenizer``: trained on ``train_texts`` (or the ``kept`` vocabulary of ``train_once``) or
    loaded from a vocab.txt, per ``cfg.vocab_from``.

    Raises ``ValueError`` when training is asked for on an empty corpus.
    """
    if cfg.vocab_from in ("train", "train_once"):
        vocab = kept if kept is not None else train_wordpiece(train_texts, cfg)
        backend = Tokenizer(models.WordPiece(vocab, unk_token=cfg.special_tokens.unk))
        backend.add_special_tokens(cfg.special_tokens.in_order())
    else:
        vocab_file = reference_model_dir() / "vocab.txt" if cfg.vocab_from == "reference" else cfg.vocab_file
        backend = Tokenizer(models.WordPiece.from_file(str(vocab_file), unk_token=cfg.special_tokens.unk))
    return with_bert_pipeline(backend, cfg)


def with_bert_pipeline(backend: Tokenizer, cfg: TokenizerParams) -> Tokenizer:
    """Set BERT's normalizer, pre-tokenizer, decoder and ``[CLS] $A [SEP]`` template; returns ``backend``.

    Raises ``ValueError`` if a special token is missing from the vocab.
    """
    backend.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=cfg.strip_accents, lowercase=cfg.lowercase
    )
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.decoder = decoders.WordPiece(prefix=CONTINUATION_PREFIX)
    specials = cfg.special_tokens
    missing = [tok for tok in specials.in_order() if backend.token_to_id(tok) is None]
    if missing:
        raise ValueError(f"tokenizer: special tokens {missing} are not in the vocab")
    cls, sep = specials.cls, specials.sep
    backend.post_processor = processors.TemplateProcessing(
        single=f"{cls} $A {sep}",
        pair=f"{cls} $A {sep} $B:1 {sep}:1",
        special_tokens=[(cls, backend.token_to_id(cls)), (sep, backend.token_to_id(sep))],
    )
    return backend


def train_wordpiece(texts: list[str], cfg: TokenizerParams) -> dict[str, int]:
    """The ``{token: id}`` vocabulary of WordPiece trained with ``tokenizers.trainers.WordPieceTrainer``,
    deterministically. Raises ``ValueError`` for no text.

    tokenizers 0.23 assigns ids to the ``##c`` continuation characters in hash-map order, and ids break ties
    between equally frequent merges, so two runs can give different vocabularies (huggingface/tokenizers#1794,
    fix pending in PR #2066). Work-around: a first pass finds the set of ``##c`` tokens (the same every run),
    the second pass pre-registers them in sorted order so that ties break the same way; the result keeps
    only the real special tokens as added tokens.
    """
    if not texts:
        raise ValueError("tokenizer: no train-split text in tokenizer.pretrain_sources")
    specials = cfg.special_tokens.in_order()
    first = _train_once(texts, cfg, specials)
    seeds = sorted(tok for tok in first.get_vocab() if tok.startswith(CONTINUATION_PREFIX) and len(tok) == 3)
    return _train_once(texts, cfg, specials + seeds).get_vocab()


def _train_once(texts: list[str], cfg: TokenizerParams, reserved: list[str]) -> Tokenizer:
    backend = Tokenizer(models.WordPiece(unk_token=cfg.special_tokens.unk))
    backend.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=cfg.strip_accents, lowercase=cfg.lowercase
    )
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=cfg.vocab_size_tokens,
        min_frequency=cfg.min_frequency,
        limit_alphabet=cfg.limit_alphabet_chars,
        special_tokens=reserved,
        continuing_subword_prefix=CONTINUATION_PREFIX,
        show_progress=False,
    )
    backend.train_from_iterator(texts, trainer, length=len(texts))
    return backend


def wrap_fast(backend: Tokenizer, specials: SpecialTokens) -> PreTrainedTokenizerFast:
    """The ``transformers`` fast tokenizer around ``backend`` with the five special tokens declared."""
    named = {f"{role}_token": token for role, token in specials.model_dump().items()}  # pad_token=..., ...
    return PreTrainedTokenizerFast(tokenizer_object=backend, **named)


def text_stats(tok: PreTrainedTokenizerFast, texts: list[str]) -> dict[str, float | None]:
    """[UNK] rate (fraction of subword tokens) and fertility (subwords per pre-tokenized word) over ``texts``.

    Words are the tokenizer's own pre-tokens (BertPreTokenizer: whitespace and punctuation splits).
    """
    if not texts:
        return {"docs": 0, "tokens": 0, "words": 0, "unk_tokens": 0, "unk_rate": None, "fertility": None}
    encodings = tok.backend_tokenizer.encode_batch(texts, add_special_tokens=False)
    n_tokens = sum(len(enc.ids) for enc in encodings)
    n_unk = sum(int(np.sum(np.asarray(enc.ids) == tok.unk_token_id)) for enc in encodings)
    n_words = sum(len({w for w in enc.word_ids if w is not None}) for enc in encodings)
    return {
        "docs": len(texts),
        "tokens": n_tokens,
        "words": n_words,
        "unk_tokens": n_unk,
        "unk_rate": n_unk / max(n_tokens, 1),
        "fertility": n_tokens / max(n_words, 1),
    }
