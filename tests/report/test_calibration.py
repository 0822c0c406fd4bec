"""tasks.report.stats.calibration: equal-mass ECE, Brier, span confidences, the prediction files read back, the
paired hierarchical bootstrap, and the reliability diagram. Expected values are derived by hand or with
scikit-learn; the vectorised bootstrap kernel is checked against the plain ECE of the repeated sample."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.metrics import brier_score_loss

from tasks.report.claims.arms.calibration_arms import load_calibration
from tasks.report.claims.grammar import NotRun
from tasks.report.render import figures
from tasks.report.stats import bootstrap as bs
from tasks.report.stats import calibration as cal

# --- ECE, reliability, Brier ---------------------------------------------------------------------------------


def test_equal_mass_bins_sort_stably_and_split_like_array_split():
    # sorted: 1 (0.1), 3 (0.1, after 1 by index), 2 (0.2) | 0 (0.3), 4 (0.5): 5 units in 2 bins of 3 and 2
    assert cal.equal_mass_bins([0.3, 0.1, 0.2, 0.1, 0.5], 2).tolist() == [1, 0, 0, 0, 1]
    assert cal.equal_mass_bins([0.9, 0.2, 0.5], 15).tolist() == [2, 0, 1]  # min(15, 3) bins of one unit
    with pytest.raises(ValueError, match="n_bins"):
        cal.equal_mass_bins([0.5], 0)


def test_tied_confidences_share_a_bin_whatever_the_unit_order():
    # a majority-class predictor: confidence 0.25 on all 200 docs, right on the 50 docs of its class, which
    # sit together in doc order; any order gives one bin and ECE |50/200 - 0.25| = 0
    correct = np.arange(200) < 50
    assert cal.equal_mass_bins(np.full(200, 0.25), 15).tolist() == [0] * 200
    assert cal.ece(np.full(200, 0.25), correct) == pytest.approx(0.0, abs=1e-12)
    # array_split cuts 0.1 0.2 | 0.2 0.2 | 0.3; both cuts fall in the run of 0.2s and move to its end:
    # 0.1 0.2 0.2 0.2 | 0.3
    assert cal.equal_mass_bins([0.2, 0.1, 0.2, 0.3, 0.2], 3).tolist() == [0, 0, 0, 1, 0]


def test_a_predictor_calibrated_in_every_bin_has_ece_zero():
    # 15 confidence levels k/20 (k = 3..17), 20 units each with exactly k correct: 300 units, 15 bins of 20
    conf = np.repeat(np.arange(3, 18) / 20, 20)
    correct = np.concatenate([np.arange(20) < k for k in range(3, 18)])
    assert cal.ece(conf, correct) == pytest.approx(0.0, abs=1e-12)


def test_a_bernoulli_sample_of_its_confidence_is_nearly_calibrated():
    rng = np.random.default_rng(0)
    conf = rng.random(200_000)
    assert cal.ece(conf, rng.random(conf.size) < conf) < 0.01


def test_over_confidence_by_hand():
    # 0.9 everywhere, 6 of every 10 units right: every one of 15 bins of 10 is 60% correct -> |0.6 - 0.9|
    correct = np.tile(np.arange(10) < 6, 15)
    assert cal.ece(np.full(150, 0.9), correct) == pytest.approx(0.3)
    assert cal.ece(np.full(150, 0.9), correct, n_bins=1) == pytest.approx(0.3)
    # two bins: {0.2, 0.4} 1 of 2 right (|0.5 - 0.3| = 0.2), {0.6, 0.8} both right (|1 - 0.7| = 0.3)
    conf, hits = [0.8, 0.2, 0.6, 0.4], [True, False, True, True]
    assert cal.ece(conf, hits, n_bins=2) == pytest.approx(0.5 * 0.2 + 0.5 * 0.3)
    mean_conf, accuracy, count = cal.reliability(conf, hits, 2)
    assert mean_conf == pytest.approx([0.3, 0.7]) and accuracy.tolist() == [0.5, 1.0] and count.tolist() == [2, 2]


def test_ece_rejects_empty_and_out_of_range_input():
    with pytest.raises(ValueError, match="0 units"):
        cal.ece([], [])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        cal.ece([1.2], [True])


def test_brier_matches_sklearn_and_a_hand_value():
    rng = np.random.default_rng(1)
    conf, correct = rng.random(50), rng.random(50) < 0.7
    assert cal.brier_binary(conf, correct) == pytest.approx(brier_score_loss(correct, conf))
    # as a 2-class distribution the (summed over classes) Brier score is twice sklearn's binary one
    two = np.stack([1 - conf, conf], axis=1)
    assert cal.brier(two, correct.astype(int)) == pytest.approx(2 * brier_score_loss(correct, conf))
    # 3 classes by hand: (0.3^2 + 0.2^2 + 0.1^2) = 0.14 and (0.1^2 + 0.7^2 + 0.6^2) = 0.86 -> mean 0.5
    probs, gold = [[0.7, 0.2, 0.1], [0.1, 0.3, 0.6]], [0, 1]
    assert cal.brier(probs, gold) == pytest.approx(0.5)
    assert cal.brier(probs, gold) == pytest.approx(brier_score_loss(gold, probs, labels=[0, 1, 2], scale_by_half=False))


def test_cls_confidence_is_the_top_probability_and_correct_its_argmax():
    conf, correct = cal.cls_confidence([[0.2, 0.5, 0.3], [0.6, 0.3, 0.1]], [1, 2])
    assert conf.tolist() == [0.5, 0.6] and correct.tolist() == [True, False]


def test_span_confidences_by_hand():
    gold = ["B-PER", "I-PER", "O", "B-LOC", "O", "I-ORG", "B-ORG"]
    pred = ["B-PER", "I-PER", "O", "B-LOC", "I-LOC", "I-ORG", "B-LOC"]
    probs = [0.9, 0.8, 0.99, 0.7, 0.6, 0.5, 0.4]
    conf, correct = cal.span_confidences(gold, pred, probs)
    # PER 0-2 exact (0.9 * 0.8); LOC 3-5 against gold LOC 3-4 (0.7 * 0.6); I-ORG at 5 is no span under strict
    # IOB2; LOC 6 against gold ORG 6
    assert conf == pytest.approx([0.72, 0.42, 0.4]) and correct.tolist() == [True, False, False]
    assert cal.span_confidences(["O"], ["I-PER"], [0.9])[0].size == 0
    with pytest.raises(ValueError, match="2 probs"):
        cal.span_confidences(["O"], ["O"], [0.5, 0.5])


# --- prediction files ----------------------------------------------------------------------------------------


def _write(folder, task, key, seed, rows):
    path = folder / task / key / f"seed{seed}.test.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_load_calibration_reads_cls_and_ner_files_in_doc_id_order(tmp_path):
    _write(
        tmp_path,
        "cls",
        "a/full/cls-pool",
        1,
        [
            {"doc_id": "d2", "gold": "y", "pred": "x", "probs": [0.7, 0.3]},
            {"doc_id": "d1", "gold": "y", "pred": "y", "probs": [0.2, 0.8]},
        ],
    )
    arm = load_calibration(tmp_path, "cls", "a/full/cls-pool", [1], ["x", "y"], "cls")
    units = arm.per_seed[0]
    assert arm.doc_ids == ("d1", "d2") and arm.seeds == (1,)
    assert units.confidence.tolist() == [0.8, 0.7] and units.correct.tolist() == [True, False]
    assert units.brier == pytest.approx([0.2**2 + 0.2**2, 0.7**2 + 0.7**2])
    _write(
        tmp_path,
        "ner",
        "b/full/first",
        0,
        [
            {"doc_id": "s1", "gold": ["B-PER", "O"], "pred": ["B-PER", "B-LOC"], "probs": [0.9, 0.6]},
            {"doc_id": "s0", "gold": ["O"], "pred": ["O"], "probs": [0.99]},
        ],
    )
    units = load_calibration(tmp_path, "ner", "b/full/first", [0], [], "ner").per_seed[0]
    # s0 has no span; s1 (item 1) has PER 0 (right) and LOC 1 (spurious)
    assert units.item.tolist() == [1, 1] and units.confidence == pytest.approx([0.9, 0.6])
    assert units.correct.tolist() == [True, False] and units.brier == pytest.approx([0.01, 0.36])


def test_load_calibration_names_the_file_without_probs_or_with_other_docs(tmp_path):
    path = _write(tmp_path, "cls", "k", 0, [{"doc_id": "d1", "gold": "x", "pred": "x"}])
    with pytest.raises(ValueError, match=rf"{path}: doc 'd1' has no 'probs' \(rerun the finetune stage\)"):
        load_calibration(tmp_path, "cls", "k", [0], ["x", "y"], "cls")
    _write(tmp_path, "cls", "k", 0, [{"doc_id": "d1", "gold": "x", "pred": "x", "probs": [1.0, 0.0]}])
    other = _write(tmp_path, "cls", "k", 1, [{"doc_id": "d9", "gold": "x", "pred": "x", "probs": [1.0, 0.0]}])
    with pytest.raises(ValueError, match=f"{other}: other test docs"):
        load_calibration(tmp_path, "cls", "k", [0, 1], ["x", "y"], "cls")
    with pytest.raises(ValueError, match="3 probs"):
        load_calibration(tmp_path, "cls", "k", [0], ["x", "y", "z"], "cls")
    with pytest.raises(NotRun, match="missing"):
        load_calibration(tmp_path, "cls", "k", [7], ["x", "y"], "cls")


# --- bootstrap -----------------------------------------------------------------------------------------------


def test_the_vectorised_bootstrap_ece_is_the_ece_of_the_repeated_sample():
    rng = np.random.default_rng(2)
    for trial in range(200):
        n = int(rng.integers(1, 40))
        conf = np.round(rng.random(n), 1)  # many ties: they share a bin, as in the plain ECE
        correct = rng.random(n) < conf
        weights = rng.integers(0, 4, size=(6, n)).astype(float)
        weights[0] = 0  # a resample without any unit scores 0
        n_bins = 15 if trial % 2 else int(rng.integers(1, 8))
        order = np.argsort(conf, kind="stable")
        got = cal._weighted_ece(conf[order], correct[order].astype(float), weights[:, order], n_bins)
        expected = [0.0] + [
            cal.ece(np.repeat(conf, w.astype(int)), np.repeat(correct, w.astype(int)), n_bins) if w.sum() else 0.0
            for w in weights[1:]
        ]
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)


def _cls_arm(name: str, seeds: tuple[int, ...], over: float, n: int = 220) -> cal.ArmCalibration:
    """An arm whose seed ``s`` is right on a Bernoulli(c) draw, c ~ U(0.3, 0.7), and states ``c + over``."""
    per_seed = []
    for s in seeds:
        rng = np.random.default_rng(100 + s)
        c = rng.uniform(0.3, 0.7, n)
        conf, correct = c + over, rng.random(n) < c
        per_seed.append(
            cal.SeedUnits(np.arange(n), conf, correct, (conf - correct) ** 2, cal.nll_binary_terms(conf, correct))
        )
    return cal.ArmCalibration(name, "cls", tuple(f"d{i:03d}" for i in range(n)), seeds, tuple(per_seed))


def test_bootstrap_interval_contains_the_point_and_is_reproducible():
    arm = _cls_arm("over", (1, 2, 3), over=0.25)
    for statistic in ("ece", "brier"):
        (est,), reps = cal.estimates([arm], statistic, 15, 2000, np.random.default_rng(0), 0.95)
        assert est.low < est.point < est.high and reps.shape == (2000, 1)
        assert est == cal.estimates([arm], statistic, 15, 2000, np.random.default_rng(0), 0.95)[0][0]
    plug_in = np.mean([cal.ece(u.confidence, u.correct) for u in arm.per_seed])
    assert cal.point_estimate(arm, "ece", 15) == plug_in
    # Brier is a mean of per-item terms: its point is the plug-in mean; ECE's is bias-corrected, below the plug-in
    (brier,), _ = cal.estimates([arm], "brier", 15, 500, np.random.default_rng(0), 0.95)
    assert brier.point == cal.point_estimate(arm, "brier", 15)
    (ece,), reps = cal.estimates([arm], "ece", 15, 2000, np.random.default_rng(0), 0.95)
    assert ece.point == pytest.approx(reps[:, 0].mean()) and ece.point < plug_in


def test_bootstrap_brier_spread_is_the_standard_error_of_a_mean_over_items():
    # one seed: the Brier score is the mean of per-item terms, whose bootstrap SD is sd(terms) / sqrt(n)
    arm = _cls_arm("one", (0,), over=0.0, n=200)
    reps = cal.replicates([arm], "brier", 15, 20_000, np.random.default_rng(3))[:, 0]
    terms = arm.per_seed[0].brier
    assert reps.std() == pytest.approx(terms.std() / np.sqrt(terms.size), rel=0.03)
    # and their mean is the full-sample mean, to 4 standard errors of a mean of 20,000 replicates
    assert reps.mean() == pytest.approx(terms.mean(), abs=4 * terms.std() / np.sqrt(terms.size) / np.sqrt(20_000))


def test_bootstrap_brier_and_nll_are_the_means_over_the_repeated_units_of_each_draw():
    # ner-like units: several spans per sentence, sentences without a span; each replicate's value must be the
    # plain mean of the terms of the units of the drawn items, each repeated as often as its item was drawn
    rng = np.random.default_rng(5)
    n_items, seeds = 30, (0, 1)
    per_seed = []
    for _ in seeds:
        item = np.sort(rng.integers(0, n_items, size=45))
        conf = rng.uniform(0.2, 0.99, item.size)
        hit = rng.random(item.size) < conf
        per_seed.append(cal.SeedUnits(item, conf, hit, (conf - hit) ** 2, cal.nll_binary_terms(conf, hit)))
    arm = cal.ArmCalibration("ner", "ner", tuple(f"s{i:02d}" for i in range(n_items)), seeds, tuple(per_seed))
    for statistic in ("brier", "nll"):
        got = cal.replicates([arm], statistic, 15, 50, np.random.default_rng(9))[:, 0]
        again = np.random.default_rng(9)  # replay the draws: the seed indices first, then the item counts
        seed_idx = bs.seed_draws([len(seeds)], 50, again, True)[0]
        draws = again.multinomial(n_items, np.full(n_items, 1.0 / n_items), size=50)
        expected = []
        for r in range(50):
            values = []
            for s in seed_idx[r]:
                units = per_seed[s]
                repeat = draws[r, units.item]
                terms = np.repeat(units.terms(statistic), repeat)
                values.append(terms.mean() if terms.size else 0.0)
            expected.append(np.mean(values))
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


def test_pretraining_seeds_are_drawn_at_the_top_of_the_calibration_bootstrap():
    # two pretraining seeds, 5 fine-tuning seeds each; every unit of pretraining seed "first" has Brier term 0.1 and
    # of seed "21" 0.3, so only the pretraining-seed draw moves a replicate: 2 draws with replacement give 0.1, 0.2
    # or 0.3 with probability 1/4, 1/2, 1/4 (a flat draw of 10 runs would almost never give 0.1)
    n, fine = 40, (1, 2, 3, 4, 5)
    units = [
        cal.SeedUnits(np.arange(n), np.full(n, 0.7), np.ones(n, bool), np.full(n, term), np.full(n, 0.5))
        for term in [0.1] * 5 + [0.3] * 5
    ]
    arm = cal.ArmCalibration(
        "pooled", "cls", tuple(f"d{i}" for i in range(n)), fine * 2, tuple(units), pretrain=("first",) * 5 + ("21",) * 5
    )
    reps = cal.replicates([arm], "brier", 15, 4000, np.random.default_rng(4))[:, 0]
    assert set(np.round(reps, 9)) <= {0.1, 0.2, 0.3}
    assert np.mean(np.isclose(reps, 0.1)) == pytest.approx(0.25, abs=0.03)
    assert np.mean(np.isclose(reps, 0.2)) == pytest.approx(0.5, abs=0.03)
    assert cal.point_estimate(arm, "brier", 15) == pytest.approx(0.2)


def test_a_difference_of_an_arm_with_itself_is_exactly_zero():
    arm = _cls_arm("a", (1, 2, 3), over=0.05)
    (first, second), reps = cal.estimates([arm, arm], "ece", 15, 500, np.random.default_rng(0), 0.95)
    assert first == second and not (reps[:, 0] - reps[:, 1]).any()


def test_a_difference_pairs_items_and_separates_an_over_confident_arm():
    calibrated, over = _cls_arm("c", (1, 2, 3), over=0.0), _cls_arm("o", (1, 2, 3), over=0.25)
    baseline = _cls_arm("b", (0,), over=0.25)  # one seed: repeated in every replicate
    for other in (over, baseline):
        _, reps = cal.estimates([calibrated, other], "ece", 15, 2000, np.random.default_rng(0), 0.95)
        low, high = bs.percentile_ci(reps[:, 0] - reps[:, 1], 0.95)
        assert high < 0 and reps.shape == (2000, 2)
    with pytest.raises(ValueError, match="one test set"):
        cal.estimates([calibrated, _cls_arm("x", (1,), 0.0, n=10)], "ece", 15, 10, np.random.default_rng(0), 0.95)


def test_a_ner_seed_without_a_predicted_span_is_named():
    empty = cal.SeedUnits(
        np.array([], dtype=np.intp), np.array([]), np.array([], dtype=bool), np.array([]), np.array([])
    )
    arm = cal.ArmCalibration("data/finetune/ner/k", "ner", ("s0",), (4,), (empty,))
    with pytest.raises(ValueError, match="ner/k: seed 4 has no calibration unit"):
        cal.estimates([arm], "ece", 15, 10, np.random.default_rng(0), 0.95)


# --- figure --------------------------------------------------------------------------------------------------


def test_reliability_diagram_writes_the_same_png_bytes_twice(tmp_path):
    curves = {"pretrained": _cls_arm("p", (1, 2), 0.0).pooled(), "random": _cls_arm("r", (1, 2), 0.2).pooled()}
    first = figures.reliability_diagram(curves, tmp_path / "a.png", 15, 60).read_bytes()
    assert first[:8] == b"\x89PNG\r\n\x1a\n"
    assert figures.reliability_diagram(curves, tmp_path / "b.png", 15, 60).read_bytes() == first
    with pytest.raises(NotRun, match="no arm"):
        figures.reliability_diagram({}, tmp_path / "c.png", 15, 60)
