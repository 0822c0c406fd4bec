"""The ``tokenizer:`` section of params.yaml."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from tasks.config.base import StrictModel, require_unique
from tasks.config.corpus.ingest import PretrainSources, SourceName


class SpecialTokens(StrictModel):
    """The five BERT special tokens, as strings; they get ids 0..4 in this order when a vocab is trained."""

    pad: str = Field(min_length=1)
    unk: str = Field(min_length=1)
    cls: str = Field(min_length=1)
    sep: str = Field(min_length=1)
    mask: str = Field(min_length=1)

    @model_validator(mode="after")
    def _distinct(self) -> SpecialTokens:
        require_unique(self.in_order(), "special tokens")
        return self

    def in_order(self) -> list[str]:
        """``[pad, unk, cls, sep, mask]``."""
        return [self.pad, self.unk, self.cls, self.sep, self.mask]


class TokenizerParams(StrictModel):
    """Params of the ``tokenizer`` stage: a WordPiece vocab trained on the pretraining train split, or loaded."""

    pretrain_sources: PretrainSources = Field(
        "all",
        description="sources whose train text trains the vocab: all (every role: pretrain source but "
        "exclude_sources; the list it stands for once params.yaml loads) or names: role=pretrain rows, or a task "
        "source's train split",
    )
    exclude_sources: list[SourceName] = Field(default_factory=list, description="role: pretrain sources not trained on")
    unk_eval_sources: list[str] = Field(
        description="task sources whose dev split gives an [UNK] rate (only measured, never trained on)"
    )
    vocab_from: Literal["train", "train_once", "reference", "file"] = Field(
        description="train: WordPiece on the pretrain train split; train_once: trained on the first run, kept "
        "in data/tokenizer_vocab for later runs (scheduled runs, tasks/common/models/vocab_ledger.py); reference: "
        "packaged MiniLM vocab.txt; file: the vocab.txt at vocab_file"
    )
    vocab_file: Path | None = Field(description="a BERT vocab.txt; required iff vocab_from == file")
    vocab_size_tokens: int = Field(ge=64, le=1_000_000, description="target vocab size, specials included")
    min_frequency: int = Field(ge=1, description="a merge needs at least this many occurrences")
    limit_alphabet_chars: int = Field(ge=1, description="at most this many distinct initial characters")
    lowercase: bool
    strip_accents: bool
    special_tokens: SpecialTokens

    @model_validator(mode="after")
    def _vocab_file_iff_file(self) -> TokenizerParams:
        if (self.vocab_from == "file") != (self.vocab_file is not None):
            raise ValueError("vocab_file must be set when vocab_from is 'file', and null otherwise")
        return self
