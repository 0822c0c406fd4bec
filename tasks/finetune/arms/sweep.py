"""Running many fine-tuning runs: the per-arm learning-rate sweep on dev, worker processes, MLflow logging.

Every arm (job) first trains with ``sweep_seed`` once per multiplier of ``lr_grid`` (a frozen cls arm, a
logistic-regression probe without a learning rate, once); the multiplier with the best dev score (``SELECT_METRIC``,
ties to the smaller multiplier) is the arm's own, and every seed of the arm's ``seeds`` trains with it. A choice at the
edge of the grid widens it by one step past that edge (``widened``), up to ``lr_grid_widen`` times, so an arm's LR is
chosen inside the range tried, not clipped by it. No arm borrows another arm's learning rate, test never enters the
choice, and no reported run is the best of several on dev (the sweep seed is not a reported seed). The sweep is logged
per arm (``lr_sweep`` in metrics; on the arm's MLflow run, one step per tried rate).

Runs go to worker processes (``spawn``: a fresh interpreter, no forked OpenMP state, no inherited CUDA
context), each with ``torch_threads`` threads; every run is seeded on its own, so results do not depend on the
schedule. Each run is given a device slot when it starts (``slots``): on the CPU ``workers`` slots, on CUDA
``runs_per_gpu`` slots on every visible GPU, a run going to the least busy GPU. On CUDA every GPU has its own
pool of ``runs_per_gpu`` workers, and each worker sees that GPU alone: its initializer sets
``CUDA_VISIBLE_DEVICES`` to the GPU (``visible_gpu``) before any CUDA call and makes it the current device, so
the run trains on ``cuda:0`` of the worker, its CUDA context, allocator cache and pinned host memory
(``place``'s ``pin_memory`` uses the current device) live on that GPU only, and no worker wanders to another.
The costliest arms start first and an arm's seeds follow its sweep at once (longest-processing-time-first list
scheduling, Graham 1969), so a long arm does not run alone at the end.
"""

from __future__ import annotations

import heapq
import multiprocessing
import os
from collections import Counter
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, ThreadPoolExecutor, wait
from dataclasses import replace
from itertools import count
from pathlib import Path
from typing import TypeVar

import torch
from tqdm import tqdm

from tasks.common.runtime.device import configure
from tasks.finetune.arms.operational import seed_folder
from tasks.finetune.arms.training import Run, is_probe, train_and_test

T, U = TypeVar("T"), TypeVar("U")


def sweep_and_train(
    jobs: list,
    seeds: dict[str, list[int]],
    sweep_seed: int,
    grids: dict[str, list[float]],
    runner: Runner,
    save_to: dict[str, Path],
) -> dict[str, dict]:
    """``{job.key: {"sweep": {scale: result}, "scale": chosen, "seeds": [result per seed]}}`` for every job.

    ``seeds``: job key -> the seeds it reports (``FinetuneParams.seeds_for``: the reference MiniLM may run fewer
    than the tiny arms); ``grids``: job key -> the multipliers it sweeps (``FinetuneParams.lr_grid_for``).
    ``result`` is ``training.train_and_test``'s dict; the sweep runs use ``sweep_seed`` (and its own draw of the
    train docs, ``Job.for_seed``). An arm's seeds start as soon as its own sweep is done, and the costliest arms go
    first (``expected_cost``), so no worker idles while one long arm finishes. Every reported run of an arm whose
    key is in ``save_to`` saves its model: its first seed's there, the others' beside it
    (``operational.seed_folder``).
    """
    state = {job.key: {"sweep": {}, "seeds": {}, "grid": arm_grid(job, grids[job.key]), "widened": 0} for job in jobs}

    def follow(run: Run, result: dict) -> list[Run]:
        entry = state[run.job.key]
        if run.seed != sweep_seed:
            entry["seeds"][run.seed] = result
            return []
        entry["sweep"][run.lr_scale] = result
        if len(entry["sweep"]) < len(entry["grid"]):
            return []
        entry["scale"] = best_scale(entry["sweep"], entry["grid"])
        wider = widened(entry["grid"], entry["scale"]) if entry["widened"] < run.job.tcfg.lr_grid_widen else None
        if wider is not None:
            entry["grid"] = sorted([*entry["grid"], wider])
            entry["widened"] += 1
            return [Run(run.job, sweep_seed, wider, score_test=False)]
        folder, own = save_to.get(run.job.key), seeds[run.job.key]
        return [Run(run.job, seed, entry["scale"], folder and seed_folder(folder, seed, own)) for seed in own]

    with runner:
        runner.run_all(
            [Run(job, sweep_seed, scale, score_test=False) for job in jobs for scale in state[job.key]["grid"]],
            follow,
            total=sum(len(entry["grid"]) + len(seeds[key]) for key, entry in state.items()),
        )
    return {
        key: {
            "sweep": {scale: entry["sweep"][scale] for scale in entry["grid"]},
            "scale": entry["scale"],
            "seeds": [entry["seeds"][seed] for seed in seeds[key]],
        }
        for key, entry in state.items()
    }


