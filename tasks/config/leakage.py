"""The ``leakage:`` section of params.yaml."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from tasks.config.base import StrictModel


class LeakageParams(StrictModel):
    """Params of the ``leakage`` stage (eval-set contamination audit; see ``tasks/leakage.py``)."""

    ngram_words: int = Field(ge=1, description="n of the word n-gram overlap check (GPT-3 / lm-eval use 13)")
    min_match_words: int = Field(
        ge=1,
        description="eval texts with fewer words are matched only as a whole normalized document, "
        "because a 2-word tweet occurs inside almost any long text",
    )
    shingle_words: int = Field(ge=1, description="word k-gram size of the MinHash shingles")
    num_perm: int = Field(ge=16, description="MinHash permutations")
    minhash_seed: int = Field(description="seed of the MinHash permutations")
    doc_threshold: float = Field(gt=0.0, le=1.0, description="Jaccard at which two whole documents match")
    passage_threshold: float = Field(gt=0.0, le=1.0, description="Jaccard at which two passages match")
    passage_words: int = Field(ge=2, description="words per passage window")
    passage_stride_words: int = Field(ge=1, description="words between the starts of consecutive passage windows")
    pretrain_action: Literal["remove", "flag"] = Field(description="what happens to leaking pretraining docs")
    task_train_action: Literal["remove", "flag"] = Field(description="what happens to leaking task train docs")
    max_span_words: int = Field(ge=1, description="longest matched span stored in the leakage table, words")

    @model_validator(mode="after")
    def _check(self) -> LeakageParams:
        if self.passage_stride_words > self.passage_words:
            raise ValueError("leakage.passage_stride_words must be <= leakage.passage_words (windows would skip text)")
        if self.shingle_words >= self.passage_words:
            raise ValueError("leakage.shingle_words must be < leakage.passage_words")
        return self
