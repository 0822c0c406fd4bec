"""The shuffled-context control of the sense probe: every probe sentence with its context words permuted.

A control sentence holds the same whitespace-separated words as its probe sentence (punctuation stays glued to
its word), the word holding the target at the same index, and the other words in an order drawn from
``sha256("<seed>:<line>")``. The target's own characters are untouched, so its subwords are the same; only
the order of the context changes. A model that reads its context as a bag of words (or a model whose
separation comes from which words co-occur, not from the sentence they form) separates the senses of the
control as well as those of the real sentences; "the last layer separates real sentences better than their
shuffled controls" can therefore fail, where "better than layer 0" could not for a model without absolute
positions (there layer 0 is the same vector in every sentence).

The control is the permutation test's null of word order (Sinha et al. 2021, "Masked language modeling and
the distributional hypothesis: order word matters pre-training for little", shuffle words within a sentence
the same way). A draw that leaves the context in place is redrawn (the next ``attempt`` in the hash), unless
the context words are all equal (then every order is the same).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from tasks.probe.probe_set import ProbeSentence

MAX_ATTEMPTS = 100  # redraws of an identity order; 2 distinct context words reach a non-identity by then


def permutation(n: int, seed: int, line: int, attempt: int) -> np.ndarray:
    """A permutation of ``range(n)`` drawn from ``sha256("<seed>:<line>:<attempt>")`` (deterministic on every
    platform: the digest seeds numpy's PCG64)."""
    digest = hashlib.sha256(f"{seed}:{line}:{attempt}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "big")).permutation(n)


def shuffle_context(row: ProbeSentence, seed: int) -> ProbeSentence:
    """``row`` with the words around its target permuted (module docstring); ``start``/``end`` follow the target.

    Words are the whitespace-separated pieces of ``row.sentence``, joined back with single spaces; the piece
    holding the target (``row.start``) keeps its index and its text. Raises ``ValueError`` naming the line when
    the target does not lie inside one piece."""
    spans = [match.span() for match in re.finditer(r"\S+", row.sentence)]
    words = [row.sentence[begin:end] for begin, end in spans]
    target = next((i for i, (begin, end) in enumerate(spans) if begin <= row.start and row.end <= end), None)
    if target is None:
        raise ValueError(f"line {row.line}: the target at chars {row.start}-{row.end} is not inside one word")
    context = [i for i in range(len(words)) if i != target]
    order = list(context)
    if len({words[i] for i in context}) > 1:
        for attempt in range(MAX_ATTEMPTS):
            order = [context[j] for j in permutation(len(context), seed, row.line, attempt)]
            if order != context:
                break
    shuffled = [words[i] for i in order]
    shuffled.insert(target, words[target])
    start = sum(len(word) + 1 for word in shuffled[:target]) + row.start - spans[target][0]
    return replace(row, sentence=" ".join(shuffled), start=start, end=start + row.end - row.start)


def shuffled(rows: Sequence[ProbeSentence], seed: int) -> list[ProbeSentence]:
    """The control sentence of every row, in the same order (``shuffle_context``)."""
    return [shuffle_context(row, seed) for row in rows]
