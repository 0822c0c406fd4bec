"""The pretraining learning rate: its peak, scaled to the run's global batch (``pretrain.lr_scaling``), and its
shape over the run (linear warm-up over ``warmup_fraction`` of the steps, then linear or cosine decay to 0).

The peak is ``pretrain.lr`` at ``pretrain.lr_reference_tokens_per_step``; a run whose optimizer steps take T
tokens (all ranks, all micro-batches) trains at lr x (T / reference)^k, k = 1/2 for ``sqrt`` (Adam: Malladi et
al. 2022) and 1 for ``linear`` (SGD: Goyal et al. 2017), so ``gpu-node`` keeps one setting on any GPU count.
"""

from __future__ import annotations

import math


def lr_factor(progress: float, warmup_fraction: float, schedule: str) -> float:
    """Multiplier of the peak lr at ``progress`` in [0, 1]: linear warmup, then linear or cosine decay to 0."""
    if progress < warmup_fraction:
        return progress / warmup_fraction
    rest = min(1.0, (progress - warmup_fraction) / max(1e-12, 1.0 - warmup_fraction))
    return 1.0 - rest if schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * rest))


#: Exponent of each ``pretrain.lr_scaling`` rule: square root for Adam (Malladi et al. 2022, "On the SDEs and
#: Scaling Rules for Adaptive Gradient Algorithms"), linear for SGD (Goyal et al. 2017).
LR_EXPONENTS = {"sqrt": 0.5, "linear": 1.0}


def tokens_per_step(cfg, world: int, seq_len: int) -> int:
    """Tokens of one optimizer step over all ranks: world x batch_size_blocks x grad_accum_steps x ``seq_len``."""
    return world * cfg.batch_size_blocks * cfg.grad_accum_steps * seq_len


def peak_lr(cfg, tokens: int) -> float:
    """The peak learning rate of a run whose steps take ``tokens`` tokens (``tokens_per_step``): ``cfg.lr`` itself
    under ``lr_scaling: none``, else lr x (tokens / lr_reference_tokens_per_step)^(1/2 for sqrt, 1 for linear)."""
    if cfg.lr_scaling == "none":
        return cfg.lr
    return cfg.lr * (tokens / cfg.lr_reference_tokens_per_step) ** LR_EXPONENTS[cfg.lr_scaling]


def lr_rule(cfg, tokens: int) -> str:
    """How ``peak_lr`` came about, in words (metrics and MLflow params)."""
    if cfg.lr_scaling == "none":
        return f"none: lr {cfg.lr:g} as given ({tokens:,} tokens a step)"
    return (
        f"{cfg.lr_scaling}: {cfg.lr:g} x ({tokens:,} / {cfg.lr_reference_tokens_per_step:,} tokens a step)"
        f"^{LR_EXPONENTS[cfg.lr_scaling]:g} = {peak_lr(cfg, tokens):.6g}"
    )


def lr_record(cfg, tokens: int) -> dict:
    """``{"lr_effective", "lr_rule", "tokens_per_step"}`` of a run whose steps take ``tokens`` tokens: what
    metrics/pretrain.json and the MLflow params record."""
    return {"lr_effective": peak_lr(cfg, tokens), "lr_rule": lr_rule(cfg, tokens), "tokens_per_step": tokens}
