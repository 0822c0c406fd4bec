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
    """The whitespace tokens of filler docs (``texts``, their ``doc_ids``) in ring order; docs without a token
    are left out. ``seed`` places the docs."""

    def __init__(self, texts: list[str], doc_ids: list[str], seed: int) -> None:
        placed = sorted(
            (hashlib.sha256(f"{seed}:filler:{d}".encode()).hexdigest(), t.split())
            for t, d in zip(texts, doc_ids, strict=True)
        )
        self.points = [point for point, tokens in placed if tokens]
        self.tokens = [tokens for _, tokens in placed if tokens]

    def __bool__(self) -> bool:
        return bool(self.tokens)

    def stream(self, salt: str) -> Iterator[str]:
        """Tokens forever from the doc at or after ``sha256(salt)`` on the ring (an offset into it from the same
        hash), then the following docs, round the ring; empty without filler tokens."""
        if not self.tokens:
            return iter(())
        point = hashlib.sha256(salt.encode()).hexdigest()
        first = bisect.bisect_left(self.points, point) % len(self.tokens)
        offset = int(point, 16) % len(self.tokens[first])
        n, doc = len(self.tokens), self.tokens[first]
        following = itertools.chain.from_iterable(self.tokens[(first + k) % n] for k in range(1, n))
        return itertools.cycle(itertools.chain(doc[offset:], following, doc[:offset]))  # lazy: O(1) per plant
