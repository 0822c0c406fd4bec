"""probe: do a model's layers separate the senses of an ambiguous word, and does its MLM prefer the acceptable
sentence of a minimal pair (``pairs``)?

For each model variant and each layer (0 = the embedding output, as in ``output_hidden_states``) the target
word's vector in every probe sentence is the mean of its subword vectors. Per word we score

- ``within``: mean cosine over pairs of sentences with the same sense,
- ``across``: mean cosine over pairs with different senses,
- ``separation = within - across`` (cosines of contextual vectors are anisotropic, so only the difference
  is comparable across layers and models),
- ``knn_accuracy``: leave-one-out 1-nearest-neighbour sense accuracy under cosine similarity,

and average each over words (every word weighs the same; ``scores``). The method follows Ethayarajh (2019),
"How contextual are contextualized word representations?", and the 1-NN sense probe of Wiedemann et al.
(2019), "Does BERT make any sense?".

Layer 0 is the embedding output: LayerNorm(token + position + token-type embeddings) in BERT, the token
embedding alone in a model without absolute positions (ModernBERT), where every occurrence of a word has the
same layer-0 vector and its separation is 0 by construction. The baseline a layer's separation must beat is
therefore the shuffled-context control (``control``): each sentence with its context words permuted
(``probe.shuffle_seed``), scored by the same model at the same layer. It keeps the words and the target's
position and removes the sentence; a model that reads its context as a bag of words scores it as high.

The shipped probe set (``tasks/probe/senses.jsonl``) holds 6 hand-picked words and 26 drawn before any
result was seen: WordNet 3.0 nouns whose sense 1 and a later sense in another lexicographer file are each
SemCor-tagged at least twice, in the order of ``sha256("clozeline-senses-2026-12-03:" + word)``, the first 26
whose two senses are unrelated and usable in ordinary sentences (the rule, the walk and each skip:
``tasks/probe/SENSES.md``; the rule's code: ``tests/probe_draw.py``), with 8 hand-written sentences per sense.

What the stage writes besides its metrics (``layers.tsv``, ``targets.tsv``, the sentence cosines, the figure):
``outputs``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tqdm import tqdm

from tasks.common.deps import require_declared
from tasks.common.models.encoders import load_encoder, load_tokenizer, model_dir
from tasks.common.runtime.device import autocast, configure, describe, place, resolve
from tasks.config.model.probe import ProbeParams
from tasks.config.paths import Paths
from tasks.probe.control import shuffled
from tasks.probe.outputs import (
    CONDITIONS,
    log_curves,
    plot_separation,
    target_rows,
    write_cosines,
    write_layer_table,
    write_tsv,
)
from tasks.probe.pairs import run_pairs, string_fields
from tasks.probe.scores import layer_scores, word_cosines, words_of

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

STATIC_BASELINE_NOTE = (
    "layer 0 is the embedding output; every probe sentence is one segment, so vectors of the same word at "
    "layer 0 differ only through position embeddings (token-type embeddings are equal; a model without "
    "absolute positions has none, and its layer-0 separation is 0): its separation measures position, not sense"
)
CONTROL_NOTE = (
    "each probe sentence with the words around the target permuted (sha256 of the seed and line; the target "
    "keeps its index and subwords): the same words without the sentence, scored by the same model and layer"
)
REQUIRED_KEYS = ("word", "sense", "sentence")
COSINES_FILE = "sentence_cosines.json"


@dataclass(frozen=True)
class ProbeSentence:
    """One line of the probe set; ``start``/``end`` are the word's character span in ``sentence``."""

    word: str
    sense: str
    sentence: str
    line: int
    start: int
    end: int


