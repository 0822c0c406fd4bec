"""BERT masked-language-model pieces: dynamic 80/10/10 masking (or other shares, e.g. all-[MASK]) and a loss
computed on masked positions only.

Masking follows BERT (Devlin et al. 2019, section 3.1 and appendix C.2) with RoBERTa's dynamic masking (Liu et
al. 2019): a fresh mask is drawn every time a block is seen. Whole-word masking follows the BERT repository's
``create_pretraining_data.py`` (a WordPiece continuation ``##x`` joins the word before it). The loss gathers
the masked positions before the vocabulary projection, as ModernBERT (Warner et al. 2024) and MosaicBERT do.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from tasks.common.models.encoders import mlm_head

COUNT_ROWS = 4096  # blocks counted per pass of unigram_log_probs

IGNORE_INDEX = -100  # label of a position that is not predicted (PyTorch cross_entropy's ignore_index)


@dataclass(frozen=True)
class MaskingVocab:
    """What masking needs from a tokenizer.

    ``special_ids``: ids never selected; ``random_ids``: non-special ids random replacements come from;
    ``continuation``: bool ``(vocab_size,)``, True for WordPiece pieces that continue a word (``##x``).
    """

    mask_token_id: int
    special_ids: torch.Tensor
    random_ids: torch.Tensor
    continuation: torch.Tensor

    @classmethod
    def from_tokenizer(cls, tokenizer) -> MaskingVocab:
        """Build from an HF fast tokenizer; raises ``ValueError`` if it has no mask token."""
        if tokenizer.mask_token_id is None:
            raise ValueError(f"tokenizer {tokenizer.name_or_path!r} has no mask token")
        vocab_size = len(tokenizer)
        special = torch.zeros(vocab_size, dtype=torch.bool)
        special[sorted(set(tokenizer.all_special_ids))] = True
        continuation = torch.zeros(vocab_size, dtype=torch.bool)
        prefix = getattr(tokenizer.backend_tokenizer.model, "continuing_subword_prefix", None) or "##"
        for token, index in tokenizer.get_vocab().items():
            continuation[index] = token.startswith(prefix) and len(token) > len(prefix)
        return cls(
            mask_token_id=int(tokenizer.mask_token_id),
            special_ids=special.nonzero().flatten(),
            random_ids=(~special).nonzero().flatten(),
            continuation=continuation & ~special,
        )


def mask_tokens(
    input_ids: torch.Tensor,
    maskable: torch.Tensor,
    vocab: MaskingVocab,
    mlm_probability: float,
    generator: torch.Generator,
    whole_word_mask: bool = False,
    mask_fraction: float = 0.8,
    random_fraction: float = 0.1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw a BERT mask: select ``mlm_probability`` of maskable tokens; of those, ``mask_fraction`` become [MASK],
    ``random_fraction`` a random token and the rest are kept (BERT: 80/10/10; ``1.0, 0.0``: all-[MASK]).

    ``input_ids`` and ``maskable`` are ``(batch, seq_len)``; ``maskable`` is False at special and pad
    positions, which are therefore never selected. Random replacements are drawn uniformly from
    ``vocab.random_ids`` (never a special token). Returns ``(masked_input_ids, labels)``, both
    ``(batch, seq_len)``, with ``labels = IGNORE_INDEX`` where nothing is predicted. With ``whole_word_mask``
    the selection probability applies per word and all pieces of a selected word are selected. The random draws
    do not depend on the fractions, so two settings differ only in how the same selected tokens are corrupted.
    """
    maskable = maskable & ~torch.isin(input_ids, vocab.special_ids)
    draw = torch.rand(input_ids.shape, generator=generator)
    if whole_word_mask:
        draw = draw.gather(1, _word_start_index(input_ids, maskable, vocab.continuation))
    selected = (draw < mlm_probability) & maskable
    labels = torch.where(selected, input_ids, IGNORE_INDEX)

    action = torch.rand(input_ids.shape, generator=generator)
    to_mask = selected & (action < mask_fraction)
    to_random = selected & (action >= mask_fraction) & (action < mask_fraction + random_fraction)
    random_pick = torch.randint(len(vocab.random_ids), input_ids.shape, generator=generator)
    masked = torch.where(to_mask, vocab.mask_token_id, input_ids)
    masked = torch.where(to_random, vocab.random_ids[random_pick], masked)
    return masked, labels


def _word_start_index(input_ids: torch.Tensor, maskable: torch.Tensor, continuation: torch.Tensor) -> torch.Tensor:
    """``(batch, seq_len)`` index of the first piece of the word each position belongs to.

    A piece starts a word unless it is a ``##`` continuation that follows a maskable piece; so a continuation
    cut off at the start of a packed block is a word of its own.
    """
    prev_maskable = F.pad(maskable[:, :-1], (1, 0), value=False)
    starts = ~(continuation[input_ids] & prev_maskable)
    positions = torch.arange(input_ids.shape[1]).expand_as(input_ids)
    return torch.where(starts, positions, 0).cummax(dim=1).values


def unigram_log_probs(input_ids: torch.Tensor, maskable: torch.Tensor, vocab: MaskingVocab) -> torch.Tensor:
    """Log-probabilities ``(vocab_size,)`` of the unigram (token-frequency) baseline: add-one smoothed counts of
    the maskable tokens of ``input_ids`` (``(n_blocks, seq_len)``) over the non-special ids; special ids (never
    a target) get ``-inf``.
    ``input_ids`` and ``maskable`` are tensors or ``blocks.BlockRows`` (memory-mapped), counted ``COUNT_ROWS``
    blocks at a time.

    Its cross-entropy on masked positions is what a model that ignores context scores (the first plateau of
    MLM training); its argmax is the frequency baseline's answer at every mask.
    """
    counts = torch.zeros(len(vocab.continuation), dtype=torch.long)
    for lo in range(0, len(input_ids), COUNT_ROWS):  # a chunk at a time: memory-mapped blocks stay on disk
        part = torch.bincount(input_ids[lo : lo + COUNT_ROWS][maskable[lo : lo + COUNT_ROWS]], minlength=len(counts))
        counts = F.pad(counts, (0, len(part) - len(counts))) + part
    counts = counts.double() + 1.0
    counts[vocab.special_ids] = 0.0
    return (counts / counts.sum()).log()


class MaskedOnlyMLM(nn.Module):
    """Wraps an HF masked-LM model: encoder on all tokens, MLM head only on the masked positions.

    Gathering before the head skips the ``(batch, seq_len, vocab)`` logits: for small models the vocabulary
    projection is most of the FLOPs. The HF model's own encoder (``base_model``) and MLM head are used, so the
    weights are the HF model's and ``save_pretrained`` of ``self.mlm`` gives a standard checkpoint. With
    ``compile`` the encoder's forward is ``torch.compile``d here, as a function rather than a submodule: the HF
    model itself stays uncompiled (fill-mask runs it at batch 1, which would recompile a compiled model).
    """

    def __init__(self, mlm: nn.Module, compile: bool = False) -> None:
        super().__init__()
        self.mlm = mlm
        self.encode = torch.compile(mlm.base_model.forward) if compile else mlm.base_model.forward

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        positions: torch.Tensor,
        targets: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``input_ids`` (batch, seq_len), ``attention_mask`` (batch, seq_len) or None (attend everywhere),
        ``positions`` (n_masked,) flat indices into ``batch * seq_len`` and ``targets`` (n_masked,) their ids ->
        ``(mean loss, n_correct)``; ``n_correct`` (top-1 hits on the masked positions, a 0-dim tensor) is counted
        in eval mode only, 0 in training mode. Nothing here reads a value back to the host.

        The loss is a sum over masked positions divided by ``max(n_masked, 1)``: 0.0 (not NaN) when nothing
        was selected, and still connected to every parameter, which DDP requires.
        """
        hidden = self.encode(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        logits = mlm_head(self.mlm)(hidden.flatten(0, 1).index_select(0, positions)).float()  # (n_masked, vocab)
        loss = F.cross_entropy(logits, targets, reduction="sum") / max(targets.numel(), 1)
        # accuracy is an evaluation metric: skip the argmax over the vocabulary while training
        n_correct = (logits.argmax(dim=-1) == targets).sum() if not self.training else targets.new_zeros(())
        return loss, n_correct


def masked_positions(labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(positions, targets)`` of ``labels`` (batch, seq_len): flat indices of the predicted tokens and
    their ids, each (n_masked,), as ``MaskedOnlyMLM`` takes them."""
    flat = labels.flatten()
    positions = (flat != IGNORE_INDEX).nonzero().flatten()
    return positions, flat[positions]
