"""dedup's row labels: every row's cluster, the kept row of its keep unit, and why it is a duplicate
(``label_rows``, after the merges and the conflict vote; the stage is ``tasks/dedup/__init__.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from tasks.config.corpus.dedup import DedupParams
    from tasks.dedup.corpus import Corpus
    from tasks.dedup.signatures import DocSignatures


@dataclass
class RowLabels:
    """Per-row outcome: its cluster, the kept row of its keep unit, and why it is a duplicate.

    A keep unit is the cluster (``keep_one_per: cluster``) or the rows of one role in the cluster (``role``).
    """

    cluster: list[int]  # row index of the cluster's first row in keep order (names the cluster_id)
    kept: list[int]  # row index of the keep unit's kept row
    # "unique" | "kept" | "exact" (exact copy of a better row of its unit) | "near" | "conflict" (dropped by
    # conflict_policy: drop_all, tasks/dedup/conflicts.py)
    kind: list[str]
    exact_of: list[int]  # first row in keep order of the same exact group (merged as identical) in the keep unit
    short: list[bool]  # fewer words than the shingle size: exact matching only
    empty: list[bool]  # empty normalized text (also short)
    lost_vote: list[bool]  # a task row that lost a conflict vote (conflicts.resolve): never its unit's kept row

    @property
    def is_duplicate(self) -> list[bool]:
        """All rows but the kept one of each keep unit, and the rows dropped for a conflict."""
        return [kind in ("exact", "near", "conflict") for kind in self.kind]


def label_rows(
    corpus: Corpus,
    docs: DocSignatures,
    rank: np.ndarray,
    cluster: list[int],
    cfg: DedupParams,
    exact_rep: list[int],
    lost_vote: np.ndarray,
) -> RowLabels:
    """Resolve every row to its cluster (``cluster[i]``: its root), the kept row of its keep unit and a duplicate
    kind. The keep order is ``rank`` with the rows that lost a conflict vote (``lost_vote``, ``(rows,)`` bool,
    ``conflicts.resolve``) moved after all others; the kept row is the unit's first in that order.

    A row is an ``exact`` copy when a row before it in its keep unit is in its exact group (``exact_rep``, from
    ``merge_exact``), otherwise a ``near`` duplicate."""
    unit = [(root, corpus.role[i] if cfg.keep_one_per == "role" else "") for i, root in enumerate(cluster)]
    kept_of: dict[tuple[int, str], int] = {}
    exact_of_group: dict[tuple[int, str, int], int] = {}
    for i in np.lexsort((rank, lost_vote)).tolist():
        kept_of.setdefault(unit[i], i)
        exact_of_group.setdefault((*unit[i], exact_rep[i]), i)
    kept = [kept_of[u] for u in unit]
    exact_of = [exact_of_group[(*u, rep)] for u, rep in zip(unit, exact_rep)]
    size = np.bincount(cluster, minlength=len(cluster)) if cluster else np.zeros(0, np.int64)
    kind = []
    for i, root in enumerate(cluster):
        if size[root] == 1:
            kind.append("unique")
        elif kept[i] == i:
            kind.append("kept")
        else:
            kind.append("exact" if exact_of[i] != i else "near")
    n = cfg.shingle_size_words
    short, empty = (docs.n_words < n).tolist(), (docs.n_chars == 0).tolist()
    return RowLabels(cluster, kept, kind, exact_of, short, empty, lost_vote.tolist())
