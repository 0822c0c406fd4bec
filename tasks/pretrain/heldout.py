"""Pretraining's held-out evaluation: masked-token loss (nats) and accuracy on the held-out blocks, with the
unigram baseline of the train blocks on the same masks, overall and per source, summed over ranks; on request
(the final evaluation) also the counts of every held-out block, so the report resamples blocks, not tokens.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from tasks.common.models.encoders import mlm_head
from tasks.common.runtime.device import autocast
from tasks.pretrain.feed import masked_batch
from tasks.pretrain.hardware import Dist
from tasks.pretrain.mlm import MaskedOnlyMLM, unigram_log_probs

#: Columns of the held-out sums that ``HeldoutEval.evaluate`` adds up per source (and over ranks).
EVAL_SUMS = ("loss_sum", "masked_tokens", "correct", "unigram_nll_sum", "unigram_correct", "blocks")
#: Counts of each held-out block (``evaluate(per_block=True)``): masked positions, the model's and the unigram's hits.
PER_BLOCK = ("masked", "correct", "unigram_correct")


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
    def evaluate(self, per_block: bool = False) -> dict[str, Any]:
        """Held-out masked-token loss (nats) and accuracy, with the unigram baseline on the same masks, overall
        and per source; this rank's share of the blocks, summed over ranks.

        The masks come from a generator seeded by ``(seed, rank)`` alone, so every evaluation (initial,
        periodic, final) scores the same masked positions. Keys: ``loss``, ``accuracy``, ``unigram_ce``,
        ``unigram_accuracy``, ``masked_tokens``, ``blocks`` and ``by_source`` (the same per source name); with
        ``per_block``, ``per_block`` = ``{masked, correct, unigram_correct}``, one count per held-out block in
        block order (the blocks are the held-out's resampling units: tokens of one block are not independent).
        """
        self.inner.eval()
        generator = torch.Generator().manual_seed(self.seed * 7919 + self.env.rank)
        mine = torch.arange(self.env.rank, len(self.heldout["input_ids"]), self.env.world)
        names = self.heldout["source_names"]
        totals = torch.zeros(len(names), len(EVAL_SUMS), dtype=torch.float64)
        blocks = torch.zeros(len(self.heldout["input_ids"]), len(PER_BLOCK), dtype=torch.float64)
        for source in range(len(names)):
            rows = mine[self.heldout["source_id"][mine] == source]
            totals[source, EVAL_SUMS.index("blocks")] = len(rows)
            for batch in rows.split(self.cfg.batch_size_blocks):
                sums, counts = self._eval_sums(batch, generator, per_block)
                totals[source] += sums
                blocks[batch] = counts
        if self.env.world > 1:
            totals, blocks = totals.to(self.env.device), blocks.to(self.env.device)  # nccl reduces CUDA tensors only
            dist.all_reduce(totals)
            dist.all_reduce(blocks)
        self.inner.train()
        totals = totals.cpu()
        by_source = {name: eval_summary(row) for name, row in zip(names, totals) if row[1] > 0}
        out = {**eval_summary(totals.sum(dim=0)), "by_source": by_source}
        if per_block:
            out["per_block"] = {k: [int(v) for v in blocks.cpu()[:, i].tolist()] for i, k in enumerate(PER_BLOCK)}
        return out

    def _eval_sums(
        self, rows: torch.Tensor, generator: torch.Generator, per_block: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``EVAL_SUMS`` of one held-out batch (``blocks`` left 0: the caller counts them) and, with ``per_block``,
        ``PER_BLOCK`` of each of its rows (else zeros). The batch is padded to ``batch_size_blocks`` with filler rows
        that predict nothing, so a compiled encoder sees one shape."""
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
            if per_block:  # the same computation as the forward, keeping each position's hit
                loss, hits = self._loss_and_hits(on_device)
                n_correct = hits.sum()
            else:  # the unwrapped module: DDP's forward is a collective, and ranks may hold unequal shares
                loss, n_correct = self.inner(
                    on_device.input_ids, on_device.attention_mask, on_device.positions, on_device.targets
                )
        unigram_nll = -float(self.unigram[batch.targets].sum())
        unigram_hits = int((batch.targets == self.unigram_argmax).sum())
        n = batch.n_masked
        sums = torch.tensor([float(loss) * n, n, int(n_correct), unigram_nll, unigram_hits, 0], dtype=torch.float64)
        counts = torch.zeros(len(rows), len(PER_BLOCK), dtype=torch.float64)
        if per_block:
            row = batch.positions // batch.input_ids.shape[1]  # flat positions -> the batch row (a held-out block)
            hits = hits.cpu()
            for i, column in enumerate((torch.ones_like(hits), hits, batch.targets == self.unigram_argmax)):
                counts[:, i].index_add_(0, row, column.double())
        return sums, counts

    def _loss_and_hits(self, batch) -> tuple[torch.Tensor, torch.Tensor]:
        """``MaskedOnlyMLM.forward``'s mean loss, step by step (the same encoder call, MLM head and sum), with the
        top-1 hit ``(n_masked,)`` of each masked position instead of their count."""
        hidden = self.inner.encode(input_ids=batch.input_ids, attention_mask=batch.attention_mask).last_hidden_state
        logits = mlm_head(self.inner.mlm)(hidden.flatten(0, 1).index_select(0, batch.positions)).float()
        loss = F.cross_entropy(logits, batch.targets, reduction="sum") / max(batch.targets.numel(), 1)
        return loss, logits.argmax(dim=-1) == batch.targets
