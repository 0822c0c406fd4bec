"""What a pretraining checkpoint's weights depend on: params (by value), the train blocks and the code.

A checkpoint resumes only when all of them match (``Trainer._fingerprint``), so an edit to the masking or the
loop never resumes a checkpoint the old code wrote.
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from tasks.common.imports import ROOT, code_sha256, import_closure

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
