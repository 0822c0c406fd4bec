"""The root params model and its loader: ``Params`` holds one section per stage
(``tasks/config/{corpus,model}/<stage>.py``), ``load_params`` reads and validates ``params.yaml``. Imported on
first use of these names (``tasks/config``'s ``__getattr__``): a stage module that needs only its own section
does not import every section's model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError, model_validator

from tasks.config.base import StrictModel
from tasks.config.cluster import RayParams
from tasks.config.corpus.dedup import DedupParams
from tasks.config.corpus.ingest import IngestParams, resolve_pretrain
from tasks.config.corpus.leakage import LeakageParams
from tasks.config.corpus.split import SplitParams
from tasks.config.corpus.tokenize import TokenizeParams
from tasks.config.corpus.tokenizer import TokenizerParams
from tasks.config.hardware import HardwareParams
from tasks.config.model.export import ExportParams
from tasks.config.model.finetune import FinetuneParams
from tasks.config.model.pretrain import PretrainParams
from tasks.config.model.probe import ProbeParams
from tasks.config.model.release import ReleaseParams
from tasks.config.model.report import ReportParams, ReportSetup
from tasks.config.paths import Paths
from tasks.config.pipeline import PipelineParams
from tasks.config.snapshot import SnapshotParams
from tasks.config.tasks import Tasks
from tasks.config.yamlfile import ParamsError, read_yaml


class Params(StrictModel):
    """The whole of ``params.yaml``: ``paths``, the fine-tuning ``tasks``, and one section per stage (section
    name = stage name). ``tasks`` is copied into the split, tokenize, finetune and export sections, the stages that
    read it (export also gets tokenize's NER window lengths; split each task's ``max_train_docs``, which size its
    train pool); ``hardware`` into the model stages' (pretrain, finetune, probe, and leakage for its semantic
    detector); ``ray`` into dedup's and leakage's; ``pretrain.init_from`` into
    leakage's ``pretrain_init_from`` (the lineage it audits)."""

    paths: Paths
    pipeline: PipelineParams
    tasks: Tasks
    ingest: IngestParams
    dedup: DedupParams
    split: SplitParams
    leakage: LeakageParams
    tokenizer: TokenizerParams
    tokenize: TokenizeParams
    pretrain: PretrainParams
    finetune: FinetuneParams
    probe: ProbeParams
    export: ExportParams
    report: ReportParams
    release: ReleaseParams
    snapshot: SnapshotParams
    ray: RayParams = RayParams()
    hardware: HardwareParams = HardwareParams()

    @model_validator(mode="after")
    def _tasks_fit(self) -> Params:
        task_sources = {source.name for source in self.ingest.sources if source.role == "task"}
        for name, spec in self.tasks.items():
            if spec.source not in task_sources:
                raise ValueError(
                    f"tasks.{name}.source: {spec.source!r} is not an ingest source with role: task "
                    f"({sorted(task_sources)})"
                )
        self.finetune.check_tasks(self.tasks)
        for spec in self.tasks.values():
            if self.finetune.recipes[spec.recipe].dose_response and not self.pretrain.dose_snapshot_fractions:
                raise ValueError(f"finetune.recipes.{spec.recipe}.dose_response needs pretrain.dose_snapshot_fractions")
            if self.finetune.recipes[spec.recipe].ablation_config and not self.pretrain.ablations:
                raise ValueError(f"finetune.recipes.{spec.recipe}.ablation_config needs pretrain.ablations")
        return self

    @model_validator(mode="after")
    def _every_source_used(self) -> Params:
        """``pretrain_sources`` of the tokenizer and tokenize sections become the names they stand for
        (``resolve_pretrain``: ``all`` is every ``role: pretrain`` source but those excluded by name); a ``role:
        pretrain`` source both exclude, or an ``unk_eval_sources`` name that is no task source, is an error."""
        for stage in ("tokenizer", "tokenize"):
            cfg = getattr(self, stage)
            names = resolve_pretrain(self.ingest.sources, cfg.pretrain_sources, cfg.exclude_sources, stage)
            object.__setattr__(self, stage, cfg.model_copy(update={"pretrain_sources": names}))
        used = {*self.tokenizer.pretrain_sources, *self.tokenize.pretrain_sources}
        idle = [source.name for source in self.ingest.sources if source.role == "pretrain" and source.name not in used]
        if idle:
            raise ValueError(
                f"ingest.sources: role: pretrain source(s) {idle} in both tokenizer.exclude_sources and "
                "tokenize.exclude_sources: no stage uses them (remove them from ingest.sources)"
            )
        task_sources = sorted(source.name for source in self.ingest.sources if source.role == "task")
        unknown = [name for name in self.tokenizer.unk_eval_sources if name not in task_sources]
        if unknown:
            raise ValueError(
                f"tokenizer.unk_eval_sources: {unknown} not ingest sources with role: task ({task_sources})"
            )
        return self

    def source_warnings(self) -> list[str]:
        """One line per ``role: task`` source that no task, ``unk_eval_sources`` or ``pretrain_sources`` names:
        only the leakage audit reads it (its dev and test texts are cleaned out of the pretraining text), which is
        seldom what a user who listed it meant, so the flow prints it, but it is not an error."""
        named = {spec.source for spec in self.tasks.values()} | set(self.tokenizer.unk_eval_sources)
        named |= {*self.tokenizer.pretrain_sources, *self.tokenize.pretrain_sources}
        return [
            f"ingest.sources: {source.name!r} (role: task) is named by no task (params.yaml tasks), "
            "tokenizer.unk_eval_sources or pretrain_sources: only the leakage audit reads it"
            for source in self.ingest.sources
            if source.role == "task" and source.name not in named
        ]

    @model_validator(mode="after")
    def _share_tasks(self) -> Params:
        # frozen models: model_copy is how a validated section gets the validated tasks
        object.__setattr__(self, "tokenize", self.tokenize.model_copy(update={"tasks": self.tasks}))
        object.__setattr__(self, "finetune", self.finetune.model_copy(update={"tasks": self.tasks}))
        # split sizes each task source's train pool from its tasks' recipes (split.task_sizing: study)
        caps = {name: self.finetune.recipes[spec.recipe].max_train_docs for name, spec in self.tasks.items()}
        object.__setattr__(self, "split", self.split.model_copy(update={"tasks": self.tasks, "max_train_docs": caps}))
        self.split.check_max_docs({source.name: source.max_docs for source in self.ingest.sources})
        windows = {
            "ner_window_tokens": self.tokenize.ner_max_seq_len_tokens,
            "ner_window_overlap_tokens": self.tokenize.ner_window_overlap_tokens,
        }
        object.__setattr__(self, "export", self.export.model_copy(update={"tasks": self.tasks, **windows}))
        for stage in ("dedup", "leakage"):  # the stages with engine: ray
            object.__setattr__(self, stage, getattr(self, stage).model_copy(update={"ray": self.ray}))
        for stage in ("pretrain", "finetune", "probe", "leakage"):  # the model stages (leakage: its encoder)
            object.__setattr__(self, stage, getattr(self, stage).model_copy(update={"hardware": self.hardware}))
        # the report generates each task's claims and says which arms a run produces (tasks/report/claims/switches.py)
        setup = ReportSetup(
            tasks=self.tasks,
            recipes=self.finetune.recipes,
            init_from=str(self.pretrain.init_from),
            ablations=[arm.name for arm in self.pretrain.ablations],
            dose_snapshots=bool(self.pretrain.dose_snapshot_fractions),
            semantic=self.leakage.semantic.enabled,
            operational=self.finetune.operational.enabled,
            probe_variants=list(self.probe.variants),
            pair_variants=list(self.probe.pair_variants),
            warnings=self.source_warnings(),
        )
        object.__setattr__(self, "report", self.report.model_copy(update={"setup": setup}))
        # leakage audits the lineage of the model pretraining starts from (tasks/leakage/lineage_audit.py)
        lineage = {"pretrain_init_from": self.pretrain.init_from}
        object.__setattr__(self, "leakage", self.leakage.model_copy(update=lineage))
        return self

    def section(self, stage: str) -> StrictModel:
        """The params section named ``stage``; raises ``ParamsError`` for an unknown stage."""
        if stage not in type(self).model_fields or stage in (
            "paths",
            "pipeline",
            "snapshot",
            "tasks",
            "ray",
            "hardware",
        ):
            raise ParamsError(f"params.yaml has no stage section {stage!r}")
        return getattr(self, stage)


def _format_errors(path: Path, err: ValidationError) -> str:
    lines = [f"{path}: {err.error_count()} invalid value(s)"]
    for item in err.errors():
        dotted = ".".join(str(part) for part in item["loc"]) or "<root>"
        got = item.get("input")
        shown = "" if isinstance(got, dict) or "(got " in item["msg"] else f" (got {got!r})"
        lines.append(f"  {dotted}: {item['msg']}{shown}")
    return "\n".join(lines)


def load_params(path: Path | str = "params.yaml", overrides: dict[str, Any] | None = None) -> Params:
    """Load and validate ``params.yaml``.

    ``overrides`` maps dotted keys (``"dedup.threshold"``) to values, applied before validation (tests use
    it to shrink runs). Raises ``ParamsError`` whose message names every invalid dotted key.
    """
    path = Path(path)
    raw = read_yaml(path)
    if not isinstance(raw, dict):
        raise ParamsError(f"{path}: top level must be a mapping of sections")
    for dotted, value in (overrides or {}).items():
        _set_dotted(raw, dotted, value)
    try:
        return Params.model_validate(raw)
    except ValidationError as err:
        raise ParamsError(_format_errors(path, err)) from None


def _set_dotted(tree: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = tree
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = value
