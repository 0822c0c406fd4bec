"""Operational evidence of the finetune stage: latency per document, peak memory, parameters and size on disk.

After all training, so that nothing else competes for the cores, each arm's model, as the run of its first
reported seed saved it (``model.save_model``: best epoch, safetensors), is loaded and timed in a fresh process
of its own (one memory high-water mark per model). These processes fork from one ``forkserver`` that imported
torch, transformers and this module once, before any torch work: a spawned interpreter per model would pay
those imports (7-10 s each on the 2-core CPU box, the whole budget for 9 models) again every time.

The inputs are the arm's own test examples batched by its task (``collate``: cls docs cut to
``max_seq_len_tokens``, ner windows), so a latency is at the task's sequence length, from token ids to logits
(tokenization is not timed). Each batch size of ``timed_batches`` runs ``warmup_batches`` untimed batches and
then the timed ones, cycling through the test examples in order; a batch's per-document latency is its wall time
(``time.perf_counter``) over its size, and p50/p95 are ``numpy.percentile`` (linear) over the timed batches.
The timing runs on the device the stage trained on (``hardware.device``): on CUDA under bf16 autocast,
synchronizing after each batch so a timing covers the work, with the GPU's peak allocated memory; there the CPU
timing is optional (``operational.cpu_on_gpu_host``: BERT-base at 512 tokens takes tens of minutes on a CPU).

The TF-IDF + logistic-regression baseline is timed the same way on the test docs' full text (vectorizing
included), in the stage's own process, so its memory is not measured. The scratch folder of saved models
(``<out_dir>/.operational``) is removed by ``remove_scratch``: the stage's DVC out keeps the numbers only.
"""

from __future__ import annotations

import json
import multiprocessing
import shutil
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import save_file

from tasks.common.runtime.device import autocast, describe, peak_memory_mib, place
from tasks.finetune.arms.model import load_model

SCRATCH = ".operational"  # under the task's out dir; removed before the stage returns
MIB = 2**20
MS_PER_S = 1000


def folder_for(out_dir: Path, key: str) -> Path:
    """The scratch folder of run ``key``'s saved model: ``<out_dir>/.operational/<key, "/" -> "__">``."""
    return out_dir / SCRATCH / key.replace("/", "__")


def seed_folder(folder: Path, seed: int, seeds: list[int]) -> Path:
    """Where run ``seed`` of an arm saves its model, given the arm's ``folder_for``: that folder for the first
    reported seed (the one measured here), ``<folder>@seed<k>`` for another (kept for the export stage, which
    takes the arm's best seed on dev without training it again)."""
    return folder if seed == seeds[0] else folder.with_name(f"{folder.name}@seed{seed}")


def remove_scratch(out_dir: Path) -> None:
    """Delete ``<out_dir>/.operational`` and every model saved in it (absent: nothing to do)."""
    shutil.rmtree(out_dir / SCRATCH, ignore_errors=True)


def measure_arms(jobs: list, out_dir: Path, ocfg, device: torch.device, log) -> dict[str, dict]:
    """``{job.key: measure_saved(...)}`` for every job, whose model is in ``folder_for(out_dir, job.key)``;
    one process per model, one at a time, each on ``device`` and logging a line of its headline numbers.

    ``ocfg`` is ``params.finetune.operational``. Raises what a measurement raised (e.g. ``OSError`` when a
    model folder is missing).
    """
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__])  # the forkserver imports torch/transformers once for all models
    out = {}
    with ProcessPoolExecutor(1, mp_context=context, max_tasks_per_child=1) as pool:
        for job in jobs:
            folder = folder_for(out_dir, job.key)
            out[job.key] = pool.submit(
                measure_saved, folder, job.task.collate, job.exs["test"], job.pad_id, ocfg, str(device)
            ).result()
            log.info(summary(job.key, out[job.key]))
    return out


