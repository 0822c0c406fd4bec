"""dedup's compiled shard scan: normalized texts, word hashes and shingle sets of one shard from its UTF-8 bytes,
without a Python string per word (``shard_values``; ``tasks/dedup/signing.py`` runs it).

The values equal the numpy path's (``textnorm.normalize_many``, ``minhash.word_hash_stream``,
``signing.shingle_sets``) bit for bit (tests/dedup/test_dedup_scan.py):

- normalization: ``fold.py`` (a per-code-point table in numba where it equals ``textnorm.normalize``, Python's
  ``textnorm.normalize_many`` elsewhere);
- words: the ``\\w+`` runs of Python's ``re`` (a code point is a word character when ``str.isalnum()`` or ``_``,
  ``word_characters``: one byte per code point), found by decoding the UTF-8 bytes;
- a word's hash is ``blake2b(word, digest_size=8)`` read little-endian (``minhash.WordHashes``), computed in the
  kernel (BLAKE2b, RFC 7693: the parameter block of an 8-byte digest without key, 12 rounds) once per distinct word
  of a process: an open-addressing table keyed by the word's bytes (``WordTable``, FNV-1a probing) remembers it
  across the shards a worker signs, and is emptied when full;
- shingles: the polynomial of ``minhash.rolling_hashes`` over each window of ``n`` words, sorted and distinct.

The character count of a document is its normalized text's code points (UTF-8 bytes that are not continuation
bytes), the ``len`` of the numpy path's string.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa

from tasks.common.matching import minhash, textnorm
from tasks.dedup.kernels import fold
from tasks.dedup.kernels.fold import utf8_code

TABLE_SLOTS = 1 << 18  # probe slots (a power of two, 8 MiB); at most half hold a word, so probes stay short
KEY_BYTES = 1 << 22  # the remembered words' bytes; the table is emptied when either is full (refilling is cheap)
MAX_WORD_BYTES = 256  # a longer word is hashed each time, never remembered
_FNV_OFFSET, _FNV_PRIME = np.uint64(0xCBF29CE484222325), np.uint64(0x100000001B3)
_IV = np.array(
    [
        0x6A09E667F3BCC908,
        0xBB67AE8584CAA73B,
        0x3C6EF372FE94F82B,
        0xA54FF53A5F1D36F1,
        0x510E527FADE682D1,
        0x9B05688C2B3E6C1F,
        0x1F83D9ABFB41BD6B,
        0x5BE0CD19137E2179,
    ],
    np.uint64,
)
_PARAMS = np.uint64(0x01010008)  # digest length 8, no key, fanout 1, depth 1 (RFC 7693, 2.5)
_SIGMA = np.array(
    [
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
        [14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3],
        [11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4],
        [7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8],
        [9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13],
        [2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9],
        [12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11],
        [13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10],
        [6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5],
        [10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0],
    ],
    np.int64,
)
_MIX = np.array(  # the v indices (a, b, c, d) of the eight G calls of a round: four columns, four diagonals
    [[0, 4, 8, 12], [1, 5, 9, 13], [2, 6, 10, 14], [3, 7, 11, 15], [0, 5, 10, 15], [1, 6, 11, 12], [2, 7, 8, 13]]
    + [[3, 4, 9, 14]],
    np.int64,
)
_R = tuple(np.uint64(k) for k in (1, 8, 16, 24, 32, 40, 48, 63))


def word_characters() -> np.ndarray:
    """``(0x110000,)`` uint8: 1 where the code point is a ``\\w`` character of Python's ``re`` (``str.isalnum()``
    or ``_``), for the running Python's Unicode tables (about 0.07 s)."""
    chars = "".join(map(chr, range(0x110000)))
    return np.fromiter((c.isalnum() or c == "_" for c in chars), np.uint8, count=len(chars))


