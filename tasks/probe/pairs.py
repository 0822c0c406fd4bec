"""Behavioural minimal pairs: does a masked LM prefer the acceptable sentence of a pair that differs in one place?

Each pair of ``probe.pairs_file`` (JSONL ``{phenomenon, good, bad}``) is scored by pseudo-log-likelihood
(Salazar et al. 2020, "Masked Language Model Scoring"): every non-special token is masked in turn and the
log-probability the model gives the original token at the mask is summed over the sentence (nats; [CLS] and
[SEP] are never masked; a word of several pieces is scored piece by piece, which favours multi-piece words
whose pieces predict each other: Kauf & Ivanova 2023). A model passes a pair when ``PLL(good) > PLL(bad)``; a tie
is a fail. Accuracy per phenomenon is the share of pairs passed (the report gives it a Clopper-Pearson interval
over pairs).

Variants: any model with an MLM head (``pretrained`` or ``adapted``, whatever ``<models>/pretrained`` holds,
and ``random``, the same config freshly initialised, which should sit near 50%), and ``unigram``: the sum of
add-one smoothed log unigram probabilities of the tokens, counted on the pretraining train blocks. The unigram
score is the frequency shortcut: on a pair whose sentences have the same token count it picks the more
frequent word. A pair whose sentences have different token counts is length-biased under a summed score
(every extra token costs about log(vocab) nats), so each variant's tokenizer reports how many pairs are
``length_mismatched``; the random-init control is near 50% only on a length-matched set.
"""

from __future__ import annotations

import csv
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import datasets
import numpy as np
import torch
from tqdm import tqdm

from tasks.common.files.ioerrors import reading
from tasks.common.models.encoders import (
    load_masked_lm,
    load_tokenizer,
    mlm_head,
    model_dir,
    pretrained_dir,
    tokenization,
)
from tasks.common.runtime.device import autocast, place
from tasks.config.paths import Paths

REQUIRED_KEYS = ("phenomenon", "good", "bad")
UNIGRAM = "unigram"  # the frequency-shortcut variant (no network)
DECIMALS = 6  # rounding of every PLL written out, so reruns are byte-identical
METHOD = (
    "pseudo-log-likelihood (Salazar et al. 2020): each non-special token masked in turn, log-probabilities "
    "of the original tokens summed (nats); a pair passes when PLL(good) > PLL(bad), ties fail"
)


@dataclass(frozen=True)
class Pair:
    """One line of the minimal-pair set: ``good`` is the acceptable sentence, ``bad`` the unacceptable one."""

    phenomenon: str
    good: str
    bad: str
    line: int


def run_pairs(
    pairs_file: Path,
    variants: Sequence[str],
    paths: Paths,
    seed: int,
    batch_size: int,
    min_pairs: int,
    device: torch.device,
    log,
) -> dict:
    """Score every pair with every variant, the masked LMs on ``device``; write ``data/probe/pairs.tsv``;
    returns ``metrics.minimal_pairs``.

    Raises ``ValueError`` naming the file and line of a bad pair, ``FileNotFoundError`` for a missing model or
    pretraining data.
    """
    pairs = read_pairs(pairs_file, min_pairs)
    log.info(f"probe: {len(pairs)} minimal pairs, {len(phenomena_of(pairs))} phenomena from {pairs_file}")
    rows, out = [], {}
    for variant in variants:
        scorer = Scorer.for_variant(variant, paths, seed, device)
        good, bad = (
            scorer.score([getattr(p, side) for p in pairs], batch_size, f"pairs {variant} {side}")
            for side in ("good", "bad")
        )
        mismatched = [len(g) != len(b) for g, b in zip(good.tokens, bad.tokens, strict=True)]
        passed = good.pll > bad.pll
        out[variant] = accuracy_table(pairs, passed, good.pll == bad.pll, mismatched)
        rows += pair_rows(variant, pairs, good, bad, passed)
        log.metrics({f"pairs/{variant}": {p: t["accuracy"] for p, t in out[variant]["per_phenomenon"].items()}})
    write_rows(paths.stage_data("probe") / "pairs.tsv", rows)
    return {
        "file": str(pairs_file),
        "method": METHOD,
        "pairs": len(pairs),
        "phenomena": dict(Counter(p.phenomenon for p in pairs)),
        "items": [{"line": p.line, "phenomenon": p.phenomenon} for p in pairs],
        "variants": out,
    }


