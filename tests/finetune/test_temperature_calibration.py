"""Temperature scaling on dev (tasks/finetune/temperature.py): the fitted T against a closed form and a brute-force
grid, NLL against sklearn's log_loss, and the scaled test probabilities of cls and ner records."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import softmax
from sklearn.metrics import log_loss

from tasks.finetune import temperature


def test_fitted_temperature_matches_the_closed_form_of_a_two_class_case():
    # every unit has logits (a, 0), and a share q of them has gold 0: NLL(T) is minimal where sigmoid(a / T) = q,
    # i.e. T = a / logit(q); a = 2, q = 3/4: T = 2 / ln 3
    logp = np.tile([2.0, 0.0], (8, 1))
    gold = np.array([0] * 6 + [1] * 2)
    assert temperature.fit_temperature(logp, gold) == pytest.approx(2 / math.log(3), abs=1e-4)
    # overconfident the other way: q = 0.95 > sigmoid(2) needs T < 1
    gold = np.array([0] * 19 + [1])
    assert temperature.fit_temperature(np.tile([2.0, 0.0], (20, 1)), gold) == pytest.approx(2 / math.log(19), abs=1e-4)


def test_fitted_temperature_is_the_minimum_of_a_brute_force_grid_and_nll_is_sklearns_log_loss():
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 3, size=(200, 4))
    gold = np.array([rng.choice(4, p=softmax(row / 2.5)) for row in logits])  # drawn as if T were 2.5
    fitted = temperature.fit_temperature(logits, gold)
    grid = np.exp(np.linspace(math.log(0.05), math.log(20), 4001))
    brute = grid[np.argmin([temperature.nll(logits, gold, t) for t in grid])]
    assert fitted == pytest.approx(brute, rel=2e-3)  # grid step 0.15% in T
    for t in (1.0, fitted):
        expected = log_loss(gold, softmax(logits / t, axis=1), labels=range(4))
        assert temperature.nll(logits, gold, t) == pytest.approx(expected, rel=1e-9)
    assert temperature.nll(logits, gold, fitted) <= temperature.nll(logits, gold)


def test_scale_records_fits_on_dev_and_scales_cls_distributions_without_moving_the_argmax():
    dev = [{"doc_id": f"d{i}", "gold": "a" if i < 6 else "b", "probs": list(softmax([2.0, 0.0]))} for i in range(8)]
    test = [{"doc_id": "t", "gold": "b", "probs": [0.2, 0.8]}]
    facts = temperature.scale_records(dev, test, ["a", "b"])
    t = 2 / math.log(3)
    assert facts["temperature"] == pytest.approx(t, abs=1e-4) and facts["dev_units"] == 8
    assert facts["dev_nll_scaled"] <= facts["dev_nll"]
    expected = softmax(np.log([0.2, 0.8]) / t)
    assert test[0]["probs_scaled"] == pytest.approx(expected.tolist(), abs=1e-5)
    assert np.argmax(test[0]["probs_scaled"]) == 1


def test_scale_records_of_ner_fits_on_dev_words_and_scales_each_words_predicted_tag():
    labels = ["B-X", "O"]
    # 4 dev words at (0.9 O, 0.1 B-X), one of them B-X: the optimum puts 3/4 on O, T = ln 9 / ln 3 = 2
    dev = [
        {
            "doc_id": "d",
            "gold": ["O", "O", "O", "B-X"],
            "pred": ["O"] * 4,
            "probs": [0.9] * 4,
            "tag_probs": [[0.1, 0.9]] * 4,
        }
    ]
    # a word whose probability is not its distribution's top (a Viterbi tag, or memorise's repaired tag)
    test = [
        {
            "doc_id": "t",
            "gold": ["B-X", "O"],
            "pred": ["B-X", "O"],
            "probs": [0.4, 0.7],
            "tag_probs": [[0.4, 0.6], [0.3, 0.7]],
        }
    ]
    facts = temperature.scale_records(dev, test, labels)
    assert facts["temperature"] == pytest.approx(2.0, abs=1e-4) and facts["dev_units"] == 4
    root = np.sqrt
    expected = [root(0.4) / (root(0.4) + root(0.6)), root(0.7) / (root(0.3) + root(0.7))]
    assert test[0]["probs_scaled"] == pytest.approx(expected, abs=1e-5)


def test_bad_dev_records_are_errors_naming_the_doc():
    with pytest.raises(ValueError, match="doc 'd'"):
        temperature.scale_records([{"doc_id": "d", "gold": "c", "probs": [0.5, 0.5]}], [], ["a", "b"])
    with pytest.raises(ValueError, match="n >= 1"):
        temperature.fit_temperature(np.zeros((0, 2)), np.zeros(0))