def alongside(train: Callable[[], T], other: Callable[[], U]) -> tuple[T, U]:
    """``(train(), other())`` computed at once: ``train`` (the sweep: it only schedules worker processes and
    waits) on a thread, ``other`` (the baselines' CPU work and their MLflow logging) on this one. An error of
    either is raised once both have ended (a running sweep is not interrupted)."""
    with ThreadPoolExecutor(1, thread_name_prefix="finetune-sweep") as pool:
        future = pool.submit(train)
        done = other()
        return future.result(), done


def arm_grid(job, grid: list[float]) -> list[float]:
    """The learning-rate multipliers ``job`` tries first, ascending: ``grid``, or its first entry alone for a
    logistic-regression probe (``training.is_probe``), which has no learning rate (its C is chosen on dev
    inside the run)."""
    return grid[:1] if is_probe(job) else sorted(grid)


def widened(grid: list[float], chosen: float) -> float | None:
    """The next multiplier past the edge of ``grid`` (ascending, at least two entries) that ``chosen`` sits on,
    one step of the grid's own ratio at that edge beyond it (``[1, 3, 10]`` chose 10: 10 x 10/3); None when
    ``chosen`` lies inside the grid, so the sweep stops only at an interior optimum or after
    ``lr_grid_widen`` steps (the metrics' ``lr_sweep.dev`` then shows the chosen LR still at an edge)."""
    if len(grid) < 2 or grid[0] < chosen < grid[-1]:
        return None
    if chosen == grid[-1]:
        return grid[-1] * grid[-1] / grid[-2]
    return grid[0] * grid[0] / grid[1]


def expected_cost(job) -> int:
    """A run's relative cost: bytes of the encoder's weights, tripled when the encoder trains (forward and
    backward) rather than only runs forward (frozen)."""
    weights = sum(f.stat().st_size for f in Path(job.folder).glob("*.safetensors"))
    return weights * (1 if job.spec.mode == "frozen" else 3)


def best_scale(results: dict[float, dict], grid: list[float]) -> float:
    """The multiplier whose run scored best on dev (``dev_best_<metric>``); the earlier grid entry wins a tie."""

    def dev(scale: float) -> float:
        return next(v for k, v in results[scale].items() if k.startswith("dev_best_"))

    return max(grid, key=lambda scale: (dev(scale), -grid.index(scale)))


def slots(setting: str, device: torch.device, workers: int, runs_per_gpu: int) -> list[str]:
    """One entry per run trained at once, naming its device: ``workers`` x ``cpu`` on the CPU; on CUDA
    ``runs_per_gpu`` x ``cuda:<i>`` for every GPU torch sees, or for the one GPU ``setting`` names (``cuda:N``)."""
    if device.type != "cuda":
        return [device.type] * workers
    gpus = [device.index] if ":" in setting else list(range(torch.cuda.device_count()))
    return [f"cuda:{gpu}" for gpu in gpus for _ in range(runs_per_gpu)]


def visible_gpu(slot: str) -> str | None:
    """What ``CUDA_VISIBLE_DEVICES`` a worker of device slot ``slot`` gets: for ``cuda:N`` the N-th GPU this
    process sees (the N-th entry of its own ``CUDA_VISIBLE_DEVICES``, else ``N``); None for the CPU."""
    if not slot.startswith("cuda"):
        return None
    index = int(slot.split(":")[1]) if ":" in slot else 0
    seen = [entry.strip() for entry in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if entry.strip()]
    return seen[index] if seen else str(index)


def worker_device(slot: str) -> str:
    """The device a run of slot ``slot`` names inside its pool's worker: ``cuda:0`` (the one GPU it sees) for a
    GPU slot, the slot itself otherwise."""
    return "cuda:0" if slot.startswith("cuda") else slot