# --- pair set ----------------------------------------------------------------------------------------------


def read_pairs(path: Path, min_pairs: int) -> list[Pair]:
    """Read and validate a JSONL minimal-pair set, in file order.

    Raises ``FileNotFoundError`` when the file is missing and ``ValueError`` naming ``path:line`` for a line
    that is not a JSON object with exactly the keys ``phenomenon, good, bad`` (non-empty strings, good != bad),
    or naming the phenomenon that has fewer than ``min_pairs`` pairs.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: minimal-pair set not found (probe.pairs_file)")
    pairs = [
        parse_pair(text, f"{path}:{n}", n)
        for n, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if text.strip()
    ]
    if not pairs:
        raise ValueError(f"{path}: minimal-pair set is empty")
    for phenomenon, count in sorted(Counter(p.phenomenon for p in pairs).items()):
        if count < min_pairs:
            raise ValueError(
                f"{path}: phenomenon {phenomenon!r} has {count} pairs, probe.min_pairs_per_phenomenon is {min_pairs}"
            )
    return pairs


def string_fields(text: str, where: str, keys: Sequence[str]) -> dict[str, str]:
    """One JSONL line that must be an object with exactly ``keys``, each a non-empty string (the probe set and
    the pair set); raises ``ValueError`` naming ``where`` (``path:line``)."""
    try:
        row = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{where}: not valid JSON ({err.msg})") from None
    if not isinstance(row, dict) or sorted(row) != sorted(keys):
        raise ValueError(f"{where}: expected exactly the keys {list(keys)}")
    if not all(isinstance(row[key], str) and row[key].strip() for key in keys):
        raise ValueError(f"{where}: {', '.join(keys)} must be non-empty strings")
    return row


def parse_pair(text: str, where: str, line: int) -> Pair:
    """One JSONL line to a ``Pair``; raises ``ValueError`` naming ``where`` (``path:line``)."""
    row = string_fields(text, where, REQUIRED_KEYS)
    if row["good"] == row["bad"]:
        raise ValueError(f"{where}: good and bad are the same sentence")
    return Pair(row["phenomenon"], row["good"], row["bad"], line)


def phenomena_of(pairs: Sequence[Pair]) -> list[str]:
    """The phenomena in order of first appearance."""
    return list(dict.fromkeys(p.phenomenon for p in pairs))


# --- scoring -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scores:
    """Per sentence: its content token ids (specials excluded) and its PLL in nats, float64 ``(n,)``."""

    tokens: list[list[int]]
    pll: np.ndarray


class Scorer:
    """Scores sentences with one variant: a masked LM by PLL, or the unigram baseline by summed log-frequency."""

    def __init__(
        self, tokenizer, model: torch.nn.Module | None, unigram: np.ndarray | None, device: torch.device
    ) -> None:
        """``model`` (a masked LM in eval mode, or None for the unigram baseline) must already be on ``device``."""
        self.tokenizer, self.model, self.unigram, self.device = tokenizer, model, unigram, device

    @classmethod
    def for_variant(cls, variant: str, paths: Paths, seed: int, device: torch.device) -> Scorer:
        """``unigram``: log-probabilities from the pretraining train blocks, read with the tokenizer of
        ``<models>/pretrained``; any other variant: its masked LM (eval mode, moved to ``device``) and tokenizer
        from ``model_dir`` (``random``: the pretrained config initialised from ``seed`` on the host, so every
        device starts from the same weights)."""
        if variant == UNIGRAM:
            folder = pretrained_dir(paths.models)
            tokenizer = load_tokenizer(folder)
            blocks = paths.stage_data("tokenize") / "pretrain" / tokenization("pretrained", paths.models) / "train"
            return cls(tokenizer, None, unigram_log_probs(blocks, len(tokenizer)), device)
        folder = model_dir(variant, paths.models)
        return cls(load_tokenizer(folder), load_masked_lm(variant, folder, seed).eval().to(device), None, device)

    def score(self, sentences: Sequence[str], batch_size: int, desc: str) -> Scores:
        """PLL (or unigram log-likelihood) of each sentence, nats, with its content token ids."""
        enc = self.tokenizer(list(sentences), return_special_tokens_mask=True)
        tokens = [
            [t for t, special in zip(ids, mask, strict=True) if not special]
            for ids, mask in zip(enc["input_ids"], enc["special_tokens_mask"], strict=True)
        ]
        if self.model is None:
            return Scores(tokens, np.array([self.unigram[t].sum() for t in tokens], dtype=np.float64))
        pll = pseudo_log_likelihoods(
            self.model,
            enc["input_ids"],
            enc["special_tokens_mask"],
            self.tokenizer.mask_token_id,
            self.tokenizer.pad_token_id,
            batch_size,
            self.device,
            desc,
        )
        return Scores(tokens, pll)


def masked_copies(
    input_ids: Sequence[Sequence[int]], special_mask: Sequence[Sequence[int]], mask_id: int
) -> list[tuple[int, int, list[int]]]:
    """``(sentence index, masked position, ids with that position replaced by mask_id)`` for every content
    (non-special) token of every sentence, in sentence then position order."""
    copies = []
    for i, (ids, special) in enumerate(zip(input_ids, special_mask, strict=True)):
        for pos, is_special in enumerate(special):
            if not is_special:
                copies.append((i, pos, [*ids[:pos], mask_id, *ids[pos + 1 :]]))
    return copies


def pseudo_log_likelihoods(
    model: torch.nn.Module,
    input_ids: Sequence[Sequence[int]],
    special_mask: Sequence[Sequence[int]],
    mask_id: int,
    pad_id: int,
    batch_size: int,
    device: torch.device,
    desc: str = "pll",
) -> np.ndarray:
    """PLL of each sentence (Salazar et al. 2020, eq. 1): ``sum_t log P(w_t | W with w_t masked)``, nats.

    ``input_ids``: one id list per sentence, specials included; ``special_mask``: 1 at [CLS]/[SEP] (never
    masked). The masked copies of all sentences go through ``model`` (an ``*ForMaskedLM`` in eval mode, already
    on ``device``) in batches of ``batch_size`` copies, right-padded with ``pad_id`` under an ``attention_mask``.
    Returns float64 ``(n_sentences,)``; a sentence with no content token scores 0. Raises ``TypeError`` when
    ``model`` has no MLM head (``mlm_parts``).
    """
    encoder, head = mlm_parts(model)
    copies = masked_copies(input_ids, special_mask, mask_id)
    scores = []  # stays on the device: one host sync at the end instead of one per batch
    for start in tqdm(range(0, len(copies), batch_size), desc=desc, unit="batch", mininterval=5):
        batch = collate(copies[start : start + batch_size], input_ids, pad_id)
        scores.append(masked_log_probs(encoder, head, batch, device))
    totals = np.zeros(len(input_ids), dtype=np.float64)
    if copies:
        np.add.at(totals, [i for i, _, _ in copies], torch.cat(scores).cpu().double().numpy())
    return totals


def mlm_parts(model: torch.nn.Module) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The encoder (``model.base_model``) and MLM head (``tasks.common.models.encoders.mlm_head``) of an HF masked LM.
    Raises ``TypeError`` for a model without an MLM head."""
    return model.base_model, mlm_head(model)


