"""dedup's per-document facts, signed in forked workers: the md5 of the normalized text, word and character
counts, the MinHash signature and the shingle set of every document (``DocSignatures``, ``sign_documents``), the
exact Jaccards of pairs of them (remembered), the LSH candidates among them, and the LSH shape (``band_shape``).
The per-shard kernels are ``signing.py``; the Ray engine signs with ``sign_shard`` (``ray_engine.py``)."""

from __future__ import annotations

import hashlib
import mmap
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from tqdm import tqdm

from tasks.common.matching import minhash, pairjaccard, textnorm
from tasks.config.corpus.dedup import DedupParams
from tasks.dedup import signing
from tasks.dedup.kernels import scan


@dataclass
class DocSignatures:
    """Per-document results of the worker pass; arrays have one row per document."""

    # md5 of the normalized text: hex (local; the index stores it), or (docs,) S16, its 16 bytes (engine ray)
    text_hash: list[str] | np.ndarray
    n_words: np.ndarray  # (docs,) int64
    n_chars: np.ndarray  # (docs,) int64, length of the normalized text
    signature: np.ndarray  # (docs, num_perm) uint32; all 2**32-1 for docs with fewer words than the shingle size
    shingles: list[np.ndarray]  # per doc: sorted unique uint64 shingle hashes (the set that Jaccard is taken on)

    known_pairs: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # sorted pair keys
    known_jaccards: np.ndarray = field(default_factory=lambda: np.zeros(0))  # (len(known_pairs),) float64
    # (flat uint64, (docs,) starts, (docs,) sizes): every ``shingles[i]`` is ``flat[starts[i]:][:sizes[i]]``;
    # set when they were signed in one pass, so the Jaccards read them without copying them together first
    packed: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def jaccards(self, left: np.ndarray, right: np.ndarray, num_proc: int) -> np.ndarray:
        """Exact Jaccard (``minhash.jaccard``) of rows ``left[k]`` and ``right[k]``: ``(pairs,)`` float64.

        A pair computed by an earlier call is looked up (the cluster report asks again for most of the pairs
        the LSH pass checked; Jaccard is symmetric); the others are computed by ``pairjaccard.jaccards`` on
        ``num_proc`` threads, and remembered."""
        left, right = np.asarray(left, np.int64), np.asarray(right, np.int64)
        keys = self.pair_keys(left, right)
        at = np.searchsorted(self.known_pairs, keys).clip(max=max(len(self.known_pairs) - 1, 0))
        known = self.known_pairs[at] == keys if len(self.known_pairs) else np.zeros(len(keys), bool)
        values = np.empty(len(keys))
        values[known] = self.known_jaccards[at[known]]
        values[~known] = self._compute(left[~known], right[~known], num_proc)
        pairs, first = np.unique(np.concatenate([self.known_pairs, keys[~known]]), return_index=True)
        self.known_pairs, self.known_jaccards = pairs, np.concatenate([self.known_jaccards, values[~known]])[first]
        return values

    def pair_keys(self, left: np.ndarray, right: np.ndarray) -> np.ndarray:
        """One int64 key per unordered pair of rows: what ``known_pairs`` holds."""
        return np.minimum(left, right) * len(self.text_hash) + np.maximum(left, right)

    def candidates(self, signed: np.ndarray, bands_rows: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
        """LSH candidates among the ``signed`` rows (``(signed,)`` int64): ``(left, right)`` int64 rows sharing a band
        key, ``left`` before ``right`` in ``signed``, sorted by (position of left, position of right) in ``signed``."""
        keys = minhash.band_keys(self.signature[signed], *bands_rows)
        first, second = shared_bucket_pairs(keys)
        rows = np.asarray(signed, np.int64)
        return rows[first], rows[second]

    def _compute(self, left: np.ndarray, right: np.ndarray, num_proc: int) -> np.ndarray:
        return pairjaccard.jaccards(self.shingles, left, right, threads=num_proc, packed=self.packed)


def shared_bucket_pairs(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of rows ``a < b`` of ``keys`` (``(rows, bands)`` band keys) equal in at least one band, as two
    int64 arrays sorted by ``(a, b)``: ``minhash.candidate_pair_arrays(keys, keys)`` without its ``(x, x)`` pairs
    and second orders, which a self-join would build (twice the pairs, plus every row once per band) only to
    drop them. Per band, rows are sorted by key and each run of equal keys gives its pairs."""
    n, found = len(keys), [np.zeros(0, np.int64)]
    for band in range(keys.shape[1] if n else 0):
        order = np.argsort(keys[:, band], kind="stable")
        ordered = keys[order, band]
        run_start = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
        run_end = np.r_[run_start[1:], n]  # each position's partners are the later positions of its run
        ends = np.repeat(run_end, run_end - run_start)
        at, partner = minhash.expand_ranges(np.arange(n) + 1, ends)
        a, b = order[at], order[partner]
        found.append(np.minimum(a, b) * n + np.maximum(a, b))
    pairs = minhash.sorted_unique(np.concatenate(found))
    return pairs // max(n, 1), pairs % max(n, 1)


def sign_documents(texts: list[str] | pa.Array, cfg: DedupParams) -> DocSignatures:
    """Hash, count and MinHash-sign every text, sharded over ``cfg.num_proc`` processes, with a progress bar.

    Shards are contiguous and results come back in order, so the output does not depend on ``num_proc``.
    The texts reach the forked workers by inheritance (each job is a row range, not a pickled list of texts),
    and each worker writes its shard's signatures and shingle sets into arrays it shares with this process
    (``_Shared``: an anonymous shared mapping, nothing pickled back but the md5s and counts); a shard's sets
    get a slot of ``_room`` values, and the sets lie slot after slot, with gaps (``DocSignatures.packed``).
    """
    global _FORKED_TEXTS, _SHARED
    a, b = minhash.permutations(cfg.num_perm, cfg.seed)
    sizes = _text_sizes(texts)
    ranges = balanced_shards(sizes, cfg.shard_size_docs, cfg.num_proc)
    room = np.array([_room(sizes[start:stop]) for start, stop in ranges], np.int64)
    slots = (np.cumsum(room) - room).tolist()
    jobs = [
        (start, stop, cfg.shingle_size_words, a, b, slot, int(r)) for (start, stop), slot, r in zip(ranges, slots, room)
    ]
    signing.prepare(int(sizes.sum()))  # before the fork: the workers inherit the compiled kernels
    _FORKED_TEXTS, _SHARED = texts, _Shared(len(texts), cfg.num_perm, int(room.sum()))
    parts = []
    try:
        with tqdm(total=len(texts), desc="dedup: minhash", unit="doc") as bar:
            for part in _map(_sign_range, jobs, cfg.num_proc):
                parts.append(part)
                bar.update(len(part[0]))
        return _gathered(parts, slots, _SHARED)
    finally:
        _FORKED_TEXTS, _SHARED = [], None


def _room(sizes: np.ndarray) -> int:
    """Shingle values a shard of texts of ``sizes`` UTF-8 bytes has room for: a word and a blank take 2 bytes, so
    ``bytes // 2 + 1`` per text (NFKC can lengthen a text: a shard past its room sends its sets back instead)."""
    return int(sizes.sum()) // 2 + len(sizes)


class _Shared:
    """The arrays the signing workers write into: ``signature`` ``(docs, num_perm)`` uint32 and ``flat`` ``(room,)``
    uint64, over anonymous shared mappings (``mmap``), so a forked worker's writes are this process's arrays;
    pages never written take no memory."""

    def __init__(self, docs: int, num_perm: int, room: int) -> None:
        self.signature = _shared_array(docs * num_perm, np.uint32).reshape(docs, num_perm)
        self.flat = _shared_array(room, np.uint64)


def _shared_array(count: int, dtype: type) -> np.ndarray:
    return np.frombuffer(mmap.mmap(-1, max(count * np.dtype(dtype).itemsize, 1)), dtype, count=count)


def _gathered(parts: list[tuple], slots: list[int], shared: _Shared) -> DocSignatures:
    """The shards' results (``_sign_range``) as one ``DocSignatures`` over the shared arrays; when a shard sent
    its sets back, every shard's sets are copied into one flat array instead."""
    sizes = np.concatenate([np.zeros(0, np.int64)] + [part[3] for part in parts])
    placed = [(slot, part[3]) if part[4] is None else (None, part[4]) for slot, part in zip(slots, parts)]
    if all(slot is not None for slot, _ in placed):
        flat = shared.flat
        starts = np.concatenate([np.zeros(0, np.int64)] + [slot + np.cumsum(n) - n for slot, n in placed])
    else:
        sets = [shared.flat[slot : slot + int(n.sum())] if slot is not None else n for slot, n in placed]
        flat = np.concatenate([np.zeros(0, np.uint64)] + sets)
        starts = np.cumsum(sizes) - sizes
    shingles = [flat[start:stop] for start, stop in zip(starts.tolist(), (starts + sizes).tolist())]
    text_hash = [digest for part in parts for digest in part[0]]
    n_words, n_chars = (np.concatenate([np.zeros(0, np.int64)] + [part[k] for part in parts]) for k in (1, 2))
    return DocSignatures(text_hash, n_words, n_chars, shared.signature, shingles, packed=(flat, starts, sizes))


def balanced_shards(sizes: np.ndarray, max_docs: int, num_proc: int) -> list[tuple[int, int]]:
    """Contiguous ``(start, stop)`` row ranges covering ``len(sizes)`` rows, cut where the running total of
    ``sizes`` (``(rows,)``, each text's length: the work) crosses equal fractions, so every worker gets the same
    work: as many ranges as the fewest multiple of ``num_proc`` that ``max_docs`` rows per range allows, and a
    range still over ``max_docs`` rows cut into equal parts. (Equal row counts left one worker busy for 60% of
    the pass at 1x: long articles and short posts sit in different parts of the corpus.)"""
    if not len(sizes):
        return []
    count = -(-len(sizes) // max_docs)
    count = -(-count // num_proc) * num_proc
    running = np.cumsum(sizes, dtype=np.float64)
    cuts = np.searchsorted(running, running[-1] * np.arange(1, count) / count) + 1  # after the row crossing
    bounds = np.unique(np.concatenate([[0], cuts, [len(sizes)]])).tolist()
    ranges = []
    for start, stop in zip(bounds, bounds[1:]):
        parts = -(-(stop - start) // max_docs)
        edges = [start + (stop - start) * k // parts for k in range(parts + 1)]
        ranges += list(zip(edges, edges[1:]))
    return ranges


def _text_sizes(texts: list[str] | pa.Array) -> np.ndarray:
    """``(texts,)`` int64: UTF-8 bytes of an Arrow array's texts, characters of a list's."""
    if isinstance(texts, pa.Array):
        return minhash.numpy_view(pc.binary_length(texts)).astype(np.int64)  # texts are never null here
    return np.fromiter(map(len, texts), np.int64, count=len(texts))


_FORKED_TEXTS: list[str] | pa.Array = []  # read by forked signing workers: inherited at fork, never pickled
_SHARED: _Shared | None = None  # written by them: inherited at fork (shared pages)


def _sign_range(job: tuple) -> tuple:
    """Sign rows ``start:stop`` into ``_SHARED``; returns ``(md5s, words, characters, set sizes, None)``, or the
    flat sets last when they outgrew the shard's room."""
    start, stop, n, a, b, slot, room = job
    hashes, n_words, n_chars, signature, flat, sizes = _sign_packed(_FORKED_TEXTS[start:stop], n, a, b)
    _SHARED.signature[start:stop] = signature
    if len(flat) > room:
        return hashes, n_words, n_chars, sizes, flat
    _SHARED.flat[slot : slot + len(flat)] = flat
    return hashes, n_words, n_chars, sizes, None


def _unpacked(packed: tuple) -> DocSignatures:
    """``_sign_packed``'s arrays as ``DocSignatures``: each document's shingle set a view of the one flat array,
    which the Jaccards use whole (``DocSignatures.packed``)."""
    text_hash, n_words, n_chars, signature, flat, sizes = packed
    ends = np.cumsum(sizes)
    starts = ends - sizes
    shingles = [flat[start:stop] for start, stop in zip(starts.tolist(), ends.tolist())]
    return DocSignatures(text_hash, n_words, n_chars, signature, shingles, packed=(flat, starts, sizes))


def _map(func, jobs: list, num_proc: int):
    if num_proc == 1 or len(jobs) <= 1:
        yield from map(func, jobs)
        return
    # fork: workers need only numpy and textnorm, and spawn would re-import pandas/datasketch in each.
    with ProcessPoolExecutor(num_proc, mp_context=multiprocessing.get_context("fork")) as pool:
        yield from pool.map(func, jobs)


PIECE_CACHE_MAX = 1_000_000  # distinct pieces one process remembers across its shards (about 150 bytes each)
_PIECES = minhash.PieceHashes()  # per process: a forked worker fills its own copy over its shards


def sign_shard(job: tuple) -> DocSignatures:
    """The ``DocSignatures`` of one shard, ``job`` = ``(texts, shingle size, a, b)``, in this process."""
    return _unpacked(_sign_packed(*job))


def _sign_packed(texts: list[str] | pa.Array, n: int, a: np.ndarray, b: np.ndarray) -> tuple:
    """A shard's results as a few arrays (cheap to pickle back from a worker): md5s, word and character counts,
    signatures, and the shingle sets flattened (``signing.shingle_sets``); compiled, from the texts' bytes
    (``kernels/scan.py``: the same values), when ``signing.compiled_now``."""
    if signing.compiled_now():
        arrow = texts if isinstance(texts, pa.Array) else textnorm.arrow_strings(texts)
        hashes, n_words, n_chars, flat, sizes = scan.shard_values(arrow, n)
        return hashes, n_words, n_chars, signing.signatures(flat, sizes, a, b), flat, sizes
    normalized = textnorm.normalize_many(texts)
    if len(_PIECES) > PIECE_CACHE_MAX:
        _PIECES.clear()
        _PIECES.words.clear()
    values, doc = minhash.word_hash_stream(normalized, _PIECES.words, _PIECES)
    flat, sizes = signing.shingle_sets(values, doc, len(normalized), n)
    hashes = [hashlib.md5(text.encode("utf-8")).hexdigest() for text in normalized]
    n_words = np.bincount(doc, minlength=len(normalized)).astype(np.int64)
    n_chars = np.fromiter(map(len, normalized), dtype=np.int64, count=len(normalized))
    return hashes, n_words, n_chars, signing.signatures(flat, sizes, a, b), flat, sizes


def band_shape(cfg: DedupParams) -> tuple[int, int]:
    """``(bands, rows)`` of the LSH for ``cfg`` (``minhash.lsh_bands_rows``); raises ``ValueError`` naming the
    keys when datasketch's optimiser finds no shape (fewer than 2 bands: raise ``num_perm`` or lower the
    threshold)."""
    try:
        return minhash.lsh_bands_rows(cfg.threshold, cfg.num_perm, cfg.lsh_weights)
    except ValueError as err:
        raise ValueError(
            f"dedup.threshold={cfg.threshold}, dedup.num_perm={cfg.num_perm}, dedup.lsh_*_weight="
            f"{cfg.lsh_weights}: datasketch finds no LSH shape ({err}); a high threshold needs more num_perm"
        ) from None
