"""Planted contaminations: perturbed copies of real eval docs that measure the audit's recall.

``rate_after`` alone cannot show that the audit works: with ``pretrain_action: remove`` every doc the
detectors match is gone, so the same detectors find nothing afterwards whatever their recall. Here copies of
eval docs, each perturbed in a way a real copy on the web could be, are scored by the audit's own detectors
(``tasks.leakage.detectors.detect``, the same functions and params) against every eval doc; a planted doc is
*found* when it matches the eval doc it was built from. Nothing planted is written to ``data/``: the stage's
real outputs are the same bytes with or without this pass.

Variants, on the eval doc's whitespace tokens (``str.split``):

- ``verbatim``: the text as it is;
- ``rewrapped``: ``line_words`` tokens per line;
- ``in_filler``: ``paragraph_words`` tokens from the middle of the doc between ``filler_words`` tokens of
  unrelated pretraining text on each side (a paragraph quoted inside another page);
- ``replaced``: every ``replace_every``-th token swapped for a filler token (a different word);
- ``unicode``: the spaces become look-alikes in turn (no-break space U+00A0, thin space U+2009, narrow no-break
  space U+202F, plain space) and every ``format_every``-th token gets a format character in its middle, in
  turn zero-width space U+200B, zero-width joiner U+200D and soft hyphen U+00AD (hidden in rendered text).

Eval docs are sampled by a sha256 hash rank of ``f"{seed}:{doc_id}"`` (as ``finetune.kept_doc_ids``), each
variant taking its own docs; filler is the text of pretraining docs the audit did not match, in the hash
rank of ``f"{seed}:filler:{doc_id}"``. Eval docs under ``min_words`` words are not planted (counted).
"""

from __future__ import annotations

import hashlib
import itertools
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pandas as pd

from tasks.common import minhash
from tasks.common.textnorm import words
from tasks.config.leakage import LeakageParams, PlantedParams
from tasks.leakage.detectors import Side, detect, make_side

SPACES = ("\u00a0", "\u2009", "\u202f", " ")  # the gap after token k is SPACES[k % 4]
FORMATS = ("\u200b", "\u200d", "\u00ad")  # inserted inside every format_every-th token, in turn


@dataclass(frozen=True)
class Plant:
    """One planted doc: its variant, the eval row it was built from and its text."""

    variant: str
    eval_index: int
    text: str


def verbatim(tokens: list[str], filler: Iterator[str], cfg: PlantedParams) -> str:
    """The eval doc's tokens, single-spaced (the audit normalizes whitespace anyway)."""
    return " ".join(tokens)


def rewrapped(tokens: list[str], filler: Iterator[str], cfg: PlantedParams) -> str:
    """``cfg.line_words`` tokens per line."""
    step = cfg.line_words
    return "\n".join(" ".join(tokens[k : k + step]) for k in range(0, len(tokens), step))


