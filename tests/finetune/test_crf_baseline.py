"""The ``crf`` ner baseline (tasks/finetune/baselines/crf.py): its features, the c1/c2 choice on dev, Viterbi
tags in IOB2 scored strictly, and marginals as probabilities."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tasks.finetune import ner as finetune_ner
from tasks.finetune import select_best
from tasks.finetune.baselines import crf, fitting

LABELS = ["B-LOC", "B-PER", "I-PER", "O"]
ARM, MEMO, CRF = "pretrained/full/first", "baseline/memorise/words", "baseline/crf/words"
# people are title-case words after "met"; places after "in"
TRAIN = [
    (["I", "met", "John", "Smith", "in", "Paris"], ["O", "O", "B-PER", "I-PER", "O", "B-LOC"]),
    (["we", "met", "Anna", "Berg", "in", "Rome"], ["O", "O", "B-PER", "I-PER", "O", "B-LOC"]),
    (["they", "met", "Tom", "Hill", "in", "Oslo"], ["O", "O", "B-PER", "I-PER", "O", "B-LOC"]),
    (["she", "lives", "in", "Berlin"], ["O", "O", "O", "B-LOC"]),
    (["he", "met", "Eva", "Lund"], ["O", "O", "B-PER", "I-PER"]),
] * 3


def _rows(split: str, sentences) -> list[dict]:
    return [
        {"doc_id": f"{split}{i}", "window_index": 0, "words": w, "word_tags": t} for i, (w, t) in enumerate(sentences)
    ]


ROWS = {
    "train": _rows("tr", TRAIN),
    "dev": _rows("dv", [(["you", "met", "Max", "Weber", "in", "Lyon"], ["O", "O", "B-PER", "I-PER", "O", "B-LOC"])]),
    "test": _rows("te", [(["I", "met", "Ida", "Holm", "in", "Kiev"], ["O", "O", "B-PER", "I-PER", "O", "B-LOC"])]),
}


def _tcfg(c1=(0.0, 0.1), c2=(0.01,), widen=0) -> SimpleNamespace:
    return SimpleNamespace(
        baseline_crf_c1_grid=list(c1),
        baseline_crf_c2_grid=list(c2),
        baseline_crf_max_iterations=50,
        baseline_grid_widen=widen,
    )


def test_word_features_have_shape_case_affixes_neighbours_and_sentence_ends():
    feats = crf.sentence_features(["Apple", "sold", "2024", "@x"])
    assert feats[0]["lower"] == "apple" and feats[0]["shape"] == "Xx"
    assert feats[0]["BOS"] is True and "EOS" not in feats[0] and feats[3]["EOS"] is True
    assert (feats[0]["suffix3"], feats[0]["suffix2"], feats[0]["prefix3"]) == ("ple", "le", "App")
    assert feats[0]["is_title"] and not feats[0]["is_upper"] and feats[2]["is_digit"] and feats[2]["shape"] == "d"
    assert feats[3]["is_handle"] and not feats[1]["is_handle"]
    assert feats[1]["-1:lower"] == "apple" and feats[1]["1:lower"] == "2024" and feats[1]["2:lower"] == "@x"
    assert "-2:lower" not in feats[1] and feats[2]["-2:title"] is True
    assert crf.shape("U.S.") == "X.X." and crf.shape("iPhone12") == "xXxd"


def test_crf_tags_iob2_from_context_chooses_c1_c2_on_dev_and_gives_marginals():
    fit = fitting.fit_predict("crf", ROWS, LABELS, _tcfg())
    rec = fit["test"][0]
    # unseen names, found by their context ("met" _ _ "in" _) and case
    assert rec["pred"] == ["O", "O", "B-PER", "I-PER", "O", "B-LOC"]
    assert finetune_ner.score(fit["test"], LABELS)["entity_f1"] == 1.0
    # each word: a distribution over LABELS, its predicted tag's marginal is its probability
    for tag, prob, dist in zip(rec["pred"], rec["probs"], rec["tag_probs"], strict=True):
        assert sum(dist) == pytest.approx(1.0) and dist[LABELS.index(tag)] == pytest.approx(prob)
    setting = fit["setting"]
    assert set(setting["dev_entity_f1"]) == {"c1=0 c2=0.01", "c1=0.1 c2=0.01"}
    best = max(setting["dev_entity_f1"].values())
    # the kept pair has the best dev F1, the earlier pair on a tie
    first_best = next(k for k, v in setting["dev_entity_f1"].items() if v == best)
    assert first_best == f"c1={setting['c1']:g} c2={setting['c2']:g}"
    assert setting["features"] > 0 and setting["fit_seconds"] >= 0


def test_the_crf_records_each_penalty_widened_and_what_it_tried():
    setting = fitting.fit_predict("crf", ROWS, LABELS, _tcfg(c1=(0.01, 0.1), c2=(0.01,), widen=1))["setting"]
    low, high = list(setting["dev_entity_f1"].values())[:2]  # c1 = 0.01 then 0.1, c2 = 0.01
    # either is an edge of a 2-value grid: the better (a tie: 0.01, tried first) widens one step of 10 past it
    extra = 0.001 if low >= high else 1.0
    assert list(setting["dev_entity_f1"]) == ["c1=0.01 c2=0.01", "c1=0.1 c2=0.01", f"c1={extra:g} c2=0.01"]
    assert setting["widening"]["c1"]["tried"] == sorted([0.01, 0.1, extra])
    assert setting["widening"]["c1"]["widenings"] == 1
    assert setting["widening"]["c2"] == {"tried": [0.01], "widenings": 0, "at_edge": False, "bound_hit": False}


def test_crf_is_deterministic_and_a_baseline_of_ner_with_a_comparator_and_a_reference_row():
    first, again = (fitting.fit_predict("crf", ROWS, LABELS, _tcfg(c1=(0.1,))) for _ in range(2))
    assert first["test"] == again["test"]
    assert [r.key for r in fitting.plan(["memorise", "crf"], ["clozeline"])] == [
        "baseline/memorise/words",
        "baseline/memorise/all-data",
        "baseline/crf/words",
        "baseline/crf/all-data",
    ]


def test_crf_without_train_sentences_is_an_error():
    with pytest.raises(ValueError, match="baseline crf: no train sentence"):
        fitting.fit_predict("crf", {**ROWS, "train": []}, LABELS, _tcfg())


def test_the_crf_is_the_best_baseline_and_the_floor_when_it_wins_on_dev():
    def run(dev: float) -> dict:
        return {"details": {"per_seed": {"13": {"dev_best_entity_f1": dev}}}, "setting": {}}

    runs = {ARM: run(0.4), MEMO: run(0.2), CRF: run(0.3)}
    chosen = select_best(runs, {ARM: "clozeline"}, {MEMO: None, CRF: None}, "ner")
    assert chosen["best_baseline"] == CRF and chosen["comparator_of"] == {ARM: CRF}
    runs[MEMO] = run(0.35)  # memorise better on dev: it is the comparator again
    assert select_best(runs, {ARM: "clozeline"}, {MEMO: None, CRF: None}, "ner")["best_baseline"] == MEMO
