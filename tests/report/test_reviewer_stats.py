"""The comparisons reviewers ask for (issue 58, item 6), each against an independent derivation: the probability of
improvement against scipy's Mann-Whitney U and a hand count, its bootstrap against a per-replicate loop; ASO's
eps_min against deepsig.aso itself (same seeds, same value) and deepsig's documented extremes; the expected maximum
of Dodge et al. (2019) against a brute-force enumeration of every draw."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
from scipy import stats

from tasks.report.stats.aso import epsilon_min, quantile, violation_ratio
from tasks.report.stats.evp import expected_max, expected_max_curve
from tasks.report.stats.improvement import improvement_ci, improvement_replicates, probability_of_improvement


def test_improvement_hand_case():
    # pairs (x, y): 3 > 1, 3 > 2, 3 = 3 (1/2); 2 > 1, 2 = 2 (1/2), 2 < 3 -> (2 + 0.5 + 1 + 0.5) / 6 = 4 / 6
    assert probability_of_improvement(np.array([3.0, 2.0]), np.array([1.0, 2.0, 3.0])) == pytest.approx(4 / 6)
    assert probability_of_improvement(np.array([1.0, 2.0]), np.array([1.0, 2.0])) == 0.5
    assert probability_of_improvement(np.array([5.0]), np.array([1.0, 2.0])) == 1.0


def test_improvement_is_mann_whitney_u_over_nm():
    rng = np.random.default_rng(3)
    x, y = rng.normal(0.8, 0.03, 20).round(2), rng.normal(0.79, 0.03, 13).round(2)  # rounded: ties present
    u = stats.mannwhitneyu(x, y, alternative="greater").statistic
    assert probability_of_improvement(x, y) == pytest.approx(u / (x.size * y.size), abs=1e-12)


def test_improvement_bootstrap_draws_each_arm_on_its_own():
    x, y = np.array([0.7, 0.8, 0.9, 0.85]), np.array([0.75, 0.8, 0.6])
    replicates = improvement_replicates(x, y, 700, seed=5)  # two chunks of the comparison
    rng = np.random.default_rng(5)
    draws_x, draws_y = rng.integers(0, 4, size=(700, 4)), rng.integers(0, 3, size=(700, 3))
    loop = [probability_of_improvement(x[a], y[b]) for a, b in zip(draws_x, draws_y, strict=True)]
    np.testing.assert_allclose(replicates, loop, atol=1e-12)
    point, low, high = improvement_ci(x, y, 0.95, 700, 5)
    assert point == probability_of_improvement(x, y)
    assert (low, high) == pytest.approx(tuple(np.quantile(loop, [0.025, 0.975])))
    assert improvement_ci(x + 1, y, 0.95, 200, 0)[1:] == (1.0, 1.0)  # every run above: no resample says otherwise


@pytest.mark.parametrize("bad", [np.array([]), np.array([[0.1, 0.2]]), np.array([0.1, np.nan])])
def test_improvement_refuses_bad_scores(bad):
    with pytest.raises(ValueError, match="non-empty finite 1-D"):
        probability_of_improvement(bad, np.array([0.5]))


def test_aso_equals_deepsig():
    deepsig = pytest.importorskip("deepsig")
    rng = np.random.default_rng(0)
    cases = [
        (rng.normal(0.81, 0.02, 7), rng.normal(0.8, 0.02, 12)),
        (rng.normal(0.8, 0.02, 20), rng.normal(0.8, 0.02, 20)),
    ]
    for x, y in cases + [(np.array([0.5, 0.6, 0.7]), np.array([0.5, 0.6, 0.7]))]:  # equal samples: 0.5 +- nothing
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # deepsig warns on a zero Wasserstein distance
            theirs = deepsig.aso(x, y, confidence_level=0.95, num_bootstrap_iterations=50, seed=11, show_progress=False)
        assert epsilon_min(x, y, 0.95, 50, 11) == pytest.approx(theirs, abs=1e-12)


def test_aso_extremes_as_deepsig_documents():
    rng = np.random.default_rng(1)
    low, high = rng.normal(0.5, 0.02, 20), rng.normal(0.9, 0.02, 20)
    assert epsilon_min(high, low, 0.95, 300, 0) == pytest.approx(0.0, abs=0.01)  # total stochastic order
    assert epsilon_min(low, high, 0.95, 300, 0) == pytest.approx(1.0, abs=0.01)
    same = rng.normal(0.7, 0.02, (400, 2, 50))  # 400 pairs of samples of one distribution
    ratios = violation_ratio(same[:, 0], same[:, 1])
    assert ratios.mean() == pytest.approx(0.5, abs=0.05)  # exchangeable: 0.5 on average (one pair varies widely)
    assert epsilon_min(same[0, 0], same[0, 0] + 1e-8, 0.95, 100, 0) == pytest.approx(1.0, abs=0.001)  # deepsig's test


def test_violation_ratio_by_hand():
    # x's quantiles [0, 2], y's [1, 1] on halves of (0, 1): squared gaps 1 and 1, x below y on the first half only
    t = np.arange(0.005, 1, 0.005)
    assert quantile(np.array([0.0, 2.0]), t)[[0, -1]].tolist() == [0.0, 2.0]
    assert float(violation_ratio(np.array([0.0, 2.0]), np.array([1.0, 1.0]))) == pytest.approx(99 / 199, abs=1e-12)
    # t = 0.005..0.5 (100 points) has x below y, minus the first point: 99 of the distance's 199 points


def test_expected_max_matches_enumeration():
    values = np.array([0.2, 0.5, 0.5, 0.9])
    for n in (1, 2, 3):
        draws = list(itertools.product(values, repeat=n))  # every ordered draw with replacement, equally likely
        assert expected_max(values, n) == pytest.approx(np.mean([max(d) for d in draws]), abs=1e-12)
    curve = expected_max_curve(values, 60)
    assert curve[0] == pytest.approx(values.mean()) and curve[-1] == pytest.approx(0.9, abs=1e-6)
    assert np.all(np.diff(curve) >= 0)


def test_expected_max_refuses_bad_input():
    with pytest.raises(ValueError, match="budget"):
        expected_max_curve(np.array([0.1]), 0)
    with pytest.raises(ValueError, match="dev scores"):
        expected_max(np.array([]), 1)
