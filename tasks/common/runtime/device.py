"""Where a model stage runs: one device setting (``hardware.device`` in params.yaml) and one placement helper.

Every model stage (pretrain, finetune, probe) resolves ``hardware.device`` here, moves models and batches with
``place``, and wraps forward passes in ``autocast``. Nothing else in a stage names a device.

- ``auto``: CUDA when torch sees a GPU, else the CPU. A GPU that the machine has but this torch cannot use
  (a CPU-only build) is an error, never a silent fall-back to the CPU.
- ``cpu``, ``cuda`` (the first GPU, or this process's ``LOCAL_RANK`` under torchrun), ``cuda:N``.

On CUDA, float32 matrix products run in TF32 (``torch.backends.cuda.matmul.allow_tf32``), and bf16 autocast
keeps fp32 master weights (mixed precision as in Micikevicius et al. 2018, with bf16 instead of fp16 and no
loss scaling). ``hardware.deterministic`` turns on ``torch.use_deterministic_algorithms``: on CUDA the
atomics-based kernels (index_add / scatter_add backward of embeddings, cuBLAS split-K reductions, flash
attention backward) either get a deterministic variant or raise, at some cost in speed.
"""

from __future__ import annotations

import os
import platform
import re
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import torch

from tasks.common.runtime.device_setting import resolve as resolve  # the stages resolve through this module


def configure(device: torch.device, deterministic: bool) -> None:
    """Process-wide settings for a process that computes on ``device``'s type: TF32 matmuls and cuDNN convolutions on
    CUDA, and with ``deterministic`` ``torch.use_deterministic_algorithms(True)`` (cuBLAS needs
    ``CUBLAS_WORKSPACE_CONFIG`` for that, set here before the first cuBLAS call)."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)


def place(tensors: Any, device: torch.device) -> Any:
    """``tensors`` (a tensor, a mapping of them, or None) on ``device``; other values pass through, except a
    ``torch.nn.Module``: a ``TypeError`` (move a model with ``model.to(device)``; passing it through would leave
    it on the CPU while its inputs go to the device).

    Host tensors bound for CUDA are copied from pinned memory with ``non_blocking=True``, so the copy overlaps
    the GPU's work instead of stalling the host; on the CPU (or ``meta``) this is a plain ``.to``."""
    if tensors is None:
        return None
    if isinstance(tensors, torch.nn.Module):
        raise TypeError(
            f"place: got a {type(tensors).__name__} (a torch.nn.Module); move a model with "
            "model.to(device), place() moves batches"
        )
    if isinstance(tensors, Mapping):
        return {key: place(value, device) for key, value in tensors.items()}
    if not isinstance(tensors, torch.Tensor):
        return tensors
    if device.type == "cuda" and tensors.device.type == "cpu":
        return tensors.pin_memory().to(device, non_blocking=True)
    return tensors.to(device)


def autocast(device: torch.device, bf16: bool = True, cpu: bool = False) -> AbstractContextManager:
    """bf16 autocast (matrix products in bf16, weights and reductions in fp32) on CUDA, and on the CPU when
    ``cpu`` is set (``cpu_bf16``); a no-op elsewhere."""
    on = device.type == "cuda" or (cpu and device.type == "cpu")
    return torch.autocast(
        device_type="cuda" if device.type == "cuda" else "cpu", dtype=torch.bfloat16, enabled=bf16 and on
    )


#: The precision of every evaluated (dev and test) prediction, on every device: the rule that makes the export's
#: re-scoring (fp32 on the CPU, ``tasks.export``) reproduce the evaluated labels (docs/shipped-models.md).
PREDICTION_PRECISION = "fp32 (no autocast; TF32 off on CUDA)"


@contextmanager
def fp32_predictions(device: torch.device) -> Iterator[None]:
    """IEEE fp32 forward passes on ``device`` (``PREDICTION_PRECISION``): no autocast is entered, and on CUDA the TF32
    matrix products that ``configure`` turns on for training are off until the block ends (then restored). bf16 (8
    mantissa bits) or TF32 (10) logits differ from the CPU's fp32 ones by about 1e-2 relative, enough to flip a
    near-tied label among thousands of NER words; fp32 on two devices differs only in summation order (about 1e-6)."""
    if device.type != "cuda":
        yield
        return
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn


def cpu_bf16(setting: str) -> bool:
    """Whether a CPU stage's training steps run under bf16 autocast: ``fp32`` never, ``bf16`` always, ``auto``
    when the CPU multiplies bf16 in hardware (``native_cpu_bf16``). Raises ``ValueError`` for another value.

    With AVX512-BF16 oneDNN runs bf16 matrix products at about twice the fp32 rate (MiniLM-L6 forward and
    backward, batch 8 x 128 tokens, one thread: 0.88 s against 1.55 s per step on this project's CI machine);
    without it they are emulated and slower than fp32, hence ``auto``."""
    if setting not in ("auto", "bf16", "fp32"):
        raise ValueError(f"cpu precision: expected auto, bf16 or fp32, got {setting!r}")
    return setting == "bf16" or (setting == "auto" and native_cpu_bf16())


def native_cpu_bf16(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """True when the CPU has a bf16 dot-product instruction (the ``avx512_bf16`` or ``amx_bf16`` flag in
    ``cpuinfo``); False where the file is absent (not Linux) or lists neither."""
    try:
        flags = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return re.search(r"\b(avx512_bf16|amx_bf16)\b", flags) is not None


def peak_memory_mib(device: torch.device) -> float | None:
    """``torch.cuda.max_memory_allocated`` of ``device`` in MiB (tensors only: not the CUDA context or the
    allocator's cache); None off CUDA."""
    if device.type != "cuda":
        return None
    return torch.cuda.max_memory_allocated(device) / 2**20


def describe(device: torch.device) -> dict:
    """``{"device": "cuda:0", "device_name": "NVIDIA H200"}`` (the CPU: ``platform.processor()``)."""
    if device.type == "cuda":
        return {"device": str(device), "device_name": torch.cuda.get_device_name(device)}
    return {"device": device.type, "device_name": platform.processor() or "cpu"}
