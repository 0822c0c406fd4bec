"""The learning curve in the report (tasks/report/claims/curve_claims.py: best-arm@n<docs>, gap references;
tasks/report/render/curve_figure.py: the figure): the interaction claim "(pretrained - random) at few docs exceeds
(pretrained - random) at many" on made data with a planted effect, the per-size best-arm vs best-baseline claim,
and the figure."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import f1_score

from report_fixtures import DEFAULT_CLAIMS
from tasks.common.provenance import Lock
from tasks.report.claims.arms.resolve import resolve
from tasks.report.claims.curve_claims import sized
from tasks.report.claims.evaluation import evaluate
from tasks.report.claims.grammar import Claim, Metrics
from tasks.report.render.curve_figure import learning_curve, series
from tasks.report.stats.estimates import StatsConfig

ROOT = Path(__file__).resolve().parents[2]
LABELS = ["a", "b"]
GOLD = ["a", "b"] * 30  # 60 test docs
SEEDS = [1, 2, 3]
STATS = StatsConfig(level=0.95, paired_method="t", resamples=2000, seed=0)


def _preds(n_wrong: int, seed: int) -> list[str]:
    """GOLD with ``n_wrong`` docs flipped, starting at a seed-dependent doc (so seeds differ)."""
    wrong = {(5 * seed + i) % len(GOLD) for i in range(n_wrong)}
    return [("b" if g == "a" else "a") if i in wrong else g for i, g in enumerate(GOLD)]


def write_curve(root: Path, wrong: dict[str, int]) -> Metrics:
    """metrics/finetune/cls.json with a learning curve at 8 and 40 train docs, and every run's predictions;
    ``wrong``: run key -> docs each seed gets wrong (baselines: one seed, 0)."""
    runs = {}
    for key, n_wrong in wrong.items():
        seeds = [0] if key.startswith("baseline/") else SEEDS
        folder = root / "data" / "finetune" / "cls" / key
        folder.mkdir(parents=True, exist_ok=True)
        values = []
        for seed in seeds:
            pred = _preds(n_wrong, seed)
            lines = [
                json.dumps({"doc_id": f"d{i:02d}", "gold": g, "pred": p})
                for i, (g, p) in enumerate(zip(GOLD, pred, strict=True))
            ]
            (folder / f"seed{seed}.test.jsonl").write_text("\n".join(lines) + "\n")
            values.append(float(f1_score(GOLD, pred, labels=LABELS, average="macro")))
        runs[key] = {"test_macro_f1": {"per_seed": values, "seeds": seeds}, "diverged_seeds": []}
    arms = ["pretrained/full/mean-pool", "random/full/mean-pool"]
    curve = {
        "sizes": [8, 40],
        "configs": arms,
        "runs": {"n8": {a: a.replace("/full", "@n8/full", 1) for a in arms}, "n40": {a: a for a in arms}},
        "selection": {
            "n8": {"best_arm": "pretrained@n8/full/mean-pool", "best_baseline": "baseline/tfidf-lr/clozeline-cut@n8"},
            "n40": {"best_arm": "pretrained/full/mean-pool", "best_baseline": "baseline/tfidf-lr/clozeline-cut"},
        },
    }
    metrics = {
        "kind": "classification",
        "metric": "test_macro_f1",
        "labels": LABELS,
        "runs": runs,
        "selection": {
            "best_arm": "pretrained/full/mean-pool",
            "dev": {},
            "best_baseline": "baseline/tfidf-lr/clozeline-cut",
        },
        "learning_curve": curve,
    }
    (root / "metrics" / "finetune").mkdir(parents=True, exist_ok=True)
    (root / "metrics" / "finetune" / "cls.json").write_text(json.dumps(metrics))
    items = [json.dumps({"doc_id": f"d{i:02d}", "n_words": 10, "train_overlap": False}) for i in range(len(GOLD))]
    (root / "data" / "finetune" / "cls" / "test_items.jsonl").write_text("\n".join(items) + "\n")
    return Metrics(root / "metrics", predictions=root / "data" / "finetune")


def interaction(min_effect: float = 0.0) -> Claim:
    """(pretrained - random) at 8 docs against (pretrained - random) at 40, in the gap grammar of claims.yaml."""
    return Claim(
        id="gap",
        statement="s",
        evidence="extrinsic",
        kind="difference",
        task="cls",
        data_slice="t",
        metric="test_macro_f1",
        ablation="x",
        treatment="finetune/cls/pretrained@n8/full/mean-pool - random@n8/full/mean-pool",
        baseline="finetune/cls/pretrained/full/mean-pool - random/full/mean-pool",
        min_effect=min_effect,
        known_confounders=[],
    )


def _f1(n_wrong: int) -> float:
    return float(np.mean([f1_score(GOLD, _preds(n_wrong, s), average="macro") for s in SEEDS]))


PLANTED = {
    "pretrained@n8/full/mean-pool": 6,
    "random@n8/full/mean-pool": 24,  # a gap of 18 docs at 8
    "pretrained/full/mean-pool": 3,
    "random/full/mean-pool": 6,  # 3 docs at 40
    "baseline/tfidf-lr/clozeline-cut@n8": 24,
    "baseline/tfidf-lr/clozeline-cut": 4,
}


def test_a_planted_larger_gap_at_few_docs_is_supported(tmp_path):
    row = evaluate(interaction(0.05), write_curve(tmp_path, PLANTED), Lock({}), STATS)
    small, large = _f1(6) - _f1(24), _f1(3) - _f1(6)  # by sklearn, independently of the bootstrap
    assert small > 0.25 and large < 0.1
    assert row.treatment.mean == pytest.approx(small) and row.baseline.mean == pytest.approx(large)
    assert row.difference.mean == pytest.approx(small - large)
    assert 0.05 < row.difference.low < row.difference.mean < row.difference.high
    assert row.verdict == "supported" and row.p_value < 0.01
    assert row.difference_label == "treatment gap - baseline gap"
    assert "the same seeds, resampled jointly" in row.pairing and "random/full/mean-pool)" in row.pairing


def test_the_baseline_gaps_diverged_seeds_are_noted(tmp_path):
    write_curve(tmp_path, PLANTED)
    path = tmp_path / "metrics" / "finetune" / "cls.json"
    tree = json.loads(path.read_text())
    tree["runs"]["random/full/mean-pool"]["diverged_seeds"] = [2]
    path.write_text(json.dumps(tree))
    row = evaluate(interaction(), Metrics(tmp_path / "metrics", tmp_path / "data" / "finetune"), Lock({}), STATS)
    assert "baseline gap: random/full/mean-pool: diverged seeds 2" in row.notes


def test_equal_gaps_are_not_supported_and_a_reversed_gap_is_contradicted(tmp_path):
    equal = {**PLANTED, "pretrained@n8/full/mean-pool": 6, "random@n8/full/mean-pool": 9}  # 3 docs at both sizes
    row = evaluate(interaction(), write_curve(tmp_path / "eq", equal), Lock({}), STATS)
    assert abs(row.difference.mean) < 0.01 and row.difference.low < 0 < row.difference.high
    assert row.verdict != "supported"
    reversed_gap = {
        **PLANTED,
        "pretrained@n8/full/mean-pool": 20,
        "random@n8/full/mean-pool": 20,
        "random/full/mean-pool": 18,
    }  # no gap at 8 docs, 15 at 40
    row = evaluate(interaction(), write_curve(tmp_path / "rev", reversed_gap), Lock({}), STATS)
    assert row.difference.high < 0 and row.verdict == "contradicted"


def test_a_gap_run_without_predictions_or_a_one_sided_gap_is_not_run(tmp_path):
    metrics = write_curve(tmp_path, PLANTED)
    one_sided = interaction().model_copy(update={"baseline": "finetune/cls/random/full/mean-pool"})
    row = evaluate(one_sided, metrics, Lock({}), STATS)
    assert row.verdict == "not run" and "needs '<run> - <run>' on both sides" in row.reason
    (tmp_path / "data" / "finetune" / "cls" / "random/full/mean-pool" / "seed2.test.jsonl").unlink()
    row = evaluate(interaction(), metrics, Lock({}), STATS)
    assert row.verdict == "not run" and "random/full/mean-pool" in row.reason


def test_best_arm_at_a_size_resolves_through_the_learning_curve(tmp_path):
    metrics = write_curve(tmp_path, PLANTED)
    assert sized("finetune/cls/best-arm@n8", metrics) == "finetune/cls/pretrained@n8/full/mean-pool"
    assert sized("finetune/cls/best-baseline@n8", metrics) == "finetune/cls/baseline/tfidf-lr/clozeline-cut@n8"
    assert sized("finetune/cls/best-arm", metrics) == "finetune/cls/best-arm"  # the full-size selection, unchanged
    assert resolve(sized("finetune/cls/best-arm@n40", metrics), "test_macro_f1", metrics).run_key == (
        "pretrained/full/mean-pool"
    )
    claim = Claim(
        id="b",
        statement="s",
        evidence="extrinsic",
        kind="difference",
        task="cls",
        data_slice="t",
        metric="test_macro_f1",
        treatment="finetune/cls/best-arm@n8",
        ablation="x",
        min_effect=0.02,
        baseline="finetune/cls/best-baseline@n8",
        known_confounders=[],
    )
    row = evaluate(claim, metrics, Lock({}), STATS)
    assert row.difference.mean == pytest.approx(_f1(6) - f1_score(GOLD, _preds(24, 0), average="macro"))
    assert row.verdict == "supported"
    missing = evaluate(claim.model_copy(update={"treatment": "finetune/cls/best-arm@n16"}), metrics, Lock({}), STATS)
    assert missing.verdict == "not run" and "learning_curve.selection.n16" in missing.reason


def test_the_figure_draws_each_arm_and_the_best_baseline_per_size(tmp_path):
    metrics = write_curve(tmp_path, PLANTED)
    lines = series(metrics, "cls", "test_macro_f1", 0.95)
    assert [s for s, _ in lines["pretrained/full/mean-pool"]] == [8, 40]
    assert lines["random/full/mean-pool"][0][1].mean == pytest.approx(_f1(24))
    assert lines["best baseline"][1][1].mean == pytest.approx(f1_score(GOLD, _preds(4, 0), average="macro"))
    assert not lines["best baseline"][1][1].has_ci and lines["pretrained/full/mean-pool"][1][1].has_ci
    out = learning_curve(metrics, "cls", "test_macro_f1", 0.95, tmp_path / "lc.png", 60)
    again = learning_curve(metrics, "cls", "test_macro_f1", 0.95, tmp_path / "lc2.png", 60)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.read_bytes() == again.read_bytes()


def test_the_claims_file_holds_the_learning_curve_claims():
    claims = {c.id: c for c in DEFAULT_CLAIMS.claims}
    for task, small, large in (("cls", 32, 160), ("ner", 80, 400)):
        gap = claims[f"pretraining-helps-most-with-few-labels-{task}"]
        head = "mean-pool" if task == "cls" else "first"
        assert gap.family == "primary"
        assert gap.treatment == f"finetune/{task}/pretrained@n{small}/full/{head} - random@n{small}/full/{head}"
        assert gap.baseline == f"finetune/{task}/pretrained/full/{head} - random/full/{head}"
        for size in (small, large):
            best = claims[f"best-arm-beats-best-baseline-at-{size}-docs-{task}"]
            assert (best.treatment, best.baseline) == (
                f"finetune/{task}/best-arm@n{size}",
                f"finetune/{task}/best-baseline@n{size}",
            )
