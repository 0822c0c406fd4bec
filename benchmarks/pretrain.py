"""Benchmark of the ``pretrain`` loop: train tokens/s against HF ``Trainer`` on the same device in the same run.

Baseline: ``transformers.Trainer`` with ``DataCollatorForLanguageModeling`` (default settings apart from the batch
size, learning rate, steps and, on CUDA, ``bf16=True``, ``torch_compile=True`` when ours compiles and 4 persistent
dataloader workers: HF's own advice for speed; on ModernBERT with ``sparse_prediction`` on, the model's own
switch for logits at the masked positions only, as ModernBERT's training recipe runs it: a competent user's
setting, and what our loop's masked-only loss does) on the same model
(``tasks.pretrain.init.build_model``: SDPA attention), the same packed blocks, batch and precision. Candidate:
the stage's own loop pieces (``tasks.pretrain.trainer.Trainer``: ``_micro_batches`` through the ``Prefetcher``
into ``_step``, masked-only loss; on CUDA bf16 autocast and ``torch.compile`` of the encoder), timed by the
stage's ``Throughput`` after a synchronize, so ``compile_seconds`` is what the warm-up window took beyond the
steady rate. The two run alternately, each in a fresh subprocess (peak memory per variant), ``--rounds``
times; the speedup is the ratio of the medians, which survives a machine shared with other jobs.

Both record the model's training FLOPs per token (``tasks.pretrain.hardware.train_flops_per_token``) and the
achieved FLOP/s, read against a limit measured in the same run on the device that ran (``fraction_of_limit``):
CPU float32 1024^3 matmuls on torch's threads; CUDA bf16 8192^3 GEMMs, and the GPU's datasheet dense bf16 peak
(``tasks.pretrain.hardware.peak_flops``: MFU).

- ``--device``: ``auto`` (default: CUDA when torch sees a GPU, ``tasks.common.runtime.device.resolve``), ``cpu``,
  ``cuda``, ``cuda:N``. CPU: the ``tiny`` preset, 32 x 128-token blocks, float32 (compile off, as the stage's
  default). CUDA: the gpu profile's shape: ``base`` preset, 64 x 512-token blocks, 30,522-token vocabulary,
  mlm_probability 0.3, bf16, ``torch.compile``.
- ``--smoke`` (or ``--quick``): tiny sizes, few steps, one round, both workers in this process (the imports once;
  a dry run of ~10 s on a 2-core CPU), results to ``--out`` or a temporary folder; ``make test`` runs it
  (tests/benchmarks/test_benchmarks_smoke.py), and so does the GPU check's dry run (benchmarks/gpu_check.sh).

Rows: ours and HF Trainer are medians of the alternated rounds with their spread; the ratio of medians, best-of-N
beside it; the results carry their provenance (``benchmarks/_provenance.py``).

    .venv/bin/python benchmarks/pretrain.py          # writes benchmarks/results/pretrain.json; --smoke: a dry run
    .venv/bin/python benchmarks/pretrain.py --device cuda --out benchmarks/results/gpu_check/pretrain_gpu.json
"""

from __future__ import annotations

import sys
from pathlib import Path

# run as a script, this folder comes first on sys.path, and benchmarks/tokenize.py would shadow the stdlib
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402

from benchmarks._device_time import PROFILE_STEPS, matmul_flops  # noqa: E402
from benchmarks._pretrain_data import build_data  # noqa: E402
from benchmarks._pretrain_loops import measure_hf_trainer, measure_stage, stage_config  # noqa: E402
from benchmarks._provenance import add_smoke, out_path, ratio_fields, write_results  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "pretrain.json"
#: The code measured: the pretrain stage, its imports followed (HF Trainer's side is the installed transformers).
MEASURED = ("tasks.pretrain",)

