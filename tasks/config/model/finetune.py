"""The ``finetune:`` section of params.yaml."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, PositiveInt, field_validator, model_validator

from tasks.config.base import StrictModel, Variant, require_unique
from tasks.config.hardware import HardwareParams
from tasks.config.tasks import Tasks, TaskSpec

Mode = Literal["full", "frozen"]

#: Heads allowed per task module (``TaskSpec.module``): the pooling of a classifier, the label scheme of a tagger.
HEADS: dict[str, tuple[str, ...]] = {"cls": ("cls-pool", "mean-pool"), "ner": ("first", "all")}
#: Baselines per task module (``tasks/finetune/baselines/fitting.py``): no encoder, fitted on the arms' train docs and
#: input. A pair's bag of words is that of both texts.
BASELINES: dict[str, tuple[str, ...]] = {"cls": ("majority", "tfidf-lr"), "ner": ("memorise", "crf")}
#: How each kind may cut a sequence longer than ``max_seq_len_tokens``.
TRUNCATIONS: dict[str, tuple[str, ...]] = {
    "classification": ("head", "head_tail"),
    "pair_classification": ("longest_first",),
    "token_classification": ("head",),
}


class RunSpec(StrictModel):
    """One configuration to fine-tune: initial weights x training mode x head. Written ``variant/mode/head``."""

    variant: Variant
    mode: Mode
    head: str

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, value: Any) -> Any:
        if isinstance(value, str):
            parts = value.split("/")
            if len(parts) != 3:
                raise ValueError(f"expected 'variant/mode/head' (e.g. 'pretrained/full/cls-pool'), got {value!r}")
            return dict(zip(("variant", "mode", "head"), parts, strict=True))
        return value

    @property
    def key(self) -> str:
        """``variant/mode/head``: the key of this configuration in ``metrics/finetune/<task>.json``."""
        return f"{self.variant}/{self.mode}/{self.head}"


class TaskParams(StrictModel):
    """A recipe (``finetune.recipes.<name>``): data budget, optimisation and the arms of the tasks that name it."""

    configs: list[RunSpec] = Field(min_length=1, description="configurations to run, each over every seed")
    max_train_docs: int | None = Field(gt=0, description="train docs kept (a seeded hash sample); null = all")
    max_dev_docs: int | None = Field(gt=0, description="dev docs kept for early stopping; null = all")
    max_test_docs: int | None = Field(gt=0, description="test docs kept; null = all (the honest setting)")
    max_seq_len_tokens: int | None = Field(
        ge=8,
        description="cut each document to this many tokens, [CLS]/[SEP] included (classification and "
        "pair tasks; token_classification: null, windows are sized by tokenize.ner_max_seq_len_tokens)",
    )
    truncation: Literal["head", "head_tail", "longest_first"] = Field(
        description="classification: keep the first tokens (head), or the first head_tokens and the last ones "
        "(head_tail, Sun et al. 2019); pair: longest_first (HF: drop from the end of the longer text first)"
    )
    head_tokens: int = Field(ge=0, description="cls head_tail: content tokens kept from the start of the document")
    baselines: list[str] = Field(
        description="baselines fitted on the arms' train docs and input (and once more on "
        "every train doc, full text: a reference row), scored on the same test"
    )
    baseline_c_grid: list[float] = Field(
        min_length=1,
        description="tfidf-lr: inverse L2 strengths C tried with each analyzer, the best pair on dev macro-F1 is kept",
    )
    baseline_tfidf_ngrams: dict[Literal["word", "char_wb"], tuple[PositiveInt, PositiveInt]] = Field(
        min_length=1, description="tfidf-lr: analyzer -> n-gram range (min, max) tried with each C of baseline_c_grid"
    )
    baseline_memorise_cases: list[Literal["cased", "lowercased", "cased_backoff"]] = Field(
        min_length=1,
        description="memorise: word lookups tried, the best on dev entity F1 is kept (cased_backoff: "
        "the cased word, else its lowercased form)",
    )
    baseline_crf_c1_grid: list[float] = Field(
        default=[0.05, 0.25],
        min_length=1,
        description="crf: L1 penalties c1 tried with each c2, the best pair on dev entity F1 is kept (0: none)",
    )
    baseline_crf_c2_grid: list[float] = Field(
        default=[0.05], min_length=1, description="crf: L2 penalties c2 tried with each c1 (0: none)"
    )
    baseline_crf_max_iterations: PositiveInt = Field(default=100, description="crf: L-BFGS iterations at most")
    baseline_grid_widen: int = Field(
        default=2,
        ge=0,
        description="times tfidf-lr's C grid and each of the crf's c1/c2 grids may add one value past the grid's "
        "edge when the edge is the best on dev (one step of the grid's ratio at that edge); 0: the grids as given",
    )
    lr_grid: list[float] = Field(
        min_length=1,
        description="multipliers of every learning rate of an arm, tried with the first seed; the best "
        "on dev is kept for all seeds of that arm",
    )
    lr_grid_widen: int = Field(
        ge=0,
        description="times an arm's sweep may add one multiplier past the grid's edge when the edge is the "
        "best on dev (one step of the grid's ratio at that edge); 0: the grid as given",
    )
    frozen_c_grid: list[float] = Field(
        [0.001, 0.01, 0.1, 1.0, 10.0],
        min_length=1,
        description="classification frozen arms: inverse L2 strengths "
        "C of the logistic-regression probe on standardized pooled features, the best on dev kept (tasks/finetune/"
        "frozen.py)",
    )
    frozen_max_iter: int = Field(
        5000,
        gt=0,
        description="lbfgs iterations a frozen arm's probe may take; one that stops there has not "
        "converged and fails the stage",
    )
    batch_size: int = Field(gt=0, description="sequences (cls docs or ner windows) per optimizer step")
    length_group_batches: int = Field(
        gt=0,
        description="shuffle, then sort by length within groups of this many batches (less padding); 1 = plain shuffle",
    )
    max_epochs: int = Field(gt=0, description="upper bound on passes over the train set")
    patience_epochs: int = Field(gt=0, description="stop after this many epochs without a better dev score")
    lr_encoder: float = Field(gt=0, description="AdamW peak learning rate of the encoder (full mode)")
    lr_encoder_reference: float = Field(
        gt=0, description="AdamW peak learning rate of the reference MiniLM encoder (a fully trained model)"
    )
    lr_head: float = Field(gt=0, description="AdamW peak learning rate of the head")
    weight_decay: float = Field(ge=0, description="AdamW decoupled weight decay (not on biases/LayerNorm)")
    warmup_fraction: float = Field(ge=0, lt=1, description="share of optimizer steps with linear LR warmup")
    max_grad_norm: float = Field(gt=0, description="gradient clipping threshold (L2 norm)")
    head_dropout: float = Field(ge=0, lt=1, description="dropout before the linear head")
    divergence_margin: float = Field(
        ge=0,
        description="a run whose best dev score is <= chance + this margin is reported as diverged "
        "(cls: dev accuracy vs majority-class rate; ner: dev entity F1 vs 0)",
    )
    dose_response: str | None = Field(
        description="a `pretrained/...` entry of configs to fine-tune again from every pretraining snapshot "
        "(pretrain.dose_snapshot_fractions): downstream score against pretraining steps; null = off"
    )
    ablation_config: str | None = Field(
        None,
        description="a `pretrained/...` (or `adapted/...`) entry of configs to fine-tune again from every "
        "pretraining ablation arm's model (pretrain.ablations: models/pretrained/ablations/<name>/), run key "
        "<variant>@ablation_<name>/<mode>/<head>, the arm's seeds and its own learning-rate sweep; null = off",
    )

    train_sizes: list[PositiveInt] = Field(
        default_factory=list,
        description="learning curve: train doc counts, each below the train docs the full-size "
        "runs keep, at which curve_configs and the comparator baselines run again (the same seeds, dev and test "
        "docs; tasks/finetune/reruns/at_train_sizes.py); [] = no curve",
    )
    curve_configs: list[RunSpec] = Field(
        default_factory=list, description="learning curve: entries of configs run at every size of train_sizes"
    )

    @field_validator("lr_grid", "baseline_c_grid", "frozen_c_grid")
    @classmethod
    def _positive_unique(cls, value: list[float]) -> list[float]:
        if any(v <= 0 for v in value):
            raise ValueError(f"every value must be > 0, got {value}")
        return require_unique(value, "grid")

    @field_validator("baseline_tfidf_ngrams")
    @classmethod
    def _ordered_ranges(cls, value: dict) -> dict:
        for analyzer, (low, high) in value.items():
            if low > high:
                raise ValueError(f"{analyzer}: n-gram range ({low}, {high}) must have min <= max")
        return value

    @field_validator("baseline_crf_c1_grid", "baseline_crf_c2_grid")
    @classmethod
    def _penalties(cls, value: list[float]) -> list[float]:
        if any(v < 0 for v in value):
            raise ValueError(f"every penalty must be >= 0, got {value}")
        return require_unique(value, "grid")

    @field_validator("baseline_memorise_cases")
    @classmethod
    def _unique_cases(cls, value: list[str]) -> list[str]:
        return require_unique(value, "baseline_memorise_cases")

    @model_validator(mode="after")
    def _curve_configs_listed(self) -> TaskParams:
        keys, curve = [spec.key for spec in self.configs], [spec.key for spec in self.curve_configs]
        require_unique(self.train_sizes, "train_sizes")
        require_unique(curve, "curve_configs")
        if [k for k in curve if k not in keys] or bool(curve) != bool(self.train_sizes):
            raise ValueError(
                f"curve_configs {curve} must be entries of configs {keys}, given with train_sizes "
                f"{self.train_sizes} (both empty: no learning curve)"
            )
        if self.max_train_docs is not None and any(n >= self.max_train_docs for n in self.train_sizes):
            raise ValueError(f"train_sizes {self.train_sizes} must be below max_train_docs {self.max_train_docs}")
        return self

    @model_validator(mode="after")
    def _dose_config_listed(self) -> TaskParams:
        if self.dose_response is None:
            return self
        keys = [spec.key for spec in self.configs]
        if self.dose_response not in keys or not self.dose_response.startswith("pretrained/"):
            raise ValueError(f"dose_response {self.dose_response!r} must be a pretrained/... entry of configs {keys}")
        return self

    @model_validator(mode="after")
    def _ablation_config_listed(self) -> TaskParams:
        if self.ablation_config is None:
            return self
        keys = [spec.key for spec in self.configs]
        if self.ablation_config not in keys or self.ablation_config.split("/")[0] not in ("pretrained", "adapted"):
            raise ValueError(
                f"ablation_config {self.ablation_config!r} must be a pretrained/... or adapted/... "
                f"entry of configs {keys}"
            )
        return self


class OperationalParams(StrictModel):
    """How the finetune stage measures each fine-tuned model after training (``tasks/finetune/arms/operational.py``):
    latency per document, peak memory, parameter count and size on disk."""

    enabled: bool = Field(description="measure every arm's model (its first reported seed) and tfidf-lr; false = skip")
    threads: int = Field(
        gt=0, description="torch intra-op threads of the measuring process (runs alone, after training)"
    )
    timed_batches: dict[PositiveInt, PositiveInt] = Field(
        min_length=1,
        description="batch size (docs or ner windows) -> batches timed at that size, cycling through "
        "the test examples; p50/p95 are over these batches",
    )
    warmup_batches: int = Field(ge=0, description="untimed batches run first at each batch size (allocator, caches)")
    cpu_on_gpu_host: bool = Field(
        False,
        description="on a CUDA run, also time every model on the CPU (slow for "
        "large models: BERT-base at 512 tokens takes tens of minutes)",
    )


class FinetuneParams(StrictModel):
    """Params of the ``finetune`` stage (a DVC foreach over the ``tasks`` of params.yaml).

    ``tasks`` is not written under ``finetune:``: the root model copies the ``tasks`` section here after
    validating both, so the stage sees the kind and source of the task it runs.
    """

    seeds: list[int] = Field(
        min_length=1,
        description="fine-tuning seeds: one run per seed of every arm (each draws its own train docs) and one fit "
        "of every comparator baseline; >= 2 for a confidence interval. An arm whose variant is in "
        "variant_seed_counts runs only the first seeds (seeds_for)",
    )
    variant_seed_counts: dict[Variant, PositiveInt] = Field(
        default_factory=dict,
        description="variant -> its arms run at most this many of the first seeds (a costly encoder: reference = "
        "the packaged MiniLM, ~20x a tiny run); a variant not listed runs every seed. A prefix of seeds, so its "
        "seed k still trains on seed k's draw of the train docs, as every other arm and baseline does",
    )
    variant_lr_grids: dict[Variant, list[float]] = Field(
        default_factory=dict,
        description="variant -> the lr_grid multipliers its arms try instead of their recipe's lr_grid (a costly "
        "encoder: one entry = one sweep run and no widening); a variant not listed sweeps the recipe's lr_grid",
    )
    sweep_seed: int = Field(
        description="seed of the learning-rate sweep runs; not in seeds, so no reported run is "
        "the best of several on dev"
    )
    data_seed: int = Field(
        ge=0,
        description="salt of the hash samples that pick the dev/test docs kept (one sample) and "
        "each seed's train docs (data_seed:seed:doc_id, tasks/finetune/draw.py)",
    )
    confidence_level: float = Field(gt=0, lt=1, description="two-sided t-interval level over seeds, e.g. 0.95")
    torch_threads: int = Field(gt=0, description="torch intra-op threads per run (results are reproducible per value)")
    workers: int = Field(gt=0, description="CPU: runs trained at once, one process each (1 = in-process)")
    runs_per_gpu: int = Field(
        1,
        gt=0,
        description="CUDA: runs trained at once on each visible GPU, one process each "
        "(small models leave a GPU idle between kernels: 2-4 fill it)",
    )
    cpu_train_precision: Literal["auto", "bf16", "fp32"] = Field(
        "auto",
        description="CPU runs: training steps under bf16 autocast (fp32 master weights; predictions stay "
        "fp32): auto = when the CPU has AVX512-BF16 or AMX (about 1.8x faster there), bf16 = always, fp32 = never",
    )
    operational: OperationalParams
    recipes: dict[str, TaskParams] = Field(min_length=1, description="recipe name -> arms, budget, optimisation")
    tasks: Tasks = Field(default_factory=dict, description="copied from the tasks section (see the class docstring)")
    hardware: HardwareParams = Field(default_factory=HardwareParams, description="copied from the hardware section")

    @field_validator("seeds")
    @classmethod
    def _unique_seeds(cls, value: list[int]) -> list[int]:
        return require_unique(value, "seeds")

    @model_validator(mode="after")
    def _sweep_seed_apart(self) -> FinetuneParams:
        if self.sweep_seed in self.seeds:
            raise ValueError(f"sweep_seed {self.sweep_seed} must not be one of seeds {self.seeds}")
        return self

    @field_validator("variant_lr_grids")
    @classmethod
    def _lr_grids_positive(cls, value: dict[str, list[float]]) -> dict[str, list[float]]:
        for variant, grid in value.items():
            if not grid or any(v <= 0 for v in grid):
                raise ValueError(f"{variant}: a grid of multipliers > 0, at least one, got {grid}")
            require_unique(grid, f"variant_lr_grids.{variant}")
        return value

    def lr_grid_for(self, variant: str, recipe_grid: list[float]) -> list[float]:
        """The learning-rate multipliers an arm of ``variant`` sweeps: ``variant_lr_grids[variant]``, else the
        recipe's ``lr_grid`` (``recipe_grid``)."""
        grids = {str(name): grid for name, grid in self.variant_lr_grids.items()}
        return grids.get(variant, recipe_grid)

    def seeds_for(self, variant: str) -> list[int]:
        """The fine-tuning seeds an arm of ``variant`` runs: the first ``variant_seed_counts[variant]`` of
        ``seeds`` (all of them when there are fewer), or all of them for a variant not listed (a prefix, so seed
        ``k`` keeps its train draw)."""
        counts = {str(name): count for name, count in self.variant_seed_counts.items()}
        return self.seeds[: counts.get(variant, len(self.seeds))]

    @model_validator(mode="after")
    def _unique_configs(self) -> FinetuneParams:
        for name, recipe in self.recipes.items():
            require_unique([spec.key for spec in recipe.configs], f"recipes.{name}.configs")
        return self

    @model_validator(mode="after")
    def _recipes_fit_tasks(self) -> FinetuneParams:
        self.check_tasks(self.tasks)  # empty when read from params.yaml: the root model checks there
        return self

    def check_tasks(self, tasks: Tasks) -> None:
        """Raise ``ValueError`` naming the task whose recipe is missing or does not fit its kind (``check_recipe``)."""
        for name, spec in tasks.items():
            if spec.recipe not in self.recipes:
                raise ValueError(
                    f"tasks.{name}.recipe: {spec.recipe!r} is not in finetune.recipes ({sorted(self.recipes)})"
                )
            check_recipe(name, spec, self.recipes[spec.recipe])

    def spec(self, task: str) -> TaskSpec:
        """The ``tasks`` entry ``task``; raises ``ValueError`` naming the known tasks for another name."""
        if task not in self.tasks:
            raise ValueError(
                f"finetune: unknown task {task!r}, expected one of {sorted(self.tasks)} (params.yaml tasks)"
            )
        return self.tasks[task]

    def task(self, task: str) -> TaskParams:
        """The recipe of task ``task`` (``finetune.recipes[tasks.<task>.recipe]``); raises as ``spec``."""
        return self.recipes[self.spec(task).recipe]


