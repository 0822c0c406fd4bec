"""A record's text and words as ingest writes them: Unicode NFC, whitespace normalized (``normalize_text``), and
each word of token-labelled data checked (``normalize_tokens``)."""

from __future__ import annotations

import re
import unicodedata

from tasks.ingest.records import SourceError

_BLANK_LINES = re.compile(r"\n{3,}")


def normalize_text(raw: str) -> tuple[str, bool, bool]:
    """``(text, nfc_changed, whitespace_changed)``: Unicode NFC, then whitespace normalized.

    Whitespace: CR/CRLF -> LF; any run of other whitespace (tabs, no-break spaces...) -> one space;
    no space at line ends; at most one blank line in a row (paragraph breaks survive); stripped.
    ``whitespace_changed`` ignores the stripping of the ends alone.
    """
    nfc = unicodedata.normalize("NFC", raw)
    lines = nfc.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    # str.split() cuts at the characters str.isspace() names, the same as re's \s, and drops the ends: each
    # line's runs of whitespace become one space and it loses its end spaces (3x faster than three regexes)
    text = "\n".join([" ".join(line.split()) for line in lines])
    text = (_BLANK_LINES.sub("\n\n", text) if "\n\n\n" in text else text).strip()
    return text, nfc != raw, text != nfc.strip()  # a file's final newline is not worth counting


def normalize_tokens(tokens: list[str] | None, where: str) -> list[str] | None:
    """NFC of each word; raises ``SourceError`` for an empty word or one holding whitespace."""
    if tokens is None:
        return None
    words = [unicodedata.normalize("NFC", token) for token in tokens]
    bad = next((word for word in words if not word or len(word.split()) != 1 or word != word.strip()), None)
    if bad is not None:
        raise SourceError(f"{where}: word {bad!r} is empty or holds whitespace")
    return words