class Runner:
    """Runs ``train_and_test`` on device ``slots`` (``slots``): over process pools when there are several, one
    pool per distinct slot (the CPU, or one GPU) with as many workers as that slot has entries, else in this
    process. A GPU pool's workers see only their GPU (``CUDA_VISIBLE_DEVICES``, ``visible_gpu``) and train on
    their ``cuda:0`` (``worker_device``). ``deterministic``: ``hardware.deterministic``, applied in every worker
    too; ``cpu_bf16``: given to every run (``Run.cpu_bf16``)."""

    def __init__(self, threads: int, slots: list[str], deterministic: bool = False, cpu_bf16: bool = False) -> None:
        self.threads, self.slots, self.deterministic, self.pools = threads, slots, deterministic, {}
        self.cpu_bf16 = cpu_bf16
        self.workers = len(slots)

    def __enter__(self) -> Runner:
        if self.workers > 1:
            context = multiprocessing.get_context("spawn")
            gpus = {slot: visible_gpu(slot) for slot in self.slots}  # from this process's view, before any pool
            self.pools = {
                slot: ProcessPoolExecutor(
                    n,
                    mp_context=context,
                    initializer=_init_worker,
                    initargs=(self.threads, slot, self.deterministic, gpus[slot]),
                )
                for slot, n in Counter(self.slots).items()
            }
        else:
            _init_worker(self.threads, self.slots[0], self.deterministic)
        return self

    def free_slot(self, running: dict) -> str:
        """The device with the fewest runs in ``running`` (values: the runs) relative to its slots."""
        busy = Counter(run.device for run in running.values())
        return min(dict.fromkeys(self.slots), key=lambda d: busy[d] / self.slots.count(d))

    def __exit__(self, *exc) -> None:
        for pool in self.pools.values():
            pool.shutdown(cancel_futures=True)
        self.pools = {}

    def run_all(self, runs: list[Run], follow: Callable[[Run, dict], list[Run]], total: int) -> None:
        """Train every run; each finished run's ``follow(run, result)`` may add runs. A free worker always takes
        the costliest waiting run (``expected_cost``), so the long arm's seeds overtake queued short runs.
        One progress bar, whose ``total`` (the planned runs) grows when ``follow`` adds runs past it (LR widening).
        """
        waiting: list[tuple[int, int, Run]] = []
        order = count()
        running: dict = {}

        def push(new: list[Run]) -> None:
            for run in new:
                heapq.heappush(waiting, (-expected_cost(run.job), next(order), run))

        def finished(bar, new: list[Run]) -> None:
            push(new)
            bar.update()
            if bar.n + len(waiting) + len(running) > bar.total:
                bar.total = bar.n + len(waiting) + len(running)
                bar.refresh()

        push(runs)
        with tqdm(total=total, desc="finetune runs", unit="run") as bar:
            if not self.pools:
                while waiting:
                    run = replace(heapq.heappop(waiting)[2], device=self.slots[0], cpu_bf16=self.cpu_bf16)
                    finished(bar, follow(run, train_and_test(run)))
                return
            while waiting or running:
                while waiting and len(running) < self.workers:
                    run = replace(heapq.heappop(waiting)[2], device=self.free_slot(running), cpu_bf16=self.cpu_bf16)
                    pool = self.pools[run.device]  # the slot's own pool has a free worker (free_slot)
                    running[pool.submit(_quiet_run, replace(run, device=worker_device(run.device)))] = run
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    run = running.pop(future)
                    finished(bar, follow(run, future.result()))


def _init_worker(threads: int, device: str, deterministic: bool, gpu: str | None = None) -> None:
    """A worker's (or, with one slot, this process's) settings before its first run. ``gpu``: the worker's
    ``CUDA_VISIBLE_DEVICES`` (``visible_gpu``), set before any CUDA call, so the worker sees one GPU, its
    ``cuda:0``; None: this process keeps what it sees. On CUDA the run's device becomes the current one, so
    pinned host memory and the CUDA context are that GPU's."""
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
        device = worker_device(device)
    torch.set_num_threads(threads)
    configure(torch.device(device), deterministic)
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))


def _quiet_run(run: Run) -> dict:
    return train_and_test(run, show_progress=False)


def log_job(log, job, result: dict, seeds: list[int], predictions: dict) -> None:
    """Log one arm: params and sweep on ``log`` (the arm's run), a nested run per seed with its ``predictions``
    file (``{seed: path}``) and the arm's ``task``, ``variant``, ``mode``, ``head`` besides its ``seed`` as
    params, so MLflow's Group by and parallel-coordinates views compare seeds and arms directly."""
    spec = job.spec
    log.params(
        {
            "task": job.item,
            "variant": spec.variant,
            "mode": spec.mode,
            "head": spec.head,
            "model_dir": job.folder,
            "seeds": seeds,
            "lr_scale": result["scale"],
            **{f"{s}_examples": len(e) for s, e in job.exs.items() if s != "train"},
        }
    )  # train: per seed
    for index, (scale, res) in enumerate(result["sweep"].items()):
        dev = {f"lr_sweep_{k}": v for k, v in res.items() if k.startswith("dev_best_")}
        log.metrics(dev | {"lr_sweep_scale": scale}, step=index)
    for res in result["seeds"]:
        with log.child(f"{job.item}/{job.key}/seed{res['seed']}") as child:
            child.params(
                {
                    "task": job.item,
                    "variant": spec.variant,
                    "mode": spec.mode,
                    "head": spec.head,
                    "seed": res["seed"],
                    "lr_scale": res["lr_scale"],
                    "lr_encoder": res["lr_encoder"],
                    "lr_head": res["lr_head"],
                    "train_examples": len(job.for_seed(res["seed"]).exs["train"]),
                }
            )
            for row in res["history"]:
                child.metrics({k: v for k, v in row.items() if k != "epoch"}, step=row["epoch"])
            child.metrics(res["test"] | {"train_seconds": res["train_seconds"]})  # the run opens after training
            child.artifact(predictions[res["seed"]], "predictions")
