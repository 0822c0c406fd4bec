"""A claim on our pretrained encoder with runs from two pretraining seeds: the report stacks them and its
bootstrap draws pretraining seeds first (tasks/report/claims/arms/nested_seeds.py, bootstrap.run_draws)."""

from __future__ import annotations

import json

import numpy as np
import pytest
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
