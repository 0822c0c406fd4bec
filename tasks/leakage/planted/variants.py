"""Planted contaminations: perturbed copies of every eval doc, at increasing edit strength, that measure the
recall of each of the audit's detectors and of the audit as a whole.

``rate_after`` alone cannot show that the audit works (what it removes, its detectors no longer find). Here
copies of eval docs, each perturbed in a way a real copy on the web could be, are scored by the audit's own detectors
(``tasks.leakage.lexical.detectors.detect`` with the same params, and the semantic detector of
``tasks.leakage.semantic`` at its chosen threshold: ``tasks.leakage.planted.recall``) against every eval doc; a
planted doc is *found* by a detector when that detector matches it to the eval doc it was built from. Nothing
planted is written to ``data/``: the stage's real outputs are the same bytes with or without this pass.

Every eval doc is planted once per variant (short ones too: a one-word tweet gets its copies like an article,
and the detectors' minimum lengths then show as misses). Variants, on the eval doc's whitespace tokens
(``str.split``), grouped in families whose strength grows along the list (``FAMILIES``):

- ``format``: ``verbatim``; ``rewrapped`` (``line_words`` tokens per line); ``unicode`` (look-alike spaces
  U+00A0, U+2009, U+202F in turn, and ZWSP, ZWJ or a soft hyphen inside every ``format_every``-th token);
  ``homoglyphs`` (every Latin a e o p c x written with its Cyrillic look-alike а е о р с х, which NFKC does
  not fold: the detectors fold them with the UTS #39 skeleton, ``tasks.common.matching.confusables``);
- ``replaced``: every k-th token swapped for a filler token that holds a different word, k in
  ``replace_every`` (20, 12, 8, 5, 3 by default);
- ``synonyms``: every k-th content word (alphabetic, 3+ letters, not an English stop word, with a WordNet
  synonym: ``tasks.leakage.planted.synonyms``) swapped for it, case kept, k in ``synonym_every`` (3, 2, 1 by default);
- ``shuffled``: the sentences (ending in . ! or ?) in another order (seeded per doc; never the identity);
- ``quoted``: ``in_filler`` (``paragraph_words`` middle tokens as a paragraph between ``filler_words``
  tokens of unrelated text on each side), then ``fragment_<n>`` for n in ``fragment_words`` (30, 20, 10 by
  default): n middle tokens in quotation marks inside ``fragment_filler_words`` tokens of unrelated text on
  each side (a quotation in another article).

A variant that leaves a doc's text as it was (one sentence to shuffle, no content word with a synonym, a doc
shorter than the fragment) still counts as planted; ``unchanged`` counts those, and ``words_changed_share``
is the mean share of the eval doc's tokens a variant changed. Filler is the text of pretraining docs the
audit did not match; each plant reads it from a point of its own on a consistent-hashing ring
(``tasks/leakage/planted/filler.py``), so a plant depends on its eval doc, variant and seed and on a few filler docs,
and most plants keep their text when new docs join the pool.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

from tasks.common.matching.textnorm import words
from tasks.config.corpus.leakage import PlantedParams
from tasks.leakage.planted.filler import FillerRing

SPACES = ("\u00a0", "\u2009", "\u202f", " ")  # the gap after token k is SPACES[k % 4]
FORMATS = ("\u200b", "\u200d", "\u00ad")  # inserted inside every format_every-th token, in turn
HOMOGLYPHS = str.maketrans("aeopcx", "\u0430\u0435\u043e\u0440\u0441\u0445")  # Latin -> Cyrillic look-alikes
_CORE = re.compile(r"^(\W*)(.*?)(\W*)$", re.S)
_SENTENCE_END = re.compile(r"[.!?][\"')\]]*$")
FILLED = ("replaced", "in_filler", "fragment")  # the kinds of variant that read filler


@dataclass(frozen=True)
class Plant:
    """One planted doc: its variant, the eval row it was built from, its text, where the eval doc's text lies
    in it (``span``: character offsets; the whole text for whole-doc variants) and the share of the eval
    doc's tokens the variant changed."""

    variant: str
    eval_index: int
    text: str
    span: tuple[int, int] = (0, -1)
    changed: float = 0.0
    unchanged: bool = False


