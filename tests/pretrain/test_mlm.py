"""BERT masking statistics (Devlin et al. 2019: 80/10/10) and the masked-only loss against HF's full loss."""

import pytest
import torch
from transformers import BertConfig, BertForMaskedLM

from tasks.pretrain.mlm import IGNORE_INDEX, MaskedOnlyMLM, MaskingVocab, mask_tokens, masked_positions

VOCAB = 1000
PAD, UNK, CLS, SEP, MASK = range(5)


pytestmark = pytest.mark.usefixtures("torch_one_thread")


def make_vocab() -> MaskingVocab:
    special = torch.tensor([PAD, UNK, CLS, SEP, MASK])
    continuation = torch.zeros(VOCAB, dtype=torch.bool)
    continuation[500:] = True  # ids >= 500 play the role of '##x' pieces
    return MaskingVocab(MASK, special, torch.arange(5, VOCAB), continuation)


def make_blocks(rows: int, seq_len: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """[CLS] body [SEP] [PAD]...: a quarter of the rows end in padding; specials also appear inside bodies."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, VOCAB, (rows, seq_len), generator=g)
    ids[:, 0] = CLS
    ids[:, -1] = SEP
    ids[:, seq_len // 2] = SEP  # a document boundary inside a packed block
    ids[: rows // 4, -10:] = PAD
    maskable = ~torch.isin(ids, torch.tensor([PAD, CLS, SEP]))
    return ids, maskable


@pytest.mark.parametrize("p", [0.15, 0.3])
def test_masking_statistics_over_2m_tokens(p):
    ids, maskable = make_blocks(4000, 512)
    vocab = make_vocab()
    masked, labels = mask_tokens(ids, maskable, vocab, p, torch.Generator().manual_seed(1))
    selected = labels != IGNORE_INDEX
    # never a special or pad position; labels hold the original ids
    assert not (selected & ~maskable).any()
    assert torch.equal(labels[selected], ids[selected])
    assert torch.equal(masked[~selected], ids[~selected])
    # selection rate within 1% (relative) of p: with 1.9M candidates the binomial sd is < 0.3% of p
    rate = selected.sum().item() / maskable.sum().item()
    assert abs(rate - p) / p < 0.01
    # outcomes read off the outputs alone: [MASK], another token (random), the same token (kept)
    out = masked[selected]
    frac_mask = (out == MASK).float().mean().item()
    frac_random = ((out != MASK) & (out != ids[selected])).float().mean().item()
    frac_kept = (out == ids[selected]).float().mean().item()
    # a random draw equals the original with prob 1/995, so "kept" is 0.1 + 0.1/995
    assert abs(frac_mask - 0.8) < 0.015 and abs(frac_random - 0.1) < 0.015 and abs(frac_kept - 0.1) < 0.015
    # random replacements are never special tokens
    assert not torch.isin(out[out != MASK], vocab.special_ids).any()


def test_masks_are_fresh_per_draw_and_reproducible_per_seed():
    ids, maskable = make_blocks(16, 64)
    vocab = make_vocab()
    a = mask_tokens(ids, maskable, vocab, 0.15, torch.Generator().manual_seed(3))
    b = mask_tokens(ids, maskable, vocab, 0.15, torch.Generator().manual_seed(3))
    g = torch.Generator().manual_seed(3)
    mask_tokens(ids, maskable, vocab, 0.15, g)
    c = mask_tokens(ids, maskable, vocab, 0.15, g)
    assert torch.equal(a[1], b[1]) and not torch.equal(a[1], c[1])


def test_whole_word_masking_selects_all_pieces_of_a_word():
    ids, maskable = make_blocks(2000, 256)
    vocab = make_vocab()
    masked, labels = mask_tokens(ids, maskable, vocab, 0.15, torch.Generator().manual_seed(5), whole_word_mask=True)
    selected = (labels != IGNORE_INDEX) & maskable
    cont = vocab.continuation[ids]
    prev_maskable = torch.nn.functional.pad(maskable[:, :-1], (1, 0), value=False)
    joined = cont & prev_maskable & maskable  # this piece belongs to the word of the piece before it
    prev_selected = torch.nn.functional.pad(selected[:, :-1], (1, 0), value=False)
    assert torch.equal(selected[joined], prev_selected[joined])
    starts = maskable & ~joined
    word_rate = selected[starts].float().mean().item()
    assert abs(word_rate - 0.15) / 0.15 < 0.02
    assert not (labels != IGNORE_INDEX)[~maskable].any()


def tiny_mlm() -> BertForMaskedLM:
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    return BertForMaskedLM(config)


def test_masked_only_loss_equals_hf_full_vocab_loss():
    model = tiny_mlm()
    ids, maskable = make_blocks(8, 32)
    masked, labels = mask_tokens(ids, maskable, make_vocab(), 0.3, torch.Generator().manual_seed(2))
    attention = torch.ones_like(ids)
    positions, targets = masked_positions(labels)
    loss, n_correct = MaskedOnlyMLM(model).eval()(masked, attention, positions, targets)
    reference = model(input_ids=masked, attention_mask=attention, labels=labels)
    assert torch.allclose(loss, reference.loss, atol=1e-5)
    assert len(targets) == (labels != IGNORE_INDEX).sum().item()
    assert torch.equal(targets, labels[labels != IGNORE_INDEX])
    ref_correct = (reference.logits.argmax(-1) == labels)[labels != IGNORE_INDEX].sum().item()
    assert n_correct.item() == ref_correct


def test_four_token_sequence_never_gives_nan():
    model = tiny_mlm()
    net = MaskedOnlyMLM(model)
    ids = torch.tensor([[CLS, 7, 8, SEP]])
    maskable = torch.tensor([[False, True, True, False]])
    for seed in range(60):  # most draws select nothing at p=0.15
        masked, labels = mask_tokens(ids, maskable, make_vocab(), 0.15, torch.Generator().manual_seed(seed))
        loss, _ = net(masked, torch.ones_like(ids), *masked_positions(labels))
        loss.backward()
        assert torch.isfinite(loss)
        assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    empty = torch.full_like(ids, IGNORE_INDEX)
    assert net(ids, torch.ones_like(ids), *masked_positions(empty))[0].item() == 0.0
