"""Residual contamination of the cleaned pretraining corpus, by a detector independent of the audit's.

The audit removes what its own detectors match, so those detectors cannot judge what is left. This check is
written separately (word n-grams as strings in Python sets; none of the rolling hashes, MinHash or code of
``tasks.leakage.lexical.detectors``, only the shared ``textnorm.words`` normalization) and looks where the audit is
brittle: word 8-grams survive a changed word every 9 words, which leaves no 13-gram intact, and coverage is
pooled over the whole corpus, so an eval doc cut into pieces spread over several training docs still adds up.

Definition, after PaLM (Chowdhery et al. 2022, dataset contamination; 8-grams at 70%, as Llama 2's appendix A.6
describes it): an eval doc is contaminated when at least ``min_coverage`` of its distinct word
``ngram_words``-grams occur anywhere in the pretraining corpus. An eval doc shorter than ``ngram_words`` words
has no n-gram; it counts as contaminated when a pretraining doc has exactly its words (an eval doc without
words is never contaminated: it shares nothing with anything). ``rate`` is measured on
the pretraining rows kept after the audit's action; ``rate_before`` on all of them (same detector, a sanity
check that it sees the contamination the audit removed).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
from tqdm import tqdm

from tasks.config.corpus.leakage import ResidualParams

SEP = "\x1f"  # joins an n-gram's words: a control character, never inside a word (``\\w`` runs, folded)


def ngrams(tokens: list[str], n: int) -> list[str]:
    """The word n-grams of ``tokens`` in text order (none when there are fewer than n words), each its words
    joined by ``SEP``: a string caches its hash, so the millions of set operations on a corpus's n-grams (and
    the incremental cache's, ``tasks/leakage/scan/incremental.py``) hash each n-gram once, where a tuple of words
    would be hashed again at every one."""
    return list(map(SEP.join, zip(*(tokens[k:] for k in range(n)))))


@dataclass(frozen=True)
class Scan:
    """The pretraining docs (``ids``), and only for the few that hold something of an eval doc, what they hold:
    ``hits[i]``, the eval n-grams doc ``i`` contains (docs with none are absent), and ``whole[i]``, doc ``i``'s
    words when they equal the words of an eval doc without n-grams (shorter than n words)."""

    ids: list[str]
    hits: dict[int, set[str]]
    whole: dict[int, tuple[str, ...]]

    def found(self, skip: set[int]) -> tuple[set, set]:
        """The eval n-grams the docs not in ``skip`` hold, and the word tuples of those of them in ``whole``."""
        return (
            set().union(*(h for i, h in self.hits.items() if i not in skip)),
            {w for i, w in self.whole.items() if i not in skip},
        )

    def sharing(self, skip: set[int], grams: set, tokens: list[str]) -> list[str]:
        """The three docs not in ``skip`` that share the most of ``grams`` (or, without n-grams, all of
        ``tokens``); ties by doc id."""
        if grams:
            counts = [(-len(h & grams), self.ids[i]) for i, h in self.hits.items() if i not in skip and h & grams]
        else:
            counts = [(0, self.ids[i]) for i, w in self.whole.items() if i not in skip and w == tuple(tokens)]
        return [doc_id for _, doc_id in sorted(counts)[:3]]


def eval_targets(eval_tokens: list[list[str]], n: int) -> tuple[set, set]:
    """What a scan looks for: every eval n-gram, and the word tuples of the eval docs with words but no n-gram."""
    return (set().union(*(ngrams(t, n) for t in eval_tokens)), {tuple(t) for t in eval_tokens if 0 < len(t) < n})


def scan_docs(tokens: list[list[str]], targets: tuple[set, set], n: int) -> tuple[dict, dict]:
    """``(hits, whole)`` of ``Scan`` for docs ``0 .. len(tokens) - 1``: one pass of set intersections (C speed,
    no hashing of our own)."""
    every_gram, short_docs = targets
    hits, whole = {}, {}
    for i, t in enumerate(tqdm(tokens, desc="leakage residual", unit="doc", mininterval=5)):
        found = every_gram.intersection(ngrams(t, n))
        if found:
            hits[i] = found
        if len(t) < n and tuple(t) in short_docs:
            whole[i] = tuple(t)
    return hits, whole


def residual(
    evals_frame: pd.DataFrame,
    eval_tokens: list[list[str]],
    corpus: Scan,
    removed: set[str],
    cfg: ResidualParams,
    max_examples: int,
) -> dict:
    """The ``residual`` metrics from ``corpus`` (``scan_docs`` of every pretraining doc, with or without Ray): eval
    docs whose n-grams the pretraining corpus still holds after the action (``contaminated_docs``, ``rate``),
    and before it (``*_before``), per eval set and with the first ``max_examples`` examples."""
    n, threshold = cfg.ngram_words, cfg.min_coverage
    eval_grams = [set(ngrams(t, n)) for t in eval_tokens]
    gone = {i for i, doc_id in enumerate(corpus.ids) if doc_id in removed}
    found = corpus.found(gone)
    after = coverage(eval_grams, eval_tokens, *found)
    before = coverage(eval_grams, eval_tokens, *corpus.found(set()))
    dirty = [c >= threshold for c in after]
    sets = list(evals_frame["source"] + "/" + evals_frame["split"])
    ranked = sorted((-c, doc_id, j) for j, (c, doc_id) in enumerate(zip(after, evals_frame["doc_id"])) if c > 0)
    examples = [
        {
            "eval_doc": doc_id,
            "coverage": round(-c, 6),
            "contaminated": -c >= threshold,
            **example(corpus, gone, found[0], eval_tokens[j], n),
        }
        for c, doc_id, j in ranked[:max_examples]
    ]
    return {
        "detector": f"word {n}-gram coverage >= {threshold:g}, pooled over the pretraining corpus (PaLM-style; "
        f"eval docs under {n} words: whole-doc equality), code independent of the audit's",
        "eval_docs": len(eval_tokens),
        "eval_docs_under_ngram_words": sum(not g for g in eval_grams),
        **_counts(dirty, ""),
        **_counts([c >= threshold for c in before], "_before"),
        "by_eval_set": {
            name: {
                "eval_docs": sets.count(name),
                "contaminated_docs": sum(d and s == name for d, s in zip(dirty, sets)),
            }
            for name in sorted(set(sets))
        },
        "examples": examples,
    }


def coverage(eval_grams: list[set], eval_tokens: list[list[str]], grams: set, whole_docs: set) -> list[float]:
    """Per eval doc, the share of its distinct n-grams in ``grams``; for an eval doc without n-grams, 1.0 when
    it has words and is one of ``whole_docs`` (word tuples), else 0.0."""
    return [
        len(g & grams) / len(g) if g else float(bool(t) and tuple(t) in whole_docs)
        for g, t in zip(eval_grams, eval_tokens)
    ]


def example(corpus: Scan, gone: set[int], found: set, tokens: list[str], n: int) -> dict:
    """The kept docs that share the most with one eval doc, and its first n-gram found (or its whole text)."""
    grams = set(ngrams(tokens, n))
    shared = next((g.split(SEP) for g in ngrams(tokens, n) if g in found), tokens)
    return {"train_docs": corpus.sharing(gone, grams, tokens), "shared": " ".join(shared)}


def _counts(dirty: list[bool], suffix: str) -> dict:
    """``contaminated_docs<suffix>`` and ``rate<suffix>`` (``None`` without eval docs), rounded to 1e-6."""
    rate = round(sum(dirty) / len(dirty), 6) if dirty else None
    return {f"contaminated_docs{suffix}": sum(dirty), f"rate{suffix}": rate}
