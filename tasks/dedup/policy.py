"""Per-source dedup policies: which rows may be merged as exact copies and which as near duplicates.

Resolution: ``dedup.source_policy.<source>`` overrides ``dedup.default_policy`` key by key (an omitted or null
key takes the default's value). A listed source that no ingest file has is a ``ValueError``: a misspelt name
would otherwise silently protect nothing.

A merge needs both rows' policies to allow its kind, so a pair of rows from sources with different policies
is merged only by a kind both allow:

- exact: both rows have ``exact`` on, at least their own source's ``exact_min_words`` words and a non-empty
  normalized text, and their normalized texts are equal;
- near: both rows have ``near`` on and at least ``shingle_size_words`` words (no shingle, no Jaccard), their
  shingle-set Jaccard reaches the threshold, and their normalized texts differ. Identical texts are the exact
  pass's alone, so ``exact: false`` or ``exact_min_words`` keep every copy of a short boilerplate sentence
  ("Thanks", a signature line) even with ``near: true``. Clusters are still connected components: a row
  near-merged with two copies of one text joins them as it would join any two rows.

An empty normalized text (nothing but whitespace and format characters; ingest drops blank texts, so this is
a text made only of invisible characters) is never merged: it holds nothing to compare. A text with
characters but no words ("...", "!!!") is merged only with the same characters (exact); it has no shingles,
so it is never a near duplicate.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tasks.config.corpus.dedup import DedupParams, DedupPolicy


def resolve(cfg: DedupParams, sources: list[str]) -> dict[str, DedupPolicy]:
    """``{source: its policy}`` for every ingest source name in ``sources``.

    Raises ``ValueError`` naming the key ``dedup.source_policy.<name>`` for a name not in ``sources``.
    """
    unknown = sorted(set(cfg.source_policy) - set(sources))
    if unknown:
        raise ValueError(
            f"dedup.source_policy.{unknown[0]}: no ingest source of that name (sources: {sorted(sources)})"
        )
    base = cfg.default_policy.model_dump()
    out = {}
    for source in sources:
        override = cfg.source_policy.get(source)
        changes = {k: v for k, v in override.model_dump().items() if v is not None} if override else {}
        out[source] = DedupPolicy.model_validate({**base, **changes})
    return out


@dataclass(frozen=True)
class RowPolicy:
    """Per row (``(docs,)`` bool arrays): what the row's source policy and its length let dedup merge it as."""

    exact: np.ndarray  # may be merged as an exact copy
    exact_protected: np.ndarray  # non-empty, but kept out of exact matching by its policy (exact off or short)
    near: np.ndarray  # may be merged as a near duplicate


def row_policy(
    policies: dict[str, DedupPolicy], row_source: list[str], n_words: np.ndarray, n_chars: np.ndarray, shingle: int
) -> RowPolicy:
    """Each row's exact and near eligibility (see the module docstring) from its source's policy."""
    exact_on = np.array([policies[s].exact for s in row_source], dtype=bool)
    min_words = np.array([policies[s].exact_min_words for s in row_source], dtype=np.int64)
    near_on = np.array([policies[s].near for s in row_source], dtype=bool)
    non_empty = n_chars > 0
    allowed = exact_on & (n_words >= min_words)
    return RowPolicy(allowed & non_empty, ~allowed & non_empty, near_on & (n_words >= shingle))
