"""A claim on our pretrained encoder with runs from two pretraining seeds: the report stacks them and its
bootstrap draws pretraining seeds first (tasks/report/claims/arms/nested_seeds.py, bootstrap.run_draws)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats
from sklearn.metrics import f1_score

from report_fixtures import ARMS, GOLD, LABELS, STATS, claim, preds, write_workspace
from tasks.common.provenance import Lock
from tasks.report.claims.arms.nested_seeds import ONE_SEED
from tasks.report.claims.evaluation import evaluate

OURS, FURTHER = "pretrained/full/mean-pool", "pretrained@pretrain_seed21/full/mean-pool"
SEED21 = {1: preds(9, 0), 2: preds(10, 4), 3: preds(9, 9)}  # a much weaker pretraining run


def add_further_seed(root) -> None:
    """Seed 21's runs of the pretrained arm: prediction files, metrics entry and the pretraining_seeds section."""
    path = root / "metrics" / "finetune" / "cls.json"
    data = json.loads(path.read_text())
    folder = root / "data" / "finetune" / "cls" / FURTHER
    folder.mkdir(parents=True)
    for seed, pred in SEED21.items():
        lines = [json.dumps({"doc_id": f"d{i:02d}", "gold": g, "pred": p}) for i, (g, p) in enumerate(zip(GOLD, pred))]
        (folder / f"seed{seed}.test.jsonl").write_text("\n".join(lines) + "\n")
    values = [float(f1_score(GOLD, p, labels=LABELS, average="macro")) for p in SEED21.values()]
    data["runs"][FURTHER] = {"test_macro_f1": {"per_seed": values, "seeds": list(SEED21)}, "diverged_seeds": [2]}
    data["pretraining_seeds"] = {"runs": {OURS: {"21": FURTHER}}}
    path.write_text(json.dumps(data))


def test_a_second_pretraining_seed_widens_the_ci_and_the_point_is_the_mean_of_every_run(tmp_path):
    one = evaluate(claim(OURS, "random/full/mean-pool"), write_workspace(tmp_path / "one"), Lock({}), STATS)
    metrics = write_workspace(tmp_path / "two")
    add_further_seed(tmp_path / "two")
    two = evaluate(claim(OURS, "random/full/mean-pool"), metrics, Lock({}), STATS)
    every = [f1_score(GOLD, p, average="macro") for p in [*ARMS[OURS].values(), *SEED21.values()]]
    assert two.treatment.mean == pytest.approx(np.mean(every))  # 6 runs: 2 pretraining x 3 fine-tuning seeds
    assert two.baseline.mean == pytest.approx(one.baseline.mean)  # random init does not depend on pretraining
    assert two.treatment.high - two.treatment.low > 2 * (one.treatment.high - one.treatment.low)
    assert two.items == "20 test items (all) x 2 pretraining x 3 fine-tuning vs 3 seeds"
    assert ONE_SEED in one.notes and ONE_SEED not in two.notes
    assert any(n.startswith("pretraining seeds resampled at the top of the bootstrap (2") for n in two.notes)
    assert f"treatment: {FURTHER}: diverged seeds 2" in two.notes  # a further seed's caveats reach the row
    again = evaluate(claim(OURS, "random/full/mean-pool"), metrics, Lock({}), STATS)
    assert (again.difference.low, again.difference.high) == (two.difference.low, two.difference.high)


def test_a_claim_without_our_encoder_has_no_pretraining_note(tmp_path):
    row = evaluate(
        claim("random/full/mean-pool", "baseline/tfidf-lr/full-text"), write_workspace(tmp_path), Lock({}), STATS
    )
    assert not any("pretraining" in n for n in row.notes)


def test_the_few_labels_gap_claim_resamples_pretraining_seeds_of_its_curve_run_too(tmp_path):
    # finetune reruns the curve arm on our encoder from each further pretraining seed and lists it under the curve
    # run's key (tasks/finetune/reruns/from_pretraining_seeds.py), so both gaps of the claim carry that variance
    metrics = write_workspace(tmp_path)
    path = tmp_path / "metrics" / "finetune" / "cls.json"
    data = json.loads(path.read_text())
    curve, curve21 = "pretrained@n4/full/mean-pool", "pretrained@pretrain_seed21@n4/full/mean-pool"
    runs = {
        curve: {1: preds(3, 0), 2: preds(4, 3), 3: preds(3, 7)},
        "random@n4/full/mean-pool": {1: preds(9, 0), 2: preds(9, 5), 3: preds(8, 11)},
        FURTHER: SEED21,
        curve21: {1: preds(5, 1), 2: preds(4, 4), 3: preds(6, 8)},
    }
    for key, seeds in runs.items():
        folder = tmp_path / "data" / "finetune" / "cls" / key
        folder.mkdir(parents=True)
        for seed, pred in seeds.items():
            lines = [
                json.dumps({"doc_id": f"d{i:02d}", "gold": g, "pred": p}) for i, (g, p) in enumerate(zip(GOLD, pred))
            ]
            (folder / f"seed{seed}.test.jsonl").write_text("\n".join(lines) + "\n")
        values = [float(f1_score(GOLD, p, labels=LABELS, average="macro")) for p in seeds.values()]
        data["runs"][key] = {"test_macro_f1": {"per_seed": values, "seeds": list(seeds)}, "diverged_seeds": []}
    data["pretraining_seeds"] = {"runs": {OURS: {"21": FURTHER}, curve: {"21": curve21}}}
    path.write_text(json.dumps(data))
    gap = claim(f"{curve} - random@n4/full/mean-pool", f"{OURS} - random/full/mean-pool")
    row = evaluate(gap, metrics, Lock({}), STATS)
    mean = {k: np.mean([f1_score(GOLD, p, average="macro") for p in v.values()]) for k, v in runs.items()}
    ours = np.mean([f1_score(GOLD, p, average="macro") for p in [*ARMS[OURS].values(), *SEED21.values()]])
    random = np.mean([f1_score(GOLD, p, average="macro") for p in ARMS["random/full/mean-pool"].values()])
    assert row.treatment.mean == pytest.approx((mean[curve] + mean[curve21]) / 2 - mean["random@n4/full/mean-pool"])
    assert row.baseline.mean == pytest.approx(ours - random)  # the mean of both pretraining seeds' runs
    assert any(n.startswith("pretraining seeds resampled at the top of the bootstrap (2") for n in row.notes)
    # the probability of improvement over run-by-run gaps: the random-init run of seed s against each pretraining
    # seed's run of seed s (it was missing: the sides' run labels differ), by hand with sklearn and scipy
    f1 = {k: [f1_score(GOLD, p, average="macro") for p in v.values()] for k, v in runs.items()}
    ours_runs = [f1_score(GOLD, p, average="macro") for p in [*ARMS[OURS].values(), *SEED21.values()]]
    base_runs = [f1_score(GOLD, p, average="macro") for p in ARMS["random/full/mean-pool"].values()]
    treat_gaps = np.subtract(f1[curve] + f1[curve21], f1["random@n4/full/mean-pool"] * 2)
    base_gaps = np.subtract(ours_runs, base_runs * 2)
    u = stats.mannwhitneyu(treat_gaps, base_gaps).statistic / (treat_gaps.size * base_gaps.size)
    assert row.comparison is not None and row.comparison.probability == pytest.approx(u)
    assert len(row.comparison.runs["treatment"]) == len(row.comparison.runs["baseline"]) == 6
