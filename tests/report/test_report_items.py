"""Claims on test items: prediction files read back as counts, the paired hierarchical bootstrap, the clean slice,
the diverged-seed gate, TOST `equivalent`, Holm across claims, and the slice tables."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import f1_score

from report_fixtures import ARMS, GOLD, LABELS, STATS, claim, write_workspace
from tasks.common.provenance import Lock
from tasks.report.claims.evaluation import apply_holm, evaluate
from tasks.report.claims.grammar import ClaimsFile, Metrics
from tasks.report.claims.row import Row
from tasks.report.stats.estimates import Estimate, Tests, difference_verdict
from tasks.report.tables.slices import slice_tables


def test_item_level_claim_pairs_test_items_and_seeds_and_shows_the_best_baseline(tmp_path):
    metrics = write_workspace(tmp_path)
    row = evaluate(claim("pretrained/full/mean-pool", "random/full/mean-pool"), metrics, Lock({}), STATS)
    # point estimates: the mean over seeds of sklearn's macro-F1 on all 20 docs
    t_mean = np.mean([f1_score(GOLD, p, average="macro") for p in ARMS["pretrained/full/mean-pool"].values()])
    b_mean = np.mean([f1_score(GOLD, p, average="macro") for p in ARMS["random/full/mean-pool"].values()])
    assert row.treatment.mean == pytest.approx(t_mean) and row.baseline.mean == pytest.approx(b_mean)
    assert row.difference.mean == pytest.approx(t_mean - b_mean) and row.difference.n == 20
    assert row.difference.low < row.difference.mean < row.difference.high <= 1.0
    assert row.verdict == "supported" and "paired by test item (20 all items" in row.pairing
    assert "the same seeds, paired" in row.pairing and row.items == "20 test items (all) x 3 vs 3 seeds"
    assert row.best_baseline_key == "baseline/tfidf-lr/full-text"
    tfidf = ARMS["baseline/tfidf-lr/full-text"][0]
    assert row.best_baseline.mean == pytest.approx(f1_score(GOLD, tfidf, average="macro"))
    assert 0.0 <= row.best_baseline.low <= row.best_baseline.high <= 1.0
    # against the one-seed baseline the seeds are resampled per arm
    vs_base = evaluate(claim("best-arm", "best-baseline"), metrics, Lock({}), STATS)
    assert "seeds per arm (3 vs 1)" in vs_base.pairing


def test_the_clean_slice_scores_only_items_without_train_overlap(tmp_path):
    metrics = write_workspace(tmp_path)
    row = evaluate(claim("pretrained/full/mean-pool", "random/full/mean-pool", items="clean"), metrics, Lock({}), STATS)
    clean = slice(4, 20)  # d00..d03 overlap the train split
    expected = np.mean(
        [f1_score(GOLD[clean], p[clean], average="macro") for p in ARMS["pretrained/full/mean-pool"].values()]
    )
    assert row.treatment.mean == pytest.approx(expected) and row.difference.n == 16


def test_predictions_that_disagree_with_the_metrics_make_the_claim_not_run(tmp_path):
    metrics = write_workspace(tmp_path, stale=True)
    row = evaluate(claim("pretrained/full/mean-pool", "random/full/mean-pool"), metrics, Lock({}), STATS)
    assert row.verdict == "not run" and "stale predictions" in row.reason


def test_an_arm_with_too_many_diverged_seeds_is_not_resolvable(tmp_path):
    metrics = write_workspace(tmp_path, diverged=(1,))  # 1 of 3 > 0.2
    row = evaluate(claim("pretrained/full/mean-pool", "random/full/mean-pool"), metrics, Lock({}), STATS)
    assert row.verdict == "not resolvable"
    assert "baseline random/full/mean-pool: 1 of 3 seeds diverged" in row.reason
    assert row.difference is not None and row.p_value is None  # shown, but out of the Holm family


def test_tost_gives_equivalent_for_a_tight_null_and_not_for_a_wide_one():
    rng = np.random.default_rng(0)
    for spread, expected in ((0.005, "equivalent"), (0.05, "inconclusive")):
        deltas = rng.normal(0.0, spread, 4000)
        tests = Tests(
            lambda m, d=deltas: float((1 + (d <= m).sum()) / (d.size + 1)),
            lambda m, d=deltas: float((1 + (d >= m).sum()) / (d.size + 1)),
            lambda m, d=deltas: max(
                float((1 + (d <= -m).sum()) / (d.size + 1)), float((1 + (d >= m).sum()) / (d.size + 1))
            ),
        )
        low, high = np.quantile(deltas, [0.025, 0.975])
        est = Estimate(float(deltas.mean()), float(low), float(high), 100, "x")
        assert difference_verdict(est, 0.02, tests, 0.05)[0] == expected


def _row(cid: str, verdict: str, p: float) -> Row:
    return Row(claim("x", "y", cid=cid), verdict, "why", p_value=p)


def test_holm_downgrades_a_decisive_verdict_that_does_not_survive_the_family():
    # m = 3: p 0.01 -> 0.03 (kept), p 0.02 -> max(0.03, 0.04) = 0.04 (kept), p 0.04 -> 0.04 (kept) at alpha 0.05
    rows = [_row("a", "supported", 0.01), _row("b", "contradicted", 0.02), _row("c", "supported", 0.04)]
    apply_holm(rows, 0.05)
    assert [r.verdict for r in rows] == ["supported", "contradicted", "supported"]
    assert [r.p_adjusted for r in rows] == pytest.approx([0.03, 0.04, 0.04])
    # p 0.03 at rank 2 of 3 -> 0.06 > 0.05: that verdict, and every later one (step-down), becomes inconclusive
    rows = [
        _row("a", "supported", 0.01),
        _row("b", "supported", 0.03),
        _row("c", "equivalent", 0.04),
        _row("d", "inconclusive", 0.9),
    ]
    apply_holm(rows, 0.05)
    assert [r.verdict for r in rows] == ["supported", "inconclusive", "inconclusive", "inconclusive"]
    assert "supported before Holm" in rows[1].reason and rows[0].p_adjusted == pytest.approx(0.04)


def test_slice_tables_score_every_named_arm_and_baseline_per_slice_and_class(tmp_path):
    metrics = write_workspace(tmp_path)
    claims = ClaimsFile(question="q", claims=[claim("pretrained/full/mean-pool", "random/full/mean-pool")])
    table = slice_tables(claims, metrics, STATS)["cls"]
    assert list(table.rows) == ["pretrained/full/mean-pool", "random/full/mean-pool", "baseline/tfidf-lr/full-text"]
    assert table.sizes["all"] == 20 and table.sizes["clean"] == 16 and table.sizes["overlapping"] == 4
    assert table.sizes["a"] == table.sizes["b"] == 10
    # 10..200 words: terciles at 73 and 136 words
    assert [c for c in table.columns if "words" in c] == ["<= 73 words", "74-136 words", "> 136 words"]
    per_class = [f1_score(GOLD, p, labels=LABELS, average=None)[0] for p in ARMS["random/full/mean-pool"].values()]
    assert table.rows["random/full/mean-pool"]["a"].mean == pytest.approx(np.mean(per_class))
    assert "ner" not in slice_tables(claims, Metrics(tmp_path / "metrics"), STATS)  # a task that did not run


def test_slice_macro_f1_averages_over_the_classes_present_in_the_slice():
    from tasks.report.stats.bootstrap import class_counts, macro_f1_from_counts
    from tasks.report.tables.slices import present_classes

    # 3 classes; the slice has gold a and b only, and one doc wrongly predicted as c
    gold, pred = np.array([0, 0, 1, 1]), np.array([0, 2, 1, 1])
    counts = class_counts(gold, pred, 3)[None]
    expected = f1_score(gold, pred, labels=[0, 1], average="macro")  # sklearn over the present classes
    assert macro_f1_from_counts(present_classes(counts, "cls").sum(axis=1))[0] == pytest.approx(expected)
    assert macro_f1_from_counts(counts.sum(axis=1))[0] == pytest.approx(
        f1_score(gold, pred, average="macro", labels=[0, 1, 2])
    )
