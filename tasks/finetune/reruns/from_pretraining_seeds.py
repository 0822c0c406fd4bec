"""Fine-tuning from every pretraining seed: the arms initialised from our pretraining run once per pretraining seed.

Each arm of ``configs`` whose variant is our pretrained encoder (``pretrained``, or ``adapted``: continued from
another model) runs again from each further pretraining seed's model (``models/pretrained/seeds/<seed>/``, the
seeds of ``pretrain.seeds`` but the first), and so does each such arm of ``curve_configs`` at each size of
``train_sizes``: every run on our encoder that a claim reads, the learning curve's few-labels gaps included. Each
rerun has the same fine-tuning seeds as the first pretraining seed's run (all of ``finetune.seeds``: the report
stacks the runs only when their seeds match), the same per-seed training subsets (``draw``, at the run's own size),
dev and test docs and its own learning-rate sweep, so that the report resamples pretraining seeds at the top of its
bootstrap (the Multi-Bootstrap of Sellam et al. 2022, ``tasks/report/stats/bootstrap.py``). Run key
``<variant>@pretrain_seed<seed>/<mode>/<head>``, a curve run's ``<variant>@pretrain_seed<seed>@n<docs>/<mode>/<head>``
(still ``@n<docs>/``, which the report's floor gate reads as the run's train size); the first pretraining seed's
runs keep their keys. The dose-response runs, the operational timing, ``selection`` and the export use the first
pretraining seed only. Nothing runs again when pretrain trained one seed, and the metrics then have no
``pretraining_seeds``.

Cost: ``len(pretrain.seeds) - 1`` x (the arms on our encoder, at every size) x (their sweep + ``finetune.seeds``)
tiny runs; the stage's ``cost`` section (``tasks/finetune/budget.py``) shows them under ``pretraining_seeds``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tasks.common.models.encoders import pretraining_seed_dirs
from tasks.config.model.finetune import RunSpec, TaskParams
from tasks.finetune.reruns.at_train_sizes import Point, size_key

#: Variants whose encoder is the pretrain stage's model.
OURS = ("pretrained", "adapted")


@dataclass(frozen=True)
class Rerun:
    """One arm from one further pretraining seed: its ``spec``, the seed's model ``folder``, its run ``key``, the
    run ``key`` of the first pretraining seed's run it repeats (``of``) and its train ``size`` (None: the full
    size, ``max_train_docs``)."""

    spec: RunSpec
    folder: Path
    key: str
    of: str
    size: int | None = None


def seed_key(spec: RunSpec, seed: str, size: int | None = None) -> str:
    """``<variant>@pretrain_seed<seed>[@n<docs>]/<mode>/<head>``: arm ``spec`` fine-tuned from pretraining seed
    ``seed``, on ``size`` train docs when given (a learning-curve point)."""
    at = f"@{size_key(size)}" if size is not None else ""
    return f"{spec.variant}@pretrain_seed{seed}{at}/{spec.mode}/{spec.head}"


def arms(tcfg: TaskParams, models: Path, curve: list[Point]) -> list[Rerun]:
    """Every arm of ``tcfg.configs`` on our encoder, then every ``curve`` point on it (``at_train_sizes.points``),
    once per further pretraining seed (``pretraining_seed_dirs``), in seed order; empty with one pretraining seed."""
    out = []
    for folder in pretraining_seed_dirs(models):
        out += [Rerun(s, folder, seed_key(s, folder.name), s.key) for s in tcfg.configs if s.variant in OURS]
        out += [
            Rerun(p.spec, folder, seed_key(p.spec, folder.name, p.size), p.key, p.size)
            for p in curve
            if p.spec.variant in OURS
        ]
    return out


def summary(points: list[Rerun]) -> dict:
    """The ``pretraining_seeds`` section of ``metrics/finetune/<task>.json``: ``runs``, per run of the first
    pretraining seed (its key: a config's, or a curve run's ``<variant>@n<docs>/...``), ``{"<pretraining seed>":
    run key}`` of its runs from the further seeds."""
    runs: dict[str, dict[str, str]] = {}
    for point in points:
        runs.setdefault(point.of, {})[point.folder.name] = point.key
    return {
        "runs": runs,
        "rule": "each arm on our pretrained encoder, at full size and at each learning-curve size, once per further "
        "pretraining seed (pretrain.seeds but the first), with every fine-tuning seed; the first seed's run is the "
        "key itself",
    }