@dataclass(frozen=True)
class Variant:
    """A variant of the strength ladder: its name, family, strength in words and its builder's argument."""

    name: str
    family: str
    strength: str
    kind: str
    arg: int = 0
    extra: dict = field(default_factory=dict)


def variants(cfg: PlantedParams) -> list[Variant]:
    """The variants in report order (families, then growing strength)."""
    out = [
        Variant("verbatim", "format", "verbatim", "verbatim"),
        Variant("rewrapped", "format", f"{cfg.line_words} words per line", "rewrapped"),
        Variant(
            "unicode",
            "format",
            f"look-alike spaces, a format character in every {ordinal(cfg.format_every)} word",
            "unicode",
        ),
        Variant("homoglyphs", "format", "Cyrillic а е о р с х for a e o p c x", "homoglyphs"),
    ]
    out += [
        Variant(f"replaced_every_{k}", "replaced", f"every {ordinal(k)} word replaced", "replaced", k)
        for k in sorted(cfg.replace_every, reverse=True)
    ]
    out += [
        Variant(
            f"synonyms_every_{k}",
            "synonyms",
            "every content word a synonym" if k == 1 else f"every {ordinal(k)} content word a synonym",
            "synonyms",
            k,
        )
        for k in sorted(cfg.synonym_every, reverse=True)
    ]
    out += [
        Variant("shuffled", "shuffled", "sentences shuffled", "shuffled"),
        Variant(
            "in_filler",
            "quoted",
            f"{cfg.paragraph_words}-word paragraph in {cfg.filler_words}-word filler",
            "in_filler",
        ),
    ]
    out += [
        Variant(f"fragment_{n}", "quoted", f"{n}-word quotation in unrelated text", "fragment", n)
        for n in sorted(cfg.fragment_words, reverse=True)
    ]
    return out


def ordinal(k: int) -> str:
    """``2nd``, ``3rd``, ``12th``, ``21st``."""
    suffix = "th" if 10 <= k % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")
    return f"{k}{suffix}"


#: The families in report order.
FAMILIES = ("format", "replaced", "synonyms", "shuffled", "quoted")


# ---------------------------------------------------------------- builders: (tokens, filler, cfg, ...) -> Plant parts


def verbatim(tokens: list[str]) -> str:
    """The eval doc's tokens, single-spaced (the audit normalizes whitespace anyway)."""
    return " ".join(tokens)


def rewrapped(tokens: list[str], line_words: int) -> str:
    """``line_words`` tokens per line."""
    return "\n".join(" ".join(tokens[k : k + line_words]) for k in range(0, len(tokens), line_words))


