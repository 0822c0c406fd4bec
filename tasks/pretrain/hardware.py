"""Where pretraining runs and how fast it could: the process group, the GPU's dense peak, FLOPs per token.

MFU (model FLOPs utilisation, Chowdhery et al. 2022, "PaLM", appendix B) = achieved model FLOP/s over the
hardware's dense peak for the precision the matmuls run in. The peaks are the vendors' datasheet numbers
for dense (not 2:4 sparse) tensor-core math, FLOP/s.
"""

from __future__ import annotations

import os
import platform
import re
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class GpuPeak:
    """One GPU model: a regex on ``torch.cuda.get_device_name`` and its dense bf16 and TF32 peaks (FLOP/s)."""

    name: str
    pattern: str
    bf16: float
    tf32: float


#: Most specific first: "L4" must not match an L40, nor "A10" an A100, nor an H100 PCIe the SXM entry.
GPU_PEAKS = (
    GpuPeak("H200", r"\bH200\b", 989e12, 494.7e12),
    GpuPeak("H100 PCIe", r"\bH100\b.*\bPCIe\b", 756e12, 378e12),
    GpuPeak("H100 NVL", r"\bH100\b.*\bNVL\b", 835e12, 417.5e12),
    GpuPeak("H100 SXM", r"\bH100\b.*(\bSXM|\bHBM3\b)", 989e12, 494.7e12),  # "NVIDIA H100 80GB HBM3" is the SXM5
    GpuPeak("A100", r"\bA100\b", 312e12, 156e12),  # SXM4 and PCIe have the same tensor-core peak
    GpuPeak("L40S", r"\bL40S\b", 362e12, 183e12),
    GpuPeak("L40", r"\bL40\b", 181e12, 90.5e12),
    GpuPeak("L4", r"\bL4\b", 121e12, 60e12),
    GpuPeak("A10G", r"\bA10G\b", 70e12, 35e12),
    GpuPeak("A10", r"\bA10\b", 125e12, 62.5e12),
)


def gpu_peak(device_name: str) -> GpuPeak | None:
    """The ``GPU_PEAKS`` entry for a CUDA device name, or ``None`` if it is not one we know (MFU unknown)."""
    return next((gpu for gpu in GPU_PEAKS if re.search(gpu.pattern, device_name)), None)


def peak_flops(device: torch.device, bf16: bool) -> float | None:
    """Dense peak FLOP/s of ``device`` for the run's matmul precision: bf16 with ``bf16``, else TF32 (torch's
    default float32 matmul on these GPUs is TF32 only if allowed, so then the plain fp32 peak would be lower:
    MFU is an upper bound there). ``None`` on CPU or an unknown GPU."""
    if device.type != "cuda":
        return None
    gpu = gpu_peak(torch.cuda.get_device_name(device))
    if gpu is None:
        return None
    return gpu.bf16 if bf16 else gpu.tf32


def train_flops_per_token(model: torch.nn.Module, seq_len: int, mlm_probability: float) -> float:
    """Training FLOPs per input token: 6 x non-embedding encoder weights + attention scores (PaLM, Chowdhery et
    al. 2022, appendix B), plus the MLM head on the masked fraction only (the head runs on gathered positions)."""
    c = model.config
    base = model.base_model
    encoder = sum(p.numel() for p in base.parameters()) - sum(p.numel() for p in base.embeddings.parameters())
    head = c.hidden_size * c.hidden_size + c.hidden_size * c.vocab_size
    return 6 * encoder + 12 * c.num_hidden_layers * c.hidden_size * seq_len + 6 * head * mlm_probability


@dataclass(frozen=True)
class Dist:
    """This process's place in the job: ``rank`` of ``world`` processes, on ``device``."""

    rank: int
    world: int
    device: torch.device

    @property
    def main(self) -> bool:
        return self.rank == 0


def setup_distributed() -> Dist:
    """Join the ``torchrun`` process group if ``WORLD_SIZE > 1`` (nccl on CUDA, gloo on CPU)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if torch.cuda.is_available():
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return Dist(rank, world, device)


def hardware(env: Dist) -> dict[str, Any]:
    """Where the run trained: device type and name, number of processes, torch threads per process."""
    name = torch.cuda.get_device_name(env.device) if env.device.type == "cuda" else platform.processor() or "cpu"
    threads = torch.get_num_threads()
    return {"device": env.device.type, "device_name": name, "world_size": env.world, "torch_threads": threads}
