"""The kept vocabulary of ``tokenizer.vocab_from: train_once`` (the ``tokenizer`` stage is ``tasks/tokenizer.py``).

A scheduled run over a growing corpus retrains WordPiece on every night's train split with ``train``, so the
vocabulary moves: ``tokenize`` then re-encodes every text (its cache is keyed by the tokenizer), and a model
carried from the night before (``pretrain.init_from``) no longer matches the tokenizer (its embedding rows are
another vocabulary's). ``train_once`` trains on the first run and keeps that vocabulary in
``<data>/tokenizer_vocab/`` (a DVC output with ``persist: true``, like the split ledger), with the params it was
trained under. Later runs load it, and measure it on their text ([UNK] rate and fertility in the metrics show the
drift), so the tokenizer's bytes, the tokenize cache and the model's rows stay valid night after night.

Trained once on a train split, it never saw evaluation text: with ``split.ledger`` (the scheduled profile) a
document in train stays in train, so the first night's train docs are train docs on every later night.

Rule. The kept vocabulary is used when ``vocab.txt`` and ``trained.json`` read whole, ``vocab.txt`` has the
sha256 recorded in ``trained.json`` (any edit, a BOM included, is caught), its tokens are distinct with the five
special tokens at ids 0-4, and ``trained.json`` holds this run's ``training_params`` (vocab size, min frequency,
alphabet limit, case and accent handling, special tokens, pretrain sources); otherwise the stage trains on this
run's train split and replaces both, and the log and the MLflow tags (``tokenizer.vocab``,
``tokenizer.vocab_reason``) say why, before training.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from tasks.common.files.stamped import one_line, swapped_in
from tasks.config.corpus.tokenizer import TokenizerParams

VOCAB, TRAINED = "vocab.txt", "trained.json"


def training_params(cfg: TokenizerParams) -> dict[str, Any]:
    """The params a trained vocabulary depends on: a kept one made under others is trained again."""
    return cfg.model_dump(
        mode="json",
        include={
            "pretrain_sources",
            "vocab_size_tokens",
            "min_frequency",
            "limit_alphabet_chars",
            "lowercase",
            "strip_accents",
            "special_tokens",
        },
    )


def load(folder: Path, cfg: TokenizerParams) -> tuple[dict[str, int] | None, str, dict[str, Any]]:
    """``(vocab {token: id}, why, how it was trained)`` of the kept vocabulary at ``folder``; ``(None, why not,
    {})`` when there is none, it is damaged, or it was trained under other params."""
    if not (folder / VOCAB).is_file():
        return None, f"no kept vocabulary at {folder / VOCAB}: trained on this run's train split", {}
    path = folder / TRAINED
    try:
        trained = json.loads(path.read_text(encoding="utf-8"))
        path = folder / VOCAB
        data = path.read_bytes()
        tokens = data.decode("utf-8").split("\n")[:-1]
    except (OSError, ValueError) as err:  # missing, not UTF-8, not JSON
        return None, f"{path}: {one_line(err)}: trained again", {}
    if not isinstance(trained, dict) or trained.get("params") != training_params(cfg):
        return None, f"{folder / TRAINED}: trained under other tokenizer params: trained again", {}
    if hashlib.sha256(data).hexdigest() != trained.get("sha256") or not isinstance(trained.get("train_docs"), int):
        return None, f"{folder / VOCAB}: not the file recorded in {TRAINED} (sha256): trained again", {}
    vocab = {token: i for i, token in enumerate(tokens)}
    if len(vocab) != len(tokens) or tokens[:5] != cfg.special_tokens.in_order():
        return None, f"{folder / VOCAB}: repeated tokens or the special tokens not at ids 0-4: trained again", {}
    return vocab, f"kept from the run of {trained['train_docs']} train docs", trained


def save(folder: Path, vocab: dict[str, int], cfg: TokenizerParams, train_docs: int) -> dict[str, Any]:
    """Write ``vocab`` (one token a line, in id order: the BERT ``vocab.txt`` format) and how it was trained,
    swapped in by rename; returns that record."""
    if sorted(vocab.values()) != list(range(len(vocab))):
        raise ValueError(f"tokenizer: the trained vocabulary's ids are not 0..{len(vocab) - 1}: cannot keep it")
    text = "".join(f"{token}\n" for token, _ in sorted(vocab.items(), key=lambda kv: kv[1])).encode("utf-8")
    trained = {
        "params": training_params(cfg),
        "vocab_size": len(vocab),
        "train_docs": train_docs,
        "sha256": hashlib.sha256(text).hexdigest(),
    }
    with swapped_in(folder) as tmp:
        (tmp / VOCAB).write_bytes(text)
        (tmp / TRAINED).write_text(json.dumps(trained, sort_keys=True, indent=1) + "\n", encoding="utf-8")
    return trained