TARGET_SPEEDUP = 1.3  # over HF Trainer on the CPU
#: On CUDA (the GPU validation run): >= 2x HF Trainer and MFU >= 40% of the datasheet bf16 peak (NVIDIA's BERT
#: reaches about 48-57% on A100 by the 6 N tokens rule).
GPU_TARGET_SPEEDUP, GPU_TARGET_MFU = 2.0, 0.40
#: per device type: model preset, blocks per step, tokens per block, tokenizer vocabulary, masking rate, timed
#: and warm-up steps, rounds; ``quick``: the dry run
# fmt: off
SETTINGS = {
    "cpu": {"preset": "tiny", "batch": 32, "seq_len": 128, "vocab": 8000, "mlm_probability": 0.15, "steps": 12,
            "warmup": 3, "rounds": 5, "max_docs": None},
    "cuda": {"preset": "base", "batch": 64, "seq_len": 512, "vocab": 30522, "mlm_probability": 0.3, "steps": 30,
             "warmup": 5, "rounds": 1, "max_docs": None},
    "quick": {"preset": "tiny", "batch": 8, "seq_len": 64, "vocab": 2000, "mlm_probability": 0.15, "steps": 3,
              "warmup": 1, "rounds": 1, "max_docs": 300},
}
# fmt: on


def worker(args: argparse.Namespace) -> dict:
    """Measure one variant in this process: tokens/s, FLOPs, peak host and (CUDA) device memory, the device."""
    import torch

    from tasks.common.runtime.device import describe, peak_memory_mib

    cfg = stage_config(args.preset, args.batch, args.mlm_probability, args.device)
    if args.variant == "stage":
        cfg = cfg.model_copy(update={"document_mask": args.document_mask})
        timed = measure_stage(Path(args.data), cfg, args.warmup, args.steps, args.profile and Path(args.profile))
    else:
        timed = measure_hf_trainer(Path(args.data), cfg, args.warmup, args.steps)
    out = {"variant": args.variant, **timed}
    device = torch.device(args.device)
    return (
        out
        | describe(device)
        | {
            "achieved_flops_per_s": out["tokens_per_s"] * out["flops_per_token"],
            "peak_rss_mb": peak_rss_mb(),
            "peak_cuda_mib": peak_memory_mib(device),
            "bf16": device.type == "cuda" and cfg.bf16,
        }
    )


def peak_rss_mb() -> float:
    """This process's peak resident memory (``VmHWM``, MiB): not ``ru_maxrss``, which keeps the high-water mark
    of the parent this process was forked from across ``exec`` (the parent that built the data)."""
    for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise KeyError("/proc/self/status has no VmHWM")


