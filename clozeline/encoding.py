"""The evaluated model's input, rebuilt for one document or one sentence: the cut finetune applied
(``clozeline.truncation``) and, for a tagger, the words' overlapping windows
(``clozeline.alignment``). ``clozeline.predict``'s pipelines call these in ``preprocess``; the ``block``
argument is an export's checked recipe (``clozeline.recipe.recipe``)."""

from __future__ import annotations

from typing import Any

import torch

from clozeline import alignment
from clozeline.truncation import cut, cut_pair


def encode_document(tokenizer, inputs: str | dict, block: dict) -> dict[str, torch.Tensor]:
    """One document (a string) or pair (``{"text", "text_pair"}``) as the evaluated model read it: tokenized
    whole with its specials, then cut (``cut`` / ``cut_pair``); tensors of shape (1, length)."""
    if isinstance(inputs, dict):
        enc = tokenizer(
            inputs["text"], inputs["text_pair"], add_special_tokens=True, return_token_type_ids=True, verbose=False
        )
        ids, types = cut_pair(list(enc["input_ids"]), list(enc["token_type_ids"]), block["max_seq_len_tokens"])
        extra = {"token_type_ids": torch.tensor([types])}
    else:
        ids = cut(
            list(tokenizer(inputs, add_special_tokens=True, verbose=False)["input_ids"]),
            block["max_seq_len_tokens"],
            block["truncation"],
            block["head_tokens"],
        )
        extra = {}
    return {"input_ids": torch.tensor([ids]), "attention_mask": torch.ones(1, len(ids), dtype=torch.long), **extra}


def encode_words(tokenizer, words: list[str], block: dict) -> dict[str, Any]:
    """A sentence's windows as the evaluated tagger read them: the words tokenized as given, a word without
    subwords replaced by ``[UNK]``, a word longer than a window cut to its first subwords, then overlapping
    windows of ``window_tokens`` (``[CLS]`` and ``[SEP]`` included), padded into one batch. ``words``: at least one."""
    capacity = block["window_tokens"] - 2
    enc = tokenizer(words, is_split_into_words=True, add_special_tokens=False)
    ids, word_ids = list(enc["input_ids"]), enc.word_ids()
    missing = alignment.missing_words(word_ids, len(words))
    if missing:
        fixed = [tokenizer.unk_token if i in missing else word for i, word in enumerate(words)]
        enc = tokenizer(fixed, is_split_into_words=True, add_special_tokens=False)
        ids, word_ids = list(enc["input_ids"]), enc.word_ids()
    ids, word_ids, _ = alignment.cap_word_subwords(ids, list(word_ids), capacity)
    counts = [0] * len(words)
    for word in word_ids:
        counts[word] += 1
    windows = alignment.plan_windows(counts, capacity, block["window_overlap_tokens"])
    pieces = alignment.window_encodings(ids, word_ids, windows, tokenizer.cls_token_id, tokenizer.sep_token_id)
    width = max(len(p[0]) for p in pieces)
    input_ids = torch.full((len(pieces), width), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(pieces), width), dtype=torch.long)
    for row, (window_ids, _) in enumerate(pieces):
        input_ids[row, : len(window_ids)], mask[row, : len(window_ids)] = torch.tensor(window_ids), 1
    return {"input_ids": input_ids, "attention_mask": mask, "word_ids": [p[1] for p in pieces], "words": list(words)}
