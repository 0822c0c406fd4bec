"""leakage stage: hand-made contamination cases, the n-gram matcher against a set-intersection reference,
check (a)/(b) scoping, actions and rates."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from leakage_fixtures import PARAGRAPH, SHORT, filler, frame, params, rewrap, run_leakage
from reference import word_ngrams
from tasks.common.matching.textnorm import words
from tasks.leakage.lexical import blocks, detectors, residual, shingles
from tasks.leakage.lexical.words import make_sides

COMMON = (
    "On the other hand, at the same time, as a result of the meeting, it is said that the authority "
    "would come into the office on Tuesday. In the end, the new project is expected to be finished before "
    "the end of the year, and at the same time the water is said to be on the other hand of the river."
)


@pytest.fixture(scope="module")
def hand_case(tmp_path_factory):
    """Task eval: the paragraph and the 6-word text. Pretraining: one doc per contamination case."""
    task = frame(
        "task", "task", [("ev-par", "test", PARAGRAPH), ("ev-short", "dev", SHORT), ("tr-1", "train", filler(80, 9))]
    )
    pre = frame(
        "pre",
        "pretrain",
        [
            ("verbatim", "train", filler(30, 1) + " " + PARAGRAPH + " " + filler(30, 2)),
            ("rewrapped", "train", rewrap(PARAGRAPH.upper(), 8)),
            ("in-filler", "train", filler(1000, 3) + " " + PARAGRAPH + " " + filler(1000, 4)),
            ("short-inside", "train", filler(50, 5) + " " + SHORT.lower() + ". " + filler(50, 6)),
            ("common", "train", COMMON),
            ("unrelated", "heldout", filler(300, 7)),
        ],
    )
    metrics, out = run_leakage(tmp_path_factory.mktemp("hand"), [task, pre])
    return metrics, out, pd.read_parquet(out / "table.parquet")


def methods_for(table, train_doc, eval_doc):
    return set(table.loc[(table["train_doc"] == train_doc) & (table["eval_doc"] == eval_doc), "method"])


def test_verbatim_copy_is_flagged_by_ngram_and_passage(hand_case):
    _, _, table = hand_case
    assert {"ngram", "minhash_passage"} <= methods_for(table, "verbatim", "ev-par")
    row = table[(table["train_doc"] == "verbatim") & (table["method"] == "ngram")].iloc[0]
    assert row["score"] == 1.0  # every 13-gram of the paragraph is in the training doc
    assert row["span"] == " ".join(words(PARAGRAPH)[:64])  # longest matched run, cut to max_span_words


def test_rewrapped_uppercased_copy_is_flagged_by_every_method(hand_case):
    _, _, table = hand_case
    assert methods_for(table, "rewrapped", "ev-par") == {"ngram", "minhash_doc", "minhash_passage", "ngram_substituted"}


def test_paragraph_inside_2000_words_of_filler_is_flagged_by_passage_not_doc_minhash(hand_case):
    _, _, table = hand_case
    # whole-doc Jaccard is ~60/2060 shingles, so only passage windows and n-grams can see it
    assert methods_for(table, "in-filler", "ev-par") == {"ngram", "minhash_passage", "ngram_substituted"}


def test_six_word_eval_text_inside_training_doc_is_flagged(hand_case):
    _, _, table = hand_case
    # n = its whole length, 6 (and 0 of 6 words substituted)
    assert methods_for(table, "short-inside", "ev-short") == {"ngram", "ngram_substituted"}


def test_unrelated_docs_with_common_phrases_are_not_flagged(hand_case):
    _, out, table = hand_case
    assert not {"common", "unrelated", "tr-1"} & set(table["train_doc"])
    kept = pd.read_parquet(out / "pre.parquet").set_index("doc_id")
    assert set(kept.index) == {"common", "unrelated"}
    assert not kept["leak_flag"].any()


def test_pretraining_leaks_are_removed_and_listed_and_rates_computed(hand_case):
    metrics, out, _ = hand_case
    removed = [json.loads(line) for line in (out / "removed.jsonl").read_text().splitlines()]
    assert [r["doc_id"] for r in removed] == ["in-filler", "rewrapped", "short-inside", "verbatim"]
    assert removed[0]["eval_docs"] == ["ev-par"] and removed[0]["reason"] == "leakage:pretrain"
    assert metrics["eval_sets"]["task/test"] == {
        "docs": 1,
        "docs_without_words": 0,
        "rate_before": 1.0,
        "rate_after": 0.0,
        "any_rate_before": 1.0,
        "any_rate_after": 0.0,
        "task_train_rate_before": 0.0,
        "task_train_rate_after": 0.0,
    }
    assert metrics["sources"]["pre"] == {"docs_in": 6, "docs_out": 2, "removed": 4, "flagged": 0}


def test_task_train_is_checked_against_its_own_eval_only_and_flagged(tmp_path):
    a = frame("a", "task", [("a-ev", "test", PARAGRAPH), ("a-tr", "train", PARAGRAPH + " " + filler(20, 1))])
    b = frame("b", "task", [("b-ev", "dev", filler(40, 2)), ("b-tr", "train", "Intro. " + PARAGRAPH)])
    metrics, out = run_leakage(tmp_path, [a, b])
    table = pd.read_parquet(out / "table.parquet")
    assert set(table["train_doc"]) == {"a-tr"} and set(table["check"]) == {"task_train"}
    kept_a = pd.read_parquet(out / "a.parquet").set_index("doc_id")
    assert kept_a.loc["a-tr", "leak_flag"] and not kept_a.loc["a-ev", "leak_flag"]
    rates = metrics["eval_sets"]["a/test"]
    assert rates["task_train_rate_after"] == rates["any_rate_after"] == 1.0  # flagged, not removed
    assert rates["rate_before"] == 0.0  # no pretraining source here
    assert metrics["eval_sets"]["b/dev"]["any_rate_before"] == 0.0
    # no pretraining text to plant into: the variants that need filler are not planted, the others are
    assert metrics["planted"]["not_planted"] == [
        "replaced_every_20",
        "replaced_every_12",
        "replaced_every_8",
        "replaced_every_5",
        "replaced_every_3",
        "in_filler",
        "fragment_30",
        "fragment_20",
        "fragment_10",
    ]
    assert metrics["planted"]["eval_docs_planted"] == 2 and metrics["planted"]["planted"] == 2 * 8
    assert metrics["residual"]["contaminated_docs"] == metrics["residual"]["contaminated_docs_before"] == 0


def test_bbc_in_both_roles_gives_nonzero_before_and_zero_after(tmp_path):
    texts = [filler(60, 100 + k) for k in range(10)]
    splits = ["train"] * 8 + ["dev", "test"]
    task = frame("news", "task", [(f"n{k}", s, t) for k, (s, t) in enumerate(zip(splits, texts))])
    pre = frame("news_pre", "pretrain", [(f"p{k}", "train", t) for k, t in enumerate(texts)])
    metrics, out = run_leakage(tmp_path, [task, pre])
    for name in ("news/dev", "news/test"):
        assert metrics["eval_sets"][name]["rate_before"] == 1.0 and metrics["eval_sets"][name]["rate_after"] == 0.0
    assert metrics["sources"]["news_pre"] == {"docs_in": 10, "docs_out": 8, "removed": 2, "flagged": 0}
    assert sorted(pd.read_parquet(out / "news_pre.parquet")["doc_id"]) == [f"p{k}" for k in range(8)]


def test_ngram_matcher_agrees_with_set_intersection_reference():
    rng = np.random.default_rng(0)
    vocab = [f"w{k}" for k in range(12)]  # tiny vocabulary: many chance 3-gram collisions
    evals = [list(rng.choice(vocab, size=int(rng.integers(3, 30)))) for _ in range(30)]
    trains = [list(rng.choice(vocab, size=int(rng.integers(0, 60)))) for _ in range(40)]
    cfg = params(ngram_words=3, min_match_words=1, residual={"ngram_words": 2, "min_coverage": 0.1}).lexical
    got = {(i, j) for i, j, *_ in detectors.ngram_matches(*make_sides(trains, evals), cfg)}
    want = {(i, j) for i, t in enumerate(trains) for j, e in enumerate(evals) if word_ngrams(t, 3) & word_ngrams(e, 3)}
    assert got == want and len(want) > 50


def test_a_sharded_eval_index_and_small_blocks_find_the_same_matches(monkeypatch):
    rng = np.random.default_rng(1)
    vocab = [f"w{k}" for k in range(12)]
    evals = [list(rng.choice(vocab, size=int(rng.integers(3, 30)))) for _ in range(30)]
    trains = [list(rng.choice(vocab, size=int(rng.integers(0, 60)))) for _ in range(40)]
    cfg = params(ngram_words=3, min_match_words=1, residual={"ngram_words": 2, "min_coverage": 0.1}).lexical
    sides = make_sides(trains, evals)
    whole = detectors.ngram_matches(*sides, cfg)
    n_ngrams = sum(max(len(e) - 2, 0) for e in evals)
    # an n-gram "costs" a quarter of the half of worker_memory_mib: 4 or more shards
    monkeypatch.setattr(detectors, "BYTES_PER_INDEX_NGRAM", (cfg.worker_memory_mib << 19) * 4 // n_ngrams + 1)
    assert len(detectors._ngram_index_shards(sides[1].hashes, cfg)) == 8  # 2**ceil(log2(4 + a bit))
    monkeypatch.setattr(blocks, "block_words", lambda cfg: 50)  # a few docs per block
    assert detectors.ngram_matches(*sides, cfg) == whole and len(whole) > 50


def test_lsh_signs_only_windows_sharing_a_shingle_and_finds_the_same_pairs(monkeypatch):
    rng = np.random.default_rng(2)
    vocab = [f"w{k}" for k in range(400)]
    evals = [list(rng.choice(vocab, size=int(rng.integers(5, 80)))) for _ in range(6)]
    trains = [list(rng.choice(vocab, size=int(rng.integers(0, 120)))) for _ in range(60)]
    for k in range(0, 60, 3):  # a third of the trains hold a stretch of an eval doc
        e = evals[k % 6]
        trains[k] = trains[k][:20] + e[: int(rng.integers(5, len(e) + 1))] + trains[k][20:]
    cfg = params(
        shingle_words=3, passage_words=12, passage_stride_words=6, doc_threshold=0.3, passage_threshold=0.3
    ).lexical
    sides = make_sides(trains, evals)
    # by hand: a train window is signed iff one of its 3-gram shingles is some eval window's
    windows = [(i, s, e) for i, x in enumerate(trains) for s, e in detectors.passage_windows(len(x), cfg)]
    eval_windows = [(j, s, e) for j, x in enumerate(evals) for s, e in detectors.passage_windows(len(x), cfg)]
    shingles = {g for j, s, e in eval_windows for g in word_ngrams(evals[j][s:e], 3)}
    want = [w for w, (i, s, e) in enumerate(windows) if word_ngrams(trains[i][s:e], 3) & shingles]
    got = detectors.sharing_windows(sides[0].hashes, windows, sides[1].hashes, eval_windows, 3)
    assert got == want and 0 < len(want) < len(windows)
    short = (6, 0, 2)  # two words: no 3-gram, never signed, and the others keep their indexes
    assert detectors.sharing_windows(sides[0].hashes, [short, *windows], sides[1].hashes, eval_windows, 3) == [
        w + 1 for w in want
    ]
    filtered = (detectors.minhash_doc_matches(*sides, cfg), detectors.minhash_passage_matches(*sides, cfg))
    monkeypatch.setattr(detectors, "sharing_windows", lambda q, windows, *_: list(range(len(windows))))
    assert filtered == (detectors.minhash_doc_matches(*sides, cfg), detectors.minhash_passage_matches(*sides, cfg))
    assert len(filtered[0]) > 3 and len(filtered[1]) > 10


def copies_of_evals() -> tuple[list, list, object]:
    """``(trains, evals, cfg)``: random docs, some holding copies of eval stretches that all five lexical
    methods find."""
    rng = np.random.default_rng(5)
    vocab = [f"w{k}" for k in range(300)]
    evals = [list(rng.choice(vocab, size=int(rng.integers(20, 60)))) for _ in range(5)] + [["w1", "w2", "w3"]]
    trains = [list(rng.choice(vocab, size=int(rng.integers(0, 90)))) for _ in range(80)]
    for k in range(0, 80, 4):  # copies of eval stretches, half with every sixth word swapped
        e = evals[k % 5]
        copy = [w if k % 8 or p % 6 else "swapped" for p, w in enumerate(e[:30])]
        trains[k] = trains[k][:15] + copy + trains[k][15:]
    trains[1], trains[2] = ["w1", "w2", "w3"], ["w1", "w2"]  # the short eval doc whole, and a shorter doc
    cfg = params(
        shingle_words=3, passage_words=12, passage_stride_words=6, doc_threshold=0.3, passage_threshold=0.3
    ).lexical
    return trains, evals, cfg


def test_only_screened_docs_meet_the_ngram_exact_and_minhash_detectors_and_the_matches_are_the_same(monkeypatch):
    trains, evals, cfg = copies_of_evals()
    sides = make_sides(trains, evals)
    # by hand: under min_match_words (5) words, or sharing a word 3-gram (min(5, shingle_words)) with an eval doc
    grams = set().union(*(word_ngrams(e, 3) for e in evals))
    want = [i for i, t in enumerate(trains) if len(t) < 5 or word_ngrams(t, 3) & grams]
    near, held = shingles.screen(*sides, cfg)
    assert near.tolist() == want and 15 < len(want) < 60
    windows = [(d, s, e) for d, i in enumerate(want) for s, e in detectors.passage_windows(len(trains[i]), cfg)]
    assert held(windows) == [w for w, (d, s, e) in enumerate(windows) if word_ngrams(trains[want[d]][s:e], 3) & grams]
    found = detectors.detect(*sides, cfg)
    monkeypatch.setattr(shingles, "screen", lambda trains, *_: (np.arange(len(trains.hashes)), None))
    assert found == detectors.detect(*sides, cfg)
    assert {m[2] for m in found} == {"ngram", "exact", "minhash_doc", "minhash_passage", "ngram_substituted"}


def test_an_owner_per_training_doc_keeps_exactly_its_pairs_of_the_full_detection():
    trains, evals, cfg = copies_of_evals()
    sides = make_sides(trains, evals)
    found = detectors.detect(*sides, cfg)
    owner = np.array([k % 5 if k % 4 == 0 else 5 if k == 1 else (k + 1) % 5 for k in range(len(trains))])
    owner[::20] = 5  # copies of eval doc 0 owned by another: their pairs are dropped
    mine = [m for m in found if owner[m[0]] == m[1]]
    assert detectors.detect(*sides, cfg, owner=owner) == mine and len(mine) < len(found)
    assert {m[2] for m in mine} == {"ngram", "exact", "minhash_doc", "minhash_passage", "ngram_substituted"}


def test_ngram_score_and_span_count_distinct_eval_windows_and_the_longest_run(monkeypatch):
    ev = [f"e{k}" for k in range(20)]  # 8 eval 13-grams, starting at 0..7
    train = ["x", "x"] + ev[0:15] + ["y"] + ev[4:20]  # eval windows 0-2 (15 words), then 4-7 (16 words)
    cfg = params().lexical
    sides = make_sides([["z"] * 30, train, ev[:12]], [ev])
    ((i, j, method, score, span),) = detectors.ngram_matches(*sides, cfg)
    assert (i, j, method, score, span) == (1, 0, "ngram", 7 / 8, " ".join(ev[4:20]))
    assert detectors.ngram_matches(*sides, params(max_span_words=5).lexical)[0][4] == " ".join(ev[4:9])
    monkeypatch.setattr(blocks, "block_words", lambda cfg: 7)  # every doc in its own block: no window lost or added
    assert detectors.ngram_matches(*sides, cfg) == [(1, 0, "ngram", 7 / 8, " ".join(ev[4:20]))]


def test_short_eval_texts_below_min_match_words_match_only_whole_docs(tmp_path):
    task = frame("t", "task", [("ev", "test", "Good day today!")])
    pre = frame(
        "p", "pretrain", [("inside", "train", "It was a good day today for us."), ("same", "train", "good DAY  today")]
    )
    _, out = run_leakage(tmp_path, [task, pre])
    table = pd.read_parquet(out / "table.parquet")
    assert table[["train_doc", "method"]].values.tolist() == [["same", "exact"]]


def test_outputs_are_byte_identical_across_runs(tmp_path):
    task = frame("t", "task", [("ev", "test", PARAGRAPH), ("tr", "train", filler(50, 1))])
    pre = frame("p", "pretrain", [("x", "train", PARAGRAPH), ("y", "train", filler(90, 2))])
    _, first = run_leakage(tmp_path / "a", [task, pre])
    _, second = run_leakage(tmp_path / "b", [task, pre])
    for name in ("table.parquet", "removed.jsonl", "p.parquet", "t.parquet", "review.jsonl"):
        assert (first / name).read_bytes() == (second / name).read_bytes()


def test_bad_params_and_inputs_fail_clearly(tmp_path):
    with pytest.raises(ValueError, match="passage_stride_words must be <="):
        params(passage_stride_words=64)
    with pytest.raises(ValueError, match="pretrain_action"):
        params(pretrain_action="delete")
    bad = frame("t", "task", [("a", "test", "x")]).drop(columns=["split"])
    with pytest.raises(ValueError, match=r"t\.parquet: missing column\(s\) \['split'\]"):
        run_leakage(tmp_path, [bad])


def test_copies_differing_only_by_format_characters_leak(tmp_path):
    # format characters (Cf) from six blocks inside every 4th word: LRM, isolates, Arabic letter mark, BOM,
    # Kaithi number sign, a tag character. Before every Cf was removed, each split its word in two.
    marks = ["\u200e", "\u2066", "\u2069", "\u061c", "\ufeff", "\U000110bd", "\U000e0001"]
    tokens = PARAGRAPH.split()
    hidden = " ".join(w[:1] + marks[k % len(marks)] + w[1:] if k % 4 == 0 else w for k, w in enumerate(tokens))
    assert words(hidden) == words(PARAGRAPH)
    task = frame("task", "task", [("ev", "test", PARAGRAPH), ("tr", "train", filler(80, 1))])
    pre = frame("pre", "pretrain", [("copy", "train", hidden), ("other", "train", filler(300, 2))])
    metrics, out = run_leakage(tmp_path, [task, pre])
    table = pd.read_parquet(out / "table.parquet")
    assert methods_for(table, "copy", "ev") == {"ngram", "minhash_doc", "minhash_passage", "ngram_substituted"}
    assert set(table["score"]) == {1.0}  # every 13-gram, identical shingle sets, no word substituted
    assert metrics["eval_sets"]["task/test"]["rate_before"] == 1.0


def test_wordless_texts_never_match_each_other(tmp_path):
    # eval texts without words (punctuation, format characters only) against training texts without words:
    # no n-gram, no shingle, and the whole-doc check needs a word, so nothing matches and nothing is removed
    task = frame(
        "task",
        "task",
        [
            ("ev-punct", "test", "!!!"),
            ("ev-cf", "dev", "\u200e\u2066\u2069"),
            ("ev-text", "test", SHORT),
            ("tr-punct", "train", "..."),
        ],
    )
    pre = frame(
        "pre",
        "pretrain",
        [("pre-punct", "train", "!!!"), ("pre-empty", "train", "\ufeff"), ("other", "train", filler(300, 2))],
    )
    metrics, out = run_leakage(tmp_path, [task, pre])
    assert pd.read_parquet(out / "table.parquet").empty and (out / "removed.jsonl").read_text() == ""
    assert metrics["eval_sets"]["task/test"] | {"docs": 2, "docs_without_words": 1} == metrics["eval_sets"]["task/test"]
    assert metrics["eval_sets"]["task/dev"]["docs_without_words"] == 1
    assert all(metrics["eval_sets"][s]["any_rate_before"] == 0.0 for s in ("task/dev", "task/test"))
    assert (metrics["residual"]["contaminated_docs_before"], metrics["residual"]["rate_before"]) == (0, 0.0)


def test_residual_scan_keeps_only_what_docs_hold_and_pools_coverage_by_hand():
    cfg = params()  # residual: 8-grams, min_coverage 0.1
    a, b = [f"a{k}" for k in range(20)], ["short", "eval", "doc"]  # A: 13 distinct 8-grams; B: none (3 words)
    corpus = [a[:12] + ["x"] * 5, b, ["pre"] + b + ["post"], ["x"] * 30, a[10:20]]
    targets = residual.eval_targets([a, b], 8)
    hits, whole = residual.scan_docs(corpus, targets, 8)
    assert sorted(hits) == [0, 4] and len(hits[0]) == 5 and len(hits[4]) == 3  # a[0:12]: 5 windows; a[10:20]: 3
    assert whole == {1: tuple(b)}  # doc 2 holds B's words but is not B: no whole-doc match
    scan = residual.Scan(["d0", "d1", "d2", "d3", "d4"], hits, whole)
    frame = pd.DataFrame({"doc_id": ["A", "B"], "source": "s", "split": "test"})
    out = residual.residual(frame, [a, b], scan, {"d1"}, cfg.residual, cfg.max_examples)
    assert (out["contaminated_docs_before"], out["contaminated_docs"]) == (2, 1)  # B only before d1's removal
    assert out["examples"] == [
        {
            "eval_doc": "A",
            "coverage": round(8 / 13, 6),
            "contaminated": True,
            "train_docs": ["d0", "d4"],
            "shared": " ".join(a[:8]),
        }
    ]
