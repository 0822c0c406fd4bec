"""What a device can do and where its time goes, for ``benchmarks/pretrain.py``: the matmul limit a train step is
read against (``matmul_flops``) and a ``torch.profiler`` breakdown of steps by kernel kind (``profile_steps``)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

PROFILE_STEPS = 20  # --profile: steps under torch.profiler, after the timed ones
#: --profile: a CUDA kernel's kind, by the first pattern its name matches (cuBLAS/CUTLASS GEMMs are nvjet, sm90_*,
#: *gemm*, cutlass; SDPA's kernels flash/fmha/efficient attention; inductor's fused kernels triton_*)
KERNEL_KINDS = {"matmul": r"gemm|nvjet|cutlass|xmma|sm90_", "attention": r"flash|fmha|attention", "triton": r"^triton_"}
#: --profile: which of SDPA's paths ran, by op or kernel name (under torch.compile the math path leaves no SDPA op,
#: only bmm and a fused kernel named after ``_safe_softmax``, as on the first H200 run)
ATTENTION_PATHS = {
    "flash": r"_flash_attention|flash_fwd|flash_bwd",
    "efficient": r"_efficient_attention|fmha",
    "cudnn": r"_cudnn_attention|cudnn.*(sdpa|attention)",
    "math": r"_scaled_dot_product_attention_math|_safe_softmax",
}


def sync(device) -> None:
    """Wait for ``device``'s queued work (CUDA); a no-op on the CPU, where work is synchronous."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_flops(device, seconds: float = 2.0, bf16: bool | None = None) -> dict:
    """The limit a train step's FLOPs read against, measured here: FLOP/s of square matrix products on
    ``device`` (CPU: float32 1024^3 on torch's threads, bf16 with ``bf16``; CUDA: bf16 8192^3), best window over
    ``seconds`` (2 * size**3 FLOPs per product; each window synchronized, and doubled until it lasts 0.1 s)."""
    import torch

    cuda = device.type == "cuda"
    bf16 = cuda if bf16 is None else bf16
    size, dtype = 8192 if cuda else 1024, torch.bfloat16 if bf16 else torch.float32
    a, b = (torch.randn(size, size, device=device, dtype=dtype) for _ in range(2))
    torch.mm(a, b)
    sync(device)
    per_window, best, deadline = 1, 0.0, time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        for _ in range(per_window):
            torch.mm(a, b)
        sync(device)
        elapsed = time.perf_counter() - start
        best = max(best, 2 * size**3 * per_window / elapsed)
        per_window *= 2 if elapsed < 0.1 else 1
    del a, b
    if cuda:
        torch.cuda.empty_cache()
    kind = f"{'bf16' if bf16 else 'float32'} {size}^3 matmul"
    return {"kind": kind, "flops_per_s": best, "threads": None if cuda else torch.get_num_threads()}


def profile_steps(run_step, device, out: Path, steps: int = PROFILE_STEPS) -> dict:
    """``steps`` calls of ``run_step`` under ``torch.profiler`` (CPU, and the device's kernels on CUDA): where a
    step's time goes. Writes ``out/pretrain_profile.txt`` (the 40 costliest ops by self device time, or by self
    CPU time on a CPU) and ``out/pretrain_profile.json``: the wall seconds of the steps, the seconds the device's
    kernels ran (``busy_fraction`` = kernel seconds / wall seconds: under 1, the GPU waited on the host) and
    those seconds by kernel kind (matrix products, attention, Triton-generated, other; kind by kernel name),
    and ``attention_paths``, the SDPA paths that ran (``attention_paths``)."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity

    cuda = device.type == "cuda"
    sync(device)
    with torch.profiler.profile(activities=[ProfilerActivity.CPU, *[ProfilerActivity.CUDA] * cuda]) as prof:
        start = time.perf_counter()
        for _ in range(steps):
            run_step()
        sync(device)
        wall_s = time.perf_counter() - start
    events = prof.key_averages()
    kernels = [e for e in events if e.device_type == DeviceType.CUDA]
    by_kind: dict[str, float] = {}
    for event in kernels:
        kind = next((k for k, pattern in KERNEL_KINDS.items() if re.search(pattern, event.key, re.I)), "other")
        by_kind[kind] = by_kind.get(kind, 0.0) + event.self_device_time_total / 1e6
    busy_s = sum(by_kind.values()) if cuda else None
    summary = {
        "steps": steps,
        "wall_s": wall_s,
        "device_kernel_s": busy_s,
        "busy_fraction": busy_s / wall_s if cuda else None,
        "kernel_s_by_kind": by_kind,
        "attention_paths": attention_paths(event.key for event in events),
    }
    out.mkdir(parents=True, exist_ok=True)
    sort = "self_device_time_total" if cuda else "self_cpu_time_total"
    (out / "pretrain_profile.txt").write_text(events.table(sort_by=sort, row_limit=40), encoding="utf-8")
    (out / "pretrain_profile.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return summary


def attention_paths(names) -> list[str]:
    """The SDPA paths (``ATTENTION_PATHS``: flash, efficient, cudnn, math) that profiler op or kernel ``names``
    show, sorted; empty where no attention ran."""
    names = list(names)
    return sorted(path for path, pattern in ATTENTION_PATHS.items() if any(re.search(pattern, n) for n in names))
