"""The dedup benchmark's corpora and their ground truth.

Corpus at scale ``k``: the default ingest rows (``params.yaml``'s ingest sources, read by the ingest stage:
6,948 rows, of which the 2,224 BBC articles listed twice are natural exact copies) plus ``k - 1`` planted
variants of each row. A variant replaces one word in every ``step`` words (at a random offset) by a random
word of the corpus: ``step`` 60 for three variants in four (5-gram Jaccard to the original about 0.85, mostly
above the 0.8 threshold) and 30 for the rest (about 0.72: mostly true negatives). A row of fewer than
``step`` words gets one replacement.

Truth: the exact Jaccard of 5-gram word shingles (the dedup normalization, ``textnorm.words``; a shingle is
identified by its words' vocabulary indices combined in uint64 arithmetic, not by the stage's blake2b word
hashes and rolling hash, so a fault there cannot agree with the truth) for every pair within a planted group
(a row and its variants) and every pair between the groups of two rows whose own Jaccard is at least
``NATURAL_FLOOR`` (found by a sparse incidence product over the rows). A variant resembles other documents
only through its row, so every other pair is a true negative. Two documents with the same normalized text
have Jaccard 1 (so wordless copies count).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

import numpy as np
from scipy import sparse

from tasks.common.files.shards import read_source, source_files
from tasks.common.matching import textnorm

SPREAD, BASE = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)  # splitmix64's odd multipliers
NATURAL_FLOOR = 0.5  # rows this similar get their groups' cross pairs computed
STEPS = (60, 60, 60, 30)  # variant c of a row replaces every STEPS[(c - 1) % 4]-th word


@dataclass
class Corpus:
    """Texts in id order: rows first (``0 .. rows-1``), then variant ``c`` of row ``i`` at ``c * rows + i``."""

    texts: list[str]
    rows: int

    def group(self, doc: int) -> int:
        return doc % self.rows


def read_rows(ingest_dir: Path) -> list[str]:
    """Texts of every source in ``ingest_dir`` as the dedup stage reads them (``shards.source_files``: a
    ``<source>.parquet`` or a folder of ``part-*.parquet`` shards; sources sorted by name, shards in row
    order). Raises ``ValueError`` naming the folder when it holds no row: a benchmark of 0 documents
    measures nothing."""
    texts: list[str] = []
    for files in source_files(ingest_dir).values():
        texts += read_source(files).column("text").to_pylist()
    if not texts:
        raise ValueError(f"{ingest_dir}: no ingest rows (no <source>.parquet or <source>/part-*.parquet)")
    return texts


def planted(rows: list[str], scale: int, seed: int) -> Corpus:
    """The rows plus ``scale - 1`` planted variants of each (see the module docstring)."""
    rng = np.random.default_rng(seed)
    vocabulary = sorted({w for text in rows[:500] for w in text.split()})
    texts = list(rows)
    for copy in range(1, scale):
        step = STEPS[(copy - 1) % len(STEPS)]
        texts += [_variant(text, step, rng, vocabulary) for text in rows]
    return Corpus(texts, len(rows))


#: benchmarks/scaling.py's remixes (``remixed``): one word in ``REMIX_STEP`` replaced, and for dedup one remix in
#: ``NEAR_EVERY`` followed by a near duplicate of it (one word in ``NEAR_STEP`` replaced)
REMIX_SEED, REMIX_STEP, NEAR_STEP, NEAR_EVERY = 20240611, 3, 60, 10


def remixed(rows: list[str], scale: int, near_duplicates: bool) -> list[str]:
    """The rows, then ``scale - 1`` remixes of each (one word in ``REMIX_STEP`` replaced by a random corpus word: no
    5-gram survives, so each is a distinct document of the same length and vocabulary), with a near duplicate
    after every ``NEAR_EVERY``-th remix when ``near_duplicates`` (benchmarks/scaling.py's corpora)."""
    texts = list(rows)
    for copy in islice(remixes(rows, near_duplicates), scale - 1):
        texts += copy
    return texts


def remixes(rows: list[str], near_duplicates: bool) -> Iterator[list[str]]:
    """``remixed``'s copies one at a time, without end: copy ``c`` (1, 2, ...) is ``remixed(rows, c + 1, ...)``'s
    last ``len(rows)`` texts (more with near duplicates), so a caller holds one copy, not the corpus (one random
    stream, drawn in the same order)."""
    rng = np.random.default_rng(REMIX_SEED)
    vocabulary = sorted({w for text in rows[:500] for w in text.split()})
    while True:
        copy: list[str] = []
        for k, text in enumerate(rows):
            copy.append(_variant(text, REMIX_STEP, rng, vocabulary))
            if near_duplicates and k % NEAR_EVERY == 0:
                copy.append(_variant(copy[-1], NEAR_STEP, rng, vocabulary))
        yield copy


def _variant(text: str, step: int, rng: np.random.Generator, vocabulary: list[str]) -> str:
    words = text.split()
    if not words:
        return text
    for position in range(int(rng.integers(min(step, len(words)))), len(words), step):
        words[position] = vocabulary[int(rng.integers(len(vocabulary)))]
    return " ".join(words)


@dataclass
class Truth:
    """Exact Jaccard of the candidate pairs of one corpus: ``pairs`` ``(k, 2)`` int64, low id first, and their
    ``values`` ``(k,)`` float64 (arrays: at 64x there are tens of millions)."""

    pairs: np.ndarray
    values: np.ndarray

    @classmethod
    def of(cls, jaccard: dict[tuple[int, int], float]) -> Truth:
        """From ``{(low id, high id): J}``."""
        return cls(np.array(list(jaccard), np.int64).reshape(-1, 2), np.array(list(jaccard.values()), np.float64))

    @property
    def jaccard(self) -> dict[tuple[int, int], float]:
        """``{(low id, high id): J}`` (for small corpora)."""
        return {(int(a), int(b)): float(v) for (a, b), v in zip(self.pairs, self.values)}

    def duplicates_of(self, threshold: float) -> dict[int, set[int]]:
        """doc -> the docs it is a near duplicate of (J >= threshold)."""
        partners: dict[int, set[int]] = {}
        for a, b in self.pairs[self.values >= threshold].tolist():
            partners.setdefault(a, set()).add(b)
            partners.setdefault(b, set()).add(a)
        return partners


def truth(corpus: Corpus, n: int) -> Truth:
    """Exact Jaccard of every pair within a family: the planted groups of rows joined when the rows have the same
    normalized text or a Jaccard of at least ``NATURAL_FLOOR`` (so every within-group pair and every cross pair of
    similar rows, and the pairs of rows joined through a third), one sparse incidence product per family."""
    normalized = [textnorm.normalize(text) for text in corpus.texts]
    vocabulary: dict[str, int] = {}
    sets = [
        _shingle_set([vocabulary.setdefault(w, len(vocabulary)) for w in textnorm.words_of_normalized(text)], n)
        for text in normalized
    ]
    text_id = np.unique(np.array(normalized, dtype=object), return_inverse=True)[1] if normalized else np.zeros(0)
    family = list(range(corpus.rows))  # union-find over rows, root = the smallest row
    for d, e in _similar_rows(sets[: corpus.rows], NATURAL_FLOOR) + _same_text_rows(normalized[: corpus.rows]):
        family[max(_root(family, d), _root(family, e))] = min(_root(family, d), _root(family, e))
    members: dict[int, list[int]] = {}
    for doc in range(len(corpus.texts)):
        members.setdefault(_root(family, corpus.group(doc)), []).append(doc)
    found = [_family_jaccards(docs, sets, text_id) for docs in members.values() if len(docs) > 1]
    pairs = np.concatenate([np.zeros((0, 2), np.int64)] + [f[0] for f in found])
    values = np.concatenate([np.zeros(0)] + [f[1] for f in found])
    order = np.lexsort((pairs[:, 1], pairs[:, 0]))
    return Truth(pairs[order], values[order])


def _root(parent: list[int], x: int) -> int:
    while parent[x] != x:
        x = parent[x]
    return x


def _family_jaccards(docs: list[int], sets: list[np.ndarray], text_id: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of ``docs`` (ascending) and its exact Jaccard (1.0 for the same normalized text; 0.0 for two
    sets without a shingle), from the overlap counts of one sparse incidence product."""
    sizes = np.array([len(sets[d]) for d in docs])
    ids, column = np.unique(np.concatenate([np.zeros(0, np.uint64)] + [sets[d] for d in docs]), return_inverse=True)
    incidence = sparse.csr_matrix(
        (np.ones(len(column), np.int32), (np.repeat(np.arange(len(docs)), sizes), column)), shape=(len(docs), len(ids))
    )
    overlap = (incidence @ incidence.T).toarray()
    first, second = np.triu_indices(len(docs), 1)
    shared = overlap[first, second].astype(np.int64)
    union = sizes[first] + sizes[second] - shared
    values = np.divide(shared, union, out=np.zeros(len(shared)), where=union > 0)
    chosen = np.asarray(docs, np.int64)
    values[text_id[chosen[first]] == text_id[chosen[second]]] = 1.0
    return np.stack([chosen[first], chosen[second]], axis=1), values


def _same_text_rows(normalized: list[str]) -> list[tuple[int, int]]:
    """Row pairs with the same normalized text (wordless copies share no shingle)."""
    by_text: dict[str, list[int]] = {}
    for row, text in enumerate(normalized):
        by_text.setdefault(text, []).append(row)
    return [(a, b) for group in by_text.values() for x, a in enumerate(group) for b in group[x + 1 :]]


def _shingle_set(word_ids: list[int], n: int) -> np.ndarray:
    """Distinct ``n``-grams of vocabulary indices, each as a 64-bit value: the indices spread by one odd
    constant, combined by a polynomial in another (splitmix64's), mod 2**64."""
    ids = (np.asarray(word_ids, dtype=np.uint64) + np.uint64(1)) * SPREAD
    if len(ids) < n:
        return np.zeros(0, np.uint64)
    key = np.zeros(len(ids) - n + 1, np.uint64)
    for k in range(n):
        key = key * BASE + ids[k : len(ids) - n + 1 + k]
    return np.unique(key)


def _similar_rows(sets: list[np.ndarray], floor: float) -> list[tuple[int, int]]:
    """Row pairs ``(d, e)``, d < e, sharing shingles with Jaccard >= ``floor`` (sparse X @ X.T)."""
    ids = {value: k for k, value in enumerate(np.unique(np.concatenate(sets)))} if sets else {}
    rows = np.repeat(np.arange(len(sets)), [len(s) for s in sets])
    cols = np.fromiter((ids[v] for s in sets for v in s.tolist()), dtype=np.int64, count=len(rows))
    incidence = sparse.csr_matrix((np.ones(len(rows), np.int32), (rows, cols)), shape=(len(sets), len(ids)))
    sizes = np.asarray(incidence.sum(axis=1)).ravel()
    overlap = sparse.triu(incidence @ incidence.T, k=1).tocoo()
    jaccard = overlap.data / (sizes[overlap.row] + sizes[overlap.col] - overlap.data)
    keep = jaccard >= floor
    return list(zip(overlap.row[keep].tolist(), overlap.col[keep].tolist()))


def score(
    clusters: list[list[int]], corpus: Corpus, known: Truth, threshold: float, removed: set[int] | None = None
) -> dict:
    """Precision and recall of the clusters a tool found, whichever of a cluster's documents it keeps.

    ``clusters``: the tool's duplicate clusters (two or more documents each; one document in at most one).
    - recall: share of the pairs with true J >= threshold whose two documents the tool put in one cluster
      (``recall_planted``: the planted pairs alone; ``pairs_found``: the count);
    - precision: share of the clustered documents that have a true near duplicate (J >= threshold) in their own
      cluster (a clustered document without one was merged wrongly: a false positive, or a chain through one).
    ``docs_removed`` (where given) is reported, not scored: which row a tool keeps is its own rule.
    """
    cluster_of = np.full(len(corpus.texts), -1, np.int64)
    for k, members in enumerate(clusters):
        cluster_of[members] = k
    wanted = known.pairs[known.values >= threshold]
    together = (cluster_of[wanted[:, 0]] >= 0) & (cluster_of[wanted[:, 0]] == cluster_of[wanted[:, 1]])
    planted = wanted[:, 1] >= corpus.rows
    grounded = np.zeros(len(corpus.texts), bool)
    grounded[wanted[together].ravel()] = True
    members = [doc for cluster in clusters for doc in cluster]
    out = {
        "clusters": len(clusters),
        "docs_in_clusters": len(members),
        "precision": float(grounded[members].sum() / len(members)) if members else 1.0,
        "recall": float(together.mean()) if len(wanted) else 1.0,
        "recall_planted": float(together[planted].mean()) if planted.any() else 1.0,
        "pairs_found": int(together.sum()),
        "true_pairs": len(wanted),
        "true_planted_pairs": int(planted.sum()),
    }
    if removed is not None:
        out["docs_removed"] = len(removed)
    return out


def clusters_of(labels: list[int]) -> list[list[int]]:
    """Clusters (two or more documents) from a per-document cluster label."""
    members: dict[int, list[int]] = {}
    for doc, label in enumerate(labels):
        members.setdefault(label, []).append(doc)
    return [docs for docs in members.values() if len(docs) > 1]