def spawn(variant: str, data: Path, opts: dict, device) -> dict:
    """One worker in a fresh process; on CUDA it sees only ``device`` (as ``cuda:0``), so HF Trainer cannot
    spread over other GPUs (DataParallel) and both variants run on the same one. With ``opts["in_process"]`` (a
    smoke run) the same worker runs in this process instead, so the imports are paid once."""
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "TOKENIZERS_PARALLELISM": "false"}  # idle threads sleep
    target = "cpu"
    if device.type == "cuda":
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        env["CUDA_VISIBLE_DEVICES"] = visible.split(",")[device.index] if visible else str(device.index)
        target = "cuda:0"
    given = {
        "variant": variant,
        "data": str(data),
        "device": str(device) if opts.get("in_process") else target,
        "preset": opts["preset"],
        "batch": opts["batch"],
        "steps": opts["steps"],
        "warmup": opts["warmup"],
        "mlm_probability": opts["mlm_probability"],
        "profile": opts["profile"] if variant == "stage" else None,
        "document_mask": opts.get("document_mask", False),
    }
    if opts.get("in_process"):
        return worker(argparse.Namespace(**given))
    cmd = [sys.executable, __file__, "--worker"]
    for key, value in given.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            cmd.append(flag)
        elif value not in (None, False):
            cmd += [flag, str(value)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if done.returncode:
        raise RuntimeError(f"{variant} worker failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def compare(data: Path, opts: dict, device) -> dict:
    """Alternate stage / HF Trainer workers ``rounds`` times; medians and their ratio."""
    runs: dict[str, list[dict]] = {"stage": [], "hf_trainer": []}
    for i in range(opts["rounds"]):
        for variant in runs:  # --profile: the first round's stage worker only (a profile per round is one too many)
            runs[variant].append(spawn(variant, data, opts if i == 0 else {**opts, "profile": None}, device))
            print(json.dumps(runs[variant][-1]), flush=True)
    med = {v: statistics.median(r["tokens_per_s"] for r in rs) for v, rs in runs.items()}
    cpu = {v: statistics.median(r["tokens_per_cpu_s"] for r in rs) for v, rs in runs.items()}
    flops_per_token = runs["stage"][0]["flops_per_token"]
    return {
        "preset": opts["preset"],
        "batch_blocks": opts["batch"],
        "seq_len_tokens": opts["seq_len"],
        "mlm_probability": opts["mlm_probability"],
        "steps_timed": opts["steps"],
        "warmup_steps": opts["warmup"],
        "rounds": opts["rounds"],
        "bf16": runs["stage"][0]["bf16"],
        "compile": runs["stage"][0]["compile"],
        "document_mask": opts.get("document_mask", False),
        "flops_per_token": flops_per_token,
        "stage_achieved_flops_per_s": med["stage"] * flops_per_token,
        "stage_tokens_per_s": med["stage"],
        "hf_trainer_tokens_per_s": med["hf_trainer"],
        "speedup": med["stage"] / med["hf_trainer"],
        # tokens per second of process CPU time: less sensitive to other jobs on a shared machine
        "speedup_cpu_time": cpu["stage"] / cpu["hf_trainer"],
        "compile_seconds": statistics.median(r["compile_seconds"] or 0.0 for r in runs["stage"]),
        "first_step_seconds": {v: statistics.median(r["first_step_seconds"] for r in rs) for v, rs in runs.items()},
        "peak_rss_mb": {v: max(r["peak_rss_mb"] for r in rs) for v, rs in runs.items()},
        "peak_cuda_mib": {v: max(r["peak_cuda_mib"] or 0.0 for r in rs) or None for v, rs in runs.items()},
        "runs": runs,
    }


def goal(cmp: dict, device: dict, target: float) -> dict:
    """The row's goal and whether it is met: on CUDA both ``GPU_TARGET_SPEEDUP`` and ``GPU_TARGET_MFU`` (an MFU
    that cannot be computed, on a GPU without a known peak, misses it); elsewhere ``target`` x HF Trainer."""
    if not device["device"].startswith("cuda"):
        return {"goal": f">= {target}x HF Trainer", "meets_goal": cmp["speedup"] >= target}
    mfu = cmp.get("mfu_vs_datasheet")
    return {
        "goal": f">= {GPU_TARGET_SPEEDUP:g}x HF Trainer and MFU >= {GPU_TARGET_MFU:.0%}",
        "meets_goal": cmp["speedup"] >= GPU_TARGET_SPEEDUP and mfu is not None and mfu >= GPU_TARGET_MFU,
    }


def summary_rows(cmp: dict, limit: dict, device: dict, target: float) -> list[dict]:
    """The README/``make bench`` row (``limit``: tokens/s if every FLOP ran at the measured matmul speed); on
    CUDA the case also names the MFU against the GPU's datasheet peak."""
    tokens_limit = limit["flops_per_s"] / cmp["flops_per_token"]
    how = [
        f"{cmp['preset']} preset",
        *["bf16"] * cmp["bf16"],
        *["torch.compile"] * cmp["compile"],
        *["document mask"] * cmp.get("document_mask", False),
    ]
    case = ", ".join([*how, f"{cmp['batch_blocks']} x {cmp['seq_len_tokens']}-token blocks"])
    if device["device"].startswith("cuda"):
        mfu = cmp.get("mfu_vs_datasheet")
        peak = (
            f"MFU {mfu:.0%} of the {limit['datasheet_peak_flops_per_s'] / 1e12:,.0f} TFLOP/s bf16 datasheet peak"
            if mfu is not None
            else "datasheet peak unknown"
        )
        case += f", {device['device_name']} ({peak})"
    else:
        case += ", CPU"
    figures = ratio_fields(*([r["tokens_per_s"] for r in cmp["runs"][v]] for v in ("stage", "hf_trainer")))
    return [
        {
            "benchmark": "pretrain",
            "case": case,
            "unit": "train tokens/s",
            "best_peer": "HF Trainer",
            **figures,
            "limit": tokens_limit,
            "fraction_of_limit": cmp["stage_tokens_per_s"] / tokens_limit,
            **goal(cmp, device, target),
        }
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--variant", choices=["stage", "hf_trainer"], help=argparse.SUPPRESS)
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N (default auto)")
    parser.add_argument("--quick", dest="smoke", action="store_true", help="the same as --smoke")
    parser.add_argument("--data", help="folder from build_data (default: built in a temp dir)")
    for flag, kind in (
        ("preset", str),
        ("batch", int),
        ("seq-len", int),
        ("vocab", int),
        ("mlm-probability", float),
        ("steps", int),
        ("warmup", int),
        ("rounds", int),
    ):
        parser.add_argument(f"--{flag}", type=kind, help="default: per device (SETTINGS), or --quick's")
    parser.add_argument(
        "--profile",
        help=f"folder: {PROFILE_STEPS} more steps of our loop under torch.profiler "
        "(pretrain_profile.txt, pretrain_profile.json; untimed)",
    )
    parser.add_argument(
        "--document-mask",
        action="store_true",
        help="our loop with pretrain.document_mask (attention within each document; HF Trainer stays unmasked)",
    )
    add_smoke(parser, RESULTS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args)))
        return
    import torch

    from tasks.common.runtime.device import describe, resolve
    from tasks.pretrain.hardware import peak_flops

    try:
        device = resolve(args.device, name="--device")
    except ValueError as err:  # no such device: one line naming this command's option, not a traceback
        parser.error(str(err))
    out = out_path(args, RESULTS)
    opts = dict(SETTINGS["quick" if args.smoke else device.type])
    opts.update({k: v for k, v in vars(args).items() if k in opts and v is not None})
    opts["profile"] = args.profile and str(Path(args.profile).resolve())
    opts["document_mask"] = args.document_mask
    opts["in_process"] = args.smoke  # a smoke run's workers in this process: the imports once
    if opts["warmup"] < 1 or opts["steps"] < 1:
        parser.error("--warmup and --steps must be at least 1")
    with tempfile.TemporaryDirectory(prefix="bench-pretrain-") as tmp:
        data = Path(args.data) if args.data else Path(tmp)
        if not args.data:
            build_data(data, vocab_size=opts["vocab"], seq_len=opts["seq_len"], max_docs=opts["max_docs"])
        cmp = compare(data, opts, device)
    limit = matmul_flops(device, seconds=0.5 if args.smoke else 2.0)
    where = describe(device)
    limit["datasheet_peak_flops_per_s"] = peak_flops(device, bf16=True) if device.type == "cuda" else None
    if limit["datasheet_peak_flops_per_s"]:
        cmp["mfu_vs_datasheet"] = cmp["stage_achieved_flops_per_s"] / limit["datasheet_peak_flops_per_s"]
        cmp["hf_trainer_mfu_vs_datasheet"] = cmp["mfu_vs_datasheet"] / cmp["speedup"]
    cmp["mfu_vs_measured_matmul"] = cmp["stage_achieved_flops_per_s"] / limit["flops_per_s"]
    rows = summary_rows(cmp, limit, where, TARGET_SPEEDUP)
    result = {
        "what": "train tokens/s: pretrain stage loop vs HF Trainer + DataCollatorForLanguageModeling, same device",
        "device": where,
        "quick": args.smoke,
        "limit": limit,
        "comparison": cmp,
        "machine": {
            "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "platform": platform.platform(),
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
        },
        "target_speedup": TARGET_SPEEDUP,
        "ratio_vs_best_peer": rows[0]["ratio_vs_best_peer"],
        "fraction_of_limit": rows[0]["fraction_of_limit"],
        "rows": rows,
        # what the GPU validation run is read by: the device's name, MFU and the peak it divides by
        "gpu_name": where["device_name"] if device.type == "cuda" else None,
        "mfu": cmp.get("mfu_vs_datasheet"),
        "mfu_peak": (
            f"dense bf16 datasheet peak, {limit['datasheet_peak_flops_per_s'] / 1e12:,.0f} TFLOP/s"
            if limit["datasheet_peak_flops_per_s"]
            else None
        ),
    }
    print(json.dumps({k: v for k, v in cmp.items() if k != "runs"} | {"device": where}, indent=1))
    write_results(out, result, MEASURED, args.smoke, device=str(device))


if __name__ == "__main__":
    main()