def collate(
    chunk: Sequence[tuple[int, int, list[int]]], input_ids: Sequence[Sequence[int]], pad_id: int
) -> dict[str, torch.Tensor]:
    """Host tensors of a chunk of ``masked_copies``: ``input_ids`` and ``attention_mask`` ``(batch, seq_len)``
    (right-padded with ``pad_id``), ``positions`` (the masked position) and ``targets`` (the original id there),
    both ``(batch,)``."""
    width = max(len(ids) for _, _, ids in chunk)
    ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(chunk), width), dtype=torch.long)
    for row, (_, _, masked) in enumerate(chunk):
        ids[row, : len(masked)], attention[row, : len(masked)] = torch.tensor(masked), 1
    return {
        "input_ids": ids,
        "attention_mask": attention,
        "positions": torch.tensor([pos for _, pos, _ in chunk], dtype=torch.long),
        "targets": torch.tensor([input_ids[i][pos] for i, pos, _ in chunk], dtype=torch.long),
    }


@torch.no_grad()
def masked_log_probs(
    encoder: torch.nn.Module, head: torch.nn.Module, batch: dict[str, torch.Tensor], device: torch.device
) -> torch.Tensor:
    """``log P(target | masked copy)`` of each copy of ``batch`` (``collate``), float64 ``(batch,)`` nats, left
    on ``device`` (the caller moves it to the host).

    The encoder reads every token but the head runs at the masked position only: the ``(batch, seq_len,
    vocab)`` logits of the full forward are never built, and the vocabulary projection is most of a small
    model's FLOPs. The log-softmax is taken in float64 outside autocast, so bf16 rounds the logits only.
    """
    batch = place(batch, device)
    with autocast(device):
        hidden = encoder(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])[0]
        rows = torch.arange(hidden.shape[0], device=device)
        logits = head(hidden[rows, batch["positions"]])
    log_probs = torch.log_softmax(logits.double(), dim=-1)
    return log_probs.gather(1, batch["targets"][:, None])[:, 0]