def unicode(tokens: list[str], format_every: int) -> str:
    """Look-alike spaces between tokens and format characters inside every ``format_every``-th token."""
    out = []
    for k, token in enumerate(tokens):
        if (k + 1) % format_every == 0:
            mid = len(token) // 2
            token = token[:mid] + FORMATS[((k + 1) // format_every - 1) % len(FORMATS)] + token[mid:]
        out.append(token + (SPACES[k % len(SPACES)] if k < len(tokens) - 1 else ""))
    return "".join(out)


def homoglyphs(tokens: list[str]) -> str:
    """Every Latin a e o p c x replaced by its Cyrillic look-alike."""
    return " ".join(tokens).translate(HOMOGLYPHS)


def replaced(tokens: list[str], filler: Iterator[str], every: int) -> tuple[str, int]:
    """Every ``every``-th token replaced by the next filler token that holds a different word; the text and the
    number of tokens changed."""
    out = list(tokens)
    for k in range(every - 1, len(out), every):
        out[k] = next(w for w in filler if words(w) and words(w) != words(out[k]))
    return " ".join(out), len(range(every - 1, len(out), every))


def synonyms(tokens: list[str], every: int, synonym_of) -> tuple[str, int]:
    """Every ``every``-th content word with a synonym (``synonym_of(lower-case word) -> str | None``) replaced
    by it, punctuation around it and its capitalisation kept; the text and the number of tokens changed."""
    return swapped(tokens, synonym_swaps(tokens, synonym_of), every)


def synonym_swaps(tokens: list[str], synonym_of) -> list[tuple[int, str]]:
    """``(position, token with its synonym)`` of each content word (alphabetic, 3+ letters, no stop word) with a
    synonym, in order: the candidates of ``synonyms``, shared by a doc's ``synonym_every`` variants."""
    out = []
    for k, token in enumerate(tokens):
        lead, core, trail = _CORE.match(token).groups()
        low = core.lower()
        if not (core.isalpha() and len(core) >= 3 and low not in ENGLISH_STOP_WORDS):
            continue
        synonym = synonym_of(low)
        if synonym is not None:
            synonym = (
                synonym.upper()
                if core.isupper() and len(core) > 1
                else (synonym.capitalize() if core[0].isupper() else synonym)
            )
            out.append((k, lead + synonym + trail))
    return out


def swapped(tokens: list[str], swaps: list[tuple[int, str]], every: int) -> tuple[str, int]:
    """Every ``every``-th of ``swaps`` applied; the text and the number of tokens changed."""
    out, picked = list(tokens), swaps[every - 1 :: every]
    for k, token in picked:
        out[k] = token
    return " ".join(out), len(picked)


def sentences(tokens: list[str]) -> list[list[str]]:
    """The tokens cut after every token that ends a sentence (. ! or ?, maybe followed by quotes or brackets)."""
    out, current = [], []
    for token in tokens:
        current.append(token)
        if _SENTENCE_END.search(token):
            out.append(current)
            current = []
    return out + ([current] if current else [])


def shuffled(tokens: list[str], salt: str) -> str:
    """The sentences in an order drawn from ``random.Random(sha256(salt))``; never the same order when there
    are two or more sentences (a drawn identity becomes a rotation by one)."""
    parts = sentences(tokens)
    order = list(range(len(parts)))
    random.Random(int(hashlib.sha256(salt.encode()).hexdigest(), 16)).shuffle(order)
    if len(order) > 1 and order == sorted(order):
        order = order[1:] + order[:1]
    return " ".join(" ".join(parts[k]) for k in order)


def middle(tokens: list[str], n: int) -> list[str]:
    """The ``n`` middle tokens (all if fewer)."""
    start = max((len(tokens) - n) // 2, 0)
    return tokens[start : start + n]


def in_filler(tokens: list[str], filler: Iterator[str], paragraph_words: int, filler_words: int) -> tuple[str, tuple]:
    """``paragraph_words`` middle tokens as a paragraph between two filler paragraphs; the text and the span."""
    before, after = (" ".join(itertools.islice(filler, filler_words)) for _ in range(2))
    paragraph = " ".join(middle(tokens, paragraph_words))
    start = len(before) + 2
    return "\n\n".join((before, paragraph, after)), (start, start + len(paragraph))


def fragment(tokens: list[str], filler: Iterator[str], n: int, filler_words: int) -> tuple[str, tuple]:
    """``n`` middle tokens in quotation marks inside unrelated text; the text and the span of the quotation."""
    before, after = (" ".join(itertools.islice(filler, filler_words)) for _ in range(2))
    quote = " ".join(middle(tokens, n))
    start = len(before) + 2
    return f'{before} "{quote}" {after}', (start, start + len(quote))


def build_one(
    variant: Variant, k: int, doc_id: str, text: str, filler: Iterator[str], cfg: PlantedParams, swaps
) -> Plant:
    """The plant of ``variant`` for eval row ``k``; ``swaps()`` gives the doc's ``synonym_swaps``."""
    tokens = text.split()
    n = max(len(tokens), 1)
    kind = variant.kind
    if kind == "verbatim":
        return Plant(variant.name, k, verbatim(tokens))
    if kind == "rewrapped":
        return Plant(variant.name, k, rewrapped(tokens, cfg.line_words))
    if kind == "unicode":
        return Plant(variant.name, k, unicode(tokens, cfg.format_every))
    if kind == "homoglyphs":
        out = homoglyphs(tokens)
        return Plant(
            variant.name,
            k,
            out,
            changed=sum(t != t.translate(HOMOGLYPHS) for t in tokens) / n,
            unchanged=out == verbatim(tokens),
        )
    if kind == "replaced":
        out, changed = replaced(tokens, filler, variant.arg)
        return Plant(variant.name, k, out, changed=changed / n, unchanged=changed == 0)
    if kind == "synonyms":
        out, changed = swapped(tokens, swaps(), variant.arg)
        return Plant(variant.name, k, out, changed=changed / n, unchanged=changed == 0)
    if kind == "shuffled":
        out = shuffled(tokens, f"{cfg.seed}:shuffle:{doc_id}")
        return Plant(variant.name, k, out, unchanged=out == verbatim(tokens))
    if kind == "in_filler":
        out, span = in_filler(tokens, filler, cfg.paragraph_words, cfg.filler_words)
        return Plant(variant.name, k, out, span, changed=1 - min(cfg.paragraph_words, len(tokens)) / n)
    out, span = fragment(tokens, filler, variant.arg, cfg.fragment_filler_words)
    return Plant(
        variant.name, k, out, span, changed=1 - min(variant.arg, len(tokens)) / n, unchanged=len(tokens) <= variant.arg
    )


# ---------------------------------------------------------------- sampling


def hash_rank(doc_ids: list[str], salt: str) -> list[int]:
    """Indexes of ``doc_ids`` by ``sha256(f"{salt}:{doc_id}")``: a sample that does not depend on the rest."""
    return sorted(range(len(doc_ids)), key=lambda k: hashlib.sha256(f"{salt}:{doc_ids[k]}".encode()).hexdigest())


def planted_rows(eval_ids: list[str], cfg: PlantedParams) -> list[int]:
    """The eval rows planted: all of them (``max_docs`` null), else the first ``max_docs`` by hash rank; in
    hash rank order."""
    ranked = hash_rank(eval_ids, str(cfg.seed))
    return ranked if cfg.max_docs is None else ranked[: cfg.max_docs]


def make(
    evals_frame: pd.DataFrame,
    filler_texts: Sequence[str],
    filler_ids: Sequence[str],
    cfg: PlantedParams,
    synonym_of,
    nonblank: np.ndarray | None = None,
) -> tuple[list[Plant], list[str]]:
    """The plants of every eval row (``planted_rows``) and variant, and the variants not planted: without
    unrelated pretraining text (``filler_texts``, ``filler_ids`` their doc ids: lists, or ``outputs.Picked``
    views of a frame's columns, read when a plant reaches a doc) the variants that need filler. ``nonblank``:
    as ``FillerRing``'s."""
    eval_ids = list(evals_frame["doc_id"])
    ring = FillerRing(filler_texts, filler_ids, cfg.seed, nonblank)
    chosen = [v for v in variants(cfg) if ring or v.kind not in FILLED]
    texts = [str(t) for t in evals_frame["text"]]
    rows = planted_rows(eval_ids, cfg)
    swaps_of = functools.cache(lambda k: synonym_swaps(texts[k].split(), synonym_of))  # one doc, 3 variants
    plants = [
        build_one(
            v,
            k,
            eval_ids[k],
            texts[k],
            ring.stream(f"{cfg.seed}:{eval_ids[k]}:{v.name}") if v.kind in FILLED else iter(()),
            cfg,
            functools.partial(swaps_of, k),
        )
        for v in chosen
        for k in rows
    ]
    return plants, [v.name for v in variants(cfg) if v not in chosen]
