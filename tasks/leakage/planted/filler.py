"""Filler for the planted copies: unrelated pretraining text around, or swapped into, a copy of an eval doc.

Each plant draws its own filler with consistent hashing (Karger et al. 1997, "Consistent hashing and random
trees"): the filler docs sit on a ring at the sha256 of ``f"{seed}:filler:{doc_id}"``, a plant at the sha256
of its own salt (seed, eval doc, variant); the plant reads the first filler doc at or after its point, from an
offset its hash picks, then the next docs round the ring. So a plant depends on its eval doc, its variant,
the seed and the few filler docs after its point, not on how many filler docs there are: when a night's new
pretraining docs join the pool (or matched ones leave it), only the plants whose stretch of the ring changed
get other filler, about the new docs' share of them. The rest keep their text, and the semantic detector
finds their windows in its store (``tasks/leakage/semantic/store.py``) instead of embedding them again.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterator, Sequence

import numpy as np


class FillerRing:
    """The filler docs (``texts``, their ``doc_ids``) in ring order; docs without a whitespace token are left
    out. ``seed`` places the docs. The ring holds per doc only its point (``points``: the 32-byte sha256 digests,
    ascending, whose order is the hex digests' order) and its position in ``texts`` (``order``); it reads a doc's
    text from ``texts`` and splits it only when a stream reaches it. ``texts`` may be any sequence, e.g. a view
    of a pandas column (``tasks.leakage.outputs.Picked``): a plant reads a few hundred tokens, so neither the
    filler docs' token lists (a Python ``str`` per word, about 60 bytes) nor their texts as Python strings (the
    text and ~50 bytes) need to be held. ``nonblank`` (bool, one a text), when given, says which texts have a
    whitespace token, so the ring reads none of them to build itself (``outputs.Fetched``). Raises
    ``ValueError`` when ``texts`` and ``doc_ids`` (or ``nonblank``) differ in length."""

    def __init__(
        self, texts: Sequence[str], doc_ids: Sequence[str], seed: int, nonblank: np.ndarray | None = None
    ) -> None:
        if len(texts) != len(doc_ids) or (nonblank is not None and len(nonblank) != len(texts)):
            raise ValueError(f"filler: {len(texts)} texts for {len(doc_ids)} doc ids")
        self.texts = texts
        # t.split() is empty exactly when t is empty or all whitespace (str.split and str.isspace: Py_UNICODE_ISSPACE)
        kept = np.flatnonzero([bool(t) and not t.isspace() for t in texts] if nonblank is None else nonblank)
        digests = np.array([hashlib.sha256(f"{seed}:filler:{doc_ids[k]}".encode()).digest() for k in kept], "S32")
        ranked = np.argsort(digests, kind="stable")
        self.points, self.order = digests[ranked], kept[ranked]

    def __bool__(self) -> bool:
        return bool(len(self.order))

    def __len__(self) -> int:
        return len(self.order)

    def text(self, k: int) -> str:
        """The text of the ``k``-th doc round the ring."""
        return str(self.texts[int(self.order[k])])

    def stream(self, salt: str) -> Iterator[str]:
        """Tokens forever from the doc at or after ``sha256(salt)`` on the ring (an offset into it from the same
        hash), then the following docs, round the ring; empty without filler tokens."""
        if not len(self.order):
            return iter(())
        point = hashlib.sha256(salt.encode()).digest()
        n = len(self.order)
        first = int(np.searchsorted(self.points, np.bytes_(point), side="left")) % n
        doc = self.text(first).split()
        offset = int.from_bytes(point, "big") % len(doc)
        following = itertools.chain.from_iterable(self.text((first + k) % n).split() for k in range(1, n))
        return itertools.cycle(itertools.chain(doc[offset:], following, doc[:offset]))  # lazy: O(1) per plant
