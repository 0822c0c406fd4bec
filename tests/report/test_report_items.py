"""Claims on test items: prediction files read back as counts, the paired hierarchical bootstrap, the clean slice,
the diverged-seed gate, TOST `equivalent`, Holm across claims, and the slice tables."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import f1_score

from tasks.common.provenance import Lock
from tasks.report.claims.evaluation import Row, apply_holm, evaluate
from tasks.report.claims.grammar import Claim, ClaimsFile, Metrics
from tasks.report.stats.estimates import Estimate, StatsConfig, Tests, difference_verdict
from tasks.report.tables.slices import slice_tables

LABELS = ["a", "b"]
GOLD = ["a", "b"] * 10  # 20 test docs
STATS = StatsConfig(level=0.95, paired_method="t", resamples=4000, seed=0, max_diverged_fraction=0.2,
                    slice_resamples=1000)


def _preds(n_wrong: int, offset: int) -> list[str]:
    """GOLD with ``n_wrong`` docs (from ``offset``, wrapping) flipped to the other label."""
    wrong = {(offset + i) % len(GOLD) for i in range(n_wrong)}
    return [("b" if g == "a" else "a") if i in wrong else g for i, g in enumerate(GOLD)]


ARMS = {  # run key -> {seed: predictions}
    "pretrained/full/mean-pool": {1: _preds(1, 0), 2: _preds(2, 3), 3: _preds(1, 7)},
    "random/full/mean-pool": {1: _preds(7, 0), 2: _preds(8, 5), 3: _preds(6, 11)},
    "baseline/tfidf-lr/full-text": {0: _preds(4, 2)},
}


def write_workspace(root: Path, diverged: tuple[int, ...] = (), stale: bool = False) -> Metrics:
    """metrics/finetune/cls.json with sklearn macro-F1 per seed, the prediction files and test_items.jsonl."""
    runs = {}
    for key, seeds in ARMS.items():
        for seed, pred in seeds.items():
            folder = root / "data" / "finetune" / "cls" / key
            folder.mkdir(parents=True, exist_ok=True)
            shown = _preds(0, 0) if stale and key.startswith("pretrained") else pred
            lines = [json.dumps({"doc_id": f"d{i:02d}", "gold": g, "pred": p}) for i, (g, p) in
                     enumerate(zip(GOLD, shown, strict=True))]
            (folder / f"seed{seed}.test.jsonl").write_text("\n".join(lines) + "\n")
        values = [float(f1_score(GOLD, p, labels=LABELS, average="macro")) for p in seeds.values()]
        runs[key] = {"test_macro_f1": {"per_seed": values, "seeds": list(seeds)}, "mlflow_run_id": f"id-{key}",
                     "diverged_seeds": list(diverged) if key.startswith("random") else []}
    metrics = {"kind": "classification", "metric": "test_macro_f1", "labels": LABELS, "runs": runs,
               "selection": {"best_arm": "pretrained/full/mean-pool",
                                                             "best_baseline": "baseline/tfidf-lr/full-text"}}
    (root / "metrics" / "finetune").mkdir(parents=True, exist_ok=True)
    (root / "metrics" / "finetune/cls.json").write_text(json.dumps(metrics))
    items = [json.dumps({"doc_id": f"d{i:02d}", "n_words": 10 * (i + 1), "train_overlap": i < 4}) for i in range(20)]
    (root / "data" / "finetune" / "cls" / "test_items.jsonl").write_text("\n".join(items) + "\n")
    return Metrics(root / "metrics", predictions=root / "data" / "finetune")


def claim(treatment: str, baseline: str, min_effect: float = 0.02, items: str = "all", cid: str = "c") -> Claim:
    return Claim(id=cid, statement="s", evidence="extrinsic", kind="difference", task="cls", data_slice="bbc_news/test",
                 metric="test_macro_f1", treatment=f"finetune/cls/{treatment}", baseline=f"finetune/cls/{baseline}",
                 ablation="x", min_effect=min_effect, known_confounders=[], items=items)


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
    assert "the same seeds, resampled jointly" in row.pairing and row.items == "20 test items (all) x 3 vs 3 seeds"
    assert row.best_baseline_key == "baseline/tfidf-lr/full-text"
    tfidf = ARMS["baseline/tfidf-lr/full-text"][0]
    assert row.best_baseline.mean == pytest.approx(f1_score(GOLD, tfidf, average="macro"))
    assert 0.0 <= row.best_baseline.low <= row.best_baseline.high <= 1.0
    # against the one-seed baseline the seeds are resampled per arm
    vs_base = evaluate(claim("best-arm", "best-baseline"), metrics, Lock({}), STATS)
    assert "seeds resampled per arm (3 vs 1)" in vs_base.pairing


def test_the_clean_slice_scores_only_items_without_train_overlap(tmp_path):
    metrics = write_workspace(tmp_path)
    row = evaluate(claim("pretrained/full/mean-pool", "random/full/mean-pool", items="clean"), metrics, Lock({}), STATS)
    clean = slice(4, 20)  # d00..d03 overlap the train split
    expected = np.mean([f1_score(GOLD[clean], p[clean], average="macro")
                        for p in ARMS["pretrained/full/mean-pool"].values()])
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
        tests = Tests(lambda m, d=deltas: float((1 + (d <= m).sum()) / (d.size + 1)),
                      lambda m, d=deltas: float((1 + (d >= m).sum()) / (d.size + 1)),
                      lambda m, d=deltas: max(float((1 + (d <= -m).sum()) / (d.size + 1)),
                                              float((1 + (d >= m).sum()) / (d.size + 1))))
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
    rows = [_row("a", "supported", 0.01), _row("b", "supported", 0.03), _row("c", "equivalent", 0.04),
            _row("d", "inconclusive", 0.9)]
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
    assert macro_f1_from_counts(counts.sum(axis=1))[0] == pytest.approx(f1_score(gold, pred, average="macro",
                                                                               labels=[0, 1, 2]))
