"""The ``leakage:`` section of params.yaml."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from tasks.config.base import StrictModel
from tasks.config.cluster import RayParams


class PlantedParams(StrictModel):
    """``leakage.planted``: planted contaminations that measure the audit's recall (``tasks/leakage/planted.py``)."""

    seed: int = Field(description="salt of the sha256 hash rank that picks the eval docs and the filler docs")
    docs_per_variant: int = Field(
        ge=1, description="eval docs planted per variant (distinct docs per variant; fewer if too few are eligible)"
    )
    min_words: int = Field(
        ge=1,
        description="eval docs with fewer words (textnorm.words) are not planted; shorter texts are matched "
        "with shorter n-grams or only as whole docs by the audit's design",
    )
    line_words: int = Field(ge=1, description="rewrapped variant: words per line")
    filler_words: int = Field(ge=1, description="in_filler variant: words of unrelated pretraining text on each side")
    paragraph_words: int = Field(ge=1, description="in_filler variant: words of the eval doc planted (its middle)")
    replace_every: int = Field(ge=2, description="replaced variant: every n-th word is replaced by a filler word")
    format_every: int = Field(
        ge=1, description="unicode variant: every n-th word gets a format character (ZWSP, ZWJ, soft hyphen in turn)"
    )


class ResidualParams(StrictModel):
    """``leakage.residual``: the independent detector run on the cleaned corpus (``tasks/leakage/residual.py``)."""

    ngram_words: int = Field(ge=1, description="word n-gram length, n (PaLM's contamination check uses 8)")
    min_coverage: float = Field(
        gt=0.0,
        le=1.0,
        description="an eval doc is contaminated when this share of its distinct n-grams occurs anywhere in the "
        "cleaned pretraining corpus (pooled over docs; PaLM uses 0.7)",
    )


class LeakageParams(StrictModel):
    """Params of the ``leakage`` stage (eval-set contamination audit; see ``tasks/leakage/__init__.py``)."""

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
    max_examples: int = Field(ge=0, description="missed planted docs and residual examples listed in the metrics")
    planted: PlantedParams
    residual: ResidualParams
    engine: Literal["local", "ray"] = Field(
        "local", description="local: in this process; ray: training docs in Ray Data blocks (byte-identical outputs)"
    )
    worker_memory_mib: int = Field(
        512, ge=16, description="bound on the n-gram scan's arrays per process (MiB): the eval n-gram index is "
        "split by hash into shards of at most half of it, and training docs are scanned in blocks of the rest",
    )
    batch_docs: int = Field(1000, ge=1, description="training docs per Ray Data task (engine: ray)")
    ray: RayParams = Field(default_factory=RayParams, description="copied from the ray section")

    @model_validator(mode="after")
    def _check(self) -> LeakageParams:
        if self.passage_stride_words > self.passage_words:
            raise ValueError("leakage.passage_stride_words must be <= leakage.passage_words (windows would skip text)")
        if self.shingle_words >= self.passage_words:
            raise ValueError("leakage.shingle_words must be < leakage.passage_words")
        if self.planted.min_words < self.ngram_words:
            raise ValueError("leakage.planted.min_words must be >= leakage.ngram_words (a shorter eval doc is one "
                             "n-gram, so a single perturbed word hides it by design)")
        if self.residual.ngram_words >= self.ngram_words:
            raise ValueError("leakage.residual.ngram_words must be < leakage.ngram_words (the residual check must "
                             "survive perturbations that break the audit's n-grams)")
        return self
