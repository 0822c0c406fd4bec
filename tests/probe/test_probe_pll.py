"""Masked-only PLL scoring (the MLM head at the masked position only) against the full forward's logits, for
tiny random BERT, pre-LayerNorm RoBERTa and ModernBERT masked LMs; ``full_logits_pll`` is the reference the
probe tests compare the stage's ``pairs.tsv`` with."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
import torch
from transformers import (
    BertConfig,
    BertForMaskedLM,
    ModernBertConfig,
    ModernBertForMaskedLM,
    RobertaPreLayerNormConfig,
    RobertaPreLayerNormForMaskedLM,
)

from tasks.probe import pairs

CPU = torch.device("cpu")
VOCAB, PAD, CLS, SEP, MASK = 97, 0, 2, 3, 4  # ids 5.. are words
SHAPE = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)


@torch.no_grad()
def full_logits_pll(
    model: torch.nn.Module,
    input_ids: Sequence[Sequence[int]],
    special_mask: Sequence[Sequence[int]],
    mask_id: int,
    pad_id: int,
    batch_size: int,
) -> np.ndarray:
    """PLL per sentence, float64 ``(n_sentences,)`` nats, as the stage computed it before masked-only scoring:
    ``model(...).logits`` ``(batch, seq_len, vocab)`` of right-padded masked copies, one position kept per copy."""
    copies = pairs.masked_copies(input_ids, special_mask, mask_id)
    totals = np.zeros(len(input_ids), dtype=np.float64)
    for start in range(0, len(copies), batch_size):
        chunk = copies[start : start + batch_size]
        width = max(len(ids) for _, _, ids in chunk)
        ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
        attention = torch.zeros((len(chunk), width), dtype=torch.long)
        for row, (_, _, masked) in enumerate(chunk):
            ids[row, : len(masked)], attention[row, : len(masked)] = torch.tensor(masked), 1
        logits = model(input_ids=ids, attention_mask=attention).logits
        rows, positions = torch.arange(len(chunk)), torch.tensor([pos for _, pos, _ in chunk])
        log_probs = torch.log_softmax(logits[rows, positions].double(), dim=-1)
        targets = torch.tensor([input_ids[i][pos] for i, pos, _ in chunk])
        np.add.at(totals, [i for i, _, _ in chunk], log_probs[rows, targets].numpy())
    return totals


def tiny_masked_lm(kind: str, seed: int = 0) -> torch.nn.Module:
    """A 2-layer random masked LM of ``kind`` (eval mode) over ``VOCAB`` ids."""
    torch.manual_seed(seed)
    if kind == "bert":
        return BertForMaskedLM(BertConfig(max_position_embeddings=64, **SHAPE)).eval()
    if kind == "roberta-prelayernorm":  # positions start after pad_token_id
        return RobertaPreLayerNormForMaskedLM(
            RobertaPreLayerNormConfig(max_position_embeddings=70, pad_token_id=PAD, **SHAPE)
        ).eval()
    config = ModernBertConfig(
        max_position_embeddings=64,
        pad_token_id=PAD,
        bos_token_id=CLS,
        eos_token_id=SEP,
        cls_token_id=CLS,
        sep_token_id=SEP,
        **SHAPE,
    )
    return ModernBertForMaskedLM(config).eval()


def random_sentences(n: int, seed: int = 0) -> tuple[list[list[int]], list[list[int]]]:
    """``n`` id lists ``[CLS] w.. [SEP]`` of 1 to 12 words (so batches mix lengths and padding), and their
    special-token masks."""
    rng = np.random.default_rng(seed)
    ids = [[CLS, *rng.integers(MASK + 1, VOCAB, size=int(rng.integers(1, 13))).tolist(), SEP] for _ in range(n)]
    return ids, [[1] + [0] * (len(s) - 2) + [1] for s in ids]


@pytest.mark.parametrize("kind", ["bert", "roberta-prelayernorm", "modernbert"])
def test_masked_only_pll_equals_full_logits_pll(kind, torch_one_thread):
    # ModernBERT agrees only because its final_norm runs inside base_model: skipping it would move every logit
    model = tiny_masked_lm(kind)
    ids, special = random_sentences(9)
    logit_shapes = []
    decoder = model.get_output_embeddings()  # the vocabulary projection of each kind's head
    hook = decoder.register_forward_hook(lambda module, args, out: logit_shapes.append(tuple(out.shape)))
    got = pairs.pseudo_log_likelihoods(model, ids, special, MASK, PAD, batch_size=7, device=CPU)
    hook.remove()
    expected = full_logits_pll(model, ids, special, MASK, PAD, batch_size=7)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)
    n_copies = sum(len(s) - 2 for s in ids)
    batches = [7] * (n_copies // 7) + [n_copies % 7] * (n_copies % 7 > 0)
    assert logit_shapes == [(n, VOCAB) for n in batches]  # one logit row per masked copy, none per other token


def test_a_model_without_an_mlm_head_is_refused():
    with pytest.raises(TypeError, match="BertModel has no MLM head"):
        pairs.mlm_parts(tiny_masked_lm("bert").bert)
