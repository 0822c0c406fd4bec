"""A model variant's vectors of each probe sentence's target word: the variant loaded on its device, the
sentences tokenized in batches with the target's subwords located, and the mean subword vector per layer."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from tqdm import tqdm

from tasks.common.models.encoders import load_encoder, load_tokenizer, model_dir
from tasks.common.runtime.device import autocast, place
from tasks.probe.probe_set import ProbeSentence

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast


def load_variant(variant: str, models: Path, seed: int, device: torch.device) -> tuple[torch.nn.Module, object]:
    """The encoder (eval mode, on ``device``) and fast tokenizer of one variant (``tasks.common.models.encoders``).

    ``random`` is the pretrained config initialised from ``seed`` on the host (the same weights on every
    device) and read with our tokenizer. Raises ``FileNotFoundError`` when the model folder is missing.
    """
    folder = model_dir(variant, models)
    return load_encoder(variant, folder, seed).eval().to(device), load_tokenizer(folder)


@dataclass(frozen=True)
class Batch:
    """Tokenized sentences (host tensors ``(batch, seq_len)``) and the token indices of each target word's
    subwords: as lists, and padded for one gather on the device (``subword_index``)."""

    inputs: dict[str, torch.Tensor]
    target_tokens: list[list[int]]
    subwords: torch.Tensor
    subword_mask: torch.Tensor


def encode(
    tokenizer: PreTrainedTokenizerFast, rows: Sequence[ProbeSentence], batch_size: int, max_seq_len_tokens: int
) -> list[Batch]:
    """Tokenize ``rows`` in batches and locate each target word's subwords.

    The subwords are the non-special tokens whose character offsets overlap the word's span; they must lie
    inside it (a tokenizer that glued the word to a neighbour would mix in other text). Raises
    ``ValueError`` naming the probe line when a sentence is longer than ``max_seq_len_tokens`` or the word
    has no clean subwords.
    """
    batches = []
    for begin in range(0, len(rows), batch_size):
        chunk = rows[begin : begin + batch_size]
        texts = [row.sentence for row in chunk]
        enc = tokenizer(texts, padding=True, return_offsets_mapping=True, return_tensors="pt")
        lengths = enc["attention_mask"].sum(dim=1).tolist()
        for row, length in zip(chunk, lengths, strict=True):
            if length > max_seq_len_tokens:
                raise ValueError(f"line {row.line}: {length} tokens, probe.max_seq_len_tokens is {max_seq_len_tokens}")
        offsets = enc.pop("offset_mapping").tolist()
        targets = [word_tokens(row, offsets[i], enc.word_ids(i)) for i, row in enumerate(chunk)]
        batches.append(Batch(dict(enc), targets, *subword_index(targets)))
    return batches


def subword_index(targets: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """``targets`` (token indices per sentence) as a right-padded long tensor ``(batch, max_subwords)`` and its
    float32 mask (1.0 at a real index, 0.0 at padding)."""
    width = max(len(tokens) for tokens in targets)
    subwords = torch.zeros((len(targets), width), dtype=torch.long)
    mask = torch.zeros((len(targets), width), dtype=torch.float32)
    for row, tokens in enumerate(targets):
        subwords[row, : len(tokens)], mask[row, : len(tokens)] = torch.tensor(tokens), 1.0
    return subwords, mask


def word_tokens(row: ProbeSentence, offsets: list[list[int]], word_ids: list[int | None]) -> list[int]:
    """Indices of the tokens that spell ``row.word`` (special and padding tokens have ``word_id`` None)."""
    tokens = [
        index
        for index, ((start, end), word_id) in enumerate(zip(offsets, word_ids, strict=True))
        if word_id is not None and start < row.end and end > row.start
    ]
    spans = [offsets[index] for index in tokens]
    if not tokens or spans[0][0] != row.start or spans[-1][1] != row.end:
        raise ValueError(f"line {row.line}: tokens at {spans} do not spell {row.word!r} at chars {row.start}-{row.end}")
    return tokens


@torch.no_grad()
def hidden_layers(encoder: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """All hidden states of ``encoder`` as one tensor ``(n_layers + 1, batch, seq_len, hidden)``; index 0 is
    the embedding output."""
    return torch.stack(encoder(**inputs, output_hidden_states=True).hidden_states)


def target_vectors(encoder: torch.nn.Module, batches: Sequence[Batch], device: torch.device, desc: str) -> np.ndarray:
    """Mean subword vector of each target word per layer: float64 ``(n_layers + 1, n_sentences, hidden)``.

    ``encoder`` must already be on ``device``; the vectors stay there until the last batch (one host sync)."""
    per_batch = [batch_vectors(encoder, b, device) for b in tqdm(batches, desc=f"probe {desc}", unit="batch")]
    return torch.cat(per_batch, dim=1).cpu().double().numpy()


@torch.no_grad()
def batch_vectors(encoder: torch.nn.Module, batch: Batch, device: torch.device) -> torch.Tensor:
    """Mean subword vector of each target word of ``batch`` per layer, float32 ``(n_layers + 1, batch,
    hidden)``, left on ``device`` (the caller moves it to the host). Padding subwords are zeroed before the sum
    (adding an exact 0.0 leaves a float sum unchanged); bf16 states (CUDA autocast) are upcast first."""
    inputs = place(batch.inputs, device)
    subwords, mask = place(batch.subwords, device), place(batch.subword_mask, device)
    with autocast(device):
        states = hidden_layers(encoder, inputs).float()
    rows = torch.arange(subwords.shape[0], device=device)[:, None]
    picked = states[:, rows, subwords] * mask[None, :, :, None]  # (n_layers + 1, batch, max_subwords, hidden)
    return picked.sum(dim=2) / mask.sum(dim=1)[None, :, None]
