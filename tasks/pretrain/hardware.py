"""Where pretraining runs and how fast it could: the process group, the GPU's dense peak, FLOPs per token.

MFU (model FLOPs utilisation, Chowdhery et al. 2022, "PaLM", appendix B) = achieved model FLOP/s over the
hardware's dense peak for the precision the matmuls run in. The peaks are the vendors' datasheet numbers
for dense (not 2:4 sparse) tensor-core math, FLOP/s.
"""

from __future__ import annotations

import os
import platform
import re
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from tasks.common.runtime.device import configure, resolve
from tasks.config.hardware import HardwareParams
from tasks.config.model.pretrain import processes_per_node


@dataclass(frozen=True)
class GpuPeak:
    """One GPU model: a regex on ``torch.cuda.get_device_name`` and its dense bf16 and TF32 peaks (FLOP/s)."""

    name: str
    pattern: str
    bf16: float
    tf32: float


#: Most specific first: "L4" must not match an L40, nor "A10" an A100, nor an H100 PCIe the SXM entry.
GPU_PEAKS = (
    GpuPeak("B200", r"\bB200\b", 2250e12, 1100e12),  # HGX B200 (1000 W): dense BF16 2.25 PFLOP/s, TF32 1.1
    GpuPeak("GH200", r"\bGH200\b", 989e12, 494.7e12),  # the Hopper GPU of the Grace Hopper superchip = H100 SXM
    GpuPeak("H200 NVL", r"\bH200\b.*\bNVL\b", 835e12, 417.5e12),  # PCIe card, 600 W
    GpuPeak("H200", r"\bH200\b", 989e12, 494.7e12),  # SXM
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


def setup_distributed(hw: HardwareParams, nproc_per_node: int | str = 1) -> Dist:
    """Resolve ``hardware.device`` for this rank (``LOCAL_RANK``'s GPU under torchrun) and join the ``torchrun``
    process group if ``WORLD_SIZE > 1`` (nccl on CUDA, gloo on CPU).

    Raises ``ValueError`` (one line) when ``pretrain.nproc_per_node`` (a number, or ``gpu``: one process per GPU
    torch sees, ``processes_per_node``) asks for more GPUs than torch sees or for ``gpu`` without one, or when
    the device cannot be used (``tasks.common.runtime.device.resolve``).
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank, local = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    device = resolve(hw.device, local if world > 1 else None)
    processes_per_node(nproc_per_node, torch.cuda.device_count() if device.type == "cuda" else 0)
    configure(device, hw.deterministic)
    if device.type == "cuda":
        torch.cuda.set_device(device)  # nccl and the default CUDA stream follow the current device
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return Dist(rank, world, device)


def gather_ints(env: Dist, value: int) -> list[int]:
    """``value`` of every rank, in rank order (an all-gather; ``[value]`` with one process)."""
    if env.world == 1:
        return [value]
    mine = torch.tensor([value], dtype=torch.int64, device=env.device)
    every = [torch.zeros_like(mine) for _ in range(env.world)]
    dist.all_gather(every, mine)
    return [int(t) for t in every]


class Throughput:
    """Training tokens/s over the steps after warm-up, measured between logging steps (where the host reads
    the loss and so waits for the device: a window's wall time is the device's). The first window of a
    process holds compilation, autotuning and allocator warm-up; it is kept apart, and what it took beyond
    the steady rate is reported as ``compile_seconds``. Time spent in ``paused()`` (evaluation, checkpoints)
    is not training time."""

    def __init__(self, tokens_per_step: int) -> None:
        self.tokens_per_step = tokens_per_step
        self.windows: list[tuple[int, float]] = []  # (steps, seconds)
        self.mark = self.pause = 0.0
        self.last = 0.0

    def start(self) -> None:
        self.mark, self.pause = time.perf_counter(), 0.0

    @contextmanager
    def paused(self):
        started = time.perf_counter()
        yield
        self.pause += time.perf_counter() - started

    def lap(self, steps: int) -> float:
        """Close a window of ``steps`` steps; returns its tokens/s."""
        now = time.perf_counter()
        seconds = max(now - self.mark - self.pause, 1e-9)
        self.windows.append((steps, seconds))
        self.mark, self.pause = now, 0.0
        self.last = steps * self.tokens_per_step / seconds
        return self.last

    def summary(self) -> dict[str, float | int | None]:
        """``train_tokens_per_s`` (after the first window; the first alone if it is all there is),
        ``timed_steps``, ``warmup_steps`` and ``compile_seconds`` (first window minus its steps at the steady rate)."""
        if not self.windows:
            return {"train_tokens_per_s": 0.0, "timed_steps": 0, "warmup_steps": 0, "compile_seconds": None}
        (first_steps, first_s), rest = self.windows[0], self.windows[1:]
        steps, seconds = (sum(w[0] for w in rest), sum(w[1] for w in rest)) if rest else (first_steps, first_s)
        rate = steps / seconds
        return {
            "train_tokens_per_s": rate * self.tokens_per_step,
            "timed_steps": steps,
            "warmup_steps": first_steps if rest else 0,
            "compile_seconds": max(0.0, first_s - first_steps / rate) if rest else None,
        }


def hardware(env: Dist) -> dict[str, Any]:
    """Where the run trained: device type and name, number of processes, torch threads per process."""
    name = torch.cuda.get_device_name(env.device) if env.device.type == "cuda" else platform.processor() or "cpu"
    threads = torch.get_num_threads()
    return {"device": env.device.type, "device_name": name, "world_size": env.world, "torch_threads": threads}