def unigram_log_probs(blocks: Path, vocab_size: int) -> np.ndarray:
    """Add-one smoothed log unigram probabilities ``(vocab_size,)`` of the non-special tokens of the
    pretraining train blocks (``datasets`` folder with ``input_ids`` and ``special_tokens_mask``).

    Raises ``FileNotFoundError`` naming the folder when it is absent (run the tokenize stage).
    """
    if not Path(blocks).is_dir():
        raise FileNotFoundError(
            f"{blocks}: pretraining blocks not found (the unigram variant counts them; run the tokenize stage)"
        )
    with reading(blocks):
        table = datasets.load_from_disk(str(blocks)).with_format("numpy")
    counts = np.ones(vocab_size, dtype=np.float64)
    for batch in table.iter(batch_size=1024):
        ids = np.concatenate(list(batch["input_ids"]))
        content = np.concatenate(list(batch["special_tokens_mask"])) == 0
        counts += np.bincount(ids[content], minlength=vocab_size)[:vocab_size]
    return np.log(counts / counts.sum())


# --- outputs -----------------------------------------------------------------------------------------------


def accuracy_table(pairs: Sequence[Pair], passed: np.ndarray, ties: np.ndarray, mismatched: list[bool]) -> dict:
    """Per phenomenon and over all pairs: ``pairs, passed, ties, accuracy, length_mismatched``, plus the
    per-pair outcomes ``passed`` (0/1, aligned with ``metrics.minimal_pairs.items``) for paired claims."""

    def counts(index: list[int]) -> dict:
        hits = int(passed[index].sum())
        return {
            "pairs": len(index),
            "passed": hits,
            "ties": int(ties[index].sum()),
            "accuracy": round(hits / len(index), DECIMALS),
            "length_mismatched": sum(mismatched[i] for i in index),
        }

    per = {name: counts([i for i, p in enumerate(pairs) if p.phenomenon == name]) for name in phenomena_of(pairs)}
    return {"all": counts(list(range(len(pairs)))), "per_phenomenon": per, "passed": [int(x) for x in passed]}


def pair_rows(variant: str, pairs: Sequence[Pair], good: Scores, bad: Scores, passed: np.ndarray) -> list[dict]:
    """One TSV row per pair and variant: token counts, both PLLs and the outcome."""
    return [
        {
            "variant": variant,
            "phenomenon": p.phenomenon,
            "line": p.line,
            "good_tokens": len(good.tokens[i]),
            "bad_tokens": len(bad.tokens[i]),
            "pll_good": f"{good.pll[i]:.{DECIMALS}f}",
            "pll_bad": f"{bad.pll[i]:.{DECIMALS}f}",
            "passed": int(passed[i]),
        }
        for i, p in enumerate(pairs)
    ]


def write_rows(path: Path, rows: list[dict]) -> None:
    """``pairs.tsv``: tab-separated with a header, in variant then file order."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]), delimiter="\t", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
