"""The ``tokenize:`` section of params.yaml."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from tasks.config.base import StrictModel


class TaskSources(StrictModel):
    """Which ``data/leakage/<source>.parquet`` feeds each fine-tuning task."""

    cls: str = Field(min_length=1, description="source with a `label` per document")
    ner: str = Field(min_length=1, description="source with word-level `tokens` and IOB2 `tags`")


class TokenizeParams(StrictModel):
    """Params of the ``tokenize`` stage: packed MLM blocks plus cls/ner datasets for each tokenizer."""

    pretrain_sources: list[str] = Field(min_length=1, description="sources whose role=pretrain rows are packed")
    tasks: TaskSources
    max_seq_len_tokens: int = Field(ge=8, le=8192, description="block / sequence length, specials included")
    num_proc: int = Field(ge=1, description="datasets.map worker processes (1 = in-process)")
    map_batch_size_docs: int = Field(ge=1, description="documents per datasets.map batch")
    ner_window_overlap_tokens: int = Field(
        ge=0, description="subword tokens of left context repeated when a long sentence is split into windows"
    )
    ner_invalid_iob2: Literal["repair", "drop", "error"] = Field(
        description="I-X after O or after B-Y/I-Y: repair (becomes B-X), drop the sentence, or raise"
    )

    @model_validator(mode="after")
    def _overlap_fits(self) -> TokenizeParams:
        if self.ner_window_overlap_tokens >= self.max_seq_len_tokens - 2:
            raise ValueError(
                f"ner_window_overlap_tokens ({self.ner_window_overlap_tokens}) must be < max_seq_len_tokens - 2 "
                f"({self.max_seq_len_tokens - 2}) so every window advances"
            )
        return self
