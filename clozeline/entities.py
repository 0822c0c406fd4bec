"""Words in, entities out, for the NER pipeline of ``clozeline.predict``: raw text split into words with their
character offsets, and per-word IOB2 tags read into entity spans exactly as the evaluation reads them.

- Words: a string is split by the tokenizers library's ``BertPreTokenizer`` (whitespace, and every punctuation
  character as a word of its own), the pre-tokenizer of both the clozeline tokenizer (``tasks/tokenizer.py``)
  and the packaged MiniLM's. ``"Saka."`` becomes ``Saka`` + ``.``, as in the CoNLL training data, whose words
  come already split by the corpus. The splitter goes further than the corpus's Twitter tokenizer on a few
  forms (``@user`` -> ``@`` + ``user``, ``it's`` -> ``it`` + ``'`` + ``s``, a URL into its pieces); pass words
  split your own way with ``is_split_into_words=True``.
- Entities: the finetune stage scores with seqeval in strict IOB2 mode (``tasks/finetune/ner.py``), where an
  ``I-X`` that cannot continue an X chunk (after ``O``, another type, or at the start) starts no entity. The
  same seqeval reading (``seqeval.scheme.Entities``, IOB2, strict) gives the spans here, so a span is an
  entity the test score counted, and ``strict_tags`` gives the per-word tags of those spans (valid IOB2).
"""

from __future__ import annotations

from typing import Any

from seqeval.scheme import IOB2, Entities
from tokenizers.pre_tokenizers import BertPreTokenizer

SPLITTER = BertPreTokenizer()
OUTSIDE = "O"


def split_words(text: str) -> tuple[list[str], list[tuple[int, int]]]:
    """``(words, offsets)`` of ``text``: ``BertPreTokenizer``'s words and their ``(start, end)`` character
    offsets into ``text`` (``text[start:end] == word``). An empty or all-whitespace text has no words."""
    pieces = SPLITTER.pre_tokenize_str(text)
    return [word for word, _ in pieces], [span for _, span in pieces]


def joined_offsets(words: list[str], delimiter: str) -> list[tuple[int, int]]:
    """``(start, end)`` of each word in ``delimiter.join(words)`` (what the stock pipeline reports for words
    given with ``is_split_into_words=True``)."""
    offsets, start = [], 0
    for word in words:
        offsets.append((start, start + len(word)))
        start += len(word) + len(delimiter)
    return offsets


def strict_spans(tags: list[str]) -> list[tuple[str, int, int]]:
    """``(type, first word, end word)`` (end exclusive) of each entity of one sentence's IOB2 ``tags`` as the
    evaluation counts them: seqeval, IOB2, strict mode."""
    return [(e.tag, e.start, e.end) for e in Entities([list(tags)], IOB2, False).entities[0]]


def strict_tags(tags: list[str]) -> list[str]:
    """The tags of ``strict_spans``: ``B-X`` then ``I-X`` over each entity, ``O`` elsewhere, so an ``I-X`` that
    starts no entity in the evaluation reads ``O``. Valid IOB2; the entities (and so every seqeval strict
    score) are unchanged."""
    fixed = [OUTSIDE] * len(tags)
    for kind, start, end in strict_spans(tags):
        fixed[start:end] = [f"B-{kind}"] + [f"I-{kind}"] * (end - start - 1)
    return fixed


def word_records(
    words: list[str], offsets: list[tuple[int, int]], tags: list[str], scores: list[float]
) -> list[dict[str, Any]]:
    """One ``{entity, score, index, word, start, end}`` per word (``aggregation_strategy="none"``): ``entity`` the
    word's tag after ``strict_tags``; ``score`` the probability the model gave the tag it predicted there."""
    return [
        {"entity": tag, "score": score, "index": i, "word": word, "start": start, "end": end}
        for i, (word, (start, end), tag, score) in enumerate(
            zip(words, offsets, strict_tags(tags), scores, strict=True)
        )
    ]


def entity_groups(
    text: str, offsets: list[tuple[int, int]], tags: list[str], scores: list[float]
) -> list[dict[str, Any]]:
    """One ``{entity_group, score, word, start, end}`` per entity of ``strict_spans`` (``aggregation_strategy=
    "simple"``): its type, the mean score of its words, ``text[start:end]`` and the character offsets from its
    first word's start to its last word's end."""
    groups = []
    for kind, first, end in strict_spans(tags):
        start, stop = offsets[first][0], offsets[end - 1][1]
        groups.append(
            {
                "entity_group": kind,
                "score": sum(scores[first:end]) / (end - first),
                "word": text[start:stop],
                "start": start,
                "end": stop,
            }
        )
    return groups
