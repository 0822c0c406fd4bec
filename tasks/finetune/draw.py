"""Which documents a fine-tuning run sees: the seeded hash samples behind ``max_*_docs`` and ``train_sizes``.

Dev and test are one sample for the whole stage: the ``max_dev_docs``/``max_test_docs`` docs of smallest
``sha256(f"{data_seed}:{doc_id}")`` (``kept_doc_ids``), the same for every seed, arm and baseline.

Train is drawn per seed: a run of seed ``s`` (a reported seed or the sweep seed) trains on the ``n`` docs of
smallest ``sha256(f"{data_seed}:{s}:{doc_id}")`` of the task's whole train split (``drawn_doc_ids``), ``n``
being ``max_train_docs`` or a ``train_sizes`` point. So the draw of the training subset is resampled with the
seeds: the seed level of the report's hierarchical bootstrap (``tasks/report/stats/bootstrap.py``) carries its
variance besides that of the initialisation and the data order. For one seed the draw is the same for every
arm, tokenization and comparator baseline (a baseline fitted on seed ``s``'s subset is what seed ``s`` of an
arm is paired with), and nested across sizes: the ``n`` docs of a smaller size are among those of a larger one.
A hash rank, not a shuffle: the sample does not depend on the order or on the other docs of the set.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


def _smallest(doc_ids: list[str], cap: int | None, salt: str) -> set[str]:
    """The ``cap`` distinct ids of smallest ``sha256(f"{salt}:{doc_id}")`` (all when ``cap`` is None or not
    below their number)."""
    unique = sorted(set(doc_ids))
    if cap is None or cap >= len(unique):
        return set(unique)
    return set(sorted(unique, key=lambda d: hashlib.sha256(f"{salt}:{d}".encode()).hexdigest())[:cap])


def kept_doc_ids(doc_ids: list[str], cap: int | None, data_seed: int) -> set[str]:
    """The dev or test sample: the ``cap`` doc ids of smallest ``sha256(f"{data_seed}:{doc_id}")`` (all when
    ``cap`` is None), the same for every seed."""
    return _smallest(doc_ids, cap, str(data_seed))


def drawn_doc_ids(doc_ids: list[str], cap: int | None, data_seed: int, seed: int) -> set[str]:
    """Seed ``seed``'s training subset: the ``cap`` doc ids of smallest ``sha256(f"{data_seed}:{seed}:{doc_id}")``
    (all when ``cap`` is None)."""
    return _smallest(doc_ids, cap, f"{data_seed}:{seed}")


@dataclass(frozen=True)
class Draw:
    """A run's training subset rule: ``cap`` train docs (None: every one) drawn per seed with ``data_seed``."""

    cap: int | None
    data_seed: int

    def keep(self, rows: list[dict], seed: int) -> list[dict]:
        """The rows (or examples: anything with a ``doc_id``) of seed ``seed``'s draw, in their order; every row
        of a drawn doc is kept (all windows of a ner sentence)."""
        ids = drawn_doc_ids([r["doc_id"] for r in rows], self.cap, self.data_seed, seed)
        return [r for r in rows if r["doc_id"] in ids]
