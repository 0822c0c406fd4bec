"""dedup's compiled text normalization: ``textnorm.normalize`` of a shard's texts as UTF-8 bytes, in numba where a
per-code-point table gives the same result, in Python elsewhere (``normalized_bytes``; ``scan.py`` reads them).

``textnorm.normalize`` removes format characters (Cf), applies NFKC, casefolds, and collapses whitespace runs to one
space. A text folds here, byte by byte, when every code point is ASCII (lowercased; ``str.split``'s ASCII
whitespace: ``\\t \\n \\v \\f \\r``, ``\\x1c``-``\\x1f``, space) or has an entry in the table (``fold_table``): its own
``NFKC`` casefolded, a single space when that is whitespace. A code point gets an entry only when normalizing it
alone equals normalizing it in any text: it is not Cf; its NFKD starts with a starter (canonical combining class 0;
no reordering reaches across it) that is not the second character of any canonical composition (nothing before
it composes with it: the canonical pairs of ``unicodedata.decomposition``, and the Hangul vowel and trailing
jamo, which compose algorithmically); and its result holds no whitespace but is all whitespace or none. The
following code point is a starter of the same kind or ASCII, so nothing in it composes backwards either.
Casefolding is per code point (``str.casefold`` has no context). Entries cover the Basic Multilingual Plane and the
emoji blocks (``U+1F000``-``U+1FAFF``). Any other text (a combining mark, a Cf character, a rarer plane) is
``textnorm.normalize_many``'s, encoded. Equality with ``textnorm.normalize`` is tested on the table's every entry in
context and on random texts (tests/dedup/test_dedup_scan.py).
"""

from __future__ import annotations

import unicodedata

import numpy as np
import pyarrow as pa

from tasks.common.matching import compiled, textnorm

TABLE_END = 0x1FB00  # code points past the table's last entry (the emoji blocks end at U+1FAFF)
_TABLED = (range(0x80, 0xD800), range(0xE000, 0x10000), range(0x1F000, TABLE_END))
_JAMO = (range(0x1160, 0x1200), range(0xD7B0, 0xD800))  # Hangul vowel and trailing jamo: seconds of algorithmic pairs
_SPACES = np.zeros(128, np.uint8)
_SPACES[[9, 10, 11, 12, 13, 28, 29, 30, 31, 32]] = 1  # ASCII whitespace of str.split
_TABLE: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # made once a process (``prepare`` before the fork)


def fold_table() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(start (TABLE_END,) int64, length (TABLE_END,) int64, pool uint8)``: code point ``c``'s folded UTF-8 bytes
    are ``pool[start[c]:][:length[c]]``; length 0: no entry (see the module docstring). About 0.3 s."""
    seconds = {cp for r in _JAMO for cp in r}
    for cp in range(0x110000):
        parts = unicodedata.decomposition(chr(cp)).split()
        if len(parts) == 2 and not parts[0].startswith("<"):
            seconds.add(int(parts[1], 16))
    start, length = np.zeros(TABLE_END, np.int64), np.zeros(TABLE_END, np.int64)
    pool = bytearray()
    for cp in (cp for r in _TABLED for cp in r):
        folded = _folded(chr(cp), seconds)
        if folded is not None:
            start[cp], length[cp] = len(pool), len(folded)
            pool += folded
    return start, length, np.frombuffer(bytes(pool), np.uint8)


def _folded(char: str, seconds: set[int]) -> bytes | None:
    """``char``'s table entry, or None (see the module docstring)."""
    if unicodedata.category(char) == "Cf" or ord(char) in seconds:
        return None
    first = unicodedata.normalize("NFKD", char)[:1]
    if not first or unicodedata.combining(first) or ord(first) in seconds:
        return None
    result = unicodedata.normalize("NFKC", char).casefold()
    if result.isspace():
        return b" "
    return None if any(c.isspace() for c in result) else result.encode("utf-8")


def prepare() -> None:
    """Build the table in this process (a process forked later inherits it)."""
    if not _TABLE:
        _TABLE.append(fold_table())


def compiled_with(kernel, helpers: tuple[str, ...], names: dict):
    """``kernel`` compiled (``compiled.jit``) after each function of ``names`` (a module's globals) named in
    ``helpers`` (callees first) is bound to its compiled self: numba compiles a call to a global that it finds
    compiled, and cannot type a plain function."""
    for name in helpers:
        if not hasattr(names[name], "py_func"):  # a numba dispatcher keeps the function it compiles
            names[name] = compiled.jit(names[name])
    return compiled.jit(kernel)


