"""The substitution-tolerant n-gram detector (tasks/leakage/lexical/substitution.py): a hand-made synonym copy that the
13-gram and MinHash detectors miss, and the pigeonhole search against a brute-force scan of every alignment."""

from __future__ import annotations

import numpy as np
import pandas as pd

from leakage_fixtures import PARAGRAPH, filler, frame, params, run_leakage
from tasks.common.matching.textnorm import words
from tasks.leakage.lexical import substitution
from tasks.leakage.lexical.words import make_sides
from test_leakage import methods_for

# PARAGRAPH with every 3rd content word (alphabetic, 3+ letters, not an English stop word) replaced by a word of
# about the same meaning, by hand: authority, reservoir, lowest, began, covering, force, pumping, pipeline,
# finished, expects, rains. The longest unchanged run is 7 words ("in 1921, and that a hosepipe ban"), so no
# 13-gram survives; every window of 13 words holds at least one replaced word.
SPUN = (
    "The regional water agency said on Tuesday that the tank near Eldham had fallen to its smallest "
    "level since records started in 1921, and that a hosepipe ban spanning four districts would come into "
    "effect at midnight. Engineers are drawing from two boreholes while a new conduit from the northern "
    "catchment is completed, a project the authority now hopes to complete before the autumn showers."
)


def test_spun_copy_is_found_only_by_the_substitution_tolerant_ngrams(tmp_path):
    original, spun = words(PARAGRAPH), words(SPUN)
    assert len(original) == len(spun)  # one word for one word: the alignment is kept
    changed = [k for k, (a, b) in enumerate(zip(original, spun)) if a != b]
    assert len(changed) == 11 and max(np.diff([-1] + changed + [len(spun)])) - 1 == 7
    task = frame("task", "task", [("ev", "test", PARAGRAPH), ("tr", "train", filler(80, 1))])
    pre = frame(
        "pre",
        "pretrain",
        [("spun", "train", filler(40, 3) + " " + SPUN + " " + filler(40, 4)), ("other", "train", filler(300, 2))],
    )
    metrics, out = run_leakage(tmp_path, [task, pre])
    table = pd.read_parquet(out / "table.parquet")
    assert methods_for(table, "spun", "ev") == {"ngram_substituted"}  # no 13-gram, shingle Jaccard far below 0.5
    row = table[table["train_doc"] == "spun"].iloc[0]
    # best window: "in 1921 and that a hosepipe ban spanning four districts would come into", 1 of 13 replaced
    assert row["score"] == round(12 / 13, 6)
    assert row["span"] == "in 1921 and that a hosepipe ban spanning four districts would come into"
    assert metrics["sources"]["pre"]["removed"] == 1  # a lexical match: pretrain_action remove


def test_the_window_rule():
    cfg = params().lexical  # window_words 13, max_substituted_share 0.2
    # (n, k, seed length): 13 words allow 2 substitutions, so some 4-word block of the 13 is intact
    assert substitution.window_rule(40, cfg) == (13, 2, 4)
    assert substitution.window_rule(9, cfg) == (9, 1, 4)
    assert substitution.window_rule(5, cfg) == (5, 1, 2)
    assert substitution.window_rule(4, cfg) == (4, 0, 4)


def brute_force(train_tokens, eval_tokens, cfg) -> dict[tuple[int, int], float]:
    """Every alignment of every window: ``{(train doc, eval doc): best share of equal words}`` for matches."""
    out = {}
    for j, e in enumerate(eval_tokens):
        if len(e) < cfg.min_match_words:
            continue
        n, k, _ = substitution.window_rule(len(e), cfg)
        for i, t in enumerate(train_tokens):
            best = -1
            for s in range(len(e) - n + 1):
                for p in range(len(t) - n + 1):
                    best = max(best, sum(t[p + x] == e[s + x] for x in range(n)))
            if best >= n - k:
                out[(i, j)] = best / n
    return out


def test_pigeonhole_search_equals_a_brute_force_scan_of_every_alignment():
    # a 6-word vocabulary makes chance near matches common; evals of 3 to 20 words cover short-text windows
    rng = np.random.default_rng(7)
    vocab = [f"w{k}" for k in range(6)]
    evals = [list(rng.choice(vocab, size=int(rng.integers(3, 21)))) for _ in range(12)]
    trains = [list(rng.choice(vocab, size=int(rng.integers(0, 40)))) for _ in range(25)]
    trains += [[w if (x + 1) % 4 else "other" for x, w in enumerate(e)] for e in evals[:4]]  # every 4th replaced
    for changes in (
        {},
        {"substitution": {"window_words": 7, "max_substituted_share": 0.3}},
        {"worker_memory_mib": 16, "substitution": {"window_words": 13, "max_substituted_share": 0.0}},
    ):
        cfg = params(**changes).lexical
        train_side, eval_side = make_sides(trains, evals)
        found = substitution.substitution_matches(train_side, eval_side, cfg)
        assert {(i, j): score for i, j, _, score, _ in found} == brute_force(trains, evals, cfg)
        for i, _j, method, _score, span in found:  # the span is a window of the training doc with that score
            assert method == "ngram_substituted" and " ".join(trains[i]).find(span) >= 0


def test_seed_hash_collisions_cannot_create_a_match(monkeypatch):
    # every seed hash made equal (as if all b-grams collided): every alignment becomes a candidate, and the
    # word-by-word check still leaves exactly the brute-force matches
    rng = np.random.default_rng(3)
    vocab = [f"w{k}" for k in range(5)]
    evals = [list(rng.choice(vocab, size=int(rng.integers(5, 16)))) for _ in range(6)]
    trains = [list(rng.choice(vocab, size=30)) for _ in range(8)] + [[f"x{k}" for k in range(30)]]
    cfg = params().lexical
    monkeypatch.setattr(
        substitution.minhash, "rolling_hashes", lambda values, n: np.zeros(max(len(values) - n + 1, 0), np.uint64)
    )
    found = substitution.substitution_matches(*make_sides(trains, evals), cfg)
    assert {(i, j): score for i, j, _, score, _ in found} == brute_force(trains, evals, cfg)
    assert not any(i == len(trains) - 1 for i, *_ in found)  # the doc of other words matches nothing
