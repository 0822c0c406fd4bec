"""Pretraining's held-out evaluation: masked-token loss (nats) and accuracy on the held-out blocks, with the
unigram baseline of the train blocks on the same masks, overall and per source, summed over ranks.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from tasks.common.runtime.device import autocast
from tasks.pretrain.feed import masked_batch
from tasks.pretrain.hardware import Dist
from tasks.pretrain.mlm import MaskedOnlyMLM, unigram_log_probs

#: Columns of the held-out sums that ``HeldoutEval.evaluate`` adds up per source (and over ranks).
EVAL_SUMS = ("loss_sum", "masked_tokens", "correct", "unigram_nll_sum", "unigram_correct", "blocks")


def eval_summary(sums: torch.Tensor) -> dict[str, float]:
    """Means from one row of ``EVAL_SUMS``: loss and unigram cross-entropy (nats per masked token),
    accuracies, and the counts they rest on."""
    loss_sum, n, correct, unigram_nll, unigram_correct, blocks = sums.tolist()
    n_safe = max(n, 1.0)
    return {
        "loss": loss_sum / n_safe,
        "accuracy": correct / n_safe,
        "unigram_ce": unigram_nll / n_safe,
        "unigram_accuracy": unigram_correct / n_safe,
        "masked_tokens": int(n),
        "blocks": int(blocks),
    }


class HeldoutEval:
    """The held-out evaluation of one pretraining seed's run: ``inner``, the masked-only model the trainer trains
    (switched to eval mode while evaluating), the held-out blocks, and the unigram baseline of the train blocks
    (log-probabilities over ``vocab``, and its most likely token)."""

    def __init__(self, cfg, inner: MaskedOnlyMLM, vocab, train, heldout, env: Dist, seed: int, with_mask: bool) -> None:
        self.cfg, self.inner, self.vocab, self.heldout, self.env, self.seed = cfg, inner, vocab, heldout, env, seed
        self.with_mask = with_mask
        self.unigram = unigram_log_probs(train["input_ids"], train["maskable"], vocab).float()
        self.unigram_argmax = int(self.unigram.argmax())

    @torch.no_grad()
    def evaluate(self) -> dict[str, Any]:
        """Held-out masked-token loss (nats) and accuracy, with the unigram baseline on the same masks, overall
        and per source; this rank's share of the blocks, summed over ranks.

        The masks come from a generator seeded by ``(seed, rank)`` alone, so every evaluation (initial,
        periodic, final) scores the same masked positions. Keys: ``loss``, ``accuracy``, ``unigram_ce``,
        ``unigram_accuracy``, ``masked_tokens``, ``blocks`` and ``by_source`` (the same per source name).
        """
        self.inner.eval()
        generator = torch.Generator().manual_seed(self.seed * 7919 + self.env.rank)
        mine = torch.arange(self.env.rank, len(self.heldout["input_ids"]), self.env.world)
        names = self.heldout["source_names"]
        totals = torch.zeros(len(names), len(EVAL_SUMS), dtype=torch.float64)
        for source in range(len(names)):
            rows = mine[self.heldout["source_id"][mine] == source]
            totals[source, EVAL_SUMS.index("blocks")] = len(rows)
            for batch in rows.split(self.cfg.batch_size_blocks):
                totals[source] += self._eval_sums(batch, generator)
        if self.env.world > 1:
            totals = totals.to(self.env.device)  # nccl reduces CUDA tensors only
            dist.all_reduce(totals)
        self.inner.train()
        totals = totals.cpu()
        by_source = {name: eval_summary(row) for name, row in zip(names, totals) if row[1] > 0}
        return {**eval_summary(totals.sum(dim=0)), "by_source": by_source}

    def _eval_sums(self, rows: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """``EVAL_SUMS`` of one held-out batch (``blocks`` left 0: the caller counts them). The batch is padded
        to ``batch_size_blocks`` with filler rows that predict nothing, so a compiled encoder sees one shape."""
        # a fixed evaluation rate: held-out losses of runs with other training mlm_probability stay comparable
        batch = masked_batch(
            self.heldout,
            rows,
            self.vocab,
            self.cfg.eval_mlm_probability,
            generator,
            self.cfg.whole_word_mask,
            self.with_mask,
            pad_to=self.cfg.batch_size_blocks,
        )
        on_device = batch.to(self.env.device)
        with autocast(self.env.device, self.cfg.bf16):
            # the unwrapped module: DDP's forward is a collective, and ranks may hold unequal shares
            loss, n_correct = self.inner(
                on_device.input_ids, on_device.attention_mask, on_device.positions, on_device.targets
            )
        unigram_nll = -float(self.unigram[batch.targets].sum())
        unigram_hits = int((batch.targets == self.unigram_argmax).sum())
        n = batch.n_masked
        return torch.tensor([float(loss) * n, n, int(n_correct), unigram_nll, unigram_hits, 0], dtype=torch.float64)