def normalized_bytes(texts: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """``(UTF-8 bytes (total,) uint8, offsets (docs + 1,) int64)`` of every text's ``textnorm.normalize``, one
    after another: folded by ``_fold`` where the table allows, else by ``textnorm.normalize_many``."""
    prepare()
    texts = texts.cast(pa.large_string())
    raw, offsets = _buffers(texts)
    sizes = np.zeros(len(texts), np.int64)
    kernel = compiled_with(_fold, ("utf8_code", "_fold_text"), globals())
    none, at = np.zeros(0, np.uint8), np.zeros(1, np.int64)
    kernel(raw, offsets, *_TABLE[0], sizes >= 0, none, at, sizes, none, at, False)
    foldable = sizes >= 0
    others = np.flatnonzero(~foldable)  # a code point without an entry: Python's
    picked = texts.take(pa.Array.from_buffers(pa.int64(), len(others), [None, pa.py_buffer(others)]))
    other_data, other_offsets = _buffers(textnorm.arrow_strings(textnorm.normalize_many(picked)))
    sizes[others] = np.diff(other_offsets)
    out_offsets = np.zeros(len(texts) + 1, np.int64)
    np.cumsum(sizes, out=out_offsets[1:])
    out = np.empty(out_offsets[-1], np.uint8)
    kernel(raw, offsets, *_TABLE[0], foldable, other_data, other_offsets, sizes, out, out_offsets, True)
    return out, out_offsets


def _buffers(texts: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """A ``large_string`` array's bytes (uint8) and its ``(len + 1,)`` int64 offsets into them."""
    _, offsets, data = texts.buffers()
    offsets = np.frombuffer(offsets, np.int64, count=len(texts) + 1, offset=texts.offset * 8)
    return np.frombuffer(data or b"", np.uint8), offsets


def _fold(raw, offsets, start, length, pool, foldable, other_data, other_offsets, sizes, out, out_offsets, write):
    """Counting (``write`` false): ``sizes[d]`` = the folded bytes of text ``d``, -1 when a code point has no
    entry. Writing: each ``foldable`` text folded into ``out`` from ``out_offsets[d]``, each other one the next
    text of ``other_data``. Numba compiles it."""
    other = 0
    for d in range(len(offsets) - 1):
        if not write:
            sizes[d] = _fold_text(raw, offsets[d], offsets[d + 1], start, length, pool, out, 0, False)
        elif foldable[d]:
            _fold_text(raw, offsets[d], offsets[d + 1], start, length, pool, out, out_offsets[d], True)
        else:
            lo, hi = other_offsets[other], other_offsets[other + 1]
            out[out_offsets[d] : out_offsets[d] + hi - lo] = other_data[lo:hi]
            other += 1


def utf8_code(data, pos):
    """``(code point, bytes)`` of the multi-byte UTF-8 sequence starting at ``data[pos]`` (a lead byte >= 0xC0 of
    valid UTF-8, as Arrow strings hold). Numba compiles it into the kernels that call it."""
    c = data[pos]
    if c < 0xE0:
        return np.int64(((c & 0x1F) << 6) | (data[pos + 1] & 0x3F)), 2
    if c < 0xF0:
        return np.int64(((c & 0x0F) << 12) | ((data[pos + 1] & 0x3F) << 6) | (data[pos + 2] & 0x3F)), 3
    code = ((c & 0x07) << 18) | ((data[pos + 1] & 0x3F) << 12) | ((data[pos + 2] & 0x3F) << 6)
    return np.int64(code | (data[pos + 3] & 0x3F)), 4


def _fold_text(raw, lo, hi, start, length, pool, out, k, write):
    """``raw[lo:hi]`` folded (see the module docstring), written to ``out`` from ``k`` when ``write``; returns
    the end, or -1 at a code point without an entry."""
    begin, blank, pos = k, False, lo
    while pos < hi:
        c, step, at, size = raw[pos], 1, -1, 1
        if c < 0x80:
            if _SPACES[c]:
                blank, pos = k > begin, pos + 1
                continue
        else:
            code, step = utf8_code(raw, pos)
            if code >= len(length) or length[code] == 0:
                return -1
            at, size = start[code], length[code]
            if size == 1 and pool[at] == 32:  # whitespace after NFKC: part of the run
                blank, pos = k > begin, pos + step
                continue
        if blank:
            if write:
                out[k] = 32
            k, blank = k + 1, False
        if write:
            if at < 0:
                out[k] = c + 32 if 65 <= c <= 90 else c
            else:
                out[k : k + size] = pool[at : at + size]
        k, pos = k + size, pos + step
    return k
