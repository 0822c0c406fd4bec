"""AdamW parameter groups shared by pretraining and fine-tuning."""

from __future__ import annotations

from typing import Any

from torch import nn


def decay_groups(module: nn.Module, weight_decay: float, **group: Any) -> list[dict]:
    """Two AdamW groups of ``module``'s trainable parameters: matrices decay by ``weight_decay``; biases and
    LayerNorm weights (every parameter with fewer than 2 dimensions) do not, as in BERT's ``optimization.py``
    and HF ``Trainer``. ``group`` adds keys (e.g. ``lr``) to both; empty groups are left out.
    """
    trainable = [p for p in module.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in trainable if p.ndim >= 2], "weight_decay": weight_decay, **group},
        {"params": [p for p in trainable if p.ndim < 2], "weight_decay": 0.0, **group},
    ]
    return [g for g in groups if g["params"]]
