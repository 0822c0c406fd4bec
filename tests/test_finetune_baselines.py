"""The finetune baselines on hand-made rows: majority, TF-IDF + logistic regression, word memorisation."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression

from tasks.finetune import baselines
from tasks.finetune import ner as finetune_ner

LABELS = ["sport", "tech"]


def _cls(split: str, texts_labels: list[tuple[str, int]]) -> list[dict]:
    return [{"doc_id": f"{split}{i}", "text": t, "label": y} for i, (t, y) in enumerate(texts_labels)]


CLS_ROWS = {
    "train": _cls("tr", [("goal match team", 0), ("match ball goal", 0), ("team goal win", 0),
                         ("chip code data", 1), ("code server data", 1)]),
    "dev": _cls("dv", [("goal team", 0), ("code data", 1)]),
    "test": _cls("te", [("ball match", 0), ("server chip", 1), ("goal code", 1)]),
}


def test_majority_predicts_the_most_frequent_train_label_with_the_train_frequencies():
    fit = baselines.fit_predict("majority", CLS_ROWS, LABELS, [1.0])
    assert [r["pred"] for r in fit["test"]] == ["sport"] * 3  # 3 sport vs 2 tech train docs
    assert [r["probs"] for r in fit["test"]] == [[3 / 5, 2 / 5]] * 3
    assert [r["gold"] for r in fit["test"]] == ["sport", "tech", "tech"]
    assert fit["setting"] == {"label": "sport"}


def test_tfidf_lr_matches_sklearn_fitted_by_hand_with_the_dev_chosen_c():
    fit = baselines.fit_predict("tfidf-lr", CLS_ROWS, LABELS, [0.01, 100.0])
    vec = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=2)
    x = vec.fit_transform([r["text"] for r in CLS_ROWS["train"]])
    # C=0.01 shrinks every weight to ~0: both dev docs get the majority label (dev macro-F1 1/3); C=100 gets both
    assert fit["setting"]["C"] == 100.0 and fit["setting"]["dev_macro_f1"] == 1.0
    model = LogisticRegression(C=100.0, max_iter=2000).fit(x, [r["label"] for r in CLS_ROWS["train"]])
    expected = model.predict(vec.transform([r["text"] for r in CLS_ROWS["test"]])).tolist()
    assert [LABELS.index(r["pred"]) for r in fit["test"]] == expected
    proba = model.predict_proba(vec.transform([r["text"] for r in CLS_ROWS["test"]]))
    np.testing.assert_allclose([r["probs"] for r in fit["test"]], proba, rtol=0, atol=1e-12)
    assert all(r["seen_fraction"] == 1.0 and r["truncated"] is False for r in fit["test"])


def test_tfidf_lr_gives_a_label_absent_from_train_probability_zero():
    labels = ["politics", *LABELS]  # id 0 never occurs in train
    rows = {split: [{**r, "label": r["label"] + 1} for r in CLS_ROWS[split]] for split in CLS_ROWS}
    fit = baselines.fit_predict("tfidf-lr", rows, labels, [100.0])
    assert all(r["probs"][0] == 0.0 and sum(r["probs"]) == pytest.approx(1.0) for r in fit["test"])
    two_labels = baselines.fit_predict("tfidf-lr", CLS_ROWS, LABELS, [100.0])["test"]
    np.testing.assert_allclose([r["probs"][1:] for r in fit["test"]], [r["probs"] for r in two_labels], atol=1e-12)


def _ner(split: str, sentences: list[tuple[list[str], list[str]]]) -> list[dict]:
    return [{"doc_id": f"{split}{i}", "window_index": 0, "words": w, "word_tags": t}
            for i, (w, t) in enumerate(sentences)]


def test_memorise_tags_each_word_with_its_most_frequent_train_tag_and_scores_with_seqeval():
    rows = {
        "train": _ner("tr", [(["John", "visited", "Paris"], ["B-PER", "O", "B-LOC"]),
                             (["paris", "hilton"], ["B-PER", "I-PER"]),
                             (["Paris", "is", "big"], ["B-LOC", "O", "O"])]),
        "dev": _ner("dv", [(["john"], ["B-PER"])]),
        # a second window of a sentence is ignored: only window 0 carries the sentence once
        "test": _ner("te", [(["paris", "john", "hilton", "x"], ["B-LOC", "B-PER", "O", "O"])])
        + [{"doc_id": "te0", "window_index": 1, "words": ["paris", "john", "hilton", "x"],
            "word_tags": ["B-LOC", "B-PER", "O", "O"]}],
    }
    fit = baselines.fit_predict("memorise", rows, [], [1.0])
    # paris: B-LOC twice, B-PER once -> B-LOC; john -> B-PER; hilton -> I-PER, which continues the PER chunk of
    # "john", so it stays I-PER; x unseen -> O
    assert [r["pred"] for r in fit["test"]] == [["B-LOC", "B-PER", "I-PER", "O"]]
    # paris 2 of 3; john, hilton 1 of 1; x unseen: O's share among the hapaxes john, visited, hilton, is, big
    assert fit["test"][0]["probs"] == pytest.approx([2 / 3, 1.0, 1.0, 3 / 5])
    scores = finetune_ner.score(fit["test"], [])
    # gold entities: LOC(0), PER(1); predicted: LOC(0), PER(1-2): 1 tp of 2 predicted, 2 gold
    assert scores["entity_precision"] == 0.5 and scores["entity_recall"] == 0.5
    assert fit["setting"] == {"lexicon_words": 6}


def test_memorise_repairs_an_orphan_inside_tag_as_conlleval_reads_it():
    rows = {"train": _ner("tr", [(["a", "b"], ["B-ORG", "I-ORG"])]), "dev": _ner("dv", [(["b"], ["O"])]),
            "test": _ner("te", [(["b", "c"], ["O", "O"])])}
    fit = baselines.fit_predict("memorise", rows, [], [1.0])
    assert fit["test"][0]["pred"] == ["B-ORG", "O"]  # "b" alone is I-ORG after O -> B-ORG
    # "b" keeps the probability of I-ORG (1 of 1); "c" unseen: no hapax (a, b) is O
    assert fit["test"][0]["probs"] == [1.0, 0.0]


def test_memorise_unseen_words_take_the_o_share_of_all_words_when_no_word_was_seen_once():
    rows = {"train": _ner("tr", [(["a", "b", "a", "b"], ["B-ORG", "O", "B-ORG", "O"])]),
            "dev": _ner("dv", [(["a"], ["O"])]), "test": _ner("te", [(["z"], ["O"])])}
    assert baselines.fit_predict("memorise", rows, [], [1.0])["test"][0]["probs"] == [0.5]


def test_unknown_baseline_is_an_error():
    with pytest.raises(ValueError, match="unknown baseline 'bm25'"):
        baselines.fit_predict("bm25", CLS_ROWS, LABELS, [1.0])
