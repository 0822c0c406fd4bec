"""Attention on the fast path: in the training configuration of the gpu profile (inductor ``torch.compile``, bf16
autocast, its dropout, its ``hardware.deterministic``, the stage's ``Trainer._step`` and the benchmark's own
``measure_stage``), every SDPA call meets the conditions of CUDA's flash kernel (``tasks.pretrain.attention``).

On the CPU, bf16 autocast stands in for CUDA's (``tasks.common.runtime.device.autocast`` with ``cpu=True``): what
reaches SDPA is the same dtype, layout, mask and flags; the GPU half (SDPA's own reasons, the kernels a profile shows)
is ``tests/pretrain/test_gpu.py::test_the_compiled_training_step_runs_flash_not_the_math_path``.
"""

from __future__ import annotations

import pytest
import torch

import tasks.pretrain.trainer as trainer_module
from pretrain_fixtures import ROOT, bench_module, make_cfg
from tasks.common.runtime.device import autocast, configure
from tasks.config import read_yaml
from tasks.pretrain import attention
from tasks.pretrain.attention import Operand, SdpaCall, flash_blockers
from tasks.pretrain.hardware import Dist
from tasks.pretrain.init import build_model
from tasks.pretrain.mlm import MaskingVocab
from tasks.pretrain.trainer import Trainer
from tasks.tracking import NullLog

GPU = read_yaml(ROOT / "profiles" / "gpu.yaml")
VOCAB, SEQ = 64, GPU["tokenize"]["max_seq_len_tokens"]  # the gpu profile's block length (512)


def gpu_training_cfg(**overrides):
    """The params.yaml pretrain section with the gpu profile's training switches (compile, bf16, dropout, masking
    rate, hardware) on a 2-layer model whose heads have the gpu preset's head dimension."""
    params = read_yaml(ROOT / "params.yaml")["pretrain"]
    profile = GPU["pretrain"]
    base = params["presets"][profile["size"]]
    head_dim = base["hidden_size"] // base["num_attention_heads"]
    preset = {"num_hidden_layers": 2, "hidden_size": 2 * head_dim, "num_attention_heads": 2, "intermediate_size": 64}
    keys = ("compile", "bf16", "dropout_prob", "mlm_probability", "architecture")
    switches = {k: profile.get(k, params[k]) for k in keys}
    hardware = {"device": "cpu", "deterministic": GPU.get("hardware", {}).get("deterministic", False)}
    settings = {**switches, "hardware": hardware, **overrides}
    return make_cfg(presets={"micro": preset}, max_position_embeddings=SEQ, batch_size_blocks=4, **settings)


@pytest.fixture()
def cpu_bf16_autocast(monkeypatch):
    """The stage's autocast, on the CPU too (bf16, as on CUDA)."""
    monkeypatch.setattr(trainer_module, "autocast", lambda device, bf16=True: autocast(device, bf16, cpu=True))


@pytest.fixture()
def settings():
    """Restore the process-wide switches a configuration sets (deterministic algorithms) and a fresh dynamo."""
    torch._dynamo.reset()
    yield
    torch.use_deterministic_algorithms(False)
    torch._dynamo.reset()


def blocks(n: int) -> dict:
    generator = torch.Generator().manual_seed(n)
    ids = torch.randint(5, VOCAB, (n, SEQ), generator=generator)
    ids[:, 0], ids[:, -1] = 2, 3
    attention_mask = torch.ones_like(ids)
    return {
        "input_ids": ids,
        "attention_mask": attention_mask,
        "maskable": ids > 4,
        "source_id": torch.zeros(n, dtype=torch.long),
        "source_names": ["s"],
    }


def one_training_step(cfg, tmp_path) -> attention.Captured:
    """One ``Trainer._step`` of ``cfg`` (after ``configure``, as ``setup_distributed`` does), captured."""
    configure(torch.device("cpu"), cfg.hardware.deterministic)
    vocab = MaskingVocab(
        mask_token_id=4,
        special_ids=torch.arange(5),
        random_ids=torch.arange(5, VOCAB),
        continuation=torch.zeros(VOCAB, dtype=torch.bool),
    )
    torch.manual_seed(0)
    model = build_model(cfg, VOCAB, SEQ, 0)
    trainer = Trainer(cfg, model, vocab, blocks(8), blocks(4), Dist(0, 1, torch.device("cpu")), NullLog(), tmp_path)
    with attention.capture() as captured:
        loss, _ = trainer._step(trainer._micro_batches(0))
    assert torch.isfinite(loss)
    return captured


def test_the_gpu_profile_training_step_meets_every_flash_condition(tmp_path, cpu_bf16_autocast, settings):
    cfg = gpu_training_cfg()
    assert cfg.compile and cfg.bf16  # what the gpu profile trains with
    captured = one_training_step(cfg, tmp_path)
    layers = cfg.preset.num_hidden_layers
    graph_calls = [c for c in captured.calls if c.source == "pre-grad graph"]
    assert len(graph_calls) == layers  # the compiled encoder's calls, as dynamo traced them
    assert all(c.query.dtype == c.key.dtype == c.value.dtype == torch.bfloat16 for c in graph_calls)
    assert not any(c.has_mask or c.is_causal for c in graph_calls)
    assert attention.report(captured) == []
    if cfg.dropout_prob == 0.0:  # the CPU's flash kernel takes no dropout; CUDA's does (next test)
        assert captured.graph_paths and all(paths == ["flash (CPU)"] for paths in captured.graph_paths)


