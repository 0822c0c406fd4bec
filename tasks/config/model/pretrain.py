"""The ``pretrain:`` section of params.yaml: model size, masking, optimisation, checkpoints, evaluation.

Every field is required (no hidden defaults). ``size`` picks one entry of ``presets``; the vocabulary size is
read from the trained tokenizer, never from here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Self

from pydantic import Field, field_validator, model_validator

from tasks.config.base import StrictModel, require_unique
from tasks.config.hardware import HardwareParams


class ModelPreset(StrictModel):
    """One BERT encoder size (Devlin et al. 2019: base = 12 layers x 768 hidden, 12 heads, 3072 FFN)."""

    num_hidden_layers: int = Field(ge=1)
    hidden_size: int = Field(ge=8)
    num_attention_heads: int = Field(ge=1)
    intermediate_size: int = Field(ge=8, description="feed-forward width")

    @model_validator(mode="after")
    def _heads_divide_hidden(self) -> Self:
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size {self.hidden_size} is not divisible by num_attention_heads {self.num_attention_heads}"
            )
        return self


#: The recipe keys a pretraining ablation arm may change (the masking; everything else is the main recipe's).
ABLATION_KEYS = ("mask_token_fraction", "random_token_fraction", "mlm_probability")


class AblationArm(StrictModel):
    """One arm of ``pretrain.ablations``: the main recipe with some masking keys changed (``ABLATION_KEYS``),
    trained from the first pretraining seed into ``models/pretrained/ablations/<name>/``."""

    name: str = Field(pattern=r"^[a-z][a-z0-9-]*$", description="folder and run-key name, e.g. all-mask")
    mask_token_fraction: float | None = Field(None, ge=0.0, le=1.0)
    random_token_fraction: float | None = Field(None, ge=0.0, le=1.0)
    mlm_probability: float | None = Field(None, gt=0.0, lt=1.0)

    @model_validator(mode="before")
    @classmethod
    def _masking_keys_only(cls, raw: Any) -> Any:
        if isinstance(raw, dict):
            other = [k for k in raw if k not in ("name", *ABLATION_KEYS)]
            if other:
                raise ValueError(
                    f"{raw.get('name', '?')}: {other[0]!r} cannot be changed by an ablation arm "
                    f"(only {', '.join(ABLATION_KEYS)})"
                )
        return raw

    def changes(self) -> dict[str, float]:
        """The keys this arm sets (``ABLATION_KEYS`` not null)."""
        return {key: getattr(self, key) for key in ABLATION_KEYS if getattr(self, key) is not None}


class PretrainParams(StrictModel):
    """Params of the ``pretrain`` stage (BERT MLM on the packed blocks of ``tokenize``; ``size``, ``presets`` and
    ``architecture`` apply to ``init_from: scratch`` only, a loaded model keeps its own shape)."""

    seeds: list[int] = Field(
        min_length=1,
        description="pretraining seeds (weights, data order, masks), each >= 0: the first's model is models/pretrained "
        "(what probe, export and release read); each further seed trains the same recipe into "
        "models/pretrained/seeds/<seed>/, fine-tuned like the first, so the report resamples pretraining seeds",
    )
    init_from: str = Field(
        min_length=1,
        description="scratch (a fresh model of preset `size`) | reference (continue MLM from the packaged MiniLM) "
        "| a path to an HF model folder whose tokenizer is ours or the reference's (continue from it)",
    )
    size: str = Field(description="key of `presets` to train")
    presets: dict[str, ModelPreset]
    max_position_embeddings: int = Field(ge=8, description="tokens; >= the block length (fine-tuning may use more)")
    architecture: Literal["bert", "roberta-prelayernorm", "modernbert"] = Field(
        description="HF model class of a fresh model: bert (BertForMaskedLM, post-LayerNorm, learned absolute "
        "positions); roberta-prelayernorm (LayerNorm before each sublayer: Cramming, Geiping & Goldstein 2023, "
        "trains stably at higher learning rates); modernbert (ModernBertForMaskedLM: pre-LayerNorm, rotary "
        "positions, GeGLU, no biases; Warner et al. 2024)"
    )
    dropout_prob: float = Field(ge=0.0, lt=1.0, description="hidden + attention dropout (Cramming uses 0)")
    document_mask: bool = Field(
        False,
        description="attention stays within each document of a packed block (tasks/pretrain/attention.py: "
        "FlexAttention block masks on CUDA, an SDPA mask on the CPU); ModernBERT only, dropout_prob 0 (FlexAttention "
        "has no dropout); false: every token attends to the whole block (SDPA's flash kernel on CUDA)",
    )

    mlm_probability: float = Field(gt=0.0, lt=1.0, description="fraction of non-special tokens selected")
    eval_mlm_probability: float = Field(
        gt=0.0, lt=1.0, description="the same for the held-out masks (fixed, so runs of any mlm_probability compare)"
    )
    whole_word_mask: bool = Field(description="select whole words (a token plus its '##' pieces)")
    mask_token_fraction: float = Field(
        ge=0.0,
        le=1.0,
        description="of the selected tokens, the share replaced by [MASK] (BERT: 0.8; 1.0 with "
        "random_token_fraction 0 = all-[MASK], Wettig et al. 2023); training masks only, the held-out masks stay "
        "80/10/10",
    )
    random_token_fraction: float = Field(
        ge=0.0,
        le=1.0,
        description="of the selected tokens, the share replaced by a random token (BERT: 0.1); the "
        "rest (1 - mask_token_fraction - random_token_fraction) keep their token",
    )

    batch_size_blocks: int = Field(ge=1, description="blocks per micro-batch per process")
    grad_accum_steps: int = Field(ge=1, description="micro-batches per optimizer step")
    max_steps: int | None = Field(ge=1, description="optimizer steps; null = derived from train_tokens")
    train_tokens: int | None = Field(
        ge=1,
        description="token budget (tokens seen in training, all ranks): steps = train_tokens / tokens per "
        "step, capped at max_epochs of the corpus given; null = max_steps",
    )
    max_epochs: float | None = Field(
        gt=0.0,
        description="with train_tokens: at most this many passes over the train blocks (a budget sized "
        "for a large corpus never turns into thousands of epochs of a small one); null = no cap",
    )
    budget_minutes: float | None = Field(
        gt=0.0,
        description="wall-clock training budget; set: the schedule follows elapsed time and training stops at "
        "the budget (Cramming, Geiping & Goldstein 2023; not bit-reproducible); null: steps only",
    )
    lr: float = Field(gt=0.0, description="peak learning rate (at lr_reference_tokens_per_step with lr_scaling)")
    lr_scaling: Literal["none", "sqrt", "linear"] = Field(
        "none",
        description="rescale lr at run time to the global batch (world x batch_size_blocks x grad_accum_steps "
        "x block length tokens a step): peak lr = lr x (tokens a step / lr_reference_tokens_per_step)^k, k = 1/2 for "
        "sqrt (Adam: Malladi et al. 2022), 1 for linear (SGD: Goyal et al. 2017); none: lr as given",
    )
    lr_reference_tokens_per_step: int | None = Field(
        None, ge=1, description="global tokens a step at which lr is given; set exactly when lr_scaling is not none"
    )
    lr_schedule: Literal["linear", "cosine"] = Field(description="decay after warmup, to 0 at the end")
    warmup_fraction: float = Field(ge=0.0, lt=1.0, description="of max_steps (or of budget_minutes)")
    weight_decay: float = Field(ge=0.0)
    adam_betas: tuple[float, float]
    adam_eps: float = Field(gt=0.0)
    max_grad_norm: float = Field(gt=0.0, description="clip the global L2 gradient norm")
    bf16: bool = Field(description="bf16 autocast on CUDA (ignored on CPU)")
    compile: bool = Field(description="torch.compile the model")
    nproc_per_node: int | Literal["gpu"] = Field(
        description="processes torchrun starts per node (dvc.yaml cmd); gpu = one per GPU torch sees (torchrun's "
        "own count; processes_per_node); more than the GPUs there are is an error when the stage starts"
    )
    nnodes: int = Field(ge=1, description="machines in the torchrun job (dvc.yaml cmd: --nnodes)")
    rdzv_endpoint: str = Field(
        pattern=r"^[^\s:]+:\d+$",
        description="host:port of the c10d rendezvous (--rdzv-endpoint); localhost:0 = a free local port, one node",
    )
    rdzv_id: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", description="job id every node passes (--rdzv-id)")
    num_threads: int | None = Field(ge=1, description="torch intra-op threads per process; null = torch default")

    log_every_steps: int = Field(ge=1)
    eval_every_steps: int = Field(ge=1, description="held-out evaluation interval, optimizer steps")
    eval_max_blocks: int | None = Field(ge=1, description="held-out blocks evaluated; null = all")
    checkpoint_every_steps: int | None = Field(ge=1)
    checkpoint_every_minutes: float | None = Field(gt=0.0)
    dose_snapshot_fractions: list[float] = Field(
        description="fractions of max_steps in [0, 1) at which the model is also saved (models/pretrained/"
        "snapshots/step_<N>/) for finetune's dose_response; [] = none"
    )
    ablations: list[AblationArm] = Field(
        default_factory=list,
        description="masking ablation arms, each the main recipe with some of "
        f"{', '.join(ABLATION_KEYS)} changed, trained after it from the first seed (same steps, model and data; "
        "no snapshots) into models/pretrained/ablations/<name>/, for finetune's ablation_config; [] = none",
    )
    fill_mask: list[str] = Field(min_length=1, description="sentences with one [MASK] for the final top-k check")
    fill_mask_top_k: int = Field(ge=1)
    hardware: HardwareParams = Field(default_factory=HardwareParams, description="copied from the hardware section")

    @property
    def seed(self) -> int:
        """The first pretraining seed: the one whose model is ``models/pretrained``."""
        return self.seeds[0]

    @field_validator("seeds")
    @classmethod
    def _distinct_seeds(cls, value: list[int]) -> list[int]:
        if any(s < 0 for s in value):
            raise ValueError(f"pretraining seeds must be >= 0, got {value}")
        return require_unique(value, "seeds")

    @field_validator("nproc_per_node")
    @classmethod
    def _positive_processes(cls, value: int | str) -> int | str:
        if isinstance(value, int) and value < 1:  # else "gpu", the one string the type allows
            raise ValueError(f"nproc_per_node must be >= 1 or gpu, got {value}")
        return value

    @field_validator("init_from")
    @classmethod
    def _known_start(cls, value: str) -> str:
        if value in ("scratch", "reference") or (Path(value) / "config.json").is_file():
            return value
        raise ValueError(f"{value!r} is neither scratch, reference nor an HF model folder (no config.json in it)")

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.size not in self.presets:
            raise ValueError(f"size {self.size!r} is not one of presets {sorted(self.presets)}")
        if self.mask_token_fraction + self.random_token_fraction > 1.0 + 1e-9:
            raise ValueError(
                f"mask_token_fraction {self.mask_token_fraction} + random_token_fraction "
                f"{self.random_token_fraction} exceed 1 (they are shares of the selected tokens)"
            )
        if not 0.0 < self.adam_betas[0] < 1.0 or not 0.0 < self.adam_betas[1] < 1.0:
            raise ValueError(f"adam_betas {self.adam_betas} must both lie in (0, 1)")
        if (self.lr_scaling == "none") != (self.lr_reference_tokens_per_step is None):
            raise ValueError(
                f"lr_reference_tokens_per_step ({self.lr_reference_tokens_per_step}) is the batch lr is "
                f"given at: set it with lr_scaling sqrt or linear, null with none (lr_scaling is "
                f"{self.lr_scaling})"
            )
        if (self.max_steps is None) == (self.train_tokens is None):
            raise ValueError(f"set exactly one of max_steps ({self.max_steps}) and train_tokens ({self.train_tokens})")
        if self.dose_snapshot_fractions and self.max_steps is None:
            raise ValueError(
                "dose_snapshot_fractions are fractions of max_steps: they need max_steps, not train_tokens"
            )
        if any(not 0.0 <= f < 1.0 for f in self.dose_snapshot_fractions):
            raise ValueError(f"dose_snapshot_fractions {self.dose_snapshot_fractions} must lie in [0, 1)")
        steps = [round(f * (self.max_steps or 0)) for f in self.dose_snapshot_fractions]
        if len(set(steps)) < len(steps):
            raise ValueError(
                f"dose_snapshot_fractions {self.dose_snapshot_fractions} fall on the same step twice "
                f"at max_steps {self.max_steps} (steps {steps})"
            )
        if self.dose_snapshot_fractions and self.budget_minutes is not None:
            raise ValueError("dose_snapshot_fractions are fractions of max_steps: they need budget_minutes: null")
        if self.nnodes > 1 and self.rdzv_endpoint.endswith(":0"):
            raise ValueError(
                f"nnodes {self.nnodes} needs an rdzv_endpoint host:port every node can reach, "
                f"not {self.rdzv_endpoint!r} (port 0 is a free port on one machine)"
            )
        if self.document_mask and (self.architecture != "modernbert" or self.dropout_prob > 0):
            raise ValueError(
                f"document_mask needs architecture modernbert and dropout_prob 0 (FlexAttention has no "
                f"dropout), not {self.architecture} with dropout_prob {self.dropout_prob}"
            )
        self._check_ablations()
        for sentence in self.fill_mask:
            if sentence.count("[MASK]") != 1:
                raise ValueError(f"fill_mask sentence {sentence!r} must contain exactly one [MASK]")
        return self

    def _check_ablations(self) -> None:
        require_unique([arm.name for arm in self.ablations], "ablations names")
        for arm in self.ablations:
            changes = arm.changes()
            if not changes or all(getattr(self, key) == value for key, value in changes.items()):
                raise ValueError(
                    f"ablations {arm.name}: changes nothing of the main recipe ({changes or 'no key'}); "
                    f"set one of {', '.join(ABLATION_KEYS)} to another value"
                )
            merged = self.ablation(arm.name)
            if merged.mask_token_fraction + merged.random_token_fraction > 1.0 + 1e-9:
                raise ValueError(
                    f"ablations {arm.name}: mask_token_fraction {merged.mask_token_fraction} + "
                    f"random_token_fraction {merged.random_token_fraction} exceed 1"
                )

    def ablation(self, name: str) -> PretrainParams:
        """The recipe of ablation arm ``name``: this one with its keys changed, no arms and no dose snapshots."""
        arm = next(a for a in self.ablations if a.name == name)
        update = {**arm.changes(), "ablations": [], "dose_snapshot_fractions": []}
        return self.model_copy(update=update)

    @property
    def preset(self) -> ModelPreset:
        """The encoder size selected by ``size``."""
        return self.presets[self.size]


def processes_per_node(setting: int | str, gpus: int) -> int:
    """The training processes a node runs for ``pretrain.nproc_per_node``: ``gpu`` = ``gpus``, the GPUs torch
    sees (what ``torchrun --nproc_per_node gpu`` starts), else the number itself. ``gpus`` is 0 when the run is
    not on CUDA (then a number is not capped). The one resolution of the setting: the rank setup
    (``tasks/pretrain/hardware.py``) and the profile check (``flows/profiles.py``) both call it.

    Raises ``ValueError`` (one line) for ``gpu`` without a GPU, or for more processes than GPUs."""
    if setting == "gpu":
        if gpus < 1:
            raise ValueError(
                "pretrain.nproc_per_node: gpu (one process per GPU), but torch sees no GPU: "
                "set a number of processes, or run on a host with a GPU"
            )
        return gpus
    if not isinstance(setting, int) or isinstance(setting, bool) or setting < 1:
        raise ValueError(f"pretrain.nproc_per_node: expected a number >= 1 or gpu, got {setting!r}")
    if gpus and setting > gpus:
        raise ValueError(
            f"pretrain.nproc_per_node: {setting} processes per node, but torch sees {gpus} GPU(s): "
            "set it to at most that (or gpu)"
        )
    return setting
