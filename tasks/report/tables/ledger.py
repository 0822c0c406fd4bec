"""The experiment ledger of the claim table: what a reader needs to reproduce or doubt the numbers.

Question, git commit, data snapshot (dvc.lock out md5s), a hash of the preprocessing sub-graph, every params
value each stage last ran with (as ``dvc.lock`` recorded it, so the ledger shows what ran, not what
``params.yaml`` says now), how much the pretrained encoder learned, seeds, hardware, library versions and the
metric implementations. A part that is not available says why.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
from collections import defaultdict
from collections.abc import Collection
from importlib import metadata
from pathlib import Path

from tasks.common.nested import flatten
from tasks.common.provenance import Lock, git_commit
from tasks.report.claims.grammar import Metrics
from tasks.report.claims.tasks_run import current_stage, finetune_tasks

PREPROCESSING_STAGES = ("ingest", "dedup", "split", "leakage", "tokenizer", "tokenize")
VERSIONED_PACKAGES = (
    "torch",
    "transformers",
    "datasets",
    "tokenizers",
    "scikit-learn",
    "seqeval",
    "scipy",
    "matplotlib",
    "dvc",
    "mlflow",
    "prefect",
)


def build_ledger(question: str, root: Path, metrics: Metrics, lock: Lock) -> dict:
    """The ledger as ``{section: text or {key: text}}``; ``root`` is the checkout whose git commit is shown."""
    tasks = metrics.tasks or ()
    params = params_as_run(lock, tasks)
    return {
        "question": question,
        "git commit": git_commit(root),
        "data snapshot (dvc.lock outs md5)": data_snapshot(lock, tasks),
        "preprocessing hash (sha256 of the dvc.lock entries of ingest..tokenize)": preprocessing_hash(lock),
        "params as run (dvc.lock, every stage)": params,
        "pretrained model quality (metrics/pretrain.json)": pretrain_quality(metrics),
        "seeds": seeds(metrics, params),
        "hardware": hardware(metrics),
        "operational cost (metrics/finetune/<task>.json operational)": operational_cost(metrics),
        "library versions": library_versions(),
        "metric implementations": metric_implementations(metrics),
    }


def params_as_run(lock: Lock, tasks: Collection[str] = ()) -> dict[str, str]:
    """Every params value the stages last ran with, as dotted keys (sorted), read from ``dvc.lock``; the entries
    of a foreach stage of a task not in ``tasks`` are left out (``tasks_run.current_stage``: DVC keeps them).

    A key that two stages recorded with different values (one stage reran after an edit, the other did
    not) lists each value with its stage, so the ledger never hides that the runs disagree.
    """
    by_key: dict[str, dict[str, str]] = defaultdict(dict)
    for stage in lock.stages:
        if stage == "report" or not current_stage(stage, tasks):  # its own entry is from its previous run
            continue
        for key, value in flatten(lock.params(stage)).items():
            by_key[key][stage] = json.dumps(value) if isinstance(value, list | dict) else str(value)
    out = {}
    for key, values in sorted(by_key.items()):
        distinct = set(values.values())
        out[key] = distinct.pop() if len(distinct) == 1 else "; ".join(f"{v} ({s})" for s, v in values.items())
    return out or {"dvc.lock": "no params recorded (no stage reproduced yet)"}


def pretrain_quality(metrics: Metrics) -> dict[str, str] | str:
    """Held-out MLM loss before/after against the unigram baseline, per source, perplexity, masked-token
    accuracy and fill-mask top-5: how much the encoder behind the ``pretrained`` (or ``adapted``) arms
    learned (a weak one explains weak downstream claims)."""
    pre = metrics.optional("pretrain")
    if not pre:
        return "not available (metrics/pretrain.json missing)"
    keys = (
        "variant",
        "init_from",
        "heldout_loss_initial",
        "heldout_loss",
        "heldout_unigram_ce",
        "heldout_gap_to_unigram_nats",
        "heldout_perplexity",
        "heldout_mlm_accuracy",
        "heldout_unigram_accuracy",
        "steps",
        "train_minutes",
    )
    quality = {key: str(pre[key]) for key in keys if key in pre}
    for source, scores in sorted((pre.get("heldout_by_source") or {}).items()):
        quality[f"held-out loss: {source}"] = f"{scores['loss']:.3f} (unigram {scores['unigram_ce']:.3f})"
    for prompt, top in sorted((pre.get("fill_mask") or {}).items()):
        quality[f"fill-mask: {prompt}"] = " ".join(top.get("tokens", []))
    return quality


def data_snapshot(lock: Lock, tasks: Collection[str] = ()) -> dict[str, str]:
    """``{"<stage>: <path>": md5}`` of every output recorded in dvc.lock, sorted, but the report stage's own
    (this run is rewriting those, so dvc.lock still holds the previous run's md5s) and those of a removed task."""
    snapshot = {
        f"{stage}: {path}": md5 or "no md5"
        for (stage, path), md5 in lock.out_md5s().items()
        if stage != "report" and current_stage(stage, tasks)
    }
    return snapshot or {"dvc.lock": "not available (no stage reproduced yet)"}


def preprocessing_hash(lock: Lock) -> str:
    """sha256 (16 hex) of the dvc.lock entries (cmd, deps, params, outs) of the preprocessing stages.

    It changes exactly when a preprocessing input, param or output changes. ``not available`` without them.
    """
    present = lock.entries(PREPROCESSING_STAGES)
    if not present:
        return "not available (dvc.lock has none of " + ", ".join(PREPROCESSING_STAGES) + ")"
    missing = [s for s in PREPROCESSING_STAGES if s not in present]
    digest = hashlib.sha256(json.dumps(present, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return digest + (f" (stages missing from dvc.lock: {', '.join(missing)})" if missing else "")


def seeds(metrics: Metrics, config: dict[str, str]) -> dict[str, str]:
    """Seed params (keys containing ``seed``) and the seeds each fine-tuning task actually ran."""
    out = {k: v for k, v in config.items() if "seed" in k.split(".")[-1]}
    for task in finetune_tasks(metrics):
        runs = (metrics.optional(f"finetune/{task}") or {}).get("runs", {})
        ran = sorted(
            {
                str(s)
                for run in runs.values()
                if isinstance(run, dict)
                for entry in run.values()
                if isinstance(entry, dict)
                for s in entry.get("seeds") or []
            }
        )
        out[f"finetune {task} seeds run"] = ", ".join(ran) if ran else "not run"
    return out


def operational_cost(metrics: Metrics) -> dict[str, str]:
    """Per measured run: latency per doc (p50) at each batch size, peak memory, parameters and size on disk,
    as the finetune stage measured them (the report's inference-cost table has the p95s too)."""
    out = {}
    for task in finetune_tasks(metrics):
        measured = (metrics.optional(f"finetune/{task}") or {}).get("operational") or {}
        for key, entry in sorted(measured.items()):
            batches = ", ".join(
                f"batch {size} p50 {t['p50_ms_per_doc']:.3g} ms/doc" for size, t in (entry.get("batch") or {}).items()
            )
            peak = entry.get("peak_rss_mib")
            memory = f"peak RSS {peak:.0f} MiB" if peak is not None else "memory not measured"
            threads = f", {entry['threads']} threads" if entry.get("threads") else ""
            out[f"{task} {key}"] = (
                f"{entry.get('device')}{threads}: {batches}; {memory}; {entry.get('parameters'):,} "
                f"parameters; {entry.get('size_on_disk_mib', float('nan')):.2f} MiB on disk"
            )
    return out or {"finetune": "not measured (finetune.operational.enabled, or no finetune metrics)"}


def hardware(metrics: Metrics) -> dict[str, str]:
    """Hardware recorded by pretrain (``metrics/pretrain.json`` -> ``hardware``) and that of this machine."""
    recorded = (metrics.optional("pretrain") or {}).get("hardware")
    out = (
        {f"pretrain: {k}": str(v) for k, v in sorted(recorded.items())}
        if isinstance(recorded, dict)
        else {"pretrain": "no hardware recorded in metrics/pretrain.json"}
    )
    out |= model_precision(metrics)
    out["report machine: CPU"] = f"{cpu_name()} ({os.cpu_count()} logical cores)"
    out["report machine: GPU"] = ", ".join(gpu_names()) or "none"
    out["report machine: OS"] = f"{platform.system()} {platform.release()}, Python {platform.python_version()}"
    return out


def model_precision(metrics: Metrics) -> dict[str, str]:
    """The numeric precision each model stage ran in, as its metrics recorded it: fine-tuning steps per task
    (``train_precision``), every evaluated prediction per task (``prediction_precision``: what the claims' predictions
    were computed in, and the export re-scores in) and the semantic leakage encoder. On a CPU it follows the machine
    (``cpu_train_precision: auto`` is bf16 autocast only with AVX512-BF16/AMX), so the same params and seeds give
    slightly different scores on another CPU family; this line says which one a reader's numbers come from."""
    out = {}
    for task in finetune_tasks(metrics):
        recorded = (metrics.optional(f"finetune/{task}") or {}).get("train_precision")
        out[f"finetune {task}: training steps"] = str(recorded) if recorded else "not recorded"
        predicted = (metrics.optional(f"finetune/{task}") or {}).get("prediction_precision")
        out[f"finetune {task}: evaluated predictions (dev, test)"] = str(predicted) if predicted else "not recorded"
    semantic = (metrics.optional("leakage") or {}).get("semantic") or {}
    if semantic.get("enabled"):
        out["leakage semantic encoder"] = f"{semantic.get('precision', 'not recorded')} on {semantic.get('device')}"
    return out


def cpu_name() -> str:
    """The CPU model name from ``/proc/cpuinfo`` (Linux), else ``platform.processor()``."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def gpu_names() -> list[str]:
    """GPU names from ``nvidia-smi`` (empty without an NVIDIA driver); avoids importing torch for this."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    res = subprocess.run([exe, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True)
    return [line.strip() for line in res.stdout.splitlines() if line.strip()] if res.returncode == 0 else []


def library_versions() -> dict[str, str]:
    """Installed versions of the libraries the numbers depend on (``importlib.metadata``, no imports)."""
    out = {"python": platform.python_version()}
    for name in VERSIONED_PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def metric_implementations(metrics: Metrics) -> dict[str, str]:
    """What computed each score: ``metric_implementations`` of the finetune metrics when recorded there."""
    out = {}
    for task in finetune_tasks(metrics):
        data = metrics.optional(f"finetune/{task}")
        recorded = (data or {}).get("metric_implementations")
        if isinstance(recorded, dict):
            out.update({f"{task}: {k}": str(v) for k, v in sorted(recorded.items())})
        else:
            out[task] = f"not recorded in metrics/finetune/{task}.json"
    return out