def in_filler(tokens: list[str], filler: Iterator[str], cfg: PlantedParams) -> str:
    """``paragraph_words`` middle tokens (all if fewer) as a paragraph between two filler paragraphs."""
    start = max((len(tokens) - cfg.paragraph_words) // 2, 0)
    paragraph = tokens[start : start + cfg.paragraph_words]
    before, after = (list(itertools.islice(filler, cfg.filler_words)) for _ in range(2))
    return "\n\n".join(" ".join(part) for part in (before, paragraph, after))


def replaced(tokens: list[str], filler: Iterator[str], cfg: PlantedParams) -> str:
    """Every ``replace_every``-th token replaced by the next filler token that holds a different word."""
    out = list(tokens)
    for k in range(cfg.replace_every - 1, len(out), cfg.replace_every):
        out[k] = next(w for w in filler if words(w) and words(w) != words(out[k]))
    return " ".join(out)


def unicode(tokens: list[str], filler: Iterator[str], cfg: PlantedParams) -> str:
    """Look-alike spaces between tokens and format characters inside every ``format_every``-th token."""
    out = []
    for k, token in enumerate(tokens):
        if (k + 1) % cfg.format_every == 0:
            mid = len(token) // 2
            token = token[:mid] + FORMATS[((k + 1) // cfg.format_every - 1) % len(FORMATS)] + token[mid:]
        out.append(token + (SPACES[k % len(SPACES)] if k < len(tokens) - 1 else ""))
    return "".join(out)


#: Variant name -> builder ``(eval tokens, filler tokens, params) -> planted text``, in report order.
VARIANTS: dict[str, Callable[[list[str], Iterator[str], PlantedParams], str]] = {
    "verbatim": verbatim, "rewrapped": rewrapped, "in_filler": in_filler, "replaced": replaced, "unicode": unicode,
}


def hash_rank(doc_ids: list[str], salt: str) -> list[int]:
    """Indexes of ``doc_ids`` by ``sha256(f"{salt}:{doc_id}")``: a sample that does not depend on the rest."""
    return sorted(range(len(doc_ids)), key=lambda k: hashlib.sha256(f"{salt}:{doc_ids[k]}".encode()).hexdigest())


def filler_stream(texts: list[str]) -> Iterator[str]:
    """The whitespace tokens of ``texts`` end to end, repeated forever (empty if ``texts`` hold none)."""
    return itertools.cycle(token for text in texts for token in text.split())


def sample(eval_ids: list[str], eval_tokens: list[list[str]], has_filler: bool,
           cfg: PlantedParams) -> tuple[dict[str, list[int]], dict[str, int]]:
    """``{variant: eval rows}`` (distinct rows per variant, round robin in hash rank) and the excluded counts."""
    excluded = Counter("under_min_words" for t in eval_tokens if len(t) < cfg.min_words)
    eligible = [k for k in hash_rank(eval_ids, str(cfg.seed)) if len(eval_tokens[k]) >= cfg.min_words]
    if not has_filler:  # in_filler and replaced need unrelated pretraining text
        excluded["no_unmatched_pretraining_text"] += len(eligible)
        eligible = []
    picks = {name: eligible[v :: len(VARIANTS)][: cfg.docs_per_variant] for v, name in enumerate(VARIANTS)}
    return picks, dict(sorted(excluded.items()))


def build(picks: dict[str, list[int]], eval_texts: list[str], filler: Iterator[str],
          cfg: PlantedParams) -> list[Plant]:
    """The planted docs, variant by variant, drawing filler tokens from one stream in that order."""
    return [Plant(name, k, VARIANTS[name](eval_texts[k].split(), filler, cfg)) for name in picks for k in picks[name]]


def found_by(plants: list[Plant], evals: Side, cfg: LeakageParams) -> list[set[str]]:
    """For each planted doc, the audit methods that match it to the eval doc it was built from."""
    side = make_side([words(p.text) for p in plants], minhash.WordHashes())
    methods: dict[tuple[int, int], set[str]] = defaultdict(set)
    for i, j, method, _, _ in detect(side, evals, cfg):
        methods[(i, j)].add(method)
    return [methods.get((i, p.eval_index), set()) for i, p in enumerate(plants)]


def recall(evals_frame: pd.DataFrame, evals: Side, filler_texts: list[str], filler_ids: list[str],
           cfg: LeakageParams) -> dict:
    """The ``planted`` metrics: how many planted copies the audit's detectors find, per variant and pooled.

    ``filler_texts`` are pretraining docs the audit did not match (``filler_ids`` their doc ids).
    """
    pcfg = cfg.planted
    eval_ids = list(evals_frame["doc_id"])
    picks, excluded = sample(eval_ids, evals.tokens, bool(filler_texts), pcfg)
    ranked_filler = [filler_texts[k] for k in hash_rank(filler_ids, f"{pcfg.seed}:filler")]
    plants = build(picks, list(evals_frame["text"]), filler_stream(ranked_filler), pcfg)
    methods = found_by(plants, evals, cfg) if plants else []
    out = {"seed": pcfg.seed, "eval_docs_eligible": len(evals.tokens) - sum(excluded.values()),
           "eval_docs_excluded": excluded, **counts(plants, methods)}
    out["variants"] = {name: counts([p for p in plants if p.variant == name],
                                    [m for p, m in zip(plants, methods) if p.variant == name], by_method=True)
                       for name in VARIANTS}
    missed = [p for p, m in zip(plants, methods) if not m]
    out["missed_examples"] = [{"eval_doc": eval_ids[p.eval_index], "variant": p.variant}
                              for p in missed[: cfg.max_examples]]
    return out


def counts(plants: list[Plant], methods: list[set[str]], by_method: bool = False) -> dict:
    """``planted = found + missed``, recall and miss rate (``None`` without planted docs), rounded to 1e-6."""
    found = sum(bool(m) for m in methods)
    rate = (lambda x: round(x / len(plants), 6)) if plants else (lambda x: None)
    out = {"planted": len(plants), "found": found, "missed": len(plants) - found,
           "recall": rate(found), "miss_rate": rate(len(plants) - found)}
    if by_method:  # a doc found by several methods counts under each
        out["found_by_method"] = dict(sorted(Counter(x for m in methods for x in m).items()))
    return out
