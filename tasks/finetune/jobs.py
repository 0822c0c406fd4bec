"""The jobs of a finetune task: ``Job``, what every seed of one arm shares (examples of each split, model folder,
pad id, run key, the draw of each seed's train docs), made from the task's rows (``make_job``), and the
``dose_response`` arm's jobs from each pretraining snapshot (``dose_jobs``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType

from tasks.common.models.encoders import model_dir, pad_token_id, pretrained_dir, snapshot_dirs
from tasks.config.model.finetune import RunSpec, TaskParams
from tasks.finetune.draw import Draw
from tasks.finetune.records import TASKS

SPLITS = ("train", "dev", "test")


@dataclass(frozen=True)
class Job:
    """What every seed of one configuration shares: task, its kind's module, spec, params, examples, model folder;
    ``draw`` picks each seed's train examples from ``exs["train"]`` (``for_seed``; None: all of them)."""

    item: str  # the task name
    module: str  # TaskSpec.module: cls | ner
    spec: RunSpec
    tcfg: TaskParams
    exs: dict[str, list[dict]]  # split -> examples
    labels: list[str]
    folder: Path
    pad_id: int
    key: str  # the run's name in metrics and MLflow: spec.key, or pretrained@step_<N>/... for a snapshot
    draw: Draw | None = None

    def for_seed(self, seed: int) -> Job:
        """The job a run of ``seed`` trains: ``exs["train"]`` cut to the seed's draw (``draw.Draw.keep``)."""
        if self.draw is None:
            return self
        return replace(self, exs={**self.exs, "train": self.draw.keep(self.exs["train"], seed)}, draw=None)

    @property
    def task(self) -> ModuleType:
        """``tasks.finetune.cls`` or ``tasks.finetune.ner`` (a property: modules do not pickle to workers)."""
        return TASKS[self.module]


def make_job(
    item: str,
    module: str,
    spec: RunSpec,
    tcfg: TaskParams,
    rows: dict,
    labels: list[str],
    models: Path,
    draw: Draw | None = None,
    folder: Path | None = None,
    key: str | None = None,
) -> Job:
    """Examples for ``spec`` (its tokenization, its label scheme) and its model folder (default: the
    variant's) and pad id; ``draw`` cuts each seed's train docs from ``rows["train"]`` (None: every seed trains
    on all of them); ``key`` names the run (default ``spec.key``)."""
    folder = folder or model_dir(spec.variant, models)
    exs = {split: TASKS[module].examples(rows[split], tcfg, spec.head) for split in SPLITS}
    return Job(item, module, spec, tcfg, exs, labels, folder, pad_token_id(folder), key or spec.key, draw)


def dose_jobs(
    item: str, module: str, tcfg: TaskParams, rows: dict, labels: list[str], models: Path, draw: Draw
) -> dict[int, Job]:
    """``{pretraining step: job}``: the ``dose_response`` config from each snapshot in
    ``<models>/pretrained/snapshots/step_<N>``, run key ``pretrained@step_<N>/<mode>/<head>``.

    Raises ``FileNotFoundError`` when pretrain saved no snapshots.
    """
    spec = next(s for s in tcfg.configs if s.key == tcfg.dose_response)
    folders = snapshot_dirs(models)
    if not folders:
        raise FileNotFoundError(
            f"finetune.recipes.*.dose_response of task {item}: no snapshots in {pretrained_dir(models)}/snapshots "
            "(set pretrain.dose_snapshot_fractions)"
        )
    jobs = {}
    for folder in folders:
        step = int(folder.name.removeprefix("step_"))
        key = f"{spec.variant}@{folder.name}/{spec.mode}/{spec.head}"
        jobs[step] = make_job(item, module, spec, tcfg, rows, labels, models, draw, folder=folder, key=key)
    return jobs
