"""Running many fine-tuning runs: the per-arm learning-rate sweep on dev, worker processes, MLflow logging.

Every arm (job) first trains its first seed once per multiplier of ``lr_grid``; the multiplier with the best dev
score (``SELECT_METRIC``, ties to the earlier grid entry) is the arm's own, and its remaining seeds train with
it. No arm borrows another arm's learning rate, and test never enters the choice (the first seed's test score
at the chosen rate is kept as that seed's result; the others are logged and dropped). The sweep is logged per
arm (``lr_sweep`` in metrics, one nested MLflow run per tried rate).

Runs go to ``workers`` processes (``spawn``: a fresh interpreter, no forked OpenMP state), each with
``torch_threads`` threads; every run is seeded on its own, so results do not depend on the schedule.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor

import torch
from tqdm import tqdm

from tasks.finetune.training import Run, train_and_test


def sweep_and_train(jobs: list, seeds: list[int], grid: list[float], threads: int, workers: int) -> dict[str, dict]:
    """``{job.key: {"sweep": {scale: result}, "scale": chosen, "seeds": [result per seed]}}`` for every job.

    ``result`` is ``training.train_and_test``'s dict. With one grid value there is no sweep run to spare.
    """
    first, rest = seeds[0], seeds[1:]
    with Runner(threads, workers) as runner:
        swept = runner.map([Run(job, first, scale) for job in jobs for scale in grid], "lr sweep")
        by_job = {job.key: dict(zip(grid, swept[i * len(grid) : (i + 1) * len(grid)], strict=True))
                  for i, job in enumerate(jobs)}  # fmt: skip
        chosen = {key: best_scale(results, grid) for key, results in by_job.items()}
        later = runner.map([Run(job, seed, chosen[job.key]) for job in jobs for seed in rest], "seeds")
    out = {}
    for i, job in enumerate(jobs):
        own = later[i * len(rest) : (i + 1) * len(rest)]
        scale = chosen[job.key]
        out[job.key] = {"sweep": by_job[job.key], "scale": scale, "seeds": [by_job[job.key][scale], *own]}
    return out


def best_scale(results: dict[float, dict], grid: list[float]) -> float:
    """The multiplier whose run scored best on dev (``dev_best_<metric>``); the earlier grid entry wins a tie."""
    def dev(scale: float) -> float:
        return next(v for k, v in results[scale].items() if k.startswith("dev_best_"))

    return max(grid, key=lambda scale: (dev(scale), -grid.index(scale)))


class Runner:
    """Maps runs over a process pool (``workers > 1``) or in this process, results in input order."""

    def __init__(self, threads: int, workers: int) -> None:
        self.threads, self.workers, self.pool = threads, workers, None

    def __enter__(self) -> Runner:
        if self.workers > 1:
            context = multiprocessing.get_context("spawn")
            self.pool = ProcessPoolExecutor(self.workers, mp_context=context, initializer=_init_worker,
                                            initargs=(self.threads,))  # fmt: skip
        else:
            torch.set_num_threads(self.threads)
        return self

    def __exit__(self, *exc) -> None:
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)

    def map(self, runs: list[Run], what: str) -> list[dict]:
        """``train_and_test`` of every run, with one progress bar over the runs."""
        if self.pool is None:
            results: Iterable[dict] = (train_and_test(run) for run in runs)
        else:
            results = self.pool.map(_quiet_run, runs)
        return list(tqdm(results, total=len(runs), desc=f"finetune {what}", unit="run"))


def _init_worker(threads: int) -> None:
    torch.set_num_threads(threads)


def _quiet_run(run: Run) -> dict:
    return train_and_test(run, show_progress=False)


def log_job(log, job, result: dict, seeds: list[int], predictions: dict) -> None:
    """Log one arm: params and sweep on ``log`` (the arm's run), a nested run per seed with its ``predictions``
    file (``{seed: path}``)."""
    spec = job.spec
    log.params({"task": job.item, "variant": spec.variant, "mode": spec.mode, "head": spec.head,
                "model_dir": job.folder, "seeds": seeds, "lr_scale": result["scale"],
                **{f"{s}_examples": len(e) for s, e in job.exs.items()}})  # fmt: skip
    for index, (scale, res) in enumerate(result["sweep"].items()):
        dev = {f"lr_sweep_{k}": v for k, v in res.items() if k.startswith("dev_best_")}
        log.metrics(dev | {"lr_sweep_scale": scale}, step=index)
    for res in result["seeds"]:
        with log.child(f"{job.item}/{job.key}/seed{res['seed']}") as child:
            child.params({"seed": res["seed"], "lr_scale": res["lr_scale"], "lr_encoder": res["lr_encoder"],
                          "lr_head": res["lr_head"]})  # fmt: skip
            for row in res["history"]:
                child.metrics({k: v for k, v in row.items() if k != "epoch"}, step=row["epoch"])
            child.metrics(res["test"])
            child.artifact(predictions[res["seed"]], "predictions")
