"""Text normalization shared by dedup and leakage, so both see the same text.

NFKC folds compatibility characters (U+00A0 no-break space -> space, ligatures, full-width forms), casefold
is Unicode-aware lowercasing, and collapsing whitespace makes re-wrapped lines and runs of spaces identical.
Every Unicode format character (general category Cf: the soft hyphen U+00AD, zero-width space/non-joiner/joiner
U+200B-U+200D, the bidi marks and isolates U+200E, U+200F, U+202A-U+202E, U+2066-U+2069, the Arabic letter
mark U+061C, the word joiner U+2060, BOM U+FEFF, the tag characters U+E0001-U+E007F, ...) is removed first:
it is invisible, yet it would split the word it sits in, so two copies differing only by such characters
would share no shingle there. The set is every code point of category Cf in the ``unicodedata`` tables of
the running Python (its Unicode version: ``unicodedata.unidata_version``), built once at import. No NFKC or
casefold output contains a Cf character that its input lacked (checked over all code points in
tests/common/test_dedup_textnorm.py), so removing them before NFKC suffices.
"""

from __future__ import annotations

import re
import sys
import unicodedata

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_WORD = re.compile(r"\w+", re.UNICODE)


def format_characters() -> list[int]:
    """Every code point of Unicode general category Cf (format), ascending."""
    return [c for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Cf"]


def code_point_ranges(code_points: list[int]) -> list[tuple[int, int]]:
    """Ascending ``code_points`` as ``(first, last)`` runs of consecutive code points."""
    ranges: list[list[int]] = []
    for c in code_points:
        if ranges and ranges[-1][1] == c - 1:
            ranges[-1][1] = c
        else:
            ranges.append([c, c])
    return [(a, b) for a, b in ranges]


# Measured on 10k real-ish docs (18 M chars of BBC, WNUT16 and Wikipedia text, a third with a Cf character in
# every 7th word): this class of 21 ranges takes 0.43 s; str.translate with a {code point: None} table 1.9 s;
# the same class written as 163 single characters 6.0 s (non-BMP members make re fall back to a slow set).
# The Cf ranges of the Unicode versions seen here, written out: scanning all 1.1 M code points costs about 0.15 s
# at every import (each dedup and leakage process and worker). Another version is scanned; a test checks that
# the written-out table equals the scan for the running Python.
_KNOWN_FORMAT_RANGES = {
    "14.0.0": [
        (173, 173),
        (1536, 1541),
        (1564, 1564),
        (1757, 1757),
        (1807, 1807),
        (2192, 2193),
        (2274, 2274),
        (6158, 6158),
        (8203, 8207),
        (8234, 8238),
        (8288, 8292),
        (8294, 8303),
        (65279, 65279),
        (65529, 65531),
        (69821, 69821),
        (69837, 69837),
        (78896, 78904),
        (113824, 113827),
        (119155, 119162),
        (917505, 917505),
        (917536, 917631),
    ],
}


def format_ranges() -> list[tuple[int, int]]:
    """``code_point_ranges(format_characters())`` for the running Python's Unicode version."""
    known = _KNOWN_FORMAT_RANGES.get(unicodedata.unidata_version)
    return list(known) if known is not None else code_point_ranges(format_characters())


_FORMAT_RANGES = format_ranges()
_FORMAT = re.compile("[" + "".join(f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in _FORMAT_RANGES) + "]")
_FORMAT_RE2 = "[" + "".join(f"\\x{{{a:X}}}-\\x{{{b:X}}}" for a, b in _FORMAT_RANGES) + "]"  # RE2 syntax


def remove_format_characters(text: str) -> str:
    """``text`` without its Unicode format characters (general category Cf)."""
    return _FORMAT.sub("", text)


def normalize(text: str) -> str:
    """Format characters (Cf) removed, NFKC, casefold, whitespace collapsed to single spaces, stripped."""
    return _fold_and_collapse(text if text.isascii() else remove_format_characters(text))


def words(text: str) -> list[str]:
    """Word tokens (``\\w+`` runs) of the normalized text; punctuation is dropped."""
    if text.isascii():  # ASCII \w is [A-Za-z0-9_]: lowercase those bytes, blank every other, split
        return text.encode("ascii").translate(_ASCII_WORD_BYTES).decode("ascii").split()
    return words_of_normalized(normalize(text))


_ASCII_WORD_BYTES = (
    bytes(c + 32 if 65 <= c <= 90 else c if chr(c).isalnum() or c == 95 else 32 for c in range(128)) + b" " * 128
)


def words_of_normalized(normalized: str) -> list[str]:
    """``words`` of a text that ``normalize`` already returned (skips normalizing twice)."""
    return _WORD.findall(normalized)


def normalize_many(texts: list[str] | pa.Array | pa.ChunkedArray) -> list[str]:
    """``normalize`` of every text (the same strings), faster on many texts; ``texts`` may also be an Arrow
    string array (a Parquet column).

    Format characters are removed by Arrow's RE2 in one call over the texts that are not ASCII (an ASCII text
    has none), with a class written as explicit code points from Python's own table (``_FORMAT_RE2``), so it
    removes exactly what ``_FORMAT`` does; NFKC, casefold and whitespace stay Python's, whose Unicode tables
    Arrow's utf8proc does not share.
    """
    texts = texts.to_pylist() if isinstance(texts, (pa.Array, pa.ChunkedArray)) else list(texts)
    others = [i for i, text in enumerate(texts) if not text.isascii()]  # O(1) each in CPython
    if others:
        unformatted = arrow_strings([texts[i] for i in others])
        cleaned = pc.replace_substring_regex(unformatted, pattern=_FORMAT_RE2, replacement="").to_pylist()
        for i, text in zip(others, cleaned):
            texts[i] = text
    return [_fold_and_collapse(text) for text in texts]


def arrow_strings(texts: list[str]) -> pa.LargeStringArray:
    """``pa.array(texts, pa.large_string())`` built from two buffers: ``pa.array`` on a Python list imports
    pandas (pyarrow's pandas shim probes for it: about 0.4 s, in every worker process)."""
    encoded = [text.encode("utf-8") for text in texts]
    offsets = np.zeros(len(encoded) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, encoded), np.int64, count=len(encoded)), out=offsets[1:])
    buffers = [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))]
    return pa.Array.from_buffers(pa.large_string(), len(encoded), buffers)


def _fold_and_collapse(text: str) -> str:
    if text.isascii():  # O(1) in CPython; ASCII is its own NFKC form, and its casefold is lower
        return " ".join(text.lower().split())
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())
