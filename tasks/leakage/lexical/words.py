"""The words every lexical detector reads, and a side of documents as the detectors take it.

``tokenize`` is ``textnorm.words`` with each word's non-ASCII look-alike letters folded to their UTS #39
prototypes (``tasks.common.matching.confusables.fold_words``); a ``Side`` holds those words and their 64-bit
blake2b hashes (``minhash.word_hashes``), index-aligned with the frame its docs came from.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tasks.common.matching import minhash
from tasks.common.matching.confusables import fold_words
from tasks.common.matching.textnorm import words


def tokenize(text: str) -> list[str]:
    """The words every lexical detector reads: ``textnorm.words``, each word's non-ASCII look-alike letters
    folded to their UTS #39 prototypes (``tasks.common.matching.confusables.fold_words``; ASCII words unchanged)."""
    return fold_words(words(text))


@dataclass(frozen=True)
class Side:
    """Documents of one side, index-aligned with its frame: normalized words and their 64-bit hashes."""

    tokens: list[list[str]]
    hashes: list[np.ndarray]


def make_sides(train_tokens: list[list[str]], eval_tokens: list[list[str]]) -> tuple[Side, Side]:
    """Both sides with each word's 64-bit hash (``minhash.word_hashes``, one cache for both)."""
    cache = minhash.WordHashes()
    return make_side(train_tokens, cache), make_side(eval_tokens, cache)


def make_side(tokens: list[list[str]], cache: minhash.WordHashes) -> Side:
    """One side; word hashes are blake2b, so any cache gives the same values (a cache only saves time)."""
    return Side(tokens, [minhash.word_hashes(x, cache) for x in tokens])