def run(cfg: ProbeParams, paths: Paths, log: Any) -> dict:
    """Probe every variant in ``cfg.variants`` on the probe set and on its shuffled-context control; write
    ``data/probe/`` and return the ``metrics/probe.json`` tree.

    Writes ``layers.tsv`` (variant, condition, word or ``mean``, layer, within, across, separation,
    knn_accuracy), ``targets.tsv`` (the subwords and position of each target word per variant),
    ``sentence_cosines.json`` (every word's pairwise cosines per variant, condition and layer: what the report
    resamples) and ``sense_separation.png``, then scores the minimal pairs of ``cfg.pairs_file``
    (``pairs.run_pairs``: ``pairs.tsv`` and ``minimal_pairs`` in the metrics). Every model runs on
    ``cfg.hardware.device`` (bf16 autocast on CUDA); the metrics name it under ``hardware``. Raises
    ``ValueError`` for a bad probe file, a probe file that is not a dvc.yaml dep of the stage
    (``require_declared``) or an unusable device setting, ``FileNotFoundError`` for a missing model folder.
    """
    require_declared(
        "probe", paths.stage_data("probe"), {"probe.senses_file": cfg.senses_file, "probe.pairs_file": cfg.pairs_file}
    )
    device = resolve(cfg.hardware.device)
    configure(device, cfg.hardware.deterministic)
    sentences = read_probe_set(cfg.senses_file, cfg.min_sentences_per_sense)
    sets = dict(zip(CONDITIONS, (sentences, shuffled(sentences, cfg.shuffle_seed)), strict=True))
    log.info(f"probe: {len(sentences)} sentences, {len(words_of(sentences))} words from {cfg.senses_file}")
    out = paths.stage_data("probe")
    out.mkdir(parents=True, exist_ok=True)
    models: dict[str, dict] = {condition: {} for condition in CONDITIONS}
    cosines: dict[str, dict] = {}
    targets = []
    for variant in cfg.variants:
        encoder, tokenizer = load_variant(variant, paths.models, cfg.random_init_seed, device)
        for condition, rows in sets.items():
            batches = encode(tokenizer, rows, cfg.batch_size_sentences, cfg.max_seq_len_tokens)
            vectors = target_vectors(encoder, batches, device, desc=f"{variant} {condition}")
            models[condition][variant] = layer_scores(vectors, rows)
            cosines.setdefault(variant, {})[condition] = word_cosines(vectors, rows)
            targets += target_rows(variant, tokenizer, batches, rows) if condition == "real" else []
            log_curves(log, variant, models[condition][variant], condition)
    write_layer_table(out / "layers.tsv", models)
    write_tsv(out / "targets.tsv", targets)
    write_cosines(out / COSINES_FILE, sentences, cosines)
    plot_separation(models, out / "sense_separation.png")
    minimal_pairs = run_pairs(
        cfg.pairs_file,
        cfg.pair_variants,
        paths,
        cfg.random_init_seed,
        cfg.pairs_batch_size,
        cfg.min_pairs_per_phenomenon,
        device,
        log,
    )
    log.artifact(out, "probe")
    return {
        "models": models["real"],
        "shuffled_control": {"seed": cfg.shuffle_seed, "note": CONTROL_NOTE, "models": models["shuffled"]},
        "sentence_cosines": (out / COSINES_FILE).as_posix(),
        "probe_set": probe_set_summary(sentences, cfg.senses_file),
        "static_baseline": {"layer": 0, "note": STATIC_BASELINE_NOTE},
        "minimal_pairs": minimal_pairs,
        "hardware": describe(device),
    }


# --- probe set ---------------------------------------------------------------------------------------------


def read_probe_set(path: Path, min_sentences_per_sense: int) -> list[ProbeSentence]:
    """Read and validate a JSONL probe set; raises ``ValueError`` naming the file and line of a bad row.

    Each line is ``{"word", "sense", "sentence"}`` with the word occurring exactly once in the sentence as a
    whole word (case-insensitive). Every word needs at least two senses and every sense at least
    ``min_sentences_per_sense`` sentences. Rows are kept in file order.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: probe set not found (probe.senses_file)")
    rows = []
    for line_no, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if text.strip():
            rows.append(parse_row(text, path, line_no))
    check_counts(rows, path, min_sentences_per_sense)
    return rows


def parse_row(text: str, path: Path, line_no: int) -> ProbeSentence:
    """One JSONL line to a ``ProbeSentence``; raises ``ValueError`` naming ``path:line_no``."""
    where = f"{path}:{line_no}"
    row = string_fields(text, where, REQUIRED_KEYS)
    matches = list(re.finditer(rf"(?<!\w){re.escape(row['word'])}(?!\w)", row["sentence"], re.IGNORECASE))
    if len(matches) != 1:
        raise ValueError(f"{where}: {row['word']!r} occurs {len(matches)} times in the sentence, expected once")
    span = matches[0].span()
    return ProbeSentence(row["word"], row["sense"], row["sentence"], line_no, span[0], span[1])


def check_counts(rows: Sequence[ProbeSentence], path: Path, min_sentences_per_sense: int) -> None:
    """Raise ``ValueError`` if a word has fewer than 2 senses or a sense too few sentences."""
    if not rows:
        raise ValueError(f"{path}: probe set is empty")
    per_sense = Counter((row.word, row.sense) for row in rows)
    for (word, sense), count in sorted(per_sense.items()):
        if count < min_sentences_per_sense:
            raise ValueError(
                f"{path}: word {word!r} sense {sense!r} has {count} sentences, "
                f"probe.min_sentences_per_sense is {min_sentences_per_sense}"
            )
    senses = Counter(word for word, _ in per_sense)
    for word, count in sorted(senses.items()):
        if count < 2:
            raise ValueError(f"{path}: word {word!r} has {count} sense; a sense probe needs at least 2")


def probe_set_summary(rows: Sequence[ProbeSentence], path: Path) -> dict:
    """Counts of the probe set for the metrics file."""
    return {
        "file": str(path),
        "sentences": len(rows),
        "words": len(words_of(rows)),
        "senses": len({(row.word, row.sense) for row in rows}),
    }


# --- models ------------------------------------------------------------------------------------------------


def load_variant(variant: str, models: Path, seed: int, device: torch.device) -> tuple[torch.nn.Module, object]:
    """The encoder (eval mode, on ``device``) and fast tokenizer of one variant (``tasks.common.models.encoders``).

    ``random`` is the pretrained config initialised from ``seed`` on the host (the same weights on every
    device) and read with our tokenizer. Raises ``FileNotFoundError`` when the model folder is missing.
    """
    folder = model_dir(variant, models)
    return load_encoder(variant, folder, seed).eval().to(device), load_tokenizer(folder)


# --- vectors -----------------------------------------------------------------------------------------------


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
