"""dedup's row labels: every row's cluster, the kept row of its keep unit, and why it is a duplicate
(``label_rows``, after the merges and the conflict vote; the stage is ``tasks/dedup/__init__.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from tasks.dedup.corpus import ROLE_RANK

if TYPE_CHECKING:
    from tasks.config.corpus.dedup import DedupParams
    from tasks.dedup.corpus import Corpus
    from tasks.dedup.signatures import DocSignatures


KINDS = ("unique", "kept", "exact", "near", "conflict")  # a row's kind (``RowLabels.kind``)
DUPLICATE_KINDS = ("exact", "near", "conflict")


@dataclass
class RowLabels:
    """Per-row outcome, ``(rows,)`` numpy arrays: its cluster, the kept row of its keep unit, and why it is a
    duplicate.

    A keep unit is the cluster (``keep_one_per: cluster``) or the rows of one role in the cluster (``role``).
    """

    cluster: np.ndarray  # int64 row index of the cluster's first row in keep order (names the cluster_id)
    kept: np.ndarray  # int64 row index of the keep unit's kept row
    # object, one of KINDS: "unique" | "kept" | "exact" (exact copy of a better row of its unit) | "near" |
    # "conflict" (dropped by conflict_policy: drop_all, tasks/dedup/conflicts.py)
    kind: np.ndarray
    exact_of: np.ndarray  # int64 first row in keep order of the same exact group (merged as identical) in the unit
    short: np.ndarray  # bool: fewer words than the shingle size: exact matching only
    empty: np.ndarray  # bool: empty normalized text (also short)
    lost_vote: np.ndarray  # bool: a task row that lost a conflict vote (conflicts.resolve): never its unit's kept row

    @property
    def is_duplicate(self) -> np.ndarray:
        """All rows but the kept one of each keep unit, and the rows dropped for a conflict: ``(rows,)`` bool."""
        return np.logical_or.reduce([self.kind == kind for kind in DUPLICATE_KINDS])  # isin would sort objects


def label_rows(
    corpus: Corpus,
    docs: DocSignatures,
    rank: np.ndarray,
    cluster: np.ndarray,
    cfg: DedupParams,
    exact_rep: np.ndarray,
    lost_vote: np.ndarray,
) -> RowLabels:
    """Resolve every row to its cluster (``cluster[i]``: its root), the kept row of its keep unit and a duplicate
    kind. The keep order is ``rank`` with the rows that lost a conflict vote (``lost_vote``, ``(rows,)`` bool,
    ``conflicts.resolve``) moved after all others; the kept row is the unit's first in that order.

    A row is an ``exact`` copy when a row before it in its keep unit is in its exact group (``exact_rep``, from
    ``merge_exact``), otherwise a ``near`` duplicate."""
    n = len(cluster)
    cluster = np.asarray(cluster, np.int64)
    by_role = cfg.keep_one_per == "role"
    role = np.fromiter((ROLE_RANK[r] for r in corpus.role), np.int64, count=n) if by_role else np.zeros(n, np.int64)
    unit = cluster * len(ROLE_RANK) + role
    order = np.lexsort((rank, lost_vote))
    kept = _first_in(unit, order)
    exact_of = _first_in(unit * max(n, 1) + np.asarray(exact_rep, np.int64), order)
    rows = np.arange(n)
    code = np.where(exact_of != rows, 2, 3)
    code = np.where(kept == rows, 1, code)
    code = np.where(np.bincount(cluster, minlength=n)[cluster] == 1, 0, code)
    kind = np.array(KINDS, object)[code]
    short, empty = docs.n_words < cfg.shingle_size_words, docs.n_chars == 0
    return RowLabels(cluster, kept, kind, exact_of, short, empty, np.asarray(lost_vote, bool))


def _first_in(key: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Each row's first row in ``order`` (a permutation of the rows) among the rows of its ``key``."""
    _, inverse = np.unique(key, return_inverse=True)
    _, first = np.unique(inverse.reshape(-1)[order], return_index=True)
    return order[first][inverse.reshape(-1)]
