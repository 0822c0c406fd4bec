"""The ``report:`` section of params.yaml."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from tasks.config.base import StrictModel
from tasks.config.model.finetune import TaskParams
from tasks.config.tasks import Tasks

#: Where each field of ``ReportSetup`` comes from: the params keys the report stage reads beyond its section.
SETUP_KEYS = {
    "tasks": ("tasks",),
    "recipes": ("finetune.recipes",),
    "init_from": ("pretrain.init_from",),
    "ablations": ("pretrain.ablations",),
    "dose_snapshots": ("pretrain.dose_snapshot_fractions",),
    "semantic": ("leakage.semantic.enabled",),
    "operational": ("finetune.operational.enabled",),
    "probe_variants": ("probe.variants",),
    "pair_variants": ("probe.pair_variants",),
    "warnings": (
        "ingest.sources",
        "tokenizer.pretrain_sources",
        "tokenizer.exclude_sources",
        "tokenizer.unk_eval_sources",
        "tokenize.pretrain_sources",
        "tokenize.exclude_sources",
    ),
}


class ReportSetup(StrictModel):
    """What the report reads of the other sections, copied by the root model (``tasks/config/root.py``), never
    written in the report section: the tasks whose claims are generated (``tasks.report.claims.standard``) and
    the switches that say which of their arms a run produces (``tasks.report.claims.switches``)."""

    tasks: Tasks = Field(default_factory=dict, description="the tasks section")
    recipes: dict[str, TaskParams] = Field(default_factory=dict, description="finetune.recipes")
    init_from: str = Field("scratch", description="pretrain.init_from: scratch, or the variant adapted exists")
    ablations: list[str] = Field(default_factory=list, description="names of pretrain.ablations")
    dose_snapshots: bool = Field(False, description="pretrain.dose_snapshot_fractions is not empty")
    semantic: bool = Field(True, description="leakage.semantic.enabled")
    operational: bool = Field(True, description="finetune.operational.enabled")
    probe_variants: list[str] = Field(default_factory=list, description="probe.variants (the sense probe)")
    pair_variants: list[str] = Field(default_factory=list, description="probe.pair_variants (the minimal pairs)")
    warnings: list[str] = Field(
        default_factory=list,
        description="Params.source_warnings(): a task source only "
        "the leakage audit reads; shown at the top of the claim table",
    )


class ReportParams(StrictModel):
    """Params of the ``report`` stage: the statistics of the claim table and where its inputs live."""

    confidence_level: float = Field(gt=0.5, lt=1.0, description="two-sided confidence level of every CI")
    paired_method: Literal["t", "bootstrap"] = Field(
        description="CI of a paired difference without test items (probe words): paired t, or a percentile bootstrap"
    )
    bootstrap_resamples: int = Field(ge=1000, description="resamples of every bootstrap behind a claim")
    slice_bootstrap_resamples: int = Field(ge=500, description="resamples per cell of the slice tables")
    max_diverged_seed_fraction: float = Field(
        ge=0, lt=1, description="an arm with a larger share of diverged seeds makes its claims not resolvable"
    )
    bootstrap_seed: int = Field(ge=0, description="seed of the bootstrap's numpy Generator")
    calibration_bins: int = Field(ge=1, description="equal-mass bins of the expected calibration error (ECE)")
    mde_power: float = Field(gt=0, lt=1, description="power of each claim's MDE against its margin (Bloom 1995)")
    floor_baseline: Literal["best", "weakest"] = Field(
        description="the floor each trained arm is compared with on test: the best comparator on dev, or the weakest"
    )
    floor_margin: float = Field(
        ge=0,
        lt=1,
        description="an arm whose CI of (arm - floor) on test lies at or below it is at floor (metric units)",
    )
    figure_runs: dict[str, str] = Field(
        default_factory=dict,
        description="task name -> run key (<variant>/<mode>/<head>) whose confusion matrix or "
        "span errors are drawn; a task not listed draws its best arm on dev",
    )
    mlflow_ui_url: str = Field(pattern=r"^https?://", description="MLflow UI base URL the run-id links point at")
    figure_dpi: int = Field(ge=50, le=600, description="resolution of the PNG figures, dots per inch")
    history_runs: int = Field(
        ge=1,
        le=1000,
        description="earlier runs' claims read back from MLflow for the "
        "'Since the last run' section and the claims' trend figure (the latest first)",
    )
    dvc_lock_file: Path = Field(
        description="dvc.lock read for data md5s and the params each stage ran with, relative to the repo root"
    )
    setup: ReportSetup = Field(default_factory=ReportSetup, description="copied from the other sections")

    @field_validator("figure_runs")
    @classmethod
    def _three_parts(cls, value: dict[str, str]) -> dict[str, str]:
        bad = {task: key for task, key in value.items() if len(key.split("/")) != 3}
        if bad:
            raise ValueError(f"every run key must be '<variant>/<mode>/<head>', got {bad}")
        return value
