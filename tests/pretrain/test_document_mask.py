"""``pretrain.document_mask``: inside a packed block a token attends only to its own document
(``tasks.pretrain.attention``): a token's output does not change, bit for bit, when another document of its block
does; the CPU's SDPA mask and CUDA's FlexAttention block mask (forward on the CPU: FlexAttention has no CPU
backward) agree; a training step runs; the params refuse what FlexAttention cannot do."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from pretrain_fixtures import make_cfg
from tasks.pretrain.attention import capture, document_ids, document_mask, with_document_mask
from tasks.pretrain.hardware import Dist
from tasks.pretrain.init import build_model
from tasks.pretrain.mlm import MaskingVocab
from tasks.pretrain.trainer import Trainer
from tasks.tracking import NullLog

VOCAB, SEQ, SEP = 64, 160, 3
FIRST, SECOND = 40, 110  # the [SEP]s that close the block's first two documents


def packed(seed: int = 0) -> torch.Tensor:
    """Two blocks of three documents each: ``[CLS] doc_0 [SEP] doc_1 [SEP] doc_2...`` (doc_2 runs on)."""
    ids = torch.randint(5, VOCAB, (2, SEQ), generator=torch.Generator().manual_seed(seed))
    ids[:, 0], ids[:, FIRST], ids[:, SECOND] = 2, SEP, SEP
    return ids


def model(**overrides):
    cfg = make_cfg(architecture="modernbert", max_position_embeddings=SEQ, document_mask=True, **overrides)
    torch.manual_seed(0)
    return with_document_mask(build_model(cfg, VOCAB, SEQ, 0), SEP)


def test_document_ids_count_the_separators_before_each_token():
    ids = torch.tensor([[2, 7, 3, 8, 9, 3, 6, 0]])
    assert document_ids(ids, 3).tolist() == [[0, 0, 0, 1, 1, 1, 2, 2]]
    padding = torch.tensor([[1, 1, 1, 1, 1, 1, 1, 0]])
    assert document_ids(ids, 3, padding).tolist() == [[0, 0, 0, 1, 1, 1, 2, -1]]


def test_a_tokens_output_does_not_depend_on_other_documents_of_its_block():
    mlm = model().train()  # training mode, as pretraining runs it (dropout 0)
    ids = packed()
    other = ids.clone()
    other[:, FIRST + 1 : SECOND] = torch.randint(5, VOCAB, (2, SECOND - FIRST - 1))  # doc_1 perturbed, its [SEP] kept
    before = mlm.base_model(input_ids=ids).last_hidden_state
    after = mlm.base_model(input_ids=other).last_hidden_state
    assert torch.equal(before[:, : FIRST + 1], after[:, : FIRST + 1])  # doc_0, exactly
    assert torch.equal(before[:, SECOND + 1 :], after[:, SECOND + 1 :])  # doc_2, exactly
    assert not torch.equal(before[:, FIRST + 1 : SECOND + 1], after[:, FIRST + 1 : SECOND + 1])
    plain = build_model(make_cfg(architecture="modernbert", max_position_embeddings=SEQ), VOCAB, SEQ, 0)
    plain.load_state_dict(mlm.state_dict())
    across = plain.base_model(input_ids=other).last_hidden_state  # without the mask, doc_0 sees doc_1
    assert not torch.equal(plain.base_model(input_ids=ids).last_hidden_state[:, :FIRST], across[:, :FIRST])


def test_the_flex_block_mask_and_the_sdpa_mask_agree():
    mlm = model().eval()
    ids = packed(1)
    with torch.no_grad():
        sdpa = mlm.base_model(input_ids=ids).last_hidden_state  # the CPU's path: an SDPA boolean mask
        mlm.config._attn_implementation = "flex_attention"
        flex = mlm.base_model(input_ids=ids, attention_mask=document_mask(ids, SEP, None, flex=True)).last_hidden_state
    torch.testing.assert_close(flex, sdpa, atol=1e-5, rtol=1e-5)


def test_a_training_step_with_document_masks(tmp_path):
    cfg = make_cfg(architecture="modernbert", max_position_embeddings=SEQ, document_mask=True, batch_size_blocks=2)
    vocab = MaskingVocab(
        mask_token_id=4,
        special_ids=torch.arange(5),
        random_ids=torch.arange(5, VOCAB),
        continuation=torch.zeros(VOCAB, dtype=torch.bool),
    )
    ids = torch.cat([packed(2), packed(3)])
    blocks = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "maskable": ids > 4,
        "source_id": torch.zeros(4, dtype=torch.long),
        "source_names": ["s"],
    }
    trainer = Trainer(cfg, model(), vocab, blocks, blocks, Dist(0, 1, torch.device("cpu")), NullLog(), tmp_path)
    with capture() as captured:
        loss, grad_norm = trainer._step(trainer._micro_batches(0))
    assert torch.isfinite(loss) and torch.isfinite(grad_norm)
    assert captured.calls and all(call.has_mask for call in captured.calls)  # the document mask, as SDPA's mask


def test_document_mask_is_for_modernbert_without_dropout():
    with pytest.raises(ValidationError, match="document_mask"):
        make_cfg(architecture="bert", document_mask=True)
    with pytest.raises(ValidationError, match="document_mask"):
        make_cfg(architecture="modernbert", document_mask=True, dropout_prob=0.1)
    bert = build_model(make_cfg(architecture="bert", max_position_embeddings=SEQ), VOCAB, SEQ, 0)
    with pytest.raises(ValueError, match="ModernBERT"):
        with_document_mask(bert, SEP)


def test_the_stage_builds_a_document_masked_model_when_asked():
    """``initial_model`` (the stage's builder) wraps the model with the tokenizer's [SEP]; without the param it
    leaves SDPA's unmasked path alone."""
    from tasks.pretrain.init import Start, initial_model

    class Tokenizer:  # what initial_model reads of a tokenizer
        cls_token_id, sep_token_id, pad_token_id = 2, SEP, 0

        def __len__(self) -> int:
            return VOCAB

    start = Start(Tokenizer(), "clozeline", None, "pretrained")
    cfg = make_cfg(architecture="modernbert", max_position_embeddings=SEQ, document_mask=True)
    torch.manual_seed(0)
    masked = initial_model(cfg, start, SEQ)
    with capture() as captured:
        masked.base_model(input_ids=packed())
    assert captured.calls and all(call.has_mask for call in captured.calls)
    plain = initial_model(cfg.model_copy(update={"document_mask": False}), start, SEQ)
    with capture() as captured:
        plain.base_model(input_ids=packed())
    assert captured.calls and not any(call.has_mask for call in captured.calls)