def measure_saved(folder: Path, collate: Callable, exs: list[dict], pad_id: int, ocfg, device: str = "cpu") -> dict:
    """Load the model saved in ``folder`` and measure it on ``exs`` (test examples; ``collate(batch, pad_id)``
    builds the tensors) on ``device``. Meant for a fresh process: the memory numbers are this process's.

    Returns ``device`` (``cpu``, ``cuda:N``), ``device_name``, ``threads`` (torch's CPU threads), ``seq_len_tokens``
    (longest timed example) and ``mean_tokens_per_doc``, ``batch: {"<size>": timings}`` (see ``timings``; on
    CUDA under bf16 autocast, the host-to-device copy of the ids included), ``rss_before_mib`` (resident memory
    before loading: interpreter, torch, transformers, the stage's modules), ``peak_rss_mib`` (the process's peak
    resident memory after the timings), ``rss_increase_mib`` (their difference: weights, activations, allocator
    caches), ``peak_allocated_mib`` (CUDA: ``torch.cuda.max_memory_allocated``, weights plus activations, not
    the CUDA context; None on the CPU), ``parameters`` (count), ``size_on_disk_mib`` (the safetensors files:
    encoder and head; not the config or tokenizer), ``seconds`` (wall time of all of it), and on CUDA with
    ``ocfg.cpu_on_gpu_host`` a ``cpu`` entry with the CPU's ``batch`` timings. Memory is from
    ``/proc/self/status`` (Linux).
    """
    started = time.perf_counter()
    torch.set_num_threads(ocfg.threads)
    before = memory_mib("VmRSS")
    model = load_model(folder)
    target = torch.device(device)
    extra = (
        {"cpu": {"batch": time_on(model, collate, exs, pad_id, ocfg, torch.device("cpu"))}}
        if target.type == "cuda" and ocfg.cpu_on_gpu_host
        else {}
    )
    batches = time_on(model.to(target), collate, exs, pad_id, ocfg, target)
    peak = memory_mib("VmHWM")
    lengths = [len(ex["input_ids"]) for ex in exs]
    entry = {
        **describe(target),
        "threads": torch.get_num_threads(),
        "seq_len_tokens": max(lengths),
        "mean_tokens_per_doc": sum(lengths) / len(lengths),
        "batch": batches,
        "rss_before_mib": before,
        "peak_rss_mib": peak,
        "rss_increase_mib": peak - before,
        "peak_allocated_mib": peak_memory_mib(target),
        "parameters": sum(p.numel() for p in model.parameters()),
        "size_on_disk_mib": sum(f.stat().st_size for f in folder.glob("*.safetensors")) / MIB,
    }
    return entry | extra | {"seconds": time.perf_counter() - started}


def time_on(model, collate: Callable, exs: list[dict], pad_id: int, ocfg, device: torch.device) -> dict:
    """``latencies`` of ``model`` (already on ``device``) on ``exs``: each batch collated, placed on ``device``,
    run under ``autocast`` (bf16 on CUDA) and, on CUDA, synchronized, so a timing covers the work."""

    def infer(batch: list[dict]) -> None:
        tensors = place(collate(batch, pad_id), device)
        with autocast(device):
            model(tensors["input_ids"], tensors["attention_mask"], tensors.get("token_type_ids"))
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    with torch.inference_mode():
        return latencies(infer, exs, ocfg)


