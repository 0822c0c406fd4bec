"""The probe set: a JSONL file of ``{"word", "sense", "sentence"}`` rows, read and checked (every word with at
least two senses, every sense with enough sentences, the word once in its sentence), and its counts."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tasks.probe.pairs import string_fields

REQUIRED_KEYS = ("word", "sense", "sentence")


@dataclass(frozen=True)
class ProbeSentence:
    """One line of the probe set; ``start``/``end`` are the word's character span in ``sentence``."""

    word: str
    sense: str
    sentence: str
    line: int
    start: int
    end: int


def read_probe_set(path: Path, min_sentences_per_sense: int) -> list[ProbeSentence]:
    """Read and validate a JSONL probe set; raises ``ValueError`` naming the file and line of a bad row.

    Each line is ``{"word", "sense", "sentence"}`` with the word occurring exactly once in the sentence as a
    whole word (case-insensitive). Every word needs at least two senses and every sense at least
    ``min_sentences_per_sense`` sentences. Rows are kept in file order.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: probe set not found (probe.senses_file)")
    rows = []
    for line_no, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if text.strip():
            rows.append(parse_row(text, path, line_no))
    check_counts(rows, path, min_sentences_per_sense)
    return rows


def parse_row(text: str, path: Path, line_no: int) -> ProbeSentence:
    """One JSONL line to a ``ProbeSentence``; raises ``ValueError`` naming ``path:line_no``."""
    where = f"{path}:{line_no}"
    row = string_fields(text, where, REQUIRED_KEYS)
    matches = list(re.finditer(rf"(?<!\w){re.escape(row['word'])}(?!\w)", row["sentence"], re.IGNORECASE))
    if len(matches) != 1:
        raise ValueError(f"{where}: {row['word']!r} occurs {len(matches)} times in the sentence, expected once")
    span = matches[0].span()
    return ProbeSentence(row["word"], row["sense"], row["sentence"], line_no, span[0], span[1])


def check_counts(rows: Sequence[ProbeSentence], path: Path, min_sentences_per_sense: int) -> None:
    """Raise ``ValueError`` if a word has fewer than 2 senses or a sense too few sentences."""
    if not rows:
        raise ValueError(f"{path}: probe set is empty")
    per_sense = Counter((row.word, row.sense) for row in rows)
    for (word, sense), count in sorted(per_sense.items()):
        if count < min_sentences_per_sense:
            raise ValueError(
                f"{path}: word {word!r} sense {sense!r} has {count} sentences, "
                f"probe.min_sentences_per_sense is {min_sentences_per_sense}"
            )
    senses = Counter(word for word, _ in per_sense)
    for word, count in sorted(senses.items()):
        if count < 2:
            raise ValueError(f"{path}: word {word!r} has {count} sense; a sense probe needs at least 2")


def probe_set_summary(rows: Sequence[ProbeSentence], path: Path) -> dict:
    """Counts of the probe set for the metrics file."""
    return {
        "file": str(path),
        "sentences": len(rows),
        "words": len(words_of(rows)),
        "senses": len({(row.word, row.sense) for row in rows}),
    }


def words_of(rows: Sequence[ProbeSentence]) -> list[str]:
    """The probe words in order of first appearance."""
    return list(dict.fromkeys(row.word for row in rows))
