"""Variance components and the Satterthwaite t interval (tasks/report/stats/components.py) against hand computations:
the crossed ANOVA of a 2 x 3 design, its unbiasedness for crossed and nested seeds (simulated), the issue-58
example, the seed and item parts of a synthetic design with known structure, cluster resampling, and the t tests
(scipy.stats.t)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from tasks.report.stats import bootstrap as bs
from tasks.report.stats import components as vc


def test_crossed_anova_by_hand():
    # rows (pretraining seeds) means 2, 6; columns (fine-tuning seeds) means 2.5, 3.5, 6; grand mean 4.
    # MS_p = 3 x var([2, 6]) = 24 (1 df); MS_f = 2 x var([2.5, 3.5, 6]) = 6.5 (2 df); residuals
    # y - row - col + 4 = [[.5, .5, -1], [-.5, -.5, 1]]: MS_pf = 3 / 2 = 1.5 (2 df). Var of the mean:
    # s_p^2 / 2 + s_f^2 / 3 + s_pf^2 / 6 = (MS_p + MS_f - MS_pf) / 6 = 29 / 6
    pretraining, seed, terms = vc.crossed_anova(np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 9.0]]))
    assert seed == pytest.approx(6.5 / 6)  # MS_f / (n_p n_f): s_f^2 / n_f + s_pf^2 / (n_p n_f)
    assert pretraining == pytest.approx((24 - 1.5) / 6)  # s_p^2 / n_p
    assert terms == (pytest.approx((4.0, 1.0)), pytest.approx((-0.25, 2.0)), pytest.approx((6.5 / 6, 2.0)))
    parts = vc.Components(pretraining, seed, 0.0, terms, 3, 1, 2)
    assert parts.total == pytest.approx(29 / 6)
    assert parts.df == pytest.approx((29 / 6) ** 2 / (4.0**2 / 1 + 0.25**2 / 2 + (6.5 / 6) ** 2 / 2))
    # one pretraining seed: var / n over n - 1 df; no pretraining part
    assert vc.crossed_anova(np.array([[1.0, 2.0, 3.0, 6.0]])) == (0.0, pytest.approx(14 / 3 / 4), ((14 / 3 / 4, 3.0),))


@pytest.mark.parametrize("crossed", [True, False])
def test_the_seed_parts_are_unbiased_for_crossed_and_nested_seeds(crossed):
    # D[p, f] = a_p + b_f + e_pf (3 x 20; s_a 1, s_b 2, s_e 1.5): fine-tuning seed f shares its draw under every
    # pretraining seed, so Var(mean) = 1 / 3 + 4 / 20 + 2.25 / 60. Nested (b_pf fresh per row, sd sqrt(4 + 2.25)):
    # Var(mean) = 1 / 3 + 6.25 / 60. The one-way nested ANOVA gave 0.37 for the crossed case (drops 4 / 20).
    rng = np.random.default_rng(11)
    a, b = rng.normal(0, 1.0, (4000, 3, 1)), rng.normal(0, 2.0, (4000, 1, 20))
    d = a + b + rng.normal(0, 1.5, (4000, 3, 20)) if crossed else a + rng.normal(0, 6.25**0.5, (4000, 3, 20))
    truth = 1 / 3 + (4 / 20 + 2.25 / 60 if crossed else 6.25 / 60)
    estimates = [sum(vc.crossed_anova(x)[:2]) for x in d]
    assert np.var(d.mean(axis=(1, 2))) == pytest.approx(truth, rel=0.06)  # the simulation itself
    # unbiased but for the truncation at MS_p <= MS_pf (2 df), which only adds
    assert truth * 0.97 < np.mean(estimates) < truth * 1.15


def test_the_issue_example_seed_se_0040_item_se_0025():
    # pretraining-helps-most-with-few-labels-cls: 5 seeds (4 df), ~203 test items; the issue's t interval
    # on Satterthwaite's df: [-0.027, 0.190] (the SEs are given to 3 decimals, so to about 0.002)
    parts = vc.Components(0.0, 0.040**2, 0.025**2, ((0.040**2, 4.0), (0.025**2, 202.0)), 5, 203)
    df = (0.040**2 + 0.025**2) ** 2 / (0.040**4 / 4 + 0.025**4 / 202)
    assert parts.df == pytest.approx(df) and 7.5 < df < 8
    low, high = vc.t_interval(0.0815, parts, 0.95, (-2.0, 2.0))
    half = stats.t.ppf(0.975, df) * math.sqrt(0.040**2 + 0.025**2)
    assert (low, high) == pytest.approx((0.0815 - half, 0.0815 + half))
    assert low == pytest.approx(-0.027, abs=0.002) and high == pytest.approx(0.190, abs=0.002)
    assert parts.shares() == pytest.approx(
        {"pretraining_seed": 0.0, "seed": 0.0016 / 0.002225, "item": 0.000625 / 0.002225}
    )


def _arm(rng: np.random.Generator, gold: np.ndarray, accuracy: np.ndarray) -> np.ndarray:
    """Counts (runs, items, 6) of a 2-class classifier, run r right on each item with probability accuracy[r]."""
    runs = []
    for p in accuracy:
        right = rng.random(gold.size) < p
        runs.append(bs.class_counts(gold, np.where(right, gold, 1 - gold), 2))
    return np.stack(runs)


def test_seed_and_item_parts_of_a_synthetic_design():
    rng = np.random.default_rng(7)
    gold = rng.integers(0, 2, 400)
    treat, base = _arm(rng, gold, np.array([0.9, 0.8, 0.85, 0.7])), _arm(rng, gold, np.array([0.6, 0.65, 0.5, 0.6]))
    parts = vc.components([treat, base], [(1, 4), (1, 4)], bs.accuracy_from_counts, (1.0, -1.0), True, 4000, 0)
    # seed part, paired: var of the per-seed differences (whole test set) over 4 seeds
    per_seed = bs.accuracy_from_counts(treat.sum(axis=1)) - bs.accuracy_from_counts(base.sum(axis=1))
    assert parts.seed == pytest.approx(np.var(per_seed, ddof=1) / 4) and parts.pretraining_seed == 0.0
    # item part: the contrast is the mean over items of c_i = mean over runs of (right_t - right_b), so its
    # bootstrap variance is var(c) / n
    right = lambda arm: arm[..., :2].sum(axis=-1)  # noqa: E731  tp of either class: 1 when right
    c = (right(treat) - right(base)).mean(axis=0)
    assert parts.item == pytest.approx(np.var(c) / c.size, rel=0.1)
    assert parts.n_items == 400 and parts.n_seeds == 4
    assert parts.df == pytest.approx(parts.total**2 / (parts.seed**2 / 3 + parts.item**2 / 399))
    # unpaired (other seeds): each arm's own seed variance, weighted by w^2 = 1
    unpaired = vc.components([treat, base], [(1, 4), (1, 4)], bs.accuracy_from_counts, (1.0, -1.0), False, 500, 0)
    by_arm = [np.var(bs.accuracy_from_counts(a.sum(axis=1)), ddof=1) / 4 for a in (treat, base)]
    assert unpaired.seed == pytest.approx(sum(by_arm)) and len(unpaired.terms) == 3
    assert [n for _, n in unpaired.seed_by_count] == [4, 4]
    assert [v for v, _ in unpaired.seed_by_count] == pytest.approx(by_arm)
    assert parts.seed_by_count == ((parts.seed, 4),)  # paired: one part


def test_items_of_one_cluster_are_resampled_together():
    rng = np.random.default_rng(3)
    gold = np.repeat(rng.integers(0, 2, 150), 2)  # every item twice: 150 clusters of 2 identical items
    treat = _arm(rng, gold[::2], np.array([0.8, 0.7])).repeat(2, axis=1)
    base = _arm(rng, gold[::2], np.array([0.6, 0.6])).repeat(2, axis=1)
    args = ([treat, base], [(1, 2), (1, 2)], bs.accuracy_from_counts, (1.0, -1.0), True, 3000, 1)
    alone, together = vc.components(*args), vc.components(*args, clusters=np.arange(300) // 2)
    # 300 items as if independent: var(c) / 300; 150 clusters: var(c) / 150, twice as much, on 149 df
    assert together.item / alone.item == pytest.approx(2.0, rel=0.15)
    assert together.n_items == 150 and together.terms[-1][1] == 149.0


def test_t_tests_against_scipy():
    parts = vc.Components(0.0, 0.0004, 0.0005, ((0.0004, 4.0), (0.0005, 199.0)), 5, 200)
    t = (0.05 - 0.02) / math.sqrt(0.0009)
    assert vc.t_p_value(0.05, parts, 0.02, "greater") == pytest.approx(stats.t.sf(t, parts.df))
    assert vc.t_p_value(0.05, parts, 0.02, "less") == pytest.approx(stats.t.cdf(t, parts.df))
    none = vc.Components(0.0, 0.0, 0.0, (), 1, 1)
    assert vc.t_p_value(0.05, none, 0.02, "greater") == 0.0 and vc.t_interval(0.05, none, 0.95, (-1, 1)) == (0.05, 0.05)


def test_a_claim_resamples_the_split_groups_of_its_test_items(tmp_path):
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from report_fixtures import STATS, claim, write_workspace
    from tasks.common.provenance import Lock
    from tasks.report.claims.evaluation import evaluate

    metrics = write_workspace(tmp_path)
    path = tmp_path / "metrics" / "finetune" / "cls.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | {"source": "news"}))
    (tmp_path / "data" / "split").mkdir()
    ids = [f"d{i:02d}" for i in range(20)]  # d00 and d01 share a group, and so on: 10 groups; one doc unlisted
    table = pa.table({"doc_id": ids[:-1], "split_group": [f"g{i // 2}" for i in range(19)]})
    pq.write_table(table, tmp_path / "data" / "split" / "news.parquet")
    row = evaluate(claim("pretrained/full/mean-pool", "random/full/mean-pool"), metrics, Lock({}), STATS)
    parts = row.power.parts
    assert parts.n_items == 11 and parts.terms[-1][1] == 10.0  # 9 pairs, g9 = d18 alone, d19 its own: 11 clusters
    assert "11 clusters of test items" in row.difference.method


def test_the_ratio_estimator_over_blocks_by_hand():
    # blocks of 10, 20, 30 masks; hits 5, 12, 21 vs 3, 8, 9: d = 2, 4, 12, D = 18 / 60 = 0.3; residuals d - 0.3 m =
    # -1, -2, 3 (sum of squares 14); var = 3 / 2 x 14 / 60^2; t(2 df)
    estimate, low, high, se = vc.ratio_difference(
        [np.array([5, 12, 21]), np.array([3, 8, 9])], np.array([10, 20, 30]), 0.95
    )
    assert estimate == pytest.approx(0.3) and se == pytest.approx(math.sqrt(1.5 * 14) / 60)
    half = stats.t.ppf(0.975, 2) * se
    assert (low, high) == pytest.approx((0.3 - half, 0.3 + half))
    with pytest.raises(ValueError):
        vc.ratio_difference([np.array([1])], np.array([3]), 0.95)


def test_the_heldout_mlm_claim_resamples_blocks_not_tokens(tmp_path):
    import json

    from report_fixtures import DEFAULT_CLAIMS, STATS
    from tasks.report.claims.arms.resolve import resolve
    from tasks.report.claims.estimation import estimate_claim
    from tasks.report.claims.grammar import Metrics

    blocks = {"masked": [10, 20, 30, 40], "correct": [6, 13, 21, 30], "unigram_correct": [1, 3, 3, 6]}
    pretrain = {"heldout_mlm_accuracy": 70 / 100, "heldout_unigram_accuracy": 13 / 100, "heldout_masked_tokens": 100}
    (tmp_path / "pretrain.json").write_text(json.dumps(pretrain | {"heldout_per_block": blocks}))
    metrics = Metrics(tmp_path)
    claim = next(c for c in DEFAULT_CLAIMS.claims if c.id == "pretrained-mlm-predicts-heldout-masks")
    row = estimate_claim(
        claim, *(resolve(ref, claim.metric, metrics) for ref in (claim.treatment, claim.baseline)), STATS
    )
    d, m = np.array([5, 10, 18, 24]), np.array(blocks["masked"])
    se = math.sqrt(4 / 3 * np.sum((d - 0.57 * m) ** 2)) / 100  # D = 57 / 100
    assert row.difference.mean == pytest.approx(0.57) and row.power.se == pytest.approx(se)
    assert row.difference.low == pytest.approx(0.57 - stats.t.ppf(0.975, 3) * se)
    assert "4 held-out blocks" in row.difference.method and row.treatment.mean == pytest.approx(0.7)


def test_the_hierarchical_bootstrap_draws_clusters_whole():
    rng = np.random.default_rng(5)
    gold = rng.integers(0, 2, 200)
    arm = _arm(rng, gold, np.array([0.7, 0.7])).repeat(2, axis=1)  # every item twice: 200 clusters of 2
    alone = bs.hierarchical_bootstrap([arm], bs.accuracy_from_counts, 3000, 0, True)[:, 0]
    together = bs.hierarchical_bootstrap([arm], bs.accuracy_from_counts, 3000, 0, True, clusters=np.arange(400) // 2)
    # as if 400 independent items vs the 200 there are: the variance doubles
    assert np.var(together[:, 0]) / np.var(alone) == pytest.approx(2.0, rel=0.15)
    # without clusters the stream is the one it always was: each item its own cluster gives the same replicates
    same = bs.hierarchical_bootstrap([arm], bs.accuracy_from_counts, 300, 0, True, clusters=np.arange(400))
    assert np.array_equal(same, bs.hierarchical_bootstrap([arm], bs.accuracy_from_counts, 300, 0, True))
