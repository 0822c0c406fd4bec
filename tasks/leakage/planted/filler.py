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

import bisect
import hashlib
import itertools
from collections.abc import Iterator


class FillerRing:
    """The filler docs (``texts``, their ``doc_ids``) in ring order; docs without a whitespace token are left
    out. ``seed`` places the docs. The ring keeps the texts (shared with the caller's list) and splits a doc into
    tokens only when a stream reaches it: a plant reads a few hundred tokens, so holding every filler doc's token
    list (a Python ``str`` per word, about 60 bytes) cost the driver more than the texts themselves."""

    def __init__(self, texts: list[str], doc_ids: list[str], seed: int) -> None:
        placed = sorted(
            (hashlib.sha256(f"{seed}:filler:{d}".encode()).hexdigest(), t) for t, d in zip(texts, doc_ids, strict=True)
        )
        # t.split() is empty exactly when t is empty or all whitespace (str.split and str.isspace: Py_UNICODE_ISSPACE)
        self.points = [point for point, t in placed if t and not t.isspace()]
        self.texts = [t for _, t in placed if t and not t.isspace()]

    def __bool__(self) -> bool:
        return bool(self.texts)

    def stream(self, salt: str) -> Iterator[str]:
        """Tokens forever from the doc at or after ``sha256(salt)`` on the ring (an offset into it from the same
        hash), then the following docs, round the ring; empty without filler tokens."""
        if not self.texts:
            return iter(())
        point = hashlib.sha256(salt.encode()).hexdigest()
        n = len(self.texts)
        first = bisect.bisect_left(self.points, point) % n
        doc = self.texts[first].split()
        offset = int(point, 16) % len(doc)
        following = itertools.chain.from_iterable(self.texts[(first + k) % n].split() for k in range(1, n))
        return itertools.cycle(itertools.chain(doc[offset:], following, doc[:offset]))  # lazy: O(1) per plant
