"""The sense probe's shuffled-context control (tasks/probe/control.py) and what the stage writes for it."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from tasks import probe
from tasks.probe import probe_set
from tasks.probe.control import shuffle_context, shuffled
from tasks.tracking import NullLog
from test_probe import SHIPPED, make_cfg, make_paths

SENTENCE = "After three weeks at sea, the sailors were glad to see the lights of the port."


def _row(sentence: str, word: str, line: int = 7) -> probe_set.ProbeSentence:
    start = sentence.index(word)
    return probe_set.ProbeSentence(word, "harbour", sentence, line, start, start + len(word))


def test_shuffle_keeps_the_target_piece_and_its_index_and_permutes_the_rest():
    row = _row(SENTENCE, "port")
    control = shuffle_context(row, seed=0)
    before, after = SENTENCE.split(), control.sentence.split()
    assert after[-1] == before[-1] == "port."  # the target's piece, punctuation and all, at its index (the last)
    assert Counter(after) == Counter(before) and after != before
    assert control.sentence[control.start : control.end] == "port"
    assert (control.word, control.sense, control.line) == ("port", "harbour", 7)
    assert shuffle_context(row, seed=0) == control  # deterministic
    assert shuffle_context(row, seed=1).sentence != control.sentence  # the seed matters
    assert shuffle_context(_row(SENTENCE, "port", line=8), seed=0).sentence != control.sentence  # and the line


def test_shuffle_of_a_target_in_the_middle_by_hand():
    # "ab cd port ef": pieces 0, 1, (2 = target), 3. Any non-identity order of the three context pieces keeps
    # "port" third, so its span starts after the two pieces placed before it plus their two spaces.
    control = shuffle_context(_row("ab cd port ef", "port"), seed=3)
    words = control.sentence.split()
    assert words[2] == "port" and sorted(words[:2] + words[3:]) == ["ab", "cd", "ef"]
    assert words[:2] + words[3:] != ["ab", "cd", "ef"]
    assert control.start == len(words[0]) + len(words[1]) + 2 and control.end == control.start + 4
    assert shuffle_context(_row("so so port so", "port"), seed=3).sentence == "so so port so"  # one order only


def test_every_shipped_control_holds_its_words_and_target():
    rows = probe_set.read_probe_set(SHIPPED, 8)
    controls = shuffled(rows, seed=0)
    for row, control in zip(rows, controls, strict=True):
        assert Counter(control.sentence.split()) == Counter(row.sentence.split())
        assert control.sentence[control.start : control.end] == row.sentence[row.start : row.end]
    assert sum(row.sentence == control.sentence for row, control in zip(rows, controls)) == 0


def _cosine_separation(triangle: list[float], senses: list[str]) -> float:
    """within - across from a word's upper triangle (i < j, row-major), by a plain double loop."""
    n, k, within, across = len(senses), 0, [], []
    for i in range(n):
        for j in range(i + 1, n):
            (within if senses[i] == senses[j] else across).append(triangle[k])
            k += 1
    return float(np.mean(within) - np.mean(across))


def test_a_run_on_tiny_models_writes_the_control_and_the_cosines_behind_both(tiny_root, tmp_path):
    lines = [
        line
        for line in SHIPPED.read_text(encoding="utf-8").splitlines()
        if '"word": "port"' in line or '"word": "lock"' in line
    ]
    subset = tmp_path / "two.jsonl"
    subset.write_text("\n".join(lines) + "\n", encoding="utf-8")
    root = tmp_path / "run"
    (root / "models").mkdir(parents=True)
    (root / "models" / "pretrained").symlink_to(tiny_root / "models" / "pretrained")
    (root / "data").mkdir()
    (root / "data" / "tokenize").symlink_to(tiny_root / "data" / "tokenize")
    metrics = probe.run(make_cfg(subset, variants=["pretrained", "random"]), make_paths(root), NullLog())
    control = metrics["shuffled_control"]
    assert control["seed"] == 0 and set(control["models"]) == {"pretrained", "random"}
    cosines = json.loads((root / "data" / "probe" / "sentence_cosines.json").read_text(encoding="utf-8"))
    assert list(cosines["words"]) == ["port", "lock"] and len(cosines["words"]["port"]["lines"]) == 20
    for variant in ("pretrained", "random"):
        for condition, tree in (("real", metrics["models"]), ("shuffled", control["models"])):
            for word in ("port", "lock"):
                triangles = cosines["variants"][variant][condition][word]
                senses = cosines["words"][word]["senses"]
                assert len(triangles) == tree[variant]["layers"] == 3
                for layer, triangle in enumerate(triangles):
                    assert len(triangle) == len(senses) * (len(senses) - 1) // 2
                    assert _cosine_separation(triangle, senses) == pytest.approx(
                        tree[variant]["per_word"][word]["separation"][layer], abs=2e-6
                    )
        assert control["models"][variant]["separation"] != metrics["models"][variant]["separation"]
    rows = (root / "data" / "probe" / "layers.tsv").read_text(encoding="utf-8").splitlines()
    assert sum(line.split("\t")[1] == "shuffled" for line in rows) == 2 * 3 * 3  # variants x (mean + 2 words) x layers
