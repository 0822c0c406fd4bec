"""The ``report:`` section of params.yaml."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from tasks.config.base import StrictModel


class FigureRuns(StrictModel):
    """Which fine-tuning run (``<variant>/<mode>/<head>``) the per-run figures draw."""

    cls: str = Field(description="run key in metrics/finetune_cls.json whose confusion matrix is drawn")
    ner: str = Field(description="run key in metrics/finetune_ner.json whose span errors are drawn")

    @field_validator("cls", "ner")
    @classmethod
    def _three_parts(cls, value: str) -> str:
        if len(value.split("/")) != 3:
            raise ValueError(f"must be '<variant>/<mode>/<head>', got {value!r}")
        return value


class FigureMetrics(StrictModel):
    """Which test metric the per-seed figure of each task plots."""

    cls: Literal["test_accuracy", "test_macro_f1"]
    ner: Literal["test_entity_f1", "test_entity_precision", "test_entity_recall"]


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
    figure_runs: FigureRuns
    figure_metrics: FigureMetrics
    mlflow_ui_url: str = Field(pattern=r"^https?://", description="MLflow UI base URL the run-id links point at")
    figure_dpi: int = Field(ge=50, le=600, description="resolution of the PNG figures, dots per inch")
    dvc_lock_file: Path = Field(
        description="dvc.lock read for data md5s and the params each stage ran with, relative to the repo root"
    )
