"""Issue 57 item 6: fine-tuning on many GPUs. With a faked count of 8 GPUs every worker sees exactly one GPU
(``CUDA_VISIBLE_DEVICES`` set by its initializer before any CUDA call, its ``cuda:0`` made current, so pinned
memory and the CUDA context are that GPU's), each GPU serves ``runs_per_gpu`` workers, and the CPU baselines
run while the GPU sweep trains. No GPU is needed: the process pools are stood in for by a recorder that runs each
worker's initializer as the fresh worker process would and records what it was given."""

from __future__ import annotations

import os
import threading
from collections import Counter
from concurrent.futures import Future
from types import SimpleNamespace

import pytest
import torch

from tasks.finetune.arms import sweep
from tasks.finetune.arms.training import Run

GPUS, RUNS_PER_GPU = 8, 2


class RecordingPool:
    """A ``ProcessPoolExecutor`` stand-in: starts its workers by running the initializer (what each spawned
    worker does first) and records the ``CUDA_VISIBLE_DEVICES`` and current device each one ends up with."""

    created: list[RecordingPool] = []
    submitted: list[tuple[RecordingPool, str]] = []

    def __init__(self, max_workers, mp_context=None, initializer=None, initargs=()):
        self.max_workers, self.initargs, self.workers = max_workers, initargs, []
        parent = os.environ.get("CUDA_VISIBLE_DEVICES")
        for _ in range(max_workers):  # each worker starts with the parent's environment
            CURRENT.clear()
            initializer(*initargs)
            self.workers.append(
                {
                    "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
                    "current_device": CURRENT.get("device"),
                }
            )
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
            os.environ.update({} if parent is None else {"CUDA_VISIBLE_DEVICES": parent})
        RecordingPool.created.append(self)

    def submit(self, fn, run):
        RecordingPool.submitted.append((self, run.device))
        future = Future()
        future.set_result({"seed": run.seed})
        return future

    def shutdown(self, cancel_futures=False):
        pass


CURRENT: dict[str, object] = {}


