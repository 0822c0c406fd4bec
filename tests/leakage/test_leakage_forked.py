"""tasks/leakage/scan/forked.py: the lexical scan on forked processes over blocks of training rows is the
one-process scan, match for match, and the stage's outputs are byte-identical."""

from __future__ import annotations

import numpy as np
import pandas as pd

from leakage_fixtures import PARAGRAPH, filler, frame, night, outputs, params, run
from tasks.common.matching import minhash
from tasks.leakage.lexical.words import make_side, tokenize
from tasks.leakage.scan import forked
from tasks.leakage.scan.local import scan_in_process


def test_blocks_are_contiguous_and_cut_at_equal_shares_of_characters(monkeypatch):
    monkeypatch.setattr(forked, "MIN_ROWS_PER_PROCESS", 1)
    # 10 rows of 1 char then 1 row of 10 chars: 20 chars, two shares of 10; the first ends after row 9
    assert forked.blocks_of(np.array([1] * 10 + [10]), 2) == [(0, 10), (10, 11)]
    assert forked.blocks_of(np.array([5, 5, 5, 5]), 3) == [(0, 2), (2, 3), (3, 4)]  # cuts after 6.7 and 13.3 chars
    assert forked.blocks_of(np.array([3, 3]), 8) == [(0, 1), (1, 2)]  # never more blocks than rows
    assert forked.blocks_of(np.zeros(0), 2) == []
    monkeypatch.setattr(forked, "MIN_ROWS_PER_PROCESS", 500)
    assert forked.blocks_of(np.ones(999), 4) == [(0, 999)]  # under 2 x 500 rows: one process


def corpus() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Eval docs and 40 training rows (task and pretraining, interleaved) with copies of them at both ends."""
    evals = frame("task", "task", [("ev", "test", PARAGRAPH), ("ev2", "dev", filler(40, 77))])
    docs = [(f"p{k}", "train", filler(30, k) + (" " + PARAGRAPH if k % 7 == 0 else "")) for k in range(30)]
    docs += [(f"q{k}", "train", filler(20, 77) + " " + filler(20, 200 + k)) for k in range(5)]
    pre = frame("pre", "pretrain", docs)
    task = frame("task", "task", [(f"t{k}", "train", PARAGRAPH if k == 3 else filler(25, 300 + k)) for k in range(5)])
    train = pd.concat([pre.iloc[:20], task, pre.iloc[20:]], ignore_index=True)
    return evals, train


def test_forked_scan_equals_the_in_process_scan_match_for_match(monkeypatch):
    monkeypatch.setattr(forked, "MIN_ROWS_PER_PROCESS", 1)
    evals, train = corpus()
    side = make_side([tokenize(t) for t in evals["text"]], minhash.WordHashes())
    one = scan_in_process(train, side, params())
    assert len(one.matches) >= 8 and one.pretrain.hits  # the copies at both ends are found
    for num_proc in (2, 3, 7):
        got = forked.scan_forked(train, side, params(num_proc=num_proc), scan_in_process)
        assert got.matches == one.matches
        assert got.has_words.tolist() == one.has_words.tolist()
        assert (got.pretrain.ids, got.pretrain.hits, got.pretrain.whole) == (
            one.pretrain.ids,
            one.pretrain.hits,
            one.pretrain.whole,
        )


def test_the_stage_on_three_processes_writes_the_bytes_of_one(monkeypatch, tmp_path):
    monkeypatch.setattr(forked, "MIN_ROWS_PER_PROCESS", 1)
    frames = night([("new-copy", "train", PARAGRAPH + " " + filler(20, 5))])
    one, _ = run(tmp_path / "one", frames, num_proc=1, incremental=False)
    three, _ = run(tmp_path / "three", frames, num_proc=3, incremental=False)
    assert outputs(tmp_path / "three", three) == outputs(tmp_path / "one", one)