def check_recipe(task: str, spec: TaskSpec, recipe: TaskParams) -> None:
    """Raise ``ValueError`` when ``recipe`` does not fit the kind of task ``task`` (heads, baselines, lengths)."""
    where = f"tasks.{task} (kind {spec.kind}, recipe {spec.recipe})"
    for run in recipe.configs:
        if run.head not in HEADS[spec.module]:
            raise ValueError(f"{where}: head {run.head!r} in {run.key!r} is not one of {HEADS[spec.module]}")
    for name in recipe.baselines:
        if name not in BASELINES[spec.module]:
            raise ValueError(f"{where}: baseline {name!r} is not one of {BASELINES[spec.module]}")
    if recipe.truncation not in TRUNCATIONS[spec.kind]:
        raise ValueError(f"{where}: truncation {recipe.truncation!r} is not one of {TRUNCATIONS[spec.kind]}")
    token = spec.kind == "token_classification"
    if token and recipe.max_seq_len_tokens is not None:
        raise ValueError(
            f"{where}: max_seq_len_tokens must be null: windows are sized by tokenize.ner_max_seq_len_tokens"
        )
    if not token and recipe.max_seq_len_tokens is None:
        raise ValueError(f"{where}: max_seq_len_tokens must be set: documents are stored whole (e.g. 128, GPU: 512)")
    max_len = recipe.max_seq_len_tokens  # set here: a token task, the one kind without it, has no head_tail
    if recipe.truncation == "head_tail" and max_len is not None and recipe.head_tokens > max_len - 2:
        raise ValueError(f"{where}: head_tokens ({recipe.head_tokens}) must be <= max_seq_len_tokens - 2")
