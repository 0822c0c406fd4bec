"""Exact subword <-> word alignment for NER: IOB2 checks, label schemes, windows, and merging back to words.

Used by ``tokenize`` (to build the NER datasets) and by ``finetune`` (to score on words). Conventions:

- ``word_ids``: one entry per subword position, the index of the word in the *whole sentence*, or ``-1`` for
  special/pad positions (``BatchEncoding.word_ids()`` gives ``None`` there; datasets store ``-1``).
- Labels are ids into ``label_names(...)``; ignored positions are ``IGNORE = -100`` (PyTorch's
  ``CrossEntropyLoss(ignore_index=-100)`` default, the HF token-classification convention).
- Schemes (HF ``run_ner.py``, ``label_all_tokens``): ``first`` labels the first subword of each word and
  ignores the rest; ``all`` labels every subword, a ``B-X`` word's continuation subwords get ``I-X``.
- Scoring is always on words: ``words_from_windows`` takes each word's prediction at its *first* subword, in
  the window where the word has the most context, whatever the training scheme. Counting entities on
  subwords would inflate ``all`` (transformers#14043).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Literal, TypeVar

IGNORE = -100
SPECIAL_WORD = -1
Scheme = Literal["first", "all"]
T = TypeVar("T")


def parse_tag(tag: str) -> tuple[str, str | None]:
    """``"B-PER" -> ("B", "PER")``, ``"O" -> ("O", None)``; raises ``ValueError`` on anything else."""
    if tag == "O":
        return "O", None
    prefix, sep, kind = tag.partition("-")
    if prefix not in ("B", "I") or not sep or not kind:
        raise ValueError(f"not an IOB2 tag: {tag!r} (expected O, B-<type> or I-<type>)")
    return prefix, kind


def label_names(tags: Iterable[str]) -> list[str]:
    """Label names in id order: ``O``, then ``B-X, I-X`` for each entity type X in sorted order.

    Both B- and I- of every type are listed even if one never occurs, because the ``all`` scheme creates I-X.
    """
    kinds = sorted({kind for tag in tags for _, kind in [parse_tag(tag)] if kind is not None})
    return ["O"] + [f"{prefix}-{kind}" for kind in kinds for prefix in ("B", "I")]


def iob2_violations(tags: Sequence[str]) -> list[int]:
    """Positions of ``I-X`` tags that do not continue a chunk of type X (after ``O``, ``B-Y``/``I-Y``, or at 0)."""
    bad = []
    previous_kind = None
    for i, tag in enumerate(tags):
        prefix, kind = parse_tag(tag)
        if prefix == "I" and kind != previous_kind:
            bad.append(i)
        previous_kind = kind
    return bad


def repair_iob2(tags: Sequence[str]) -> list[str]:
    """Turn every invalid ``I-X`` into ``B-X``.

    This is how conlleval and seqeval's default (non-strict) mode already read such a tag: an ``I-X`` that
    cannot continue a chunk starts a new chunk of type X. Repairing makes strict IOB2 scoring agree with it.
    """
    fixed = list(tags)
    for i in iob2_violations(tags):
        fixed[i] = "B-" + tags[i][2:]
    return fixed


def align_labels(
    word_ids: Sequence[int | None], word_tags: Sequence[str], label2id: dict[str, int], scheme: Scheme
) -> list[int]:
    """Subword labels, shape ``(seq_len,)``, for one sequence (a window or a whole sentence).

    ``word_ids`` index into ``word_tags`` (``None`` or ``-1`` = special/pad -> ``IGNORE``). A position is a
    word's first subword when its word id differs from the previous position's. Raises ``ValueError`` for an
    unknown scheme and ``KeyError`` for a tag missing from ``label2id``.
    """
    if scheme not in ("first", "all"):
        raise ValueError(f"unknown label scheme {scheme!r} (expected 'first' or 'all')")
    labels = []
    previous = None
    for word in word_ids:
        if word is None or word == SPECIAL_WORD:
            labels.append(IGNORE)
        elif word != previous:
            labels.append(label2id[word_tags[word]])
        elif scheme == "first":
            labels.append(IGNORE)
        else:
            tag = word_tags[word]
            labels.append(label2id["I-" + tag[2:] if tag.startswith("B-") else tag])
        previous = word
    return labels


def missing_words(word_ids: Sequence[int | None], n_words: int) -> list[int]:
    """Indices of words with zero subwords (e.g. a lone U+200B, which BertNormalizer deletes)."""
    present = {w for w in word_ids if w is not None and w != SPECIAL_WORD}
    return [w for w in range(n_words) if w not in present]


def word_token_spans(word_ids: Sequence[int], n_words: int) -> list[tuple[int, int]]:
    """``[(first_pos, end_pos), ...]`` per word over a special-free sequence; raises if a word is missing."""
    spans: list[list[int]] = [[-1, -1] for _ in range(n_words)]
    for pos, word in enumerate(word_ids):
        if spans[word][0] < 0:
            spans[word][0] = pos
        spans[word][1] = pos + 1
    absent = [w for w, (start, _) in enumerate(spans) if start < 0]
    if absent:
        raise ValueError(f"words {absent} have no subword; replace them before windowing")
    return [(start, end) for start, end in spans]


def cap_word_subwords(
    ids: Sequence[int], word_ids: Sequence[int], capacity: int
) -> tuple[list[int], list[int], list[int]]:
    """``(ids, word_ids, cut_words)``: every word's subwords cut to its first ``capacity``.

    A word whose subwords alone exceed a window (a long URL, a hash) cannot be windowed; keeping its first
    subwords keeps its first-subword label and prediction (the ``first`` scheme, Devlin et al. 2019, sec. 5.3)
    and loses only the inside of one word. ``cut_words`` lists the indices of the words cut. ``ids`` and
    ``word_ids`` are a special-free sentence encoding (subword positions, word index per position).
    """
    kept_ids, kept_words, seen, cut = [], [], Counter(), []
    for token, word in zip(ids, word_ids, strict=True):
        seen[word] += 1
        if seen[word] <= capacity:
            kept_ids.append(token)
            kept_words.append(word)
        elif seen[word] == capacity + 1:
            cut.append(word)
    return kept_ids, kept_words, cut


def plan_windows(subwords_per_word: Sequence[int], capacity: int, overlap: int) -> list[tuple[int, int]]:
    """Split a sentence into word ranges ``[(start, end), ...]`` of at most ``capacity`` subwords each.

    Windows never cut a word. Each next window starts early enough to repeat at most ``overlap`` subwords of
    left context (like the ``doc_stride`` of BERT's SQuAD reference code) and always advances by a word.
    ``capacity`` is ``max_seq_len - 2`` ([CLS] and [SEP]). Raises ``ValueError`` if one word alone exceeds it.
    """
    too_long = [w for w, n in enumerate(subwords_per_word) if n > capacity]
    if too_long:
        raise ValueError(f"word(s) {too_long} have more than {capacity} subwords; raise max_seq_len_tokens")
    n_words = len(subwords_per_word)
    windows = []
    start = 0
    while True:
        end, used = start, 0
        while end < n_words and used + subwords_per_word[end] <= capacity:
            used += subwords_per_word[end]
            end += 1
        windows.append((start, end))
        if end >= n_words:
            return windows
        next_start, carried = end, 0
        while next_start - 1 > start and carried + subwords_per_word[next_start - 1] <= overlap:
            next_start -= 1
            carried += subwords_per_word[next_start]
        start = next_start


def window_encodings(
    ids: Sequence[int], word_ids: Sequence[int], windows: Sequence[tuple[int, int]], cls_id: int, sep_id: int
) -> list[tuple[list[int], list[int]]]:
    """``[(input_ids, word_ids), ...]`` per window: ``[CLS] + the window's subwords + [SEP]``.

    ``ids``/``word_ids`` are the special-free encoding of the whole sentence (every word has >= 1 subword);
    the window's ``word_ids`` keep sentence-level word indices and ``-1`` at [CLS]/[SEP].
    """
    n_words = (max(word_ids) + 1) if word_ids else 0
    spans = word_token_spans(word_ids, n_words)
    out = []
    for first_word, end_word in windows:
        lo, hi = spans[first_word][0], spans[end_word - 1][1]
        out.append(([cls_id, *ids[lo:hi], sep_id], [SPECIAL_WORD, *word_ids[lo:hi], SPECIAL_WORD]))
    return out


def words_from_windows(windows: Sequence[tuple[Sequence[int], Sequence[T]]], n_words: int) -> list[T]:
    """One prediction per word from per-subword predictions of the windows of one sentence.

    ``windows`` is ``[(word_ids, predictions), ...]``, each of length ``seq_len`` (``word_ids`` with ``-1`` or
    ``None`` at specials/pad; predictions of any type: label ids, names or score vectors). A word's prediction
    is the one at its first subword, in the window where ``min(left context, right context)`` in subwords is
    largest (earlier window on ties): the "max context" rule of BERT's ``run_squad.py``
    (``_check_is_max_context``). Raises ``ValueError`` if some word appears in no window.
    """
    best: dict[int, tuple[int, T]] = {}
    for word_ids, predictions in windows:
        content = [pos for pos, w in enumerate(word_ids) if w is not None and w != SPECIAL_WORD]
        if not content:
            continue
        first_content, last_content = content[0], content[-1]
        firsts: dict[int, int] = {}
        lasts: dict[int, int] = {}
        for pos in content:
            firsts.setdefault(word_ids[pos], pos)
            lasts[word_ids[pos]] = pos
        for word, first in firsts.items():
            score = min(first - first_content, last_content - lasts[word])
            if word not in best or score > best[word][0]:
                best[word] = (score, predictions[first])
    absent = [w for w in range(n_words) if w not in best]
    if absent:
        raise ValueError(f"words {absent} of {n_words} have no subword in any window")
    return [best[w][1] for w in range(n_words)]
