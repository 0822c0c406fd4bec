"""The MinHash kit that dedup and the leakage audit share: shingle hashing, permutations, signatures, the
LSH band rule, banding into candidate pairs, and exact Jaccard.

Method: MinHash (Broder 1997) over word ``k``-gram shingles, LSH banding (Leskovec, Rajaraman & Ullman,
*Mining of Massive Datasets*, ch. 3), every candidate verified by exact Jaccard (as text-dedup does). With
``b`` bands of ``r`` rows, a pair at Jaccard ``s`` becomes a candidate with probability
``1 - (1 - s**r)**b`` (the S-curve); ``(b, r)`` come from datasketch's own optimiser.

- A word hashes to 64 bits with blake2b (stable across processes, unlike Python's salted ``hash``); a
  shingle hashes to a polynomial rolling hash of its words' hashes mod 2**64 (as in Rabin-Karp), so equal
  shingles get equal hashes in any document and two distinct shingles collide with probability ~2**-64.
- Signatures use datasketch 2.0's ``affine32`` scheme: 64-bit shingle hashes folded to 32 bits, a
  MurmurHash3 fmix32 pre-mix, then ``a * h + b mod 2**32`` per permutation and a minimum over shingles. The
  values equal ``datasketch.MinHash(scheme="affine32").update_batch`` on the folded hashes, computed with
  numpy over blocks of documents instead of one call per shingle.
- Banding hashes each band's ``r`` values into one 64-bit key; two signatures are candidates when a key is
  equal in any band (the same set datasketch's ``MinHashLSH`` returns, up to 64-bit key collisions, which
  only add candidates that exact Jaccard then rejects).
"""

from __future__ import annotations

import hashlib
import itertools
from functools import lru_cache
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tasks.common.matching.textnorm import arrow_strings, words_of_normalized

MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)  # odd 64-bit constant (golden ratio) of every polynomial hash here
EMPTY = np.iinfo(np.uint32).max  # the signature value of a document without shingles
BLOCK_SHINGLES = 1 << 13  # shingles per numpy block: (num_perm, rows) uint32 is 4 MiB at 128 perms
#: A Jaccard similarity or an array of them (``p_candidate`` answers in kind).
Similarity = TypeVar("Similarity", float, np.ndarray)
_FMIX32 = (np.uint32(16), np.uint32(0x85EBCA6B), np.uint32(13), np.uint32(0xC2B2AE35), np.uint32(16))


class WordHashes(dict):
    """word -> stable 64-bit hash (blake2b), computed once per word; share one across a corpus."""

    def __missing__(self, word: str) -> int:
        value = self[word] = int.from_bytes(hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest(), "little")
        return value


def word_hashes(tokens: list[str], cache: WordHashes) -> np.ndarray:
    """The 64-bit hash of every word: ``(len(tokens),)`` uint64."""
    return np.fromiter(map(cache.__getitem__, tokens), dtype=np.uint64, count=len(tokens))


def rolling_hashes(values: np.ndarray, n: int) -> np.ndarray:
    """Polynomial hash of every window of ``n`` consecutive uint64 ``values``: ``(max(len - n + 1, 0),)`` uint64.

    ``h = sum(values[k] * M**(n-1-k))`` mod 2**64 (uint64 arithmetic wraps), computed for all windows at once.
    """
    count = len(values) - n + 1
    if count <= 0:
        return np.zeros(0, np.uint64)
    rolling = np.zeros(count, np.uint64)
    for offset in range(n):
        rolling = rolling * MULTIPLIER + values[offset : offset + count]
    return rolling


def shingle_hashes(tokens: list[str], n: int, cache: WordHashes | None = None) -> np.ndarray:
    """64-bit hashes of the word ``n``-gram shingles of ``tokens``, in text order (not deduplicated)."""
    return rolling_hashes(word_hashes(tokens, WordHashes() if cache is None else cache), n)


