"""Placement: one sense-probe batch and one PLL batch computed with the model on the ``meta`` device.

Meta tensors have shapes but no data, so any host tensor that the per-batch code makes or keeps shows up:
an elementwise op mixing it with a meta tensor raises "Tensor on device meta is not on the expected device
cpu", and ``HostTensorGuard(every=True)`` (tests/placement_harness.py) records the rest: any op that reads or
makes a host tensor with elements (indexing with a host index tensor is legal on meta and on CUDA, where it
costs a synchronising copy per batch). ``on_meta`` runs the same guard on the whole stage, where it refuses only
an op that mixes a meta tensor with a host one (a stage keeps host-side bookkeeping). On a GPU the same code
then keeps every batch on the GPU.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers.masking_utils
from transformers import AutoTokenizer, BertConfig, BertModel, ModernBertConfig, ModernBertModel

from placement_harness import HostTensorGuard, on_meta
from tasks import probe
from tasks.common.models.encoders import reference_model_dir
from tasks.probe import pairs, probe_set
from tasks.probe import vectors as probe_vectors
from tasks.tracking import NullLog
from test_probe import make_cfg, make_paths
from test_probe_pll import MASK, PAD, random_sentences, tiny_masked_lm  # same folder: pytest puts it on sys.path

pytestmark = pytest.mark.placement

META = torch.device("meta")
SHIPPED = Path(__file__).resolve().parents[2] / "tasks" / "probe" / "senses.jsonl"


@pytest.fixture(autouse=True)
def mask_without_host_sync(monkeypatch):
    # HF's SDPA mask checks padding_mask.all() on the host to skip an all-ones mask; meta tensors have no value
    # to read, so build the mask instead (what it does for any batch with padding)
    monkeypatch.setattr(transformers.masking_utils, "_ignore_bidirectional_mask_sdpa", lambda *args, **kw: False)


def tiny_probe_encoder(kind: str, vocab_size: int, pad_id: int) -> torch.nn.Module:
    """A 2-layer random bare encoder of ``kind`` (eval mode) on ``meta``."""
    shape = dict(
        vocab_size=vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    if kind == "bert":
        model = BertModel(BertConfig(**shape), add_pooling_layer=False)
    else:
        model = ModernBertModel(ModernBertConfig(pad_token_id=pad_id, **shape))
    return model.eval().to(META)


@pytest.mark.parametrize("kind", ["bert", "modernbert"])
def test_sense_probe_batch_stays_on_the_device(kind):
    tokenizer = AutoTokenizer.from_pretrained(reference_model_dir())
    encoder = tiny_probe_encoder(kind, len(tokenizer), tokenizer.pad_token_id)
    batch = probe_vectors.encode(
        tokenizer, probe_set.read_probe_set(SHIPPED, 8)[:6], batch_size=6, max_seq_len_tokens=128
    )[0]
    with HostTensorGuard(every=True) as guard:
        found = probe_vectors.batch_vectors(encoder, batch, META)
    assert guard.leaks == []
    assert (found.device, found.dtype, tuple(found.shape)) == (META, torch.float32, (3, 6, 32))


@pytest.mark.parametrize("kind", ["bert", "modernbert"])
def test_pll_batch_stays_on_the_device(kind):
    encoder, head = pairs.mlm_parts(tiny_masked_lm(kind).to(META))
    ids, special = random_sentences(3)
    batch = pairs.collate(pairs.masked_copies(ids, special, MASK)[:7], ids, PAD)
    with HostTensorGuard(every=True) as guard:
        log_probs = pairs.masked_log_probs(encoder, head, batch, META)
    assert guard.leaks == []
    assert (log_probs.device, log_probs.dtype, tuple(log_probs.shape)) == (META, torch.float64, (7,))


def test_guard_sees_a_host_index_and_meta_refuses_a_host_operand():
    states = torch.zeros(2, 5, 4, device=META)
    with HostTensorGuard(every=True) as guard:
        states[torch.arange(2), torch.zeros(2, dtype=torch.long, device=META)]  # legal on meta: only the guard sees it
    assert guard.leaks and guard.leaks[0].startswith("aten.arange")
    with pytest.raises(RuntimeError, match="is not on the expected device"):
        states * torch.ones(2, 5, 1)


# ---------------------------------------------------------------- the stage's entry point


def test_probe_run_keeps_every_model_and_batch_on_the_resolved_device(monkeypatch, tiny_root):
    """``probe.run`` as DVC calls it, with ``hardware.device`` resolving to a device that is not the CPU: the
    sense probe (pretrained, random, reference) and the minimal pairs (pretrained, random; unigram has no
    model) load, move and run every model there."""
    cfg = make_cfg(
        hardware={"device": "cuda"},
        pair_variants=["pretrained", "random", "unigram"],
        batch_size_sentences=1024,
        pairs_batch_size=4096,
    )  # few forwards: meta costs a forward, not a row
    with on_meta(monkeypatch) as placement:
        metrics = probe.run(cfg, make_paths(tiny_root), NullLog())
    assert placement.resolved == ["cuda"] and placement.forwards > 0
    assert placement.leaks == []
    assert set(metrics["models"]) == {"pretrained", "random", "reference"}
    assert set(metrics["minimal_pairs"]["variants"]) >= {"pretrained", "random"}
