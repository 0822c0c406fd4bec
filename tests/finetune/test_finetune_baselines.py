"""The finetune baselines on hand-made rows: majority, TF-IDF + logistic regression (analyzer and C chosen on
dev), word memorisation (lookup chosen on dev)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression

from tasks.finetune import ner as finetune_ner
from tasks.finetune.baselines import fitting

LABELS = ["sport", "tech"]
CASES = ["cased", "lowercased", "cased_backoff"]


def _tcfg(c_grid=(1.0,), ngrams=None, cases=("lowercased",), widen=0) -> SimpleNamespace:
    """The recipe fields the baselines read (``TaskParams``; ``widen``: ``baseline_grid_widen``)."""
    return SimpleNamespace(
        baseline_c_grid=list(c_grid),
        baseline_grid_widen=widen,
        baseline_tfidf_ngrams=ngrams or {"word": (1, 2)},
        baseline_memorise_cases=list(cases),
    )


def _cls(split: str, texts_labels: list[tuple[str, int]]) -> list[dict]:
    return [{"doc_id": f"{split}{i}", "text": t, "label": y} for i, (t, y) in enumerate(texts_labels)]


CLS_ROWS = {
    "train": _cls(
        "tr",
        [
            ("goal match team", 0),
            ("match ball goal", 0),
            ("team goal win", 0),
            ("chip code data", 1),
            ("code server data", 1),
        ],
    ),
    "dev": _cls("dv", [("goal team", 0), ("code data", 1)]),
    "test": _cls("te", [("ball match", 0), ("server chip", 1), ("goal code", 1)]),
}


def test_majority_predicts_the_most_frequent_train_label_with_the_train_frequencies():
    fit = fitting.fit_predict("majority", CLS_ROWS, LABELS, _tcfg())
    assert [r["pred"] for r in fit["test"]] == ["sport"] * 3  # 3 sport vs 2 tech train docs
    assert [r["probs"] for r in fit["test"]] == [[3 / 5, 2 / 5]] * 3
    assert [r["gold"] for r in fit["test"]] == ["sport", "tech", "tech"]
    assert fit["setting"] == {"label": "sport"}


def test_tfidf_lr_matches_sklearn_fitted_by_hand_with_the_dev_chosen_c():
    fit = fitting.fit_predict("tfidf-lr", CLS_ROWS, LABELS, _tcfg([0.01, 100.0]))
    vec = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=2)
    x = vec.fit_transform([r["text"] for r in CLS_ROWS["train"]])
    # C=0.01 shrinks every weight to ~0: both dev docs get the majority label (dev macro-F1 1/3); C=100 gets both
    assert fit["setting"]["C"] == 100.0 and fit["setting"]["dev_macro_f1"] == 1.0
    assert fit["setting"]["dev_macro_f1_grid"] == {"word C=0.01": pytest.approx(1 / 3), "word C=100": 1.0}
    model = LogisticRegression(C=100.0, max_iter=2000).fit(x, [r["label"] for r in CLS_ROWS["train"]])
    expected = model.predict(vec.transform([r["text"] for r in CLS_ROWS["test"]])).tolist()
    assert [LABELS.index(r["pred"]) for r in fit["test"]] == expected
    proba = model.predict_proba(vec.transform([r["text"] for r in CLS_ROWS["test"]]))
    np.testing.assert_allclose([r["probs"] for r in fit["test"]], proba, rtol=0, atol=1e-12)
    assert all(r["seen_fraction"] == 1.0 and r["truncated"] is False for r in fit["test"])


def test_tfidf_lr_records_the_cs_tried_and_the_product_grid():
    # dev macro-F1 is 1/3 at C = 0.01 and 1 at C = 100 (test_tfidf_lr_matches_sklearn_fitted_by_hand_...): 100 is
    # the top, so one step of the grid's ratio (10^4) past it, 10^6, is tried with each analyzer and cannot beat 1
    tcfg = _tcfg([0.01, 100.0], {"word": (1, 2), "char_wb": (2, 3)}, widen=1)
    setting = fitting.fit_predict("tfidf-lr", CLS_ROWS, LABELS, tcfg)["setting"]
    assert list(setting["dev_macro_f1_grid"]) == [
        f"{a} C={c}" for a in ("word", "char_wb") for c in ("0.01", "100")
    ] + ["word C=1e+06", "char_wb C=1e+06"]
    assert setting["C"] == 100.0 and setting["widening"]["C"] == {
        "tried": [0.01, 100.0, 1e6],
        "widenings": 1,
        "at_edge": False,
        "bound_hit": False,
    }


def test_tfidf_lr_chooses_character_ngrams_on_dev_when_dev_words_are_unseen_in_train():
    rows = {
        "train": _cls(
            "tr",
            [
                ("goals matches teams", 0),
                ("matches balls goals", 0),
                ("teams goals wins", 0),
                ("chips codes databases", 1),
                ("codes servers databases", 1),
            ],
        ),
        "dev": _cls("dv", [("goal team", 0), ("code database", 1)]),
        "test": CLS_ROWS["test"],
    }
    fit = fitting.fit_predict("tfidf-lr", rows, LABELS, _tcfg([1.0], {"word": (1, 1), "char_wb": (3, 4)}))
    # no dev word is a train word: every dev doc is the zero vector, so word n-grams give both dev docs one
    # label (macro-F1 (2/3 + 0) / 2 = 1/3); character n-grams of "goal", "team", "code", "database" are in train
    grid = fit["setting"]["dev_macro_f1_grid"]
    assert grid["word C=1"] == pytest.approx(1 / 3) and grid["char_wb C=1"] == 1.0
    assert (fit["setting"]["analyzer"], fit["setting"]["ngram_range"]) == ("char_wb", [3, 4])
    vec = TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 4), sublinear_tf=True, min_df=2)
    model = LogisticRegression(C=1.0, max_iter=2000).fit(
        vec.fit_transform([r["text"] for r in rows["train"]]), [r["label"] for r in rows["train"]]
    )
    proba = model.predict_proba(vec.transform([r["text"] for r in rows["test"]]))
    np.testing.assert_allclose([r["probs"] for r in fit["test"]], proba, rtol=0, atol=1e-12)
    assert fit["setting"]["vocabulary"] == len(vec.vocabulary_)


def test_tfidf_lr_gives_a_label_absent_from_train_probability_zero():
    labels = ["politics", *LABELS]  # id 0 never occurs in train
    rows = {split: [{**r, "label": r["label"] + 1} for r in CLS_ROWS[split]] for split in CLS_ROWS}
    fit = fitting.fit_predict("tfidf-lr", rows, labels, _tcfg([100.0]))
    assert all(r["probs"][0] == 0.0 and sum(r["probs"]) == pytest.approx(1.0) for r in fit["test"])
    two_labels = fitting.fit_predict("tfidf-lr", CLS_ROWS, LABELS, _tcfg([100.0]))["test"]
    np.testing.assert_allclose([r["probs"][1:] for r in fit["test"]], [r["probs"] for r in two_labels], atol=1e-12)


def test_tfidf_lr_reads_the_texts_it_is_given_and_one_label_in_train_is_an_error():
    texts = {"train": ["goal", "goal x", "goal y", "chip", "chip z"], "dev": ["goal", "chip"], "test": ["chip"] * 3}
    fit = fitting.fit_predict("tfidf-lr", CLS_ROWS, LABELS, _tcfg([100.0], {"word": (1, 1)}), texts)
    assert fit["setting"]["vocabulary"] == 2  # goal, chip: x, y, z occur once (min_df=2)
    assert [r["pred"] for r in fit["test"]] == ["tech"] * 3  # "chip" everywhere, whatever the rows' text says
    one = {**CLS_ROWS, "train": [r for r in CLS_ROWS["train"] if r["label"] == 0]}
    with pytest.raises(ValueError, match="baseline tfidf-lr: the train docs hold 1 label"):
        fitting.fit_predict("tfidf-lr", one, LABELS, _tcfg())


def _ner(split: str, sentences: list[tuple[list[str], list[str]]]) -> list[dict]:
    return [
        {"doc_id": f"{split}{i}", "window_index": 0, "words": w, "word_tags": t} for i, (w, t) in enumerate(sentences)
    ]


def test_memorise_tags_each_word_with_its_most_frequent_train_tag_and_scores_with_seqeval():
    rows = {
        "train": _ner(
            "tr",
            [
                (["John", "visited", "Paris"], ["B-PER", "O", "B-LOC"]),
                (["paris", "hilton"], ["B-PER", "I-PER"]),
                (["Paris", "is", "big"], ["B-LOC", "O", "O"]),
            ],
        ),
        "dev": _ner("dv", [(["john"], ["B-PER"])]),
        # a second window of a sentence is ignored: only window 0 carries the sentence once
        "test": _ner("te", [(["paris", "john", "hilton", "x"], ["B-LOC", "B-PER", "O", "O"])])
        + [
            {
                "doc_id": "te0",
                "window_index": 1,
                "words": ["paris", "john", "hilton", "x"],
                "word_tags": ["B-LOC", "B-PER", "O", "O"],
            }
        ],
    }
    fit = fitting.fit_predict("memorise", rows, [], _tcfg(cases=["lowercased"]))
    # paris: B-LOC twice, B-PER once -> B-LOC; john -> B-PER; hilton -> I-PER, which continues the PER chunk of
    # "john", so it stays I-PER; x unseen -> O
    assert [r["pred"] for r in fit["test"]] == [["B-LOC", "B-PER", "I-PER", "O"]]
    # paris 2 of 3; john, hilton 1 of 1; x unseen: O's share among the hapaxes john, visited, hilton, is, big
    assert fit["test"][0]["probs"] == pytest.approx([2 / 3, 1.0, 1.0, 3 / 5])
    scores = finetune_ner.score(fit["test"], [])
    # gold entities: LOC(0), PER(1); predicted: LOC(0), PER(1-2): 1 tp of 2 predicted, 2 gold
    assert scores["entity_precision"] == 0.5 and scores["entity_recall"] == 0.5
    assert fit["setting"] == {"case": "lowercased", "dev_entity_f1": {"lowercased": 1.0}, "lexicon_words": 6}


def test_memorise_repairs_an_orphan_inside_tag_as_conlleval_reads_it():
    rows = {
        "train": _ner("tr", [(["a", "b"], ["B-ORG", "I-ORG"])]),
        "dev": _ner("dv", [(["b"], ["O"])]),
        "test": _ner("te", [(["b", "c"], ["O", "O"])]),
    }
    for case in CASES:  # the repair is the same under every lookup, never a choice
        fit = fitting.fit_predict("memorise", rows, [], _tcfg(cases=[case]))
        assert fit["test"][0]["pred"] == ["B-ORG", "O"]  # "b" alone is I-ORG after O -> B-ORG
        # "b" keeps the probability of I-ORG (1 of 1); "c" unseen: no hapax (a, b) is O
        assert fit["test"][0]["probs"] == [1.0, 0.0]


def test_memorise_unseen_words_take_the_o_share_of_all_words_when_no_word_was_seen_once():
    rows = {
        "train": _ner("tr", [(["a", "b", "a", "b"], ["B-ORG", "O", "B-ORG", "O"])]),
        "dev": _ner("dv", [(["a"], ["O"])]),
        "test": _ner("te", [(["z"], ["O"])]),
    }
    assert fitting.fit_predict("memorise", rows, [], _tcfg())["test"][0]["probs"] == [0.5]


# "Apple" is an ORG when capitalised, "apple" a fruit (O); "Paris" is seen only capitalised
MEMO_TRAIN = _ner(
    "tr",
    [
        (["Apple", "sells", "apple", "pie"], ["B-ORG", "O", "O", "O"]),
        (["Apple", "in", "Paris"], ["B-ORG", "O", "B-LOC"]),
        (["an", "apple", "or", "apple"], ["O", "O", "O", "O"]),
    ],
)


def _memorise_on(dev: list[tuple[list[str], list[str]]]) -> dict:
    rows = {"train": MEMO_TRAIN, "dev": _ner("dv", dev), "test": _ner("te", [(["Apple", "PARIS"], ["B-ORG", "B-LOC"])])}
    return fitting.fit_predict("memorise", rows, [], _tcfg(cases=CASES))


def test_memorise_chooses_the_lookup_with_the_best_dev_entity_f1():
    # dev "Apple ... paris" (gold ORG, LOC): cased finds Apple (ORG) but not paris (O): P 1, R 1/2; lowercased
    # reads apple as O (3 O vs 2 ORG in train) but finds paris (LOC): P 1, R 1/2; cased_backoff finds both
    fit = _memorise_on([(["Apple", "visits", "paris"], ["B-ORG", "O", "B-LOC"])])
    assert fit["setting"]["dev_entity_f1"] == {
        "cased": pytest.approx(2 / 3),
        "lowercased": pytest.approx(2 / 3),
        "cased_backoff": 1.0,
    }
    assert fit["setting"]["case"] == "cased_backoff"
    # test under cased_backoff: Apple cased (ORG, 2 of 2); PARIS unseen cased, "paris" lowercased (LOC, 1 of 1)
    assert fit["test"][0]["pred"] == ["B-ORG", "B-LOC"] and fit["test"][0]["probs"] == [1.0, 1.0]
    assert fit["setting"]["lexicon_words"] == 7  # the lowercased table: apple sells pie in paris an or


def test_memorise_ties_on_dev_go_to_the_earlier_lookup_of_the_params():
    # dev "apple" (no entity): cased O (3 of 3), lowercased O (3 of 5), backoff O: no entity, F1 0 for all
    fit = _memorise_on([(["apple"], ["O"])])
    assert set(fit["setting"]["dev_entity_f1"].values()) == {0.0} and fit["setting"]["case"] == "cased"
    # cased: "Apple" -> B-ORG (2 of 2); "PARIS" unseen -> O with the O share of the cased hapaxes
    # (sells pie in Paris an or: 5 of 6 O)
    assert fit["test"][0]["pred"] == ["B-ORG", "O"] and fit["test"][0]["probs"] == pytest.approx([1.0, 5 / 6])


def test_memorise_an_unknown_lookup_is_an_error_naming_the_key():
    with pytest.raises(ValueError, match="baseline_memorise_cases"):
        fitting.fit_predict("memorise", {"train": MEMO_TRAIN, "dev": [], "test": []}, [], _tcfg(cases=["title"]))


def test_unknown_baseline_is_an_error():
    with pytest.raises(ValueError, match="unknown baseline 'bm25'"):
        fitting.fit_predict("bm25", CLS_ROWS, LABELS, _tcfg())
    with pytest.raises(ValueError, match="unknown baseline 'bm25'"):
        fitting.plan(["bm25"], ["clozeline"])


def test_plan_gives_one_tfidf_comparator_per_tokenization_and_one_reference_row_per_baseline():
    rows = fitting.plan(["majority", "tfidf-lr"], ["reference", "clozeline"])
    assert [(r.key, r.reference, r.tok) for r in rows] == [
        ("baseline/majority/labels", False, None),
        ("baseline/majority/all-data", True, None),
        ("baseline/tfidf-lr/clozeline-cut", False, "clozeline"),
        ("baseline/tfidf-lr/reference-cut", False, "reference"),
        ("baseline/tfidf-lr/all-data", True, None),
    ]
    assert [r.key for r in fitting.plan(["memorise"], ["clozeline"])] == [
        "baseline/memorise/words",
        "baseline/memorise/all-data",
    ]