class PieceHashes(dict):
    """space-free piece of a normalized text -> the 64-bit hashes of its words (a tuple: ``words_of_normalized``
    of the piece, hashed by ``words``); computed once per piece. One kept across the shards of a process makes
    the per-word Python work (regex, blake2b) proportional to the new pieces only."""

    def __init__(self, words: WordHashes | None = None) -> None:
        super().__init__()
        self.words = WordHashes() if words is None else words

    def __missing__(self, piece: str) -> tuple[int, ...]:
        # re's \w is str.isalnum() plus "_", so an alphanumeric piece is one word, and so is an ASCII piece of
        # ``word_pieces`` (its other ASCII characters are blanked); only the rest need the regex
        found = [piece] if piece.isalnum() or (piece.isascii() and piece) else words_of_normalized(piece)
        value = self[piece] = tuple(map(self.words.__getitem__, found))
        return value


def word_hash_stream(
    normalized: list[str], cache: WordHashes, pieces: PieceHashes | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The 64-bit hash of every word of many normalized texts, without a Python string per word occurrence.

    Returns ``(values, doc)``, both ``(words,)``: uint64 word hashes, text after text in text order, and the
    int64 index of each word's text. The words are ``textnorm.words_of_normalized`` of each text:
    ``word_pieces`` cuts the texts where no ``\\w`` run can continue, Arrow encodes the pieces as a dictionary,
    and only each distinct piece is split into words and hashed in Python (``pieces``, a ``PieceHashes`` over
    ``cache``; a new one when omitted); the per-occurrence work is numpy gathers.
    """
    pieces = PieceHashes(cache) if pieces is None else pieces
    split = word_pieces(normalized)
    encoded = pc.list_flatten(split).dictionary_encode()
    piece_doc = numpy_view(pc.list_parent_indices(split)).astype(np.int64)
    hashes = list(map(pieces.__getitem__, encoded.dictionary.to_pylist()))
    counts = np.fromiter(map(len, hashes), dtype=np.int64, count=len(hashes))
    flat = np.fromiter(itertools.chain.from_iterable(hashes), dtype=np.uint64, count=int(counts.sum()))
    first = np.cumsum(counts) - counts  # each distinct piece's first word in ``flat``
    occurrence = numpy_view(encoded.indices)
    worded = np.flatnonzero(counts[occurrence])  # empty pieces and pieces of punctuation hold no word
    per, source, owner = counts[occurrence[worded]], first[occurrence[worded]], piece_doc[worded]
    if (per == 1).all():  # most pieces are one word: gathered directly
        return flat[source], owner
    word_of = np.repeat(np.arange(len(per)), per)  # each output word's occurrence
    within = np.arange(len(word_of)) - np.repeat(np.cumsum(per) - per, per)  # word k of its piece
    return flat[source[word_of] + within], owner[word_of]


def word_pieces(normalized: list[str]) -> pa.ListArray:
    """Each normalized text cut into pieces: ``(texts,)`` lists of strings, every ``\\w`` run of a text inside
    one piece, in text order.

    Every ASCII byte that is not a ``\\w`` character (``[0-9A-Za-z_]``, what Python's ``re`` matches below 128)
    becomes a space in one ``bytes.translate`` of all texts, and Arrow splits on the space runs. A UTF-8 byte of
    128 or more is never an ASCII character, so non-ASCII characters stay whole and only pieces holding one
    need the regex; a piece of ASCII characters is one word. Leading and trailing blanks give empty pieces
    (no words).
    """
    texts = arrow_strings(normalized)
    _, offsets, data = texts.buffers()  # the translation keeps every byte in place: the same offsets hold
    blanked = pa.py_buffer(data.to_pybytes().translate(_NON_WORD_ASCII_TO_SPACE))
    return pc.ascii_split_whitespace(pa.Array.from_buffers(pa.large_string(), len(texts), [None, offsets, blanked]))


_NON_WORD_ASCII_TO_SPACE = bytes(c if c >= 128 or chr(c).isalnum() or c == 95 else 32 for c in range(256))


def numpy_view(array: pa.Array) -> np.ndarray:
    """A null-free Arrow integer array as a read-only numpy view of its buffer: ``Array.to_numpy`` would import
    pandas (pyarrow's pandas shim), about 0.4 s in each worker process."""
    if array.null_count:
        raise ValueError("numpy_view needs an array without nulls")
    dtype = np.dtype(_NUMPY_INTS[array.type.id])
    return np.frombuffer(array.buffers()[1], dtype, count=len(array), offset=array.offset * dtype.itemsize)


_NUMPY_INTS = {
    pa.int8().id: np.int8,
    pa.int16().id: np.int16,
    pa.int32().id: np.int32,
    pa.int64().id: np.int64,
    pa.uint8().id: np.uint8,
    pa.uint16().id: np.uint16,
    pa.uint32().id: np.uint32,
    pa.uint64().id: np.uint64,
}


def shingle_windows(values: np.ndarray, doc: np.ndarray, n_docs: int, n: int) -> list[np.ndarray]:
    """The ``n``-gram shingle hashes of each document, from the word hashes of many documents at once.

    ``values`` ``(words,)`` uint64 word hashes, documents one after another; ``doc`` ``(words,)`` int64 the
    document of each word (non-decreasing). Returns ``n_docs`` arrays (views of one array), each equal to
    ``rolling_hashes`` of that document's words: in text order, repeats kept; a window that crosses a
    document boundary is dropped.
    """
    windows = rolling_hashes(values, n)
    owner = doc[: len(windows)]
    inside = owner == doc[n - 1 :] if len(windows) else np.zeros(0, bool)
    windows, owner = windows[inside], owner[inside]
    bounds = np.searchsorted(owner, np.arange(n_docs + 1))
    return [windows[bounds[i] : bounds[i + 1]] for i in range(n_docs)]


@lru_cache(maxsize=8)
def permutations(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(a, b)``, each ``(num_perm,)`` uint32: datasketch 2.0's affine32 permutations for ``seed``.

    The same draws as ``datasketch.MinHash(num_perm, seed).permutations`` (``_init_permutations``: an odd
    ``a`` and any ``b`` from ``np.random.RandomState(seed)``; equality is tested), written out because
    importing datasketch costs about 1.7 s (it imports ``scipy.integrate``) in every dedup and leakage run.
    """
    generator = np.random.RandomState(seed)
    a = generator.randint(0, 1 << 31, num_perm, dtype=np.uint32) * np.uint32(2) + np.uint32(1)
    b = generator.randint(0, 1 << 32, num_perm, dtype=np.uint32)
    return a, b


def fold_to_32_bits(hashes: np.ndarray) -> np.ndarray:
    """uint64 -> uint32 by xor of the two halves (the input width of the affine32 scheme)."""
    return ((hashes >> np.uint64(32)) ^ hashes).astype(np.uint32)


def permuted(hashes: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Every permutation of every 64-bit shingle hash: ``(num_perm, len(hashes))`` uint32."""
    values = a[:, None] * _fmix32(fold_to_32_bits(hashes))[None, :]
    values += b[:, None]
    return values


def signatures(shingle_sets: list[np.ndarray], a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """MinHash signatures ``(docs, num_perm)`` uint32 of per-document uint64 shingle hash arrays.

    A document without shingles keeps ``EMPTY`` everywhere. Documents are processed in blocks of about
    ``BLOCK_SHINGLES`` shingles, each reduced with ``np.minimum.reduceat``.
    """
    out = np.full((len(shingle_sets), len(a)), EMPTY, dtype=np.uint32)
    filled = [i for i, h in enumerate(shingle_sets) if len(h)]
    for block in _blocks(filled, [len(shingle_sets[i]) for i in filled]):
        starts = np.cumsum([0] + [len(shingle_sets[i]) for i in block[:-1]])
        values = permuted(np.concatenate([shingle_sets[i] for i in block]), a, b)
        out[block] = np.minimum.reduceat(values, starts, axis=1).T
    return out


def window_signatures(
    doc_words: np.ndarray, windows: list[tuple[int, int]], k: int, a: np.ndarray, b: np.ndarray
) -> np.ndarray:
    """Signatures ``(len(windows), num_perm)`` of the ``k``-gram shingles inside each ``(start, end)`` word
    window of one document, from one permuted matrix of the whole document (windows overlap)."""
    values = permuted(rolling_hashes(doc_words, k), a, b)
    return np.stack([values[:, start : end - k + 1].min(axis=1) for start, end in windows])


def _blocks(indices: list[int], sizes: list[int]) -> list[list[int]]:
    blocks: list[list[int]] = []
    current: list[int] = []
    rows = 0
    for index, size in zip(indices, sizes):
        if current and rows + size > BLOCK_SHINGLES:
            blocks.append(current)
            current, rows = [], 0
        current.append(index)
        rows += size
    return blocks + [current] if current else blocks


def _fmix32(hv: np.ndarray) -> np.ndarray:
    s1, m1, s2, m2, s3 = _FMIX32  # MurmurHash3 finalizer (Appleby), datasketch's affine32 pre-mix
    hv = hv ^ (hv >> s1)
    hv = hv * m1
    hv = hv ^ (hv >> s2)
    hv = hv * m2
    return hv ^ (hv >> s3)


# ---------------------------------------------------------------------------------------------- LSH


@lru_cache(maxsize=16)
def lsh_bands_rows(threshold: float, num_perm: int, weights: tuple[float, float] = (0.5, 0.5)) -> tuple[int, int]:
    """``(bands, rows)`` that datasketch's ``MinHashLSH`` derives for ``threshold`` and ``num_perm``.

    datasketch (``lsh._optimal_param``) minimises ``fp_weight * P(false positive) + fn_weight * P(false
    negative)``, the areas under the S-curve below and above the threshold, over ``bands * rows <=
    num_perm``, keeping the first minimum in (bands, rows) order. It integrates with ``scipy.integrate.quad``;
    here Gauss-Legendre quadrature with ``num_perm // 2 + 1`` nodes, exact for these integrands (polynomials of
    degree ``bands * rows <= num_perm``), gives the same areas without importing scipy (equality with
    datasketch is tested). ``weights`` is ``(fp, fn)``; raises ``ValueError`` with datasketch's message where
    datasketch raises one (threshold or a weight outside [0, 1], weights not summing to 1.0, fewer than 2
    permutations or 2 bands).
    """
    if threshold > 1.0 or threshold < 0.0:
        raise ValueError("threshold must be in [0.0, 1.0]")
    if num_perm < 2:
        raise ValueError("Too few permutation functions")
    if any(w < 0.0 or w > 1.0 for w in weights):
        raise ValueError("Weight must be in [0.0, 1.0]")
    if sum(weights) != 1.0:
        raise ValueError("Weights must sum to 1.0")
    nodes, node_weights = np.polynomial.legendre.leggauss(num_perm // 2 + 1)
    below = (nodes + 1) * threshold / 2  # nodes mapped from [-1, 1] onto [0, threshold] and [threshold, 1]
    above = threshold + (nodes + 1) * (1 - threshold) / 2
    best, shape = float("inf"), (0, 0)
    for bands in range(1, num_perm + 1):
        for rows in range(1, num_perm // bands + 1):
            false_positive = threshold / 2 * node_weights @ p_candidate(below, bands, rows)
            false_negative = (1 - threshold) / 2 * node_weights @ (1 - p_candidate(above, bands, rows))
            error = false_positive * weights[0] + false_negative * weights[1]
            if error < best:
                best, shape = error, (bands, rows)
    if shape[0] < 2:
        raise ValueError("The number of bands are too small (b < 2)")
    return shape


def p_candidate(similarity: Similarity, bands: int, rows: int) -> Similarity:
    """Probability that a pair at Jaccard ``similarity`` (a float or an array) shares a band:
    ``1 - (1 - s**rows)**bands``."""
    return 1.0 - (1.0 - similarity**rows) ** bands


def band_keys(sigs: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """``(n, bands)`` uint64: each band's ``rows`` values hashed as ``key * MULTIPLIER + value`` mod 2**64, in place."""
    grouped, keys = sigs[:, : bands * rows].reshape(len(sigs), bands, rows), np.zeros((len(sigs), bands), np.uint64)
    for r in range(rows):
        keys *= MULTIPLIER
        keys += grouped[:, :, r]  # widened to uint64 as added: no uint64 copy of every signature (0.3 s at 111k)
    return keys


def candidate_pair_arrays(query_keys: np.ndarray, index_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique ``(query row, index row)`` pairs that share a key in at least one band, as two int64 arrays.

    For a self-join pass the same keys twice; the result then holds ``(i, i)`` and both orders of a pair.
    """
    found = []
    for band in range(query_keys.shape[1]):
        order = np.argsort(index_keys[:, band], kind="stable")
        sorted_keys = index_keys[order, band]
        rows, at = expand_ranges(
            np.searchsorted(sorted_keys, query_keys[:, band], side="left"),
            np.searchsorted(sorted_keys, query_keys[:, band], side="right"),
        )
        found.append(rows * len(index_keys) + order[at])
    flat = sorted_unique(np.concatenate(found)) if found else np.zeros(0, dtype=np.int64)
    return flat // max(len(index_keys), 1), flat % max(len(index_keys), 1)


def changes(*cols: np.ndarray) -> np.ndarray:
    """True where any of the equally long sorted ``cols`` differs from the row before (and at row 0): the first
    row of each run of equal rows."""
    out = np.zeros(len(cols[0]), dtype=bool)
    out[:1] = True
    for col in cols:
        out[1:] |= col[1:] != col[:-1]
    return out


def expand_ranges(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For half-open ranges ``[lo[r], hi[r])``: every ``(r, x)`` with x in range r, as two flat arrays."""
    counts = hi - lo
    rows = np.repeat(np.arange(len(lo)), counts)
    return rows, np.repeat(lo, counts) + np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)


def jaccard(x: np.ndarray, y: np.ndarray) -> float:
    """``|x ∩ y| / |x ∪ y|`` of two sorted unique arrays (shingle hash sets).

    0.0 when both are empty: two texts without a shingle share nothing, so they are never a near duplicate or
    a MinHash leak match (the 0/0 convention of 1.0 would match every pair of wordless texts).
    """
    shared = intersection_size(x, y)
    union = len(x) + len(y) - shared
    return shared / union if union else 0.0


def jaccards_with(x: np.ndarray, ys: list[np.ndarray]) -> np.ndarray:
    """``jaccard(x, y)`` for each ``y`` of ``ys`` (sorted unique arrays): ``(len(ys),)`` float64, equal to the
    one-pair function bit for bit, from one binary search of all of ``ys`` in ``x`` (per-call overhead paid once
    per document, not once per pair)."""
    sizes = np.fromiter(map(len, ys), dtype=np.int64, count=len(ys))
    if not len(x) or not len(ys) or not sizes.all():
        return _jaccards_general(x, ys, sizes)
    pooled = np.concatenate(ys) if len(ys) > 1 else ys[0]
    at = x.searchsorted(pooled)
    np.minimum(at, len(x) - 1, out=at)  # past the end: compare with the last element; a miss either way
    found = x[at] == pooled
    if len(ys) > 1:
        shared = np.add.reduceat(found, np.cumsum(sizes) - sizes, dtype=np.int64)
    else:
        shared = found.sum(keepdims=True, dtype=np.int64)
    union = len(x) + sizes - shared
    # int64 / int64 below 2**53 converts exactly, so this is Python's correctly rounded int / int (union > 0 here)
    return shared / union


def _jaccards_general(x: np.ndarray, ys: list[np.ndarray], sizes: np.ndarray) -> np.ndarray:
    """``jaccards_with`` when ``x`` or some ``y`` is empty."""
    if not len(x) or not sizes.sum():
        shared = np.zeros(len(ys), np.int64)
    else:
        pooled = np.concatenate(ys)
        at = np.searchsorted(x, pooled)
        at[at == len(x)] = 0  # past the end: compare with any element; a miss either way
        hits = np.concatenate([[0], np.cumsum(x[at] == pooled)])
        ends = np.cumsum(sizes)
        shared = hits[ends] - hits[ends - sizes]
    union = len(x) + sizes - shared
    return np.divide(shared, union, out=np.zeros(len(ys)), where=union > 0)


def intersection_size(x: np.ndarray, y: np.ndarray) -> int:
    """``|x ∩ y|`` of two sorted unique arrays: a binary search of the shorter in the longer (no merge sort)."""
    if len(x) > len(y):
        x, y = y, x
    if not len(x):
        return 0
    at = np.searchsorted(y, x)
    at[at == len(y)] = 0  # past the end: compare with any element; a miss either way
    return int(np.count_nonzero(y[at] == x))


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)`` of a 1-d array by one sort and a neighbour mask (faster on many small arrays)."""
    ordered = np.sort(values)
    keep = np.ones(len(ordered), bool)
    keep[1:] = ordered[1:] != ordered[:-1]
    return ordered[keep]