@pytest.fixture
def eight_gpus(monkeypatch, tmp_path):
    """torch in this process sees 8 GPUs; the pools record; CUDA calls of the initializer are recorded."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: GPUS)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: CURRENT.update(device=str(device)))
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)
    monkeypatch.setattr(sweep, "configure", lambda device, deterministic: CURRENT.update(configured=str(device)))
    monkeypatch.setattr(sweep, "ProcessPoolExecutor", RecordingPool)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)  # restored after the test, whatever the pools set
    RecordingPool.created, RecordingPool.submitted = [], []
    job = SimpleNamespace(folder=tmp_path, spec=SimpleNamespace(mode="full"))
    return [Run(job, seed, 1.0) for seed in range(6 * GPUS * RUNS_PER_GPU)]


def run_all(runs: list[Run], slots: list[str]) -> None:
    with sweep.Runner(1, slots) as runner:
        runner.run_all(runs, lambda run, result: [], total=len(runs))


def test_eight_gpus_each_worker_sees_exactly_one_gpu(eight_gpus):
    slots = sweep.slots("auto", torch.device("cuda", 0), workers=3, runs_per_gpu=RUNS_PER_GPU)
    assert Counter(slots) == {f"cuda:{gpu}": RUNS_PER_GPU for gpu in range(GPUS)}
    run_all(eight_gpus, slots)
    pools = RecordingPool.created
    assert len(pools) == GPUS and all(pool.max_workers == RUNS_PER_GPU for pool in pools)
    workers = [worker for pool in pools for worker in pool.workers]
    assert len(workers) == GPUS * RUNS_PER_GPU
    assert all(w["current_device"] == "cuda:0" for w in workers)  # the one GPU it sees, made current
    assert all("," not in w["CUDA_VISIBLE_DEVICES"] for w in workers)  # exactly one GPU per worker
    assert Counter(w["CUDA_VISIBLE_DEVICES"] for w in workers) == {str(gpu): RUNS_PER_GPU for gpu in range(GPUS)}
    for pool in pools:  # a pool's workers all see its GPU
        assert len({w["CUDA_VISIBLE_DEVICES"] for w in pool.workers}) == 1
    assert {device for _, device in RecordingPool.submitted} == {"cuda:0"}  # a run names the worker's own GPU
    per_gpu = Counter(pool.workers[0]["CUDA_VISIBLE_DEVICES"] for pool, _ in RecordingPool.submitted)
    assert per_gpu == {str(gpu): len(eight_gpus) // GPUS for gpu in range(GPUS)}  # every GPU used, evenly
    wave = Counter(pool.workers[0]["CUDA_VISIBLE_DEVICES"] for pool, _ in RecordingPool.submitted[: len(slots)])
    assert wave == {str(gpu): RUNS_PER_GPU for gpu in range(GPUS)}  # at once: runs_per_gpu runs on each GPU


def test_the_parents_visible_gpus_are_the_ones_handed_out(eight_gpus):
    os.environ["CUDA_VISIBLE_DEVICES"] = "8,9,10,11,12,13,14,15"  # the fixture's monkeypatch restores it
    run_all(eight_gpus, sweep.slots("auto", torch.device("cuda", 0), 3, RUNS_PER_GPU))
    seen = Counter(w["CUDA_VISIBLE_DEVICES"] for pool in RecordingPool.created for w in pool.workers)
    assert seen == {str(gpu): RUNS_PER_GPU for gpu in range(8, 16)}


def test_one_named_gpu_gets_one_pool_of_that_gpu(eight_gpus):
    slots = sweep.slots("cuda:5", torch.device("cuda", 5), 3, RUNS_PER_GPU)
    run_all(eight_gpus, slots)
    (pool,) = RecordingPool.created
    assert [w["CUDA_VISIBLE_DEVICES"] for w in pool.workers] == ["5"] * RUNS_PER_GPU


def test_one_slot_trains_in_this_process_on_its_gpu_made_current(eight_gpus, monkeypatch):
    trained = []
    monkeypatch.setattr(sweep, "train_and_test", lambda run: trained.append(run.device) or {})
    run_all(eight_gpus[:2], ["cuda:3"])
    assert not RecordingPool.created and trained == ["cuda:3", "cuda:3"]
    assert CURRENT["device"] == "cuda:3" and "CUDA_VISIBLE_DEVICES" not in os.environ


def test_the_cpu_pool_is_unchanged(eight_gpus):
    run_all(eight_gpus[:5], sweep.slots("cpu", torch.device("cpu"), 3, RUNS_PER_GPU))
    (pool,) = RecordingPool.created
    assert pool.max_workers == 3 and pool.initargs[1] == "cpu"
    assert all(w["CUDA_VISIBLE_DEVICES"] is None and w["current_device"] is None for w in pool.workers)
    assert {device for _, device in RecordingPool.submitted} == {"cpu"}


def test_baselines_run_while_the_gpu_sweep_trains():
    """``alongside``: the baselines (here: a function that lets the sweep finish) start before the sweep ends; run
    one after the other, the sweep would wait for a signal that never comes."""
    started = threading.Event()

    def sweep_work():
        assert started.wait(timeout=10), "the baselines did not start while the sweep ran"
        return "sweep"

    def baselines():
        started.set()
        return "baselines"

    assert sweep.alongside(sweep_work, baselines) == ("sweep", "baselines")


def test_an_error_of_the_sweep_is_raised_after_the_baselines():
    done = []

    def failing():
        raise RuntimeError("worker died")

    with pytest.raises(RuntimeError, match="worker died"):
        sweep.alongside(failing, lambda: done.append(1))
    assert done == [1]


@pytest.mark.slow
def test_the_stage_fits_its_baselines_during_the_sweep_on_cuda(tmp_path, monkeypatch):
    """The finetune stage on a device that resolves to CUDA (the runs themselves on the CPU here): the baselines'
    first fit starts while ``sweep_and_train`` is still running (which waits for it), and the stage's
    results are those of the CPU order."""
    import tasks.finetune as stage
    from export_fixtures import N_DOCS, finetune_params
    from finetune_fixtures import save_tiny_bert, write_task_data
    from tasks.config import Paths
    from tasks.tracking import NullLog

    pretrained = save_tiny_bert(tmp_path / "models" / "pretrained", hidden=32, seed=0)
    write_task_data(tmp_path / "data", pretrained, "clozeline", N_DOCS)
    paths = Paths(data=tmp_path / "data", models=tmp_path / "models", metrics=tmp_path / "m", reports=tmp_path / "r")
    cfg = finetune_params([3])
    cpu = stage.run(cfg, paths, NullLog(), "cls")

    fitting = threading.Event()
    real_sweep, real_baseline = stage.sweep_and_train, stage.run_baseline

    def sweep_waiting(*args, **kwargs):
        assert fitting.wait(timeout=30), "no baseline was fitted while the GPU sweep ran"
        return real_sweep(*args, **kwargs)

    def baseline_started(*args, **kwargs):
        fitting.set()
        return real_baseline(*args, **kwargs)

    monkeypatch.setattr(stage, "resolve", lambda setting: torch.device("cuda", 0))
    monkeypatch.setattr(stage, "slots", lambda setting, device, workers, per_gpu: ["cpu"])
    monkeypatch.setattr(stage, "sweep_and_train", sweep_waiting)
    monkeypatch.setattr(stage, "run_baseline", baseline_started)
    gpu = stage.run(cfg, paths, NullLog(), "cls")
    assert fitting.is_set() and list(gpu["runs"]) == list(cpu["runs"])
    assert {k: v["test_macro_f1"] for k, v in gpu["runs"].items()} == {
        k: v["test_macro_f1"] for k, v in cpu["runs"].items()
    }
