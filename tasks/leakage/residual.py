"""Residual contamination of the cleaned pretraining corpus, by a detector independent of the audit's.

The audit removes what its own detectors match, so those detectors cannot judge what is left. This check is
written separately (tuples of words in Python sets; none of the rolling hashes, MinHash or code of
``tasks.leakage.detectors``, only the shared ``textnorm.words`` normalization) and looks where the audit is
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

from tasks.config.leakage import LeakageParams


def ngrams(tokens: list[str], n: int) -> list[tuple[str, ...]]:
    """The word n-grams of ``tokens`` in text order (none when there are fewer than n words)."""
    return list(zip(*(tokens[k:] for k in range(n))))


@dataclass(frozen=True)
class Scan:
    """The pretraining docs and, per doc, the eval n-grams it contains."""

    ids: list[str]
    tokens: list[list[str]]
    hits: list[set[tuple[str, ...]]]

    def found(self, docs: list[int]) -> tuple[set, set]:
        """The eval n-grams that ``docs`` hold, and their word tuples (for eval docs without n-grams)."""
        return set().union(*(self.hits[i] for i in docs)), {tuple(self.tokens[i]) for i in docs}

    def sharing(self, docs: list[int], grams: set, tokens: list[str]) -> list[str]:
        """The three of ``docs`` that share the most of ``grams`` (or, without n-grams, all of ``tokens``)."""
        counts = [(-len(self.hits[i] & grams), self.ids[i]) for i in docs
                  if (self.hits[i] & grams if grams else self.tokens[i] == tokens)]
        return [doc_id for _, doc_id in sorted(counts)[:3]]


def scan(pretrain_ids: list[str], pretrain_tokens: list[list[str]], eval_grams: list[set], n: int) -> Scan:
    """Every pretraining doc's eval n-grams: one pass of set intersections (C speed, no hashing of our own)."""
    every_gram = set().union(*eval_grams)
    hits = [every_gram.intersection(ngrams(t, n))
            for t in tqdm(pretrain_tokens, desc="leakage residual", unit="doc", mininterval=5)]
    return Scan(pretrain_ids, pretrain_tokens, hits)


def residual(evals_frame: pd.DataFrame, eval_tokens: list[list[str]], pretrain_ids: list[str],
             pretrain_tokens: list[list[str]], removed: set[str], cfg: LeakageParams) -> dict:
    """The ``residual`` metrics: eval docs whose n-grams the pretraining corpus still holds after the action
    (``contaminated_docs``, ``rate``), and before it (``*_before``), per eval set and with examples."""
    n, threshold = cfg.residual.ngram_words, cfg.residual.min_coverage
    eval_grams = [set(ngrams(t, n)) for t in eval_tokens]
    corpus = scan(pretrain_ids, pretrain_tokens, eval_grams, n)
    kept = [i for i, doc_id in enumerate(pretrain_ids) if doc_id not in removed]
    found = corpus.found(kept)
    after = coverage(eval_grams, eval_tokens, *found)
    before = coverage(eval_grams, eval_tokens, *corpus.found(list(range(len(pretrain_ids)))))
    dirty = [c >= threshold for c in after]
    sets = list(evals_frame["source"] + "/" + evals_frame["split"])
    ranked = sorted((-c, doc_id, j) for j, (c, doc_id) in enumerate(zip(after, evals_frame["doc_id"])) if c > 0)
    examples = [{"eval_doc": doc_id, "coverage": round(-c, 6), "contaminated": -c >= threshold,
                 **example(corpus, kept, found[0], eval_tokens[j], n)} for c, doc_id, j in ranked[: cfg.max_examples]]
    return {
        "detector": f"word {n}-gram coverage >= {threshold:g}, pooled over the pretraining corpus (PaLM-style; "
                    f"eval docs under {n} words: whole-doc equality), code independent of the audit's",
        "eval_docs": len(eval_tokens),
        "eval_docs_under_ngram_words": sum(not g for g in eval_grams),
        **_counts(dirty, ""),
        **_counts([c >= threshold for c in before], "_before"),
        "by_eval_set": {name: {"eval_docs": sets.count(name),
                               "contaminated_docs": sum(d and s == name for d, s in zip(dirty, sets))}
                        for name in sorted(set(sets))},
        "examples": examples,
    }


def coverage(eval_grams: list[set], eval_tokens: list[list[str]], grams: set, whole_docs: set) -> list[float]:
    """Per eval doc, the share of its distinct n-grams in ``grams``; for an eval doc without n-grams, 1.0 when
    it has words and is one of ``whole_docs`` (word tuples), else 0.0."""
    return [len(g & grams) / len(g) if g else float(bool(t) and tuple(t) in whole_docs)
            for g, t in zip(eval_grams, eval_tokens)]


def example(corpus: Scan, kept: list[int], found: set, tokens: list[str], n: int) -> dict:
    """The kept docs that share the most with one eval doc, and its first n-gram found (or its whole text)."""
    grams = set(ngrams(tokens, n))
    shared = next((g for g in ngrams(tokens, n) if g in found), tokens)
    return {"train_docs": corpus.sharing(kept, grams, tokens), "shared": " ".join(shared)}


def _counts(dirty: list[bool], suffix: str) -> dict:
    """``contaminated_docs<suffix>`` and ``rate<suffix>`` (``None`` without eval docs), rounded to 1e-6."""
    rate = round(sum(dirty) / len(dirty), 6) if dirty else None
    return {f"contaminated_docs{suffix}": sum(dirty), f"rate{suffix}": rate}
