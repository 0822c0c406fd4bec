"""The ``dedup:`` section of params.yaml.

The LSH shape (bands, rows) is derived from ``threshold``, ``num_perm`` and the two weights by the dedup stage
(``tasks.common.minhash.lsh_bands_rows``, datasketch's optimiser). Every candidate is verified by exact
Jaccard, so false positives cost only time; that is why the false-negative weight is set high in
params.yaml (recall matters, precision is guaranteed).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from tasks.config.base import StrictModel


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