def test_dropout_and_the_deterministic_switch_leave_flash_eligible(tmp_path, cpu_bf16_autocast, settings):
    cfg = gpu_training_cfg(dropout_prob=0.1, hardware={"device": "cpu", "deterministic": True})
    captured = one_training_step(cfg, tmp_path)
    calls = [c for c in captured.calls if c.source == "pre-grad graph"]
    assert calls and all(c.dropout_p == 0.1 for c in calls)
    assert [reason for c in calls for reason in flash_blockers(c)] == []
    assert attention.setting_blockers() == [] and attention.setting_notes()  # a cost, not a blocker


def test_the_eager_step_meets_every_flash_condition(tmp_path, cpu_bf16_autocast, settings):
    captured = one_training_step(gpu_training_cfg(compile=False), tmp_path)
    assert [c.source for c in captured.calls] == ["eager"] * 2
    assert attention.report(captured) == []


def test_the_benchmark_path_meets_every_flash_condition(tmp_path, cpu_bf16_autocast, settings):
    """``benchmarks/pretrain.py``'s stage arm (``measure_stage``: ``setup_distributed``, ``build_model``, the
    ``Prefetcher``, ``Trainer._step``) on its own data, compiled under bf16 autocast as on CUDA."""
    bench = bench_module()
    bench.build_data(tmp_path, vocab_size=300, seq_len=SEQ, max_docs=60)
    cfg = bench.stage_config("tiny", 4, 0.15, "cpu")
    cfg = cfg.model_copy(update={"compile": True, "bf16": True, "size": "micro", "presets": gpu_training_cfg().presets})
    with attention.capture() as captured:
        timed = bench.measure_stage(tmp_path, cfg, warmup=1, steps=1)
    assert timed["compile"] and timed["tokens_per_s"] > 0
    assert any(c.source == "pre-grad graph" for c in captured.calls)
    assert attention.report(captured) == []


def test_the_hf_trainer_arm_passes_sdpa_no_mask():
    """The benchmark's HF Trainer arm trains ``build_model``'s SDPA model on the collator's all-ones attention
    mask: transformers drops an all-ones mask, so SDPA gets none there either (eager: Trainer does not compile)."""
    cfg = gpu_training_cfg(compile=False)
    model = build_model(cfg, VOCAB, SEQ, 0)
    packed = blocks(4)
    with attention.capture() as captured:
        model(input_ids=packed["input_ids"], attention_mask=packed["attention_mask"])
    assert len(captured.calls) == cfg.preset.num_hidden_layers and not any(c.has_mask for c in captured.calls)


def call(shape=(2, 4, 16, 64), stride=None, dtype=torch.bfloat16, **kwargs) -> SdpaCall:
    stride = stride or tuple(int(torch.tensor(shape[i + 1 :]).prod()) for i in range(len(shape)))
    operand = Operand(shape, stride, dtype)
    args = {"has_mask": False, "dropout_p": 0.0, "is_causal": False} | kwargs
    return SdpaCall("eager", operand, operand, operand, **args)


def test_flash_blockers_name_each_unmet_condition():
    assert flash_blockers(call()) == []
    assert flash_blockers(call(dropout_p=0.1, is_causal=True)) == []
    assert "attn_mask" in flash_blockers(call(has_mask=True))[0]
    assert "fp16, bf16" in flash_blockers(call(dtype=torch.float32))[0]
    assert "<= 256" in flash_blockers(call(shape=(2, 4, 16, 320)))[0]
    assert "multiple of 8" in flash_blockers(call(shape=(2, 4, 16, 60)))[0]
    assert "strides" in flash_blockers(call(stride=(4096, 1024, 64, 2)))[0]
    q = Operand((2, 4, 16, 64), (4096, 1024, 64, 1), torch.bfloat16)
    k = Operand((2, 4, 8, 64), (2048, 512, 64, 1), torch.bfloat16)
    assert "is_causal" in flash_blockers(SdpaCall("eager", q, k, k, False, 0.0, True))[0]
    assert attention.setting_blockers() == []
    torch.backends.cuda.enable_flash_sdp(False)
    try:
        assert attention.setting_blockers() == ["torch.backends.cuda.flash_sdp_enabled() is False"]
    finally:
        torch.backends.cuda.enable_flash_sdp(True)


def test_the_checker_sees_a_mask_and_the_math_path_in_a_compiled_graph(settings):
    """What the GPU test fails on, made to happen on the CPU: a padded batch (an attention mask) with SDPA held to
    its math kernel; the report names the mask and the math path, and shows the mask added to the scores."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from tasks.pretrain.mlm import MaskedOnlyMLM

    cfg = gpu_training_cfg()
    net = MaskedOnlyMLM(build_model(cfg, VOCAB, SEQ, 0), compile=True)
    packed = blocks(2)
    packed["attention_mask"][0, -5:] = 0
    positions = torch.arange(8)
    with attention.capture() as captured, autocast(torch.device("cpu"), True, cpu=True), sdpa_kernel([SDPBackend.MATH]):
        net(packed["input_ids"], packed["attention_mask"], positions, packed["input_ids"].flatten()[positions])
    lines = attention.report(captured)
    assert any("attn_mask" in line for line in lines) and captured.math_graphs == 1
    assert "aten.add.Tensor" in captured.math_inputs[0] and f"bfloat16[2, 1, {SEQ}, {SEQ}]" in captured.math_inputs[0]
