"""Resumable training checkpoints without pickle: model weights in safetensors, the rest via ``weights_only``.

A checkpoint is a folder ``step_<NNNNNNNN>/`` holding ``model.safetensors`` (tied weights handled by
``safetensors.torch.save_model``), ``optimizer.pt`` (AdamW state dict) and ``trainer_state.pt`` (step, data
position, schedule clock, RNG states, the loss curve so far and a fingerprint of the run). It is written to a
temporary folder and renamed into place, so a process killed mid-write leaves the previous checkpoint intact.

The fingerprint is what a checkpoint's weights depend on: params (by value), the train blocks and the code. A
checkpoint resumes only when all of them match (``Trainer._fingerprint``), so an edit to the masking or the loop
never resumes a checkpoint the old code wrote.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_model, save_model

from tasks.common.files.ioerrors import reading
from tasks.common.imports import ROOT, code_sha256, import_closure
from tasks.common.models.encoders import SNAPSHOTS, STEP_PREFIX, step_folders

PREFIX = STEP_PREFIX


def save(
    folder: Path, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]
) -> Path:
    """Write checkpoint ``folder/step_<step>`` atomically and delete older ones; returns its path.

    ``state`` must hold only tensors, numbers, strings, lists and dicts (what ``torch.load(weights_only=True)``
    reads back).
    """
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / f"{PREFIX}{step:08d}"
    tmp = folder / f".tmp_{PREFIX}{step:08d}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    save_model(model, str(tmp / "model.safetensors"))
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    torch.save(state, tmp / "trainer_state.pt")
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    for old in _complete(folder):
        if old != final:
            shutil.rmtree(old)
    return final


def latest(folder: Path) -> Path | None:
    """The newest complete checkpoint under ``folder``, or ``None``."""
    found = _complete(folder)
    return found[-1] if found else None


def load(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, device: torch.device) -> dict[str, Any]:
    """Load weights and optimizer state from checkpoint ``path`` in place; returns the trainer state dict.

    Raises ``RuntimeError`` naming the file if the weights do not fit the model.
    """
    with reading(path / "model.safetensors", deleting(path)):
        missing, unexpected = load_model(model, str(path / "model.safetensors"), strict=False, device=str(device))
    if missing or unexpected:
        # safetensors returns the missing names as a set: sorted before slicing
        raise RuntimeError(
            f"{path / 'model.safetensors'}: missing {sorted(missing)[:5]}, unexpected {sorted(unexpected)[:5]}"
        )
    with reading(path / "optimizer.pt", deleting(path)):
        state = torch.load(path / "optimizer.pt", map_location=device, weights_only=True)
    optimizer.load_state_dict(state)
    return read_state(path)


def read_state(path: Path) -> dict[str, Any]:
    """Only the trainer state of checkpoint ``path`` (to check its fingerprint before loading weights)."""
    with reading(path / "trainer_state.pt", deleting(path)):
        return torch.load(path / "trainer_state.pt", weights_only=True)


def deleting(path: Path) -> str:
    """How to recover from a damaged checkpoint ``path``: it persists across runs (a rerun would resume from it and
    fail the same way), so delete it; the run then resumes from an older one or starts afresh."""
    return (
        f"delete {path} and rerun `dvc repro --single-item pretrain` (it then resumes from an older checkpoint, "
        "if any, or starts afresh)"
    )


def clear(folder: Path) -> None:
    """Delete every checkpoint and snapshot under ``folder`` (a run with other params must not resume from them)."""
    for old in _complete(folder):
        shutil.rmtree(old)
    shutil.rmtree(folder / SNAPSHOTS, ignore_errors=True)


def snapshot_dir(folder: Path, step: int) -> Path:
    """``folder/snapshots/step_<NNNNNNNN>``: the model saved at ``step`` for dose-response fine-tuning."""
    return folder / SNAPSHOTS / f"{PREFIX}{step:08d}"


def snapshots(folder: Path) -> list[Path]:
    """The snapshot folders under ``folder/snapshots``, in step order."""
    return step_folders(folder / SNAPSHOTS)


def _complete(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_dir() and p.name.startswith(PREFIX))


#: Params that do not change the trained weights: a checkpoint made under other values is still resumed.
NOT_IN_FINGERPRINT = {
    "fill_mask",
    "fill_mask_top_k",
    "log_every_steps",
    "eval_every_steps",
    "checkpoint_every_steps",
    "checkpoint_every_minutes",
    "compile",
    "num_threads",
    "nproc_per_node",
    "nnodes",
    "rdzv_endpoint",
    "rdzv_id",
    "hardware",
    "ablations",
}  # ablations: other runs, in their own folders


def sha256_json(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def pretrain_code_files() -> set[Path]:
    """The code that makes the weights: every project file ``tasks.pretrain`` imports, transitively
    (``tasks.common.imports``), except ``tasks/config`` (params enter the fingerprint by value)."""
    config = ROOT / "tasks" / "config"
    return {f for f in import_closure(["tasks.pretrain"]) if config not in f.parents}


@lru_cache(maxsize=1)
def pretrain_code_sha256() -> str:
    """sha256 of ``pretrain_code_files``."""
    return code_sha256(pretrain_code_files())
