"""The minimum detectable effect (tasks/report/power.py): Bloom's formula by hand, the bootstrap SE against the
analytic one, a planted effect at the MDE found about 80% of the time, and the MDE of evaluated claims."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats
from sklearn.metrics import f1_score
from test_report_items import ARMS, GOLD, STATS, claim, write_workspace  # tests/ is on sys.path (rootdir import)

from tasks.common.provenance import Lock
from tasks.report import bootstrap as bs
from tasks.report.evaluation import evaluate
from tasks.report.power import Power, describe, minimum_detectable_effect, underpowered


def test_bloom_multiplier_by_hand():
    # z_0.975 = 1.959964, z_0.8 = 0.841621: the familiar 2.80 of Bloom 1995 (two-sided 5%, 80% power)
    assert minimum_detectable_effect(1.0, 0.05, 0.8) == pytest.approx(1.959964 + 0.841621, abs=1e-6)
    # t with 2 df (3 paired seeds): t_0.975(2) = 4.302653, t_0.8(2) = 1.060660
    assert minimum_detectable_effect(0.01, 0.05, 0.8, df=2) == pytest.approx(0.01 * (4.302653 + 1.060660), abs=1e-8)
    with pytest.raises(ValueError):
        minimum_detectable_effect(-1.0, 0.05, 0.8)


def test_units_needed_scale_with_the_square_of_mde_over_min_effect():
    p = Power(mde=0.06, se=0.06 / 2.8, alpha=0.05, power=0.8, n=200, unit="test items", min_effect=0.02)
    assert not p.detectable and p.n_needed == 1800  # 200 * (0.06 / 0.02)^2
    assert underpowered(p) == "underpowered: MDE 0.0600 > min_effect 0.02"
    assert "about 1800 test items would make it so" in describe(p)
    ok = Power(mde=0.01, se=0.01 / 2.8, alpha=0.05, power=0.8, n=50, unit="seeds", min_effect=-0.05)
    assert ok.detectable and underpowered(ok) == "" and "min_effect 0.05 was detectable" in describe(ok)


def _arms(rng: np.random.Generator, n: int, p_treat: float, p_base: float) -> list[np.ndarray]:
    """Two one-seed arms of a binary classifier on ``n`` items (layout of ``bootstrap.class_counts``): each item
    right with probability ``p``, independently per arm."""
    gold = rng.integers(0, 2, n)
    out = []
    for p in (p_treat, p_base):
        right = rng.random(n) < p
        out.append(bs.class_counts(gold, np.where(right, gold, 1 - gold), 2)[None])
    return out


def _detected(rng: np.random.Generator, n: int, effect: float, seed: int, alpha: float) -> bool:
    """Plant ``effect`` (accuracies 0.5 +- effect / 2, so each arm's variance stays ~0.25) on ``n`` fresh items;
    detected = the two-sided ``1 - alpha`` percentile CI of the hierarchical bootstrap excludes 0 above."""
    reps = bs.hierarchical_bootstrap(_arms(rng, n, 0.5 + effect / 2, 0.5 - effect / 2), bs.accuracy_from_counts,
                                     300, seed, shared_seeds=True)
    return bs.percentile_ci(reps[:, 0] - reps[:, 1], 1 - alpha)[0] > 0


@pytest.mark.slow
def test_a_planted_effect_at_the_mde_is_detected_about_80_percent_of_the_time():
    rng = np.random.default_rng(20260)
    n, alpha, trials = 200, 0.05, 250
    # pilot: both arms right half the time; SE of the accuracy difference from the hierarchical bootstrap
    pilot = bs.hierarchical_bootstrap(_arms(rng, n, 0.5, 0.5), bs.accuracy_from_counts, 4000, 1, shared_seeds=True)
    se = float(np.std(pilot[:, 0] - pilot[:, 1], ddof=1))
    assert se == pytest.approx(math.sqrt(2 * 0.25 / n), rel=0.1)  # two independent Bernoulli(0.5) means
    mde = minimum_detectable_effect(se, alpha, 0.8)
    rate = sum(_detected(rng, n, mde, k, alpha) for k in range(trials)) / trials
    assert 0.72 <= rate <= 0.88  # 0.8 +- 3.2 binomial SDs (sqrt(0.16 / 250) = 0.025)
    # at half the MDE the power is far lower: Phi(2.80 / 2 - 1.96) = 0.29 by the normal approximation
    half = sum(_detected(rng, n, mde / 2, k, alpha) for k in range(150)) / 150
    assert 0.17 <= half <= 0.41  # 0.29 +- 3.2 SDs (sqrt(0.29 * 0.71 / 150) = 0.037)


def test_an_item_level_claim_reports_the_mde_of_its_bootstrap(tmp_path):
    metrics = write_workspace(tmp_path)
    row = evaluate(claim("pretrained/full/mean-pool", "random/full/mean-pool", min_effect=0.3), metrics, Lock({}),
                   STATS)
    # the same bootstrap as the CI: the 95% percentile interval's half-width is ~1.96 SE for a near-normal spread
    half_width = (row.difference.high - row.difference.low) / 2
    assert row.power.se == pytest.approx(half_width / stats.norm.ppf(0.975), rel=0.15)
    assert row.power.mde == pytest.approx(row.power.se * (stats.norm.ppf(0.975) + stats.norm.ppf(0.8)))
    assert row.power.n == 20 and row.power.unit == "test items"
    deltas = [f1_score(GOLD, t, average="macro") - f1_score(GOLD, b, average="macro")
              for t, b in zip(ARMS["pretrained/full/mean-pool"].values(), ARMS["random/full/mean-pool"].values())]
    assert row.difference.mean == pytest.approx(np.mean(deltas))


def test_a_seed_level_claim_uses_the_paired_t_se_and_df():
    from tasks.report.claims import Sample
    from tasks.report.evaluation import _estimate

    t, b = (0.80, 0.82, 0.84), (0.70, 0.71, 0.72)  # deltas 0.10, 0.11, 0.12: sd 0.01
    sample = lambda v: Sample(v, ("1", "2", "3"), "seed", "x")  # noqa: E731
    row = _estimate(claim("a/b/c", "d/e/f", min_effect=0.2), sample(t), sample(b), STATS)
    se = 0.01 / math.sqrt(3)
    assert row.power.se == pytest.approx(se) and row.power.df == 2 and row.power.unit == "seeds"
    assert row.power.mde == pytest.approx(se * (stats.t.ppf(0.975, 2) + stats.t.ppf(0.8, 2)))
    assert row.power.detectable  # 0.0310 <= 0.2
