"""Fine-tuning from every pretraining seed: the arms initialised from our pretraining run once per pretraining seed.

Each arm of ``configs`` whose variant is our pretrained encoder (``pretrained``, or ``adapted``: continued from
another model) runs again from each further pretraining seed's model (``models/pretrained/seeds/<seed>/``, the
seeds of ``pretrain.seeds`` but the first), with the same fine-tuning seeds, the same per-seed training subsets
(``draw``), dev and test docs and its own learning-rate sweep, so that the report resamples pretraining seeds
at the top of its bootstrap (the Multi-Bootstrap of Sellam et al. 2022, ``tasks/report/stats/bootstrap.py``). Run key
``<variant>@pretrain_seed<seed>/<mode>/<head>``; the first pretraining seed's runs keep their keys. The learning
curve, the dose-response runs, the operational timing, ``selection`` and the export use the first pretraining seed
only. Nothing runs again when pretrain trained one seed, and the metrics then have no ``pretraining_seeds``.
"""

from __future__ import annotations

from pathlib import Path

from tasks.common.models.encoders import pretraining_seed_dirs
from tasks.config.model.finetune import RunSpec, TaskParams

#: Variants whose encoder is the pretrain stage's model.
OURS = ("pretrained", "adapted")


def seed_key(spec: RunSpec, seed: str) -> str:
    """``<variant>@pretrain_seed<seed>/<mode>/<head>``: arm ``spec`` fine-tuned from pretraining seed ``seed``."""
    return f"{spec.variant}@pretrain_seed{seed}/{spec.mode}/{spec.head}"


def arms(tcfg: TaskParams, models: Path) -> list[tuple[RunSpec, Path, str]]:
    """``(spec, model folder, run key)`` of every arm of ``tcfg.configs`` on our encoder, once per further
    pretraining seed (``pretraining_seed_dirs``), in seed then config order; empty with one pretraining seed."""
    return [
        (spec, folder, seed_key(spec, folder.name))
        for folder in pretraining_seed_dirs(models)
        for spec in tcfg.configs
        if spec.variant in OURS
    ]


def summary(points: list[tuple[RunSpec, Path, str]]) -> dict:
    """The ``pretraining_seeds`` section of ``metrics/finetune/<task>.json``: ``runs``, per arm of the first
    pretraining seed (its config key), ``{"<pretraining seed>": run key}`` of its runs from the further seeds."""
    runs: dict[str, dict[str, str]] = {}
    for spec, folder, key in points:
        runs.setdefault(spec.key, {})[folder.name] = key
    return {
        "runs": runs,
        "rule": "each arm on our pretrained encoder, once per further pretraining seed "
        "(pretrain.seeds but the first); the first seed's run is the config key itself",
    }
