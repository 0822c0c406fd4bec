"""``benchmarks/_device_time.py``: which SDPA path a profile shows (``--profile`` of ``benchmarks/pretrain.py``)."""

from __future__ import annotations

import json

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from benchmarks._device_time import attention_paths, profile_steps

# names seen in the first H200 profile (benchmarks/results/gpu_check/pretrain_profile.txt) and in torch's op names
H200_MATH = ["aten::bmm", "triton_per_fused__safe_softmax_add_exp_expand_prepar...", "aten::mm"]


def test_names_map_to_the_sdpa_path_that_ran():
    assert attention_paths(H200_MATH) == ["math"]
    assert attention_paths(["aten::_scaled_dot_product_flash_attention", "aten::mm"]) == ["flash"]
    assert attention_paths(["aten::_scaled_dot_product_efficient_attention"]) == ["efficient"]
    assert attention_paths(["aten::_scaled_dot_product_cudnn_attention"]) == ["cudnn"]
    assert attention_paths(["aten::mm", "triton_poi_fused_gelu_1", "aten::softmax"]) == []


def attention_step(q: torch.Tensor):
    def run_step() -> None:
        F.scaled_dot_product_attention(q, q, q).sum().backward()

    return run_step


def test_a_cpu_profile_names_the_kernel_sdpa_chose(tmp_path):
    q = torch.randn(2, 2, 16, 64, requires_grad=True)
    flash = profile_steps(attention_step(q), torch.device("cpu"), tmp_path / "flash", steps=2)
    with sdpa_kernel([SDPBackend.MATH]):
        math = profile_steps(attention_step(q), torch.device("cpu"), tmp_path / "math", steps=2)
    assert flash["attention_paths"] == ["flash"] and math["attention_paths"] == ["math"]
    written = json.loads((tmp_path / "math" / "pretrain_profile.json").read_text())
    assert written["attention_paths"] == ["math"] and written["steps"] == 2 and written["busy_fraction"] is None
    assert "aten::_scaled_dot_product_attention_math" in (tmp_path / "math" / "pretrain_profile.txt").read_text()
