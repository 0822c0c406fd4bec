"""The reviewer comparisons in the claim table (issue 58, item 6): a fine-tuning claim's probability of improvement
and ASO from its per-run scores (recomputed here from sklearn's per-seed F1), their metrics/report.json keys, the
expected validation performance curves read from the finetune metrics, and the variance breakdown figure drawn
from synthetic report entries."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.metrics import f1_score

from report_fixtures import ARMS, GOLD, LABELS, STATS, claim, write_workspace
from tasks.common.provenance import Lock
from tasks.report import row_metrics
from tasks.report.claims.arms.seed_scores import compare_runs
from tasks.report.claims.evaluation import evaluate
from tasks.report.claims.grammar import Metrics, NotRun, Sample
from tasks.report.claims.row import Row
from tasks.report.render.reviewer_figures import tuning_scores, validation_curves, variance_figure, variance_rows
from tasks.report.stats.evp import expected_max_curve
from tasks.report.stats.improvement import probability_of_improvement

PRETRAINED, RANDOM = "pretrained/full/mean-pool", "random/full/mean-pool"


def f1s(key: str) -> np.ndarray:
    return np.array([f1_score(GOLD, p, labels=LABELS, average="macro") for p in ARMS[key].values()])


def test_a_finetune_claim_gets_probability_of_improvement_and_aso(tmp_path):
    metrics = write_workspace(tmp_path)
    row = evaluate(claim(PRETRAINED, RANDOM), metrics, Lock({}), STATS)
    comparison = row.comparison
    assert comparison.probability == probability_of_improvement(f1s(PRETRAINED), f1s(RANDOM)) == 1.0
    assert (comparison.low, comparison.high) == (1.0, 1.0)  # every pretrained run beats every random run
    assert comparison.epsilon_min == pytest.approx(0.0, abs=1e-9)  # total stochastic order
    assert comparison.runs == {"treatment": ("1", "2", "3"), "baseline": ("1", "2", "3")}
    out = row_metrics(row)
    assert out["probability_of_improvement"] == 1.0 and out["aso_epsilon_min"] == comparison.epsilon_min
    assert out["comparison_runs"]["treatment"] == ["1", "2", "3"] and out["comparison_bootstrap"]["seed"] == 0
    json.dumps(out)  # report.json-ready
    flipped = evaluate(claim(RANDOM, PRETRAINED), metrics, Lock({}), STATS).comparison
    assert flipped.probability == 0.0 and flipped.epsilon_min > 0.95  # below 1 only by the grid's dropped first point


def test_a_gap_claim_compares_run_by_run_gaps(tmp_path):
    metrics = write_workspace(tmp_path)
    gap = f"{PRETRAINED} - {RANDOM}"
    row = evaluate(claim(gap, f"{RANDOM} - {PRETRAINED}"), metrics, Lock({}), STATS)
    gaps = f1s(PRETRAINED) - f1s(RANDOM)
    assert row.comparison.probability == probability_of_improvement(gaps, -gaps) == 1.0


def test_a_run_without_a_finite_score_gives_a_note_not_an_error():
    sample = Sample((0.5, float("nan")), ("1", "2"), "seed", "finetune/cls/x")
    comparison, notes = compare_runs(claim(PRETRAINED, RANDOM), [sample, sample], STATS)
    assert comparison is None and "non-empty finite 1-D" in notes[0]


def test_a_claim_outside_finetune_or_on_calibration_gets_none(tmp_path):
    metrics = write_workspace(tmp_path)
    calibration = claim(PRETRAINED, RANDOM).model_copy(update={"metric": "test_ece"})
    assert evaluate(calibration, metrics, Lock({}), STATS).comparison is None
    assert "probability_of_improvement" not in row_metrics(evaluate(calibration, metrics, Lock({}), STATS))


def test_validation_curves_read_every_tuning_grid(tmp_path):
    runs = {
        "pretrained/full/mean-pool": {"lr_sweep": {"dev": {"1": 0.5, "3": 0.7, "10": 0.6}}},
        "pretrained@n32/full/mean-pool": {"lr_sweep": {"dev": {"1": 0.1}}},  # a curve size: left out
        "baseline/tfidf-lr/cut": {
            "setting": {
                "1": {"C": 1.0, "dev_macro_f1": 0.8, "dev_macro_f1_grid": {"word C=1": 0.8, "word C=10": 0.6}},
                "2": {"C": 1.0, "dev_macro_f1": 0.9, "dev_macro_f1_grid": {"word C=1": 0.9, "word C=10": 0.7}},
            }
        },
        "baseline/majority/labels": {
            "setting": {"1": {"label": "a"}},
            "details": {"per_seed": {"1": {"dev_best_macro_f1": 0.2}}},
        },
    }
    (tmp_path / "finetune").mkdir()
    (tmp_path / "finetune" / "cls.json").write_text(json.dumps({"kind": "classification", "runs": runs}))
    scores = tuning_scores(Metrics(tmp_path), "cls")
    assert sorted(scores) == ["baseline/majority/labels", "baseline/tfidf-lr/cut", "pretrained/full/mean-pool"]
    curves = validation_curves(scores)
    assert all(curve.size == 3 for curve in curves.values())  # equal budgets: the largest grid
    np.testing.assert_allclose(curves["pretrained/full/mean-pool"], expected_max_curve(np.array([0.5, 0.7, 0.6]), 3))
    # tfidf: per seed (mean, E[max of 2], E[max of 3]) averaged: seed 1 (0.7, 0.75, 0.775), seed 2 (0.8, 0.85, 0.875)
    np.testing.assert_allclose(curves["baseline/tfidf-lr/cut"], [0.75, 0.8, 0.825])
    np.testing.assert_allclose(curves["baseline/majority/labels"], [0.2, 0.2, 0.2])


def test_variance_figure_draws_the_shares_and_says_not_available(tmp_path):
    rows = [
        Row(claim(PRETRAINED, RANDOM, cid="with"), "supported", ""),
        Row(claim(PRETRAINED, RANDOM, cid="without"), "inconclusive", ""),
        Row(claim(PRETRAINED, RANDOM, cid="bound").model_copy(update={"kind": "upper_bound"}), "supported", ""),
    ]
    entries = {"with": {"variance_shares": {"pretraining_seed": 0.1, "seed": 0.6, "item": 0.3}}, "without": {}}
    assert variance_rows(rows, entries) == [
        ("with", {"pretraining_seed": 0.1, "seed": 0.6, "item": 0.3}),
        ("without", None),
    ]
    path = variance_figure(rows, entries, tmp_path / "variance.png", 50)
    assert path.read_bytes()[:4] == b"\x89PNG"
    for none in (rows[1:], rows[2:]):  # no claim with shares; no difference claim
        with pytest.raises(NotRun, match="has variance_shares"):
            variance_figure(none, entries, tmp_path / "none.png", 50)


def test_a_slice_claim_scores_its_items_and_needs_the_predictions(tmp_path):
    metrics = write_workspace(tmp_path)  # test_items.jsonl: d00-d03 overlap train, so "clean" is d04-d19
    row = evaluate(claim(PRETRAINED, RANDOM, items="clean"), metrics, Lock({}), STATS)

    def clean(key: str) -> np.ndarray:
        return np.array([f1_score(GOLD[4:], p[4:], labels=LABELS, average="macro") for p in ARMS[key].values()])

    assert row.comparison.probability == probability_of_improvement(clean(PRETRAINED), clean(RANDOM))
    seed_level = Metrics(tmp_path / "metrics")  # no prediction files: per-seed values of every test item only
    row = evaluate(claim(PRETRAINED, RANDOM, items="clean"), seed_level, Lock({}), STATS)
    assert row.comparison is None and any("the clean items need the prediction files" in n for n in row.notes)
