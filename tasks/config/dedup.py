"""The ``dedup:`` section of params.yaml.

MinHash LSH maths (Broder 1997; Leskovec, Rajaraman & Ullman, *Mining of Massive Datasets*, ch. 3): with
``b`` bands of ``r`` rows, a pair of documents at Jaccard ``s`` shares at least one band, and so becomes an
LSH candidate, with probability ``1 - (1 - s**r)**b``. datasketch picks ``(b, r)`` with ``b * r <= num_perm``
to minimise ``fp_weight * P(false positive) + fn_weight * P(false negative)`` around ``threshold``. Every
candidate is then verified by exact Jaccard, so false positives cost only time; that is why the
false-negative weight is set high in params.yaml (recall matters, precision is guaranteed).
"""

from __future__ import annotations

from functools import lru_cache
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
    def _datasketch_accepts(self) -> DedupParams:
        try:
            lsh_bands_rows(
                self.threshold, self.num_perm, self.lsh_false_positive_weight, self.lsh_false_negative_weight
            )
        except ValueError as err:
            raise ValueError(
                f"datasketch MinHashLSH rejects threshold={self.threshold}, num_perm={self.num_perm}, "
                f"weights=({self.lsh_false_positive_weight}, {self.lsh_false_negative_weight}): {err} "
                "(weights must sum to 1.0; a high threshold needs more num_perm; for threshold 1.0 "
                "exact dedup alone is enough)"
            ) from None
        return self

    @property
    def lsh_weights(self) -> tuple[float, float]:
        """``(false_positive_weight, false_negative_weight)`` as datasketch takes them."""
        return (self.lsh_false_positive_weight, self.lsh_false_negative_weight)


@lru_cache(maxsize=16)
def lsh_bands_rows(threshold: float, num_perm: int, fp_weight: float, fn_weight: float) -> tuple[int, int]:
    """``(bands, rows)`` that datasketch's ``MinHashLSH`` derives for these values (its own optimiser).

    Raises ``ValueError`` with datasketch's message when it rejects them (weights not summing to 1.0, fewer
    than 2 bands). Cached because the grid search integrates numerically and every stage loads params.
    """
    from datasketch import MinHashLSH  # imported here: other stages load params without needing datasketch

    lsh = MinHashLSH(threshold=threshold, num_perm=num_perm, weights=(fp_weight, fn_weight))
    return lsh.b, lsh.r
