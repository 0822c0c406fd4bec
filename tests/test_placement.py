"""Nothing stays behind on the host: one fine-tuning step per task kind and one pretraining step (train and
held-out evaluation) run with the model on the ``meta`` device, where any input or intermediate tensor left on
the CPU raises "Tensor on device meta is not on the expected device cpu". The same code paths run on CUDA, so
a pass here is what a CPU box can prove about GPU placement (the probe's own check is in tests/test_probe.py).

transformers' SDPA mask builder reads ``padding_mask.all()`` back to the host to skip an all-ones mask (its own
sync, once per forward of a padded batch; meta tensors cannot be read), so these tests make it keep the mask.
"""

from __future__ import annotations

import pytest
import torch
from finetune_fixtures import save_tiny_bert
from pretrain_fixtures import make_cfg
from transformers import masking_utils

from tasks.common.device import autocast, place
from tasks.finetune import cls, ner
from tasks.finetune.model import build_model
from tasks.finetune.training import train_step
from tasks.pretrain.feed import masked_batch
from tasks.pretrain.hardware import Dist
from tasks.pretrain.init import build_model as build_mlm
from tasks.pretrain.mlm import MaskingVocab
from tasks.pretrain.trainer import Trainer
from tasks.tracking import NullLog

META = torch.device("meta")
VOCAB, SEQ = 64, 16


@pytest.fixture()
def keep_every_mask(monkeypatch):
    monkeypatch.setattr(masking_utils, "_ignore_bidirectional_mask_sdpa", lambda *args, **kwargs: False)


def cls_batch() -> dict:
    exs = [{"input_ids": [2, 9, 10, 3], "label": 0}, {"input_ids": [2, 11, 3], "label": 1}]
    return cls.collate(exs, pad_id=0)


def ner_batch() -> dict:
    exs = [{"input_ids": [2, 9, 10, 3], "labels": [-100, 1, 0, -100]}, {"input_ids": [2, 11, 3], "labels": [-100, 2, -100]}]
    return ner.collate(exs, pad_id=0)


@pytest.mark.parametrize(("head", "n_labels", "make_batch"), [("mean-pool", 2, cls_batch), ("cls-pool", 2, cls_batch),
                                                              ("first", 3, ner_batch)])  # fmt: skip
def test_a_fine_tuning_step_runs_entirely_on_the_models_device(tmp_path, keep_every_mask, head, n_labels, make_batch):
    model = build_model("pretrained", save_tiny_bert(tmp_path / "m"), head, n_labels, "full", 0.1, 0).to(META)
    loss = train_step(model, place(make_batch(), META), META)
    assert loss.device == META
    assert all(p.grad is not None and p.grad.device == META for p in model.head.parameters())


def test_a_batch_left_on_the_host_is_caught(tmp_path, keep_every_mask):
    model = build_model("pretrained", save_tiny_bert(tmp_path / "m"), "mean-pool", 2, "full", 0.1, 0).to(META)
    with pytest.raises((RuntimeError, NotImplementedError), match="meta"):
        train_step(model, cls_batch(), META)  # not placed: the check can fail


def blocks(n: int, with_padding: bool = False) -> dict:
    generator = torch.Generator().manual_seed(n)
    ids = torch.randint(5, VOCAB, (n, SEQ), generator=generator)
    ids[:, 0], ids[:, -1] = 2, 3
    attention = torch.ones_like(ids)
    if with_padding:
        ids[0, -4:], attention[0, -4:] = 0, 0
    maskable = (attention == 1) & (ids > 4)
    return {"input_ids": ids, "attention_mask": attention, "maskable": maskable,
            "source_id": torch.zeros(n, dtype=torch.long), "source_names": ["s"]}  # fmt: skip


@pytest.mark.parametrize("architecture", ["modernbert", "bert"])
@pytest.mark.parametrize("with_padding", [False, True])
def test_a_pretraining_step_and_an_evaluation_batch_run_entirely_on_the_models_device(tmp_path, keep_every_mask, architecture,
                                                                                    with_padding):  # fmt: skip
    cfg = make_cfg(architecture=architecture, max_position_embeddings=SEQ, batch_size_blocks=4)
    vocab = MaskingVocab(mask_token_id=4, special_ids=torch.arange(5), random_ids=torch.arange(5, VOCAB),
                         continuation=torch.zeros(VOCAB, dtype=torch.bool))  # fmt: skip
    model = build_mlm(cfg, VOCAB, SEQ, 0)
    train, heldout = blocks(12, with_padding), blocks(6)
    trainer = Trainer(cfg, model, vocab, train, heldout, Dist(0, 1, torch.device("cpu")), NullLog(), tmp_path)
    model.to(META)
    for batch in trainer._micro_batches(0):
        on_meta = batch.to(META)
        with autocast(META):
            loss, _ = trainer.net(on_meta.input_ids, on_meta.attention_mask, on_meta.positions, on_meta.targets)
        loss.backward()
        assert loss.device == META
    trainer.inner.eval()
    rows = torch.arange(3)  # a ragged last batch, padded to batch_size_blocks
    batch = masked_batch(heldout, rows, vocab, 0.15, torch.Generator().manual_seed(0), False, trainer.with_mask, 4)
    on_meta = batch.to(META)
    loss, n_correct = trainer.inner(on_meta.input_ids, on_meta.attention_mask, on_meta.positions, on_meta.targets)
    assert loss.device == n_correct.device == META and on_meta.input_ids.shape[0] == 4


def test_packed_blocks_reach_sdpa_without_a_mask_and_padded_ones_with_one(monkeypatch):
    """With every ModernBERT layer full_attention, transformers hands SDPA no mask for unpadded blocks, so on
    CUDA the flash kernel is eligible; a padded batch gets a boolean 4-D mask (memory-efficient kernel)."""
    masks = []
    real = torch.nn.functional.scaled_dot_product_attention

    def spy(query, key, value, attn_mask=None, **kwargs):
        masks.append(None if attn_mask is None else (attn_mask.dtype, attn_mask.dim()))
        return real(query, key, value, attn_mask=attn_mask, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    cfg = make_cfg(architecture="modernbert", max_position_embeddings=SEQ)
    model = build_mlm(cfg, VOCAB, SEQ, 0)
    packed = blocks(4)
    model.base_model(input_ids=packed["input_ids"], attention_mask=None)
    assert masks == [None] * cfg.preset.num_hidden_layers
    masks.clear()
    padded = blocks(4, with_padding=True)
    model.base_model(input_ids=padded["input_ids"], attention_mask=padded["attention_mask"])
    assert masks == [(torch.bool, 4)] * cfg.preset.num_hidden_layers
