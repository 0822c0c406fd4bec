"""The data feed of pretraining: which blocks a step takes, their BERT masks, and a prefetching pinned copy.

A step's micro-batches are a pure function of the step number: the data order of epoch ``e`` is a permutation
seeded by ``seed + e`` (an epoch is ``n_blocks // global_batch`` steps, the ragged tail dropped) and the mask of
micro-batch ``m`` of rank ``r`` is drawn from a generator seeded by ``(seed, step, m, r)``. So a resumed run
sees exactly the batches and masks of an uninterrupted one, and the next step's batch can be built while the
device runs this one (``Prefetcher``: one host thread, pinned memory, ``non_blocking`` copies).

The train blocks are memory-mapped (``blocks.open_blocks``: ``BlockRows`` over the tokenize stage's Arrow
shards), so a rank reads from disk only the rows of its own micro-batches (``masked_batch`` indexes them), and
its memory does not grow with the corpus; only the epoch's permutation (8 bytes a block) does.

Masking stays on the host (``mlm.mask_tokens``, bit-identical to the CPU runs before the feed existed); what it
gives the device besides the ids is the flat index of every masked position and its target, so the model
gathers the masked rows with ``index_select`` and never needs the host to count them (a boolean index inside
the forward would be a device-to-host sync every step).
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch

from tasks.common.runtime.device import place
from tasks.pretrain.mlm import IGNORE_INDEX, MaskingVocab, mask_tokens, masked_positions


@dataclass(frozen=True)
class MicroBatch:
    """One forward pass's inputs: ``input_ids`` (batch, seq_len) after masking, ``attention_mask`` (batch,
    seq_len) or None (packed blocks without padding: SDPA then takes its mask-free kernel), ``positions``
    (n_masked,) flat indices into ``batch * seq_len`` of the predicted tokens, ``targets`` (n_masked,) their
    original ids, and ``rows`` (batch,) the block indices (host only; -1 marks a filler row of a padded
    evaluation batch)."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor | None
    positions: torch.Tensor
    targets: torch.Tensor
    rows: torch.Tensor

    @property
    def n_masked(self) -> int:
        """Number of predicted tokens (known on the host: no sync)."""
        return int(self.targets.shape[0])

    def to(self, device: torch.device) -> MicroBatch:
        """This batch on ``device`` (``tasks.common.runtime.device.place``: pinned, non_blocking to CUDA); ``rows``
        stay."""
        moved = place(
            {
                "input_ids": self.input_ids,
                "attention_mask": self.attention_mask,
                "positions": self.positions,
                "targets": self.targets,
            },
            device,
        )
        return MicroBatch(**moved, rows=self.rows)


def needs_attention_mask(*block_sets: dict[str, Any]) -> bool:
    """Whether any block of these sets has padding. Decided once per run, so a compiled encoder sees either a
    mask on every call or on none (switching between ``None`` and a tensor would recompile it)."""
    return not all(bool(blocks["attention_mask"].all()) for blocks in block_sets)


def masked_batch(
    blocks: dict[str, Any],
    rows: torch.Tensor,
    vocab: MaskingVocab,
    probability: float,
    generator: torch.Generator,
    whole_word: bool,
    with_mask: bool,
    pad_to: int = 0,
    corruption: tuple[float, float] = (0.8, 0.1),
) -> MicroBatch:
    """Mask ``rows`` of ``blocks`` (``mask_tokens``; ``corruption``: the shares of the selected tokens made [MASK]
    and random, BERT's 80/10/10 by default); with ``pad_to`` > len(rows), filler rows (copies of the
    first, nothing predicted on them) make the batch ``pad_to`` long, so evaluation batches have one shape."""
    input_ids = blocks["input_ids"][rows]
    masked, labels = mask_tokens(
        input_ids, blocks["maskable"][rows], vocab, probability, generator, whole_word, *corruption
    )
    attention = blocks["attention_mask"][rows]
    filler = max(0, pad_to - len(rows))
    if filler:
        masked = torch.cat([masked, masked[:1].expand(filler, -1)])
        attention = torch.cat([attention, attention[:1].expand(filler, -1)])
        labels = torch.cat([labels, torch.full((filler, labels.shape[1]), IGNORE_INDEX)])
        rows = torch.cat([rows, torch.full((filler,), -1, dtype=rows.dtype)])
    positions, targets = masked_positions(labels)
    return MicroBatch(masked, attention if with_mask else None, positions, targets, rows)


class Prefetcher:
    """Builds the micro-batches of step ``s + 1`` on a host thread while step ``s`` runs: ``get(step)`` returns
    ``make(step)`` moved to ``device`` and starts ``make(step + 1)``. ``make`` must be a pure function of the
    step (it is: ``Trainer._micro_batches``), so prefetching never changes what a step sees."""

    def __init__(self, make, device: torch.device) -> None:
        self.make, self.device = make, device
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="pretrain-feed")
        self.pending: tuple[int, Future] | None = None

    def _build(self, step: int) -> list[MicroBatch]:
        batches = self.make(step)
        if self.device.type == "cuda":  # pinned on the feed thread: the main thread's copy is then asynchronous
            batches = [
                MicroBatch(
                    b.input_ids.pin_memory(),
                    None if b.attention_mask is None else b.attention_mask.pin_memory(),
                    b.positions.pin_memory(),
                    b.targets.pin_memory(),
                    b.rows,
                )
                for b in batches
            ]
        return batches

    def get(self, step: int) -> list[MicroBatch]:
        """The micro-batches of ``step`` on the device."""
        if self.pending is not None and self.pending[0] == step:
            batches = self.pending[1].result()
        else:
            batches = self._build(step)
        self.pending = (step + 1, self.pool.submit(self._build, step + 1))
        return [batch.to(self.device) for batch in batches]

    def close(self) -> None:
        """Stop the feed thread (a prefetched batch past the last step is dropped)."""
        self.pool.shutdown(wait=True, cancel_futures=True)
