"""dedup's per-shard shingle sets and MinHash signatures as flat arrays, compiled on a large corpus.

``shingle_sets`` gives every document's sorted unique word ``n``-gram hashes one after another (``flat`` plus
``sizes``), ``signatures`` their MinHash signatures. The values equal ``minhash.shingle_windows`` +
``minhash.sorted_unique`` and ``minhash.signatures`` bit for bit (tests/dedup/test_dedup_signing.py): the same rolling
hash, the same affine32 arithmetic (fold to 32 bits, MurmurHash3's fmix32, ``a * h + b mod 2**32``, minimum).

Run compiled (numba, ``tasks/common/matching/compiled.py``) when numba is loaded in the process: the stage loads it
with the kernels before forking its signing workers (``prepare``) when the texts are long enough to repay the
~1 s, so the workers inherit the machine code instead of each loading it. The numpy signing permutes blocks of
shingles into ``(num_perm, shingles)`` temporaries (about 0.15 us per shingle and permutation); the compiled loop
keeps one document's signature row in registers (about 10x less). Compiled, the workers also take the shard's
normalized texts, words and ``shingle_sets`` from one scan of its UTF-8 bytes (``kernels/scan.py``,
``signatures._sign_packed``). Below that size numpy runs, with the same results.
"""

from __future__ import annotations

import sys
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from tasks.common.matching import compiled, minhash
from tasks.dedup.kernels import scan

COMPILE_MIN_BYTES = 40_000_000  # text bytes: ~4x the default corpus, where numpy signing costs ~1 s on 2 workers
_LOW = np.uint64(0xFFFFFFFF)
_S16, _S13, _S32 = np.uint64(16), np.uint64(13), np.uint64(32)
_M1, _M2 = np.uint64(0x85EBCA6B), np.uint64(0xC2B2AE35)


def prepare(text_bytes: int) -> None:
    """Load numba, the signature kernel and the shard scan in this process when ``text_bytes`` repay it
    (``COMPILE_MIN_BYTES``); a process forked after this runs them compiled."""
    if text_bytes < COMPILE_MIN_BYTES:
        return
    flat, sizes = np.zeros(1, np.uint64), np.ones(1, np.int64)
    a, b = minhash.permutations(2, 1)
    compiled.jit(_sign)(flat, sizes, a.astype(np.uint64), b.astype(np.uint64), np.zeros((1, 2), np.uint32))
    scan.prepare()


def preload(text_bytes: int) -> Future | None:
    """``prepare(text_bytes)`` started now in a thread of its own, or None when ``text_bytes`` are below
    ``COMPILE_MIN_BYTES``: the stage starts it before it reads the ingest files, so numba's ~1 s load overlaps
    the Parquet decoding (which releases the GIL) instead of the md5s (which at 16x the bench corpus it slowed
    from 0.36 s to 1.2 s). Its ``result()`` (which raises what ``prepare`` raised) must come before a fork."""
    if text_bytes < COMPILE_MIN_BYTES:
        return None
    loader = ThreadPoolExecutor(1, thread_name_prefix="dedup-kernels")
    loading = loader.submit(prepare, text_bytes)
    loader.shutdown(wait=False)  # the thread ends with the load; nothing else is ever submitted
    return loading


def compiled_now() -> bool:
    """Whether this process runs the compiled kernels (numba is loaded: ``prepare`` loaded it, or an earlier
    loop of the process did)."""
    return "numba" in sys.modules


def shingle_sets(values: np.ndarray, doc: np.ndarray, n_docs: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Each document's sorted unique ``n``-gram hashes (``minhash.rolling_hashes`` of its words; a window across
    two documents dropped), one document after another: ``(flat (total,) uint64, sizes (n_docs,) int64)``, in
    numpy (compiled, ``kernels/scan.py`` computes them from the texts).

    ``values`` ``(words,)`` uint64 word hashes, documents one after another; ``doc`` ``(words,)`` int64 the
    document of each word (non-decreasing)."""
    windows = minhash.shingle_windows(values, doc, n_docs, n)
    sets = [minhash.sorted_unique(w) for w in windows]
    sizes = np.fromiter(map(len, sets), np.int64, count=n_docs)
    return np.concatenate([np.zeros(0, np.uint64)] + sets), sizes


def signatures(flat: np.ndarray, sizes: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """MinHash signatures ``(docs, num_perm)`` uint32 of the shingle sets ``flat``/``sizes`` (``shingle_sets``);
    a document without shingles keeps ``minhash.EMPTY`` everywhere."""
    if not compiled_now():
        return minhash.signatures(np.split(flat, np.cumsum(sizes)[:-1]) if len(sizes) else [], a, b)
    out = np.full((len(sizes), len(a)), minhash.EMPTY, dtype=np.uint32)
    compiled.jit(_sign)(flat, sizes, a.astype(np.uint64), b.astype(np.uint64), out)
    return out


def _sign(flat, sizes, a, b, out):
    """``out[d, p] = min over d's shingles x of (a[p] * fmix32(fold(x)) + b[p]) mod 2**32``, ``out`` filled with
    ``EMPTY`` beforehand; ``a``, ``b`` as uint64 (the products are taken mod 2**32). Numba compiles it."""
    start = 0
    for d in range(len(sizes)):
        row = out[d]
        for k in range(start, start + sizes[d]):
            x = flat[k]
            h = ((x >> _S32) ^ x) & _LOW
            h ^= h >> _S16
            h = (h * _M1) & _LOW
            h ^= h >> _S13
            h = (h * _M2) & _LOW
            h ^= h >> _S16
            for p in range(len(a)):
                value = np.uint32((a[p] * h + b[p]) & _LOW)
                if value < row[p]:
                    row[p] = value
        start += sizes[d]