class WordTable:
    """One process's remembered word hashes (see the module docstring): arrays the kernel reads and fills."""

    def __init__(self) -> None:
        # per slot, one 32-byte row: FNV-1a of the word's bytes (the probe key), its blake2b hash, where its
        # bytes lie in ``keys`` and how many (0: an empty slot)
        self.slots = np.zeros((TABLE_SLOTS, 4), np.uint64)
        self.keys = np.zeros(KEY_BYTES, np.uint8)
        self.used = np.zeros(2, np.int64)  # words, key bytes

    def arrays(self) -> tuple[np.ndarray, ...]:
        return self.slots, self.keys, self.used


_TABLE: list[WordTable] = []  # per process, made at its first shard (a forked worker fills its own)
_WORD_CHARACTERS: list[np.ndarray] = []  # made by ``prepare`` before the fork, inherited


def prepare() -> None:
    """Load the kernels, the word-character and fold tables in this process (a process forked later inherits
    them)."""
    shard_values(textnorm.arrow_strings(["A b\u00e9", ""]), 1)


def shard_values(texts: pa.Array, n: int) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(md5 hex of each normalized text, (docs,) int64 words, (docs,) int64 characters, flat shingles, (docs,)
    int64 set sizes)`` of the Arrow string array ``texts`` with shingle size ``n`` (see the module docstring)."""
    if not _TABLE:
        _WORD_CHARACTERS[:] = _WORD_CHARACTERS or [word_characters()]
        _TABLE.append(WordTable())
    data, offsets = fold.normalized_bytes(texts)
    view = memoryview(data)
    hashes = [hashlib.md5(view[a:b]).hexdigest() for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())]
    longest = int(np.diff(offsets).max()) if len(texts) else 0
    scratch = np.empty((2, longest // 2 + 1), np.uint64)  # a document's words and windows (a word, then a blank)
    out = np.empty(max(len(data) // 2 + 1, 1), np.uint64)
    counts = np.zeros((3, len(texts)), np.int64)  # words, characters, set size
    kernel = fold.compiled_with(_scan, _HELPERS, globals())
    total = kernel(data, offsets, _WORD_CHARACTERS[0], n, *_TABLE[0].arrays(), scratch, out, counts)
    return hashes, counts[0], counts[1], out[:total].copy(), counts[2]


_HELPERS = ("utf8_code", "_round", "_blake2b", "_word_hash", "_append_shingles")  # what ``_scan`` calls, callees first


def _scan(data, offsets, word, n, slots, keys, used, scratch, out, counts):
    """Per document ``d`` of ``data[offsets[d]:offsets[d + 1]]``: its words' hashes (``_word_hash``) into
    ``scratch[0]``, its sorted distinct ``n``-gram hashes appended to ``out``; ``counts`` rows: words,
    characters, set size. Returns the values written. Numba compiles it."""
    k = 0
    for d in range(len(offsets) - 1):
        words, chars, begin, pos, stop, key = 0, 0, -1, offsets[d], offsets[d + 1], _FNV_OFFSET
        while pos <= stop:
            inside, step = False, 1
            if pos < stop:
                c = data[pos]
                if c < 0x80:
                    code = np.int64(c)
                else:
                    code, step = utf8_code(data, pos)
                inside = word[code] != 0
                chars += 1
            if inside:
                if begin < 0:
                    begin, key = pos, _FNV_OFFSET
                for i in range(pos, pos + step):
                    key = (key ^ np.uint64(data[i])) * _FNV_PRIME
            elif begin >= 0:  # a word ends: its hash from its first slot when it sits there, else _word_hash
                slot, size = np.int64(key) & (len(slots) - 1), pos - begin
                hit = slots[slot, 0] == key and slots[slot, 3] == size
                at = np.int64(slots[slot, 2])
                for i in range(size if hit else 0):
                    if keys[at + i] != data[begin + i]:
                        hit = False
                        break
                if hit:  # here, not in the call: most words are, and the call cost a third of the scan
                    scratch[0, words] = slots[slot, 1]
                else:
                    scratch[0, words] = _word_hash(data, begin, pos, key, slots, keys, used)
                words += 1
                begin = -1
            pos += step
        counts[0, d], counts[1, d] = words, chars
        counts[2, d] = _append_shingles(scratch[0, :words], n, scratch[1], out, k)
        k += counts[2, d]
    return k


def _word_hash(data, begin, end, key, slots, keys, used):
    """The blake2b hash of the word ``data[begin:end]`` (``key``: FNV-1a of its bytes): remembered in the table
    (``WordTable``), else computed (``_blake2b``) and remembered, the table emptied first when full; a word over
    ``MAX_WORD_BYTES`` is computed and not remembered. Numba compiles it."""
    size = end - begin
    if size > MAX_WORD_BYTES:
        return _blake2b(data, begin, end)
    if 2 * used[0] >= len(slots) or used[1] + size > len(keys):
        slots[:, 3] = 0
        used[:] = 0
    mask = len(slots) - 1
    slot = np.int64(key) & mask
    while slots[slot, 3] != 0:
        if slots[slot, 0] == key and slots[slot, 3] == size:
            at = np.int64(slots[slot, 2])
            same = True
            for i in range(size):
                if keys[at + i] != data[begin + i]:
                    same = False
                    break
            if same:
                return slots[slot, 1]
        slot = (slot + 1) & mask
    at = used[1]
    keys[at : at + size] = data[begin:end]
    value = _blake2b(data, begin, end)
    slots[slot, 0], slots[slot, 1], slots[slot, 2], slots[slot, 3] = key, value, at, size
    used[0], used[1] = used[0] + 1, at + size
    return value


def _blake2b(data, begin, end):
    """``int.from_bytes(hashlib.blake2b(data[begin:end], digest_size=8).digest(), "little")`` (RFC 7693): 128-byte
    blocks, the last zero-padded and flagged, the counter the bytes so far. Numba compiles it."""
    h = _IV.copy()
    h[0] ^= _PARAMS
    v, m = np.empty(16, np.uint64), np.empty(16, np.uint64)
    block, counted = begin, 0
    while True:
        take = min(end - block, 128)
        counted += take
        m[:] = 0
        for i in range(take):
            m[i >> 3] |= np.uint64(data[block + i]) << np.uint64((i & 7) * 8)
        v[:8], v[8:] = h, _IV
        v[12] ^= np.uint64(counted)
        if block + take == end:
            v[14] = ~v[14]
        for r in range(12):
            _round(v, m, _SIGMA[r % 10])
        for i in range(8):
            h[i] ^= v[i] ^ v[i + 8]
        block += take
        if block == end:
            return h[0]


def _round(v, m, sigma):
    """One BLAKE2b round: the G function on the four columns and four diagonals of ``v`` (RFC 7693, 3.1)."""
    r1, _, r16, r24, r32, r40, r48, r63 = _R
    for g in range(8):
        a, b, c, d = _MIX[g, 0], _MIX[g, 1], _MIX[g, 2], _MIX[g, 3]
        v[a] = v[a] + v[b] + m[sigma[2 * g]]
        x = v[d] ^ v[a]
        v[d] = (x >> r32) | (x << r32)
        v[c] = v[c] + v[d]
        x = v[b] ^ v[c]
        v[b] = (x >> r24) | (x << r40)
        v[a] = v[a] + v[b] + m[sigma[2 * g + 1]]
        x = v[d] ^ v[a]
        v[d] = (x >> r16) | (x << r48)
        v[c] = v[c] + v[d]
        x = v[b] ^ v[c]
        v[b] = (x >> r63) | (x << r1)


def _append_shingles(words, n, run, out, k):
    """The sorted distinct ``n``-gram hashes of ``words`` (``minhash.rolling_hashes``) written to ``out`` from
    ``k``; returns how many. Numba compiles it."""
    count = len(words) - n + 1
    if count <= 0:
        return 0
    for i in range(count):
        h = np.uint64(0)
        for j in range(i, i + n):
            h = h * minhash.MULTIPLIER + words[j]
        run[i] = h
    window = run[:count]
    window.sort()
    written = 0
    for i in range(count):
        if i == 0 or window[i] != window[i - 1]:
            out[k + written] = window[i]
            written += 1
    return written
