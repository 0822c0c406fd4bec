"""probe scoring on CUDA under bf16 autocast against the same scoring on the CPU (float32), within bf16's
rounding. Deselected by default (``-m 'not gpu'``); run with ``pytest -m gpu tests/probe/test_probe_gpu.py``."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from tasks import probe
from tasks.common.models.encoders import load_encoder, reference_model_dir
from tasks.probe import pairs, probe_set
from tasks.probe import vectors as probe_vectors
from test_probe_pll import MASK, PAD, random_sentences, tiny_masked_lm  # same folder: pytest puts it on sys.path

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

CPU, CUDA = torch.device("cpu"), torch.device("cuda")
SHIPPED = Path(__file__).resolve().parents[2] / "tasks" / "probe" / "senses.jsonl"
# bf16 keeps 8 significant bits (2^-8 = 0.4%). CPU bf16 autocast, a stand-in, gave at most 0.5% relative error
# on the vectors, 8e-5 on separation and 0.012 nats per token on the PLLs; CUDA autocasts more ops (attention)
BF16_REL = 3e-2


def relative_error(got: np.ndarray, expected: np.ndarray) -> float:
    return float(np.linalg.norm(got - expected) / np.linalg.norm(expected))


def test_sense_vectors_and_scores_on_cuda_match_cpu():
    encoder = load_encoder("reference", reference_model_dir(), seed=0).eval()  # trained MiniLM: real activations
    tokenizer = AutoTokenizer.from_pretrained(reference_model_dir())
    rows = probe_set.read_probe_set(SHIPPED, 8)
    batches = probe_vectors.encode(tokenizer, rows, batch_size=32, max_seq_len_tokens=128)
    on_cpu = probe_vectors.target_vectors(encoder, batches, CPU, desc="cpu")
    on_cuda = probe_vectors.target_vectors(copy.deepcopy(encoder).to(CUDA), batches, CUDA, desc="cuda")
    assert on_cuda.dtype == np.float64 and on_cuda.shape == on_cpu.shape
    for layer in range(on_cpu.shape[0]):
        assert relative_error(on_cuda[layer], on_cpu[layer]) < BF16_REL, layer
    cpu_scores, cuda_scores = probe.layer_scores(on_cpu, rows), probe.layer_scores(on_cuda, rows)
    np.testing.assert_allclose(cuda_scores["separation"], cpu_scores["separation"], rtol=0, atol=1e-2)


@pytest.mark.parametrize("kind", ["bert", "modernbert"])
def test_pll_on_cuda_matches_cpu(kind):
    model = tiny_masked_lm(kind)
    with torch.no_grad():  # weights 10x the 0.02 init: peaked distributions, where bf16 rounding shows
        for param in model.parameters():
            if param.dim() > 1:
                param.mul_(10.0)
    ids, special = random_sentences(40)
    on_cpu = pairs.pseudo_log_likelihoods(model, ids, special, MASK, PAD, batch_size=64, device=CPU)
    logit_dtypes = []
    gpu_model = copy.deepcopy(model).to(CUDA)
    gpu_model.get_output_embeddings().register_forward_hook(lambda m, args, out: logit_dtypes.append(out.dtype))
    on_cuda = pairs.pseudo_log_likelihoods(gpu_model, ids, special, MASK, PAD, batch_size=64, device=CUDA)
    assert set(logit_dtypes) == {torch.bfloat16}  # the head really ran under bf16 autocast
    n_tokens = np.array([len(s) - 2 for s in ids])
    np.testing.assert_array_less(np.abs(on_cuda - on_cpu), 0.05 * n_tokens + BF16_REL * np.abs(on_cpu))
