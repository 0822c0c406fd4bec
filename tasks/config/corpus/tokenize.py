"""The ``tokenize:`` section of params.yaml."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from tasks.config.base import StrictModel
from tasks.config.corpus.ingest import PretrainSources, SourceName
from tasks.config.tasks import Tasks


class TokenizeParams(StrictModel):
    """Params of the ``tokenize`` stage: packed MLM blocks plus one dataset per task and tokenizer.

    ``tasks`` is not written under ``tokenize:``: the root model copies the validated ``tasks`` section here.
    """

    pretrain_sources: PretrainSources = Field(
        "all",
        description="sources packed into MLM blocks: all (every role: pretrain source but exclude_sources; "
        "the list it stands for once params.yaml loads) or names: role=pretrain rows, or a task source's train split "
        "(train) and dev split (heldout)",
    )
    exclude_sources: list[SourceName] = Field(default_factory=list, description="role: pretrain sources not packed")
    tasks: Tasks = Field(default_factory=dict, description="copied from the tasks section")
    max_seq_len_tokens: int = Field(ge=8, le=8192, description="pretraining block length, specials included")
    ner_max_seq_len_tokens: int = Field(
        ge=8,
        le=8192,
        description="token_classification window length, specials included (a long sentence becomes "
        "overlapping windows; a word longer than a window alone is cut to its first subwords)",
    )
    num_proc: int = Field(
        ge=1, description="pretraining tokenization processes (1 = in-process; more: datasets.map workers)"
    )
    map_batch_size_docs: int = Field(ge=1, description="documents per tokenizer batch call (and datasets.map batch)")
    shard_blocks: int = Field(
        50_000,
        ge=1,
        description="packed MLM blocks per shard file: tokenize holds at most one shard's blocks (its peak memory "
        "follows this, not the corpus); pretraining memory-maps the shards",
    )
    ner_window_overlap_tokens: int = Field(
        ge=0, description="subword tokens of left context repeated when a long sentence is split into windows"
    )
    ner_invalid_iob2: Literal["repair", "drop", "error"] = Field(
        description="I-X after O or after B-Y/I-Y: repair (becomes B-X), drop the sentence, or raise"
    )
    incremental: bool = Field(
        True,
        description="encode only pretraining texts without ids in <data>/tokenize_cache (the outputs equal a "
        "from-scratch run; a changed tokenizer re-encodes all); false encodes every text again",
    )

    @model_validator(mode="after")
    def _overlap_fits(self) -> TokenizeParams:
        if self.ner_window_overlap_tokens >= self.ner_max_seq_len_tokens - 2:
            raise ValueError(
                f"ner_window_overlap_tokens ({self.ner_window_overlap_tokens}) must be < ner_max_seq_len_tokens - 2 "
                f"({self.ner_max_seq_len_tokens - 2}) so every window advances"
            )
        return self
