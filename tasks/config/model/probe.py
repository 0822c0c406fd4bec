"""The ``probe:`` section of params.yaml."""

from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator

from tasks.config.base import StrictModel, Variant, require_unique
from tasks.config.hardware import HardwareParams


class ProbeParams(StrictModel):
    """Params of the ``probe`` stage: a per-layer sense probe of ambiguous words' contextual vectors."""

    senses_file: Path = Field(
        description="JSONL probe set, one object per line with keys word, sense, sentence (each sentence "
        "contains its word exactly once); relative to the repo root"
    )
    variants: list[Variant] = Field(
        min_length=1,
        description="initial weights to probe: pretrained (models/pretrained), random (same config, random "
        "init), reference (packaged MiniLM)",
    )
    random_init_seed: int = Field(ge=0, description="torch seed for the random-init variant's weights")
    batch_size_sentences: int = Field(gt=0, description="sentences per forward pass")
    max_seq_len_tokens: int = Field(ge=8, description="longest tokenized sentence allowed, special tokens included")
    min_sentences_per_sense: int = Field(
        ge=2, description="fewer sentences in any sense is an error (leave-one-out 1-NN needs at least 2)"
    )
    shuffle_seed: int = Field(
        ge=0,
        description="seed of the shuffled-context control: each sentence's context "
        "words are permuted by sha256(seed:line) (tasks/probe/control.py)",
    )

    pairs_file: Path = Field(
        description="JSONL minimal-pair set, one object per line with keys phenomenon, good (the acceptable "
        "sentence), bad (the unacceptable one); relative to the repo root"
    )
    pair_variants: list[Literal["pretrained", "adapted", "random", "unigram"]] = Field(
        min_length=1,
        description="models scored on the pairs by pseudo-log-likelihood: those with an MLM head (pretrained or "
        "adapted, as models/pretrained holds; random = its config re-initialised) and unigram (token "
        "frequencies of the pretraining blocks). The reference MiniLM has no MLM head",
    )
    pairs_batch_size: int = Field(gt=0, description="masked copies of the pair sentences per forward pass")
    min_pairs_per_phenomenon: int = Field(ge=1, description="fewer pairs in any phenomenon fails the run")
    hardware: HardwareParams = Field(default_factory=HardwareParams, description="copied from the hardware section")

    @field_validator("variants", "pair_variants")
    @classmethod
    def _unique(cls, value: list[str], info: ValidationInfo) -> list[str]:
        return require_unique(value, str(info.field_name))  # a field validator always has its field name
