"""Texts as the semantic detector reads them, cut into token windows, and the embedded windows of some docs.

``normalize_text`` is what the encoder reads (format characters removed, NFKC, look-alike letters folded);
a text's windows are ``window_tokens - 2`` wordpieces (its [CLS] and [SEP] aside) every ``stride_tokens``, the
last one ending at the text's end (``window_starts``); ``Windows`` holds their vectors, docs and token ranges.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from tasks.common.matching import confusables
from tasks.common.matching.textnorm import remove_format_characters


class Tokenizes(Protocol):
    """What ``Windows`` needs of its encoder (``encoder.Encoder``): token ids and character offsets per text."""

    def tokenize(self, texts: list[str]) -> tuple[list[np.ndarray], list[np.ndarray]]: ...


def normalize_text(text: str) -> str:
    """Format characters removed, NFKC, non-ASCII look-alikes folded to their prototypes, whitespace collapsed."""
    if text.isascii():
        return " ".join(text.split())
    text = unicodedata.normalize("NFKC", remove_format_characters(text))
    return " ".join(confusables.fold_text(text).split())


def window_starts(n_tokens: int, content: int, stride: int) -> list[int]:
    """Starts of the windows of ``content`` tokens every ``stride`` tokens, the last one ending at the end;
    none for an empty text, one for a text of at most ``content`` tokens."""
    if n_tokens <= 0:
        return []
    last = max(n_tokens - content, 0)
    starts = list(range(0, last + 1, stride))
    return starts + ([] if starts[-1] == last else [last])


def window_bounds(n_tokens: int, content: int, stride: int) -> list[tuple[int, int]]:
    """``(start, end)`` token ranges of a text's windows (``window_starts``)."""
    return [(s, min(s + content, n_tokens)) for s in window_starts(n_tokens, content, stride)]


@dataclass
class Windows:
    """Embedded windows of some docs: ``vectors`` (n, dim) float32 unit rows (the Ray engine's corpus windows: a
    ``spill.Routed``, their vectors left in files its search tasks read), ``doc`` (n,) the doc of each,
    ``bounds`` (n, 2) its token range; ``texts`` the docs' texts as given, and ``encoder`` the ``Encoder`` that
    tokenizes one again for its matched text (a text whose windows were laid out by an earlier run was not)."""

    vectors: np.ndarray
    doc: np.ndarray
    bounds: np.ndarray
    texts: Sequence[str]
    encoder: Tokenizes
    _located: dict = field(default_factory=dict, repr=False)

    def text_of(self, w: int, max_words: int) -> str:
        """The text of window ``w`` (its normalised text), at most ``max_words`` words."""
        d, (s, e) = int(self.doc[w]), self.bounds[w]
        if d not in self._located:
            norm = normalize_text(self.texts[d])
            self._located[d] = (norm, self.encoder.tokenize([norm])[1][0])
        norm, off = self._located[d]
        return " ".join(norm[int(off[s][0]) : int(off[e - 1][1])].split()[:max_words])

    def of_doc(self, d: int) -> np.ndarray:
        """Indexes of doc ``d``'s windows."""
        return np.flatnonzero(self.doc == d)