def measure_tfidf(vectorizer, classifier, texts: list[str], ocfg, folder: Path) -> dict:
    """Time ``classifier.predict_proba(vectorizer.transform(batch))`` on ``texts`` (the test docs' full text)
    at every batch size of ``ocfg.timed_batches``, in this process; save the fitted numbers to ``folder`` to
    measure their size.

    Returns ``device``, ``threads`` (null: scikit-learn's sparse product does not use torch's threads),
    ``seq_len_tokens`` (null: the full text, no token cut), ``batch`` (see ``timings``), ``peak_rss_mib`` and
    ``rss_increase_mib`` (null: not measurable inside the stage's process), ``parameters`` (``coef_`` and
    ``intercept_`` entries; the ``idf_`` vector is one more per vocabulary entry), ``size_on_disk_mib``
    (``coef_``, ``intercept_``, ``idf_`` as safetensors), ``vocabulary_mib`` (the vocabulary as JSON,
    term -> column), ``vocabulary`` (terms) and ``seconds``.
    """
    started = time.perf_counter()
    batches = latencies(lambda batch: classifier.predict_proba(vectorizer.transform(batch)), texts, ocfg)
    folder.mkdir(parents=True, exist_ok=True)
    weights, vocabulary = folder / "weights.safetensors", folder / "vocabulary.json"
    save_file({"coef": classifier.coef_, "intercept": classifier.intercept_, "idf": vectorizer.idf_}, weights)
    vocabulary.write_text(json.dumps({t: int(i) for t, i in vectorizer.vocabulary_.items()}), encoding="utf-8")
    return {
        "device": "cpu",
        "threads": None,
        "seq_len_tokens": None,
        "batch": batches,
        "peak_rss_mib": None,
        "rss_increase_mib": None,
        "parameters": int(classifier.coef_.size + classifier.intercept_.size),
        "size_on_disk_mib": weights.stat().st_size / MIB,
        "vocabulary_mib": vocabulary.stat().st_size / MIB,
        "vocabulary": len(vectorizer.vocabulary_),
        "seconds": time.perf_counter() - started,
    }


def latencies(infer: Callable[[list], object], items: list, ocfg) -> dict[str, dict]:
    """``{"<batch size>": timings(...)}`` for every batch size of ``ocfg.timed_batches``."""
    return {
        str(size): timings(infer, items, size, count, ocfg.warmup_batches) for size, count in ocfg.timed_batches.items()
    }


def timings(infer: Callable[[list], object], items: list, size: int, count: int, warmup: int) -> dict:
    """Run ``warmup`` untimed batches of ``size`` items, then time ``count`` more (``cycled``).

    Returns ``p50_ms_per_doc`` and ``p95_ms_per_doc`` (percentiles over the timed batches of batch time / size,
    milliseconds), ``docs_per_s`` (timed items / total timed seconds) and ``timed_batches``.
    """
    batches = cycled(items, size, warmup + count)
    for batch in batches[:warmup]:
        infer(batch)
    seconds = []
    for batch in batches[warmup:]:
        start = time.perf_counter()
        infer(batch)
        seconds.append(time.perf_counter() - start)
    p50, p95 = np.percentile(np.array(seconds) * MS_PER_S / size, [50, 95])
    return {
        "p50_ms_per_doc": float(p50),
        "p95_ms_per_doc": float(p95),
        "docs_per_s": size * count / sum(seconds),
        "timed_batches": count,
    }


def cycled(items: list, size: int, count: int) -> list[list]:
    """``count`` batches of ``size`` items taken in order, wrapping around to the start of ``items``."""
    return [[items[(k * size + i) % len(items)] for i in range(size)] for k in range(count)]


def memory_mib(field: str) -> float:
    """``VmRSS`` (resident now) or ``VmHWM`` (peak resident, the process's high-water mark, what
    ``getrusage``'s ``ru_maxrss`` reports) from ``/proc/self/status``, in MiB. Raises ``KeyError`` otherwise."""
    for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
        name, _, value = line.partition(":")
        if name == field:
            return int(value.split()[0]) * 1024 / MIB  # the kernel writes kB
    raise KeyError(f"/proc/self/status has no {field}")


def summary(key: str, entry: dict) -> str:
    """One progress line: parameters, size, p50/p95 per batch size and peak memory of run ``key``."""
    parts = [f"{entry['parameters']:,} parameters, {entry['size_on_disk_mib']:.1f} MiB on disk"]
    for size, t in entry["batch"].items():
        parts.append(f"batch {size}: p50 {t['p50_ms_per_doc']:.2f} / p95 {t['p95_ms_per_doc']:.2f} ms per doc")
    if entry["peak_rss_mib"] is not None:
        parts.append(f"peak RSS {entry['peak_rss_mib']:.0f} MiB (+{entry['rss_increase_mib']:.0f})")
    return f"operational {key}: {'; '.join(parts)} ({entry['seconds']:.1f} s)"
