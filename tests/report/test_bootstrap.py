"""tasks.report.stats.bootstrap: metrics from counts, the paired hierarchical bootstrap and the tests built on it.

Every expected value is derived independently: by hand, from sklearn, or from the analytic variance of the
bootstrap on a case whose structure is known.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import accuracy_score, f1_score

from tasks.report.stats import bootstrap as bs


def _additive_arm(seed_effects: np.ndarray, item_effects: np.ndarray) -> np.ndarray:
    """One-class counts ``[tp, fp, fn] = [x, 0, 1 - x]`` with ``x[s, i] = seed_effects[s] + item_effects[i]``.

    Accuracy on weighted counts is then ``mean_w(x)``, an additive seed + item model.
    """
    x = seed_effects[:, None] + item_effects[None, :]
    return np.stack([x, np.zeros_like(x), 1 - x], axis=-1)


def _diff(replicates: np.ndarray) -> np.ndarray:
    return replicates[:, 0] - replicates[:, 1]


# --- metrics from counts -------------------------------------------------------------------------------------


def test_classification_metrics_match_sklearn():
    rng = np.random.default_rng(0)
    n_classes = 6  # class 4 is only ever predicted, class 5 never occurs: both exercise the 0 rules
    for _ in range(5):
        gold = rng.integers(0, 4, size=300)
        pred = np.where(rng.random(300) < 0.6, gold, rng.integers(0, 5, size=300))
        total = bs.class_counts(gold, pred, n_classes).sum(axis=0)
        labels = list(range(n_classes))
        assert bs.accuracy_from_counts(total) == pytest.approx(accuracy_score(gold, pred))
        assert bs.macro_f1_from_counts(total) == pytest.approx(
            f1_score(gold, pred, average="macro", labels=labels, zero_division=0)
        )
        per_class = f1_score(gold, pred, average=None, labels=labels, zero_division=0)
        for c in labels:
            assert bs.class_f1_from_counts(total, c) == pytest.approx(per_class[c])


def test_class_counts_layout_by_hand():
    counts = bs.class_counts(np.array([0, 1, 2]), np.array([0, 2, 2]), 3)
    # columns: tp0 tp1 tp2 | fp0 fp1 fp2 | fn0 fn1 fn2
    expected = [[1, 0, 0, 0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 1, 0, 1, 0], [0, 0, 1, 0, 0, 0, 0, 0, 0]]
    np.testing.assert_array_equal(counts, expected)
    with pytest.raises(ValueError, match="pred labels"):
        bs.class_counts(np.array([0]), np.array([3]), 3)


def test_metrics_vectorise_over_leading_axes():
    counts = np.random.default_rng(1).integers(0, 5, size=(2, 3, 9)).astype(float)
    got = bs.macro_f1_from_counts(counts)
    assert got.shape == (2, 3)
    for i in range(2):
        for j in range(3):
            assert got[i, j] == pytest.approx(bs.macro_f1_from_counts(counts[i, j]))


def test_micro_f1_by_hand():
    sentences = np.array([[2, 3, 2], [0, 1, 0], [1, 1, 2], [0, 0, 0]])  # tp=3, n_pred=5, n_gold=4 in all
    total = sentences.sum(axis=0)
    assert bs.micro_f1_from_counts(total) == pytest.approx(6 / 9)
    assert bs.precision_from_counts(total) == pytest.approx(3 / 5)
    assert bs.recall_from_counts(total) == pytest.approx(3 / 4)
    np.testing.assert_array_equal(bs.micro_f1_from_counts(sentences), [0.8, 0.0, 2 / 3, 0.0])
    assert bs.precision_from_counts(np.array([0, 0, 2])) == 0.0


def test_point_estimate_is_mean_over_seeds():
    gold = np.array([0, 1, 1, 0])
    arm = np.stack([bs.class_counts(gold, np.array([0, 1, 0, 1]), 2), bs.class_counts(gold, gold, 2)])
    assert bs.point_estimate(arm, bs.accuracy_from_counts) == pytest.approx((0.5 + 1.0) / 2)


# --- hierarchical bootstrap ------------------------------------------------------------------------------------


def test_one_seed_difference_matches_analytic_se():
    rng = np.random.default_rng(2)
    n = 200
    gold = rng.integers(0, 2, size=n)
    right_a, right_b = rng.random(n) < 0.8, rng.random(n) < 0.7
    arm_a = bs.class_counts(gold, np.where(right_a, gold, 1 - gold), 2)[None]
    arm_b = bs.class_counts(gold, np.where(right_b, gold, 1 - gold), 2)[None]
    d = right_a.astype(float) - right_b.astype(float)
    b = 20000
    diff = _diff(bs.hierarchical_bootstrap([arm_a, arm_b], bs.accuracy_from_counts, b, seed=0, shared_seeds=False))
    # multinomial weights: Var(sum_i w_i d_i / n) = var(d, ddof=0) / n exactly
    se = np.std(d) / np.sqrt(n)
    assert diff.std() == pytest.approx(se, rel=0.05)
    assert abs(diff.mean() - d.mean()) < 5 * se / np.sqrt(b)


def test_seed_and_item_variance_add_up():
    rng = np.random.default_rng(3)
    seed_effects = np.array([0.10, 0.15, 0.20, 0.25, 0.30])
    item_effects = rng.uniform(0, 0.5, size=50)
    arm = _additive_arm(seed_effects, item_effects)
    reps = bs.hierarchical_bootstrap([arm], bs.accuracy_from_counts, 20000, seed=1, shared_seeds=False)[:, 0]
    # mean of S seeds drawn with replacement, plus an independent item mean of n items drawn with replacement
    expected = np.var(seed_effects) / 5 + np.var(item_effects) / 50
    assert reps.var() == pytest.approx(expected, rel=0.05)
    assert reps.mean() == pytest.approx(bs.point_estimate(arm, bs.accuracy_from_counts), abs=1e-3)


def test_shared_seeds_cancel_the_seed_variance_of_a_difference():
    rng = np.random.default_rng(4)
    seed_effects = np.array([0.10, 0.15, 0.20, 0.25, 0.30])
    items_a, items_b = rng.uniform(0, 0.5, size=60), rng.uniform(0, 0.5, size=60)
    arms = [_additive_arm(seed_effects, items_a), _additive_arm(seed_effects, items_b)]
    item_var = np.var(items_a - items_b) / 60
    shared = _diff(bs.hierarchical_bootstrap(arms, bs.accuracy_from_counts, 20000, seed=2, shared_seeds=True))
    independent = _diff(bs.hierarchical_bootstrap(arms, bs.accuracy_from_counts, 20000, seed=2, shared_seeds=False))
    assert shared.var() == pytest.approx(item_var, rel=0.05)
    assert independent.var() == pytest.approx(2 * np.var(seed_effects) / 5 + item_var, rel=0.05)


def test_identical_arms_have_zero_difference_in_every_replicate():
    rng = np.random.default_rng(5)
    gold = rng.integers(0, 3, size=40)
    one_seed = bs.class_counts(gold, rng.integers(0, 3, size=40), 3)[None]
    reps = bs.hierarchical_bootstrap([one_seed, one_seed.copy()], bs.macro_f1_from_counts, 500, 0, False)
    np.testing.assert_array_equal(_diff(reps), 0.0)
    assert reps[:, 0].std() > 0  # the items were resampled
    five = np.stack([bs.class_counts(gold, rng.integers(0, 3, size=40), 3) for _ in range(5)])
    reps = bs.hierarchical_bootstrap([five, five.copy()], bs.macro_f1_from_counts, 500, 0, True)
    np.testing.assert_array_equal(_diff(reps), 0.0)
    unshared = _diff(bs.hierarchical_bootstrap([five, five.copy()], bs.macro_f1_from_counts, 4000, 0, False))
    assert unshared.std() > 0
    assert abs(unshared.mean()) < 5 * unshared.std() / np.sqrt(unshared.size)


def test_same_seed_same_replicates_and_chunking_does_not_matter(monkeypatch):
    rng = np.random.default_rng(6)
    arms = [rng.integers(0, 4, size=(s, 30, 3)).astype(float) for s in (5, 1, 3)]
    run = bs.hierarchical_bootstrap
    first = run(arms, bs.micro_f1_from_counts, 300, seed=7, shared_seeds=False)
    assert first.shape == (300, 3)
    np.testing.assert_array_equal(first, run(arms, bs.micro_f1_from_counts, 300, seed=7, shared_seeds=False))
    assert not np.array_equal(first, run(arms, bs.micro_f1_from_counts, 300, seed=8, shared_seeds=False))
    monkeypatch.setattr(bs, "_CHUNK_BYTES", 8 * 100 * 7)  # a few replicates per chunk
    np.testing.assert_array_equal(first, run(arms, bs.micro_f1_from_counts, 300, seed=7, shared_seeds=False))


def test_bootstrap_rejects_inconsistent_arms():
    arm = np.ones((2, 10, 3))
    metric = bs.micro_f1_from_counts
    with pytest.raises(ValueError, match="n_items differ: arm 0 has 10, arm 1 has 9"):
        bs.hierarchical_bootstrap([arm, np.ones((2, 9, 3))], metric, 10, 0, False)
    with pytest.raises(ValueError, match="K .* differ: arm 0 has 3, arm 1 has 6"):
        bs.hierarchical_bootstrap([arm, np.ones((2, 10, 6))], metric, 10, 0, False)
    with pytest.raises(ValueError, match="shared_seeds needs equal seed counts: arm 0 has 2 seeds, arm 1 has 1"):
        bs.hierarchical_bootstrap([arm, np.ones((1, 10, 3))], metric, 10, 0, True)
    with pytest.raises(ValueError, match="0 test items"):
        bs.hierarchical_bootstrap([np.ones((2, 0, 3))], metric, 10, 0, False)
    with pytest.raises(ValueError, match="metric must map"):
        bs.hierarchical_bootstrap([arm], lambda c: c.sum(axis=(-1, -2)), 10, 0, False)


# --- intervals, p-values, multiplicity, equivalence, effect size ----------------------------------------------


def test_percentile_ci_by_hand_and_clipped():
    reps = np.arange(101.0)  # the q-quantile is exactly 100 q
    assert bs.percentile_ci(reps, 0.9, None) == pytest.approx((5.0, 95.0))
    assert bs.percentile_ci(reps, 0.9, (10.0, 50.0)) == (10.0, 50.0)
    assert bs.percentile_ci(np.linspace(0.9, 1.2, 101), 0.5, (0.0, 1.0))[1] == 1.0
    with pytest.raises(ValueError, match="level"):
        bs.percentile_ci(reps, 1.0, None)


def test_p_value_plus_one_correction():
    reps = np.array([-1.0, 0.0, 1.0, 2.0])
    assert bs.p_value(reps, 0.0, "greater") == pytest.approx(3 / 5)  # #{d <= 0} = 2
    assert bs.p_value(reps, 0.0, "less") == pytest.approx(4 / 5)  # #{d >= 0} = 3
    assert bs.p_value(reps, -5.0, "greater") == pytest.approx(1 / 5)
    with pytest.raises(ValueError, match="alternative"):
        bs.p_value(reps, 0.0, "two-sided")


def test_holm_by_hand():
    adjusted = bs.holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.005})
    # sorted d, a, c, b: 4 * .005, 3 * .01, 2 * .03, then max(.06, 1 * .04)
    assert adjusted == pytest.approx({"d": 0.02, "a": 0.03, "c": 0.06, "b": 0.06})
    assert bs.holm({"x": 0.6, "y": 0.7}) == pytest.approx({"x": 1.0, "y": 1.0})
    assert bs.holm({}) == {}


def test_holm_matches_reference_formula_and_step_down_rule():
    rng = np.random.default_rng(9)
    for _ in range(50):
        p = rng.uniform(0, 0.1, size=8) ** rng.uniform(0.5, 2)
        family = {f"claim{i}": float(v) for i, v in enumerate(p)}
        adjusted = bs.holm(family)
        # statsmodels' multipletests(method="holm"), written out
        order = np.argsort(p)
        reference = np.minimum(1, np.maximum.accumulate(p[order] * np.arange(8, 0, -1)))
        np.testing.assert_allclose([adjusted[f"claim{i}"] for i in order], reference)
        for alpha in (0.01, 0.05, 0.1):
            rejected = set()
            for j, i in enumerate(order):  # step down: stop at the first p_(j) > alpha / (m - j + 1)
                if p[i] > alpha / (8 - j):
                    break
                rejected.add(f"claim{i}")
            assert {k for k, v in adjusted.items() if v <= alpha} == rejected


def test_tost():
    rng = np.random.default_rng(10)
    tight = rng.normal(0.0, 0.01, size=2000)
    assert bs.tost_p_value(tight, 0.05) < 0.01
    assert bs.tost_p_value(tight + 0.1, 0.05) > 0.99
    # p_lower = (1 + #{d <= -.05}) / 6 = 1/6, p_upper = (1 + #{d >= .05}) / 6 = 2/6
    assert bs.tost_p_value(np.array([-0.03, -0.01, 0.0, 0.02, 0.06]), 0.05) == pytest.approx(2 / 6)
    for margin in (0.0, -0.1):
        with pytest.raises(ValueError, match="margin"):
            bs.tost_p_value(tight, margin)


def test_cohens_d_by_hand():
    # means 4 and 2; sums of squares 8 and 2 over 3 + 2 - 2 = 3 dof
    assert bs.cohens_d([2, 4, 6], [1, 3]) == pytest.approx(2 / np.sqrt(10 / 3))
    # deterministic baseline: only the treatment's spread, var 0.02 / 2 = 0.01
    assert bs.cohens_d([0.8, 0.9, 1.0], [0.5]) == pytest.approx(4.0)
    assert bs.cohens_d([0.7], [0.5]) is None
    assert bs.cohens_d([0.1, 0.1, 0.1], [0.2, 0.2]) is None
    with pytest.raises(ValueError, match="both arms"):
        bs.cohens_d([], [0.5])
