"""The ``dedup:`` section of params.yaml.

The LSH shape (bands, rows) is derived from ``threshold``, ``num_perm`` and the two weights by the dedup stage
(``tasks.common.matching.minhash.lsh_bands_rows``, datasketch's optimiser). Every candidate is verified by exact
Jaccard, so false positives cost only time; that is why the false-negative weight is set high in
params.yaml (recall matters, precision is guaranteed).

Per-source policies (``default_policy``, ``source_policy``), the label-conflict policy and the component-size
warning are optional keys with defaults (every source: exact and near dedup, no length floor; conflicts
decided by ``majority``). How the stage applies them is ``tasks/dedup/policy.py`` and
``tasks/dedup/conflicts.py``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from tasks.config.base import StrictModel
from tasks.config.cluster import RayParams


class DedupPolicy(StrictModel):
    """What dedup may merge for a source's rows (``dedup.default_policy``)."""

    exact: bool = Field(True, description="merge rows with the same normalized text")
    near: bool = Field(True, description="merge rows whose shingle-set Jaccard reaches the threshold")
    exact_min_words: int = Field(
        0, ge=0, description="rows with fewer words (textnorm.words) are never merged as exact copies (words)"
    )


class SourcePolicy(StrictModel):
    """One source's overrides (``dedup.source_policy.<source>``); an omitted key takes ``default_policy``'s."""

    exact: bool | None = Field(None, description="as DedupPolicy.exact; null/omitted: the default policy's")
    near: bool | None = Field(None, description="as DedupPolicy.near; null/omitted: the default policy's")
    exact_min_words: int | None = Field(
        None, ge=0, description="as DedupPolicy.exact_min_words (words); null/omitted: the default policy's"
    )


class DedupParams(StrictModel):
    """Params of the ``dedup`` stage (exact + MinHash near-duplicate clustering)."""

    shingle_size_words: int = Field(ge=1, description="n of the word n-gram shingles (words)")
    num_perm: int = Field(ge=2, description="MinHash permutations (signature length)")
    threshold: float = Field(gt=0.0, description="Jaccard similarity at or above which two docs merge, < 1")
    lsh_false_positive_weight: float = Field(ge=0.0, le=1.0, description="datasketch LSH optimiser weight")
    lsh_false_negative_weight: float = Field(ge=0.0, le=1.0, description="datasketch LSH optimiser weight")
    seed: int = Field(ge=0, lt=2**32, description="seed of the MinHash permutations and shingle hashing")
    num_proc: int = Field(ge=1, description="worker processes for signatures (1 = in-process)")
    shard_size_docs: int = Field(ge=1, description="documents per worker task (and per progress-bar step)")
    report_max_pairs_per_cluster: int = Field(ge=0, description="cap on Jaccard pairs listed per cluster")
    keep_one_per: Literal["role", "cluster"] = Field(
        description=(
            "unit that keeps one row of each cluster: 'role' keeps the best task row and the best pretrain row "
            "(a pretraining copy of a task document stays pretraining text; cross-role overlap is the leakage "
            "stage's job), 'cluster' keeps one row of the whole cluster"
        )
    )

    default_policy: DedupPolicy = Field(
        default_factory=DedupPolicy, description="policy of every source not listed in source_policy"
    )
    source_policy: dict[str, SourcePolicy] = Field(
        default_factory=dict, description="per ingest source name: overrides of default_policy"
    )
    conflict_policy: Literal["majority", "drop_all"] = Field(
        "majority",
        description=(
            "a cluster whose task rows disagree on label or tags: 'majority' keeps the best row among those with "
            "the most-voted label and, between tagged copies of one text, the most entities (a tie drops the "
            "keep unit); 'drop_all' drops every row of the keep unit that holds the disagreeing rows"
        ),
    )
    warn_component_docs: int = Field(
        50, ge=1, description="warn when the largest cluster (one split group) has more docs than this"
    )
    engine: Literal["local", "ray"] = Field(
        "local", description="local: this machine's process pool; ray: Ray Data (byte-identical outputs)"
    )
    ray: RayParams = Field(default_factory=RayParams, description="copied from the ray section")
    incremental: bool = Field(
        True,
        description="sign only texts not in <data>/dedup_index and reuse its exact Jaccards (the outputs "
        "equal a from-scratch run; engine ray always signs all); false signs every document again",
    )

    @field_validator("conflict_policy", mode="before")
    @classmethod
    def _no_keep_one(cls, value: object) -> object:
        if value == "keep_one":
            raise ValueError(
                "'keep_one' was removed: it kept the first row in keep order (longest, then smallest doc_id) "
                "whatever the copies' labels; use 'majority' (votes decide, a tie drops the rows) or 'drop_all'"
            )
        return value

    @field_validator("threshold")
    @classmethod
    def _below_one(cls, value: float) -> float:
        if value >= 1.0:
            raise ValueError(
                f"threshold must be < 1.0 (got {value}): at 1.0 only identical shingle sets merge, which the "
                "exact (normalized-text) pass already finds, and MinHash LSH has no band shape for it"
            )
        return value

    @model_validator(mode="after")
    def _weights_sum_to_one(self) -> DedupParams:
        total = self.lsh_false_positive_weight + self.lsh_false_negative_weight
        if abs(total - 1.0) > 1e-9:
            raise ValueError(
                f"lsh_false_positive_weight + lsh_false_negative_weight must be 1.0 (got {total:g}): "
                "datasketch's LSH optimiser weighs the two error areas against each other"
            )
        return self

    @property
    def lsh_weights(self) -> tuple[float, float]:
        """``(false_positive_weight, false_negative_weight)`` as datasketch takes them."""
        return (self.lsh_false_positive_weight, self.lsh_false_negative_weight)
