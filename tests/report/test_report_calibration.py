"""Calibration claims and tables of the report: a calibrated arm against an over-confident one, both directions,
the Brier score by hand, Brier and NLL against sklearn, a claim on the temperature-scaled Brier score with ECE, NLL
and T beside it, the calibration and cost tables, and the reliability diagrams."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import brier_score_loss, log_loss

from tasks.common.provenance import Lock
from tasks.report.claims.arms.calibration_arms import arm_calibration, calibration_estimates, pooled_calibration
from tasks.report.claims.evaluation import evaluate
from tasks.report.claims.grammar import Claim, Metrics
from tasks.report.stats.calibration import nll_binary_terms, point_estimate
from tasks.report.stats.estimates import StatsConfig
from tasks.report.tables.evidence import calibration_grids, cost_grids, reliability_curves
from tasks.report.tables.ledger import operational_cost

LABELS = ["a", "b"]
N = 200
STATS = StatsConfig(
    level=0.95,
    paired_method="t",
    resamples=2000,
    seed=0,
    max_diverged_fraction=0.2,
    slice_resamples=500,
    calibration_bins=15,
)
CALIBRATED, OVERCONFIDENT = "pretrained/full/mean-pool", "baseline/tfidf-lr/full-text"


def calibrated_records(seed: int) -> list[dict]:
    """Four groups of 50 docs at confidence 0.6, 0.7, 0.8, 0.9, each with exactly that share right, spread
    evenly over the group (and shifted by ``seed``)."""
    out = []
    for i in range(N):
        conf = (0.6, 0.7, 0.8, 0.9)[i // 50]
        right = ((i + seed) % 10) < round(conf * 10)
        gold = LABELS[i % 2]
        pred = gold if right else LABELS[1 - i % 2]
        probs = [conf, 1 - conf] if pred == "a" else [1 - conf, conf]
        out.append({"doc_id": f"d{i:03d}", "gold": gold, "pred": pred, "probs": probs})
    return out


def overconfident_records() -> list[dict]:
    """Confidence 0.99 on every doc, 60% right (3 of every 5): ECE = 0.99 - 0.6 = 0.39 in any binning in which
    no bin is all right, and Brier = 0.6 * 2 * 0.01**2 + 0.4 * 2 * 0.99**2 = 0.7842."""
    out = []
    for i in range(N):
        gold = LABELS[i % 2]
        pred = gold if i % 5 < 3 else LABELS[1 - i % 2]
        out.append(
            {"doc_id": f"d{i:03d}", "gold": gold, "pred": pred, "probs": [0.99, 0.01] if pred == "a" else [0.01, 0.99]}
        )
    return out


def write_workspace(root: Path) -> Metrics:
    arms = {CALIBRATED: {s: calibrated_records(s) for s in (1, 2, 3)}, OVERCONFIDENT: {0: overconfident_records()}}
    runs = {}
    for key, seeds in arms.items():
        folder = root / "data" / "finetune" / "cls" / key
        folder.mkdir(parents=True)
        for seed, recs in seeds.items():
            (folder / f"seed{seed}.test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
        runs[key] = {
            "test_macro_f1": {"per_seed": [0.7] * len(seeds), "seeds": list(seeds)},
            "diverged_seeds": [],
            "details": {"per_seed": {str(s): {} for s in seeds}},
        }
    operational = {
        CALIBRATED: {
            "device": "cpu",
            "threads": 2,
            "seq_len_tokens": 128,
            "mean_tokens_per_doc": 120.0,
            "batch": {
                "1": {"p50_ms_per_doc": 4.0, "p95_ms_per_doc": 6.5, "docs_per_s": 230.0},
                "32": {"p50_ms_per_doc": 1.5, "p95_ms_per_doc": 1.9, "docs_per_s": 650.0},
            },
            "peak_rss_mib": 450.0,
            "rss_increase_mib": 70.0,
            "parameters": 1_350_000,
            "size_on_disk_mib": 5.2,
        }
    }
    metrics = {
        "kind": "classification",
        "metric": "test_macro_f1",
        "labels": LABELS,
        "runs": runs,
        "operational": operational,
        "selection": {"best_arm": CALIBRATED, "best_baseline": OVERCONFIDENT},
    }
    (root / "metrics" / "finetune").mkdir(parents=True)
    (root / "metrics" / "finetune/cls.json").write_text(json.dumps(metrics))
    return Metrics(root / "metrics", predictions=root / "data" / "finetune")


def claim(treatment: str, baseline: str, metric: str = "test_ece") -> Claim:
    return Claim(
        id="cal",
        statement="s",
        evidence="operational",
        kind="difference",
        task="cls",
        data_slice="t",
        metric=metric,
        treatment=f"finetune/cls/{treatment}",
        baseline=f"finetune/cls/{baseline}",
        ablation="x",
        min_effect=-0.05,
        known_confounders=[],
    )


def test_a_calibrated_arm_is_no_worse_than_an_overconfident_one_and_not_the_reverse(tmp_path):
    metrics = write_workspace(tmp_path)
    row = evaluate(claim(CALIBRATED, OVERCONFIDENT), metrics, Lock({}), STATS)
    assert row.baseline.mean == pytest.approx(0.39, abs=0.02)  # bias-corrected; the plug-in is exactly 0.39
    assert row.treatment.mean < 0.1 and row.treatment.low <= row.treatment.mean <= row.treatment.high
    assert row.difference.mean == pytest.approx(row.baseline.mean - row.treatment.mean)
    # the table's cell is the same estimate at the slice tables' resamples (the claim's: STATS.resamples)
    table = {r[0]: r[1] for r in calibration_grids(metrics, STATS)[0][2]}
    arm = arm_calibration("cls", OVERCONFIDENT, metrics)
    (cell,), _ = calibration_estimates([arm], "ece", STATS, STATS.slice_resamples)
    assert table[OVERCONFIDENT].startswith(f"{cell.mean:.4f} [{cell.low:.4f}, {cell.high:.4f}]")
    assert cell.mean == pytest.approx(row.baseline.mean, abs=0.005)
    assert row.verdict == "supported" and "lower is better calibrated" in row.pairing
    assert row.effect_size is None  # per-seed values are macro-F1, not ECE
    reverse = evaluate(claim(OVERCONFIDENT, CALIBRATED), metrics, Lock({}), STATS)
    assert reverse.verdict == "contradicted" and reverse.difference.high < -0.05


def test_brier_claim_uses_the_plug_in_score(tmp_path):
    metrics = write_workspace(tmp_path)
    row = evaluate(claim(CALIBRATED, OVERCONFIDENT, "test_brier"), metrics, Lock({}), STATS)
    assert row.baseline.mean == pytest.approx(0.6 * 2 * 0.01**2 + 0.4 * 2 * 0.99**2)
    assert row.verdict == "supported"


def test_calibration_and_cost_tables_and_reliability_curves(tmp_path):
    metrics = write_workspace(tmp_path)
    ((title, header, body),) = calibration_grids(metrics, STATS)
    assert title.startswith("cls: calibration") and [r[0] for r in body] == [OVERCONFIDENT, CALIBRATED]
    assert body[0][2] == "0.3900" and body[0][6] == "1 seed x 200 test docs (200 predictions)"
    assert body[1][6] == "3 seeds x 200 test docs (600 predictions)"
    ((_, cost_header, cost_body),) = cost_grids(metrics, STATS)
    assert cost_header[3:5] == ["batch 1: p50 / p95 ms per doc", "batch 32: p50 / p95 ms per doc"]
    assert cost_body == [
        [
            CALIBRATED,
            "cpu, 2 threads",
            "token ids: 120 (128)",
            "4 / 6.5",
            "1.5 / 1.9",
            "650.0",
            "450 (+70)",
            "1,350,000",
            "5.20",
        ]
    ]
    assert operational_cost(metrics) == {
        f"cls {CALIBRATED}": (
            "cpu, 2 threads: batch 1 p50 4 ms/doc, batch 32 p50 1.5 ms/doc; peak RSS 450 MiB; 1,350,000 parameters; "
            "5.20 MiB on disk"
        )
    }
    curves = reliability_curves("cls", metrics)
    assert set(curves) == {CALIBRATED, OVERCONFIDENT} and len(curves[CALIBRATED][0]) == 3 * N


def scaled_workspace(root: Path, scaled: bool = True) -> Metrics:
    """``write_workspace`` with ``probs_scaled`` and each seed's ``temperature``: the calibrated arm keeps its
    probabilities (T = 1), the over-confident one is scaled down to confidence 0.6 on every doc (60% right)."""
    metrics = write_workspace(root)
    for key, temperature in ((CALIBRATED, 1.0), (OVERCONFIDENT, 7.8)):
        for path in (root / "data" / "finetune" / "cls" / key).glob("seed*.test.jsonl"):
            recs = [json.loads(line) for line in path.read_text().splitlines()]
            for r in recs:
                top = r["probs"].index(max(r["probs"]))
                r["probs_scaled"] = r["probs"] if key == CALIBRATED else [0.6 if i == top else 0.4 for i in range(2)]
                if not scaled:
                    del r["probs_scaled"]
            path.write_text("".join(json.dumps(r) + "\n" for r in recs))
        finetune = json.loads((root / "metrics/finetune/cls.json").read_text())
        for facts in finetune["runs"][key]["details"]["per_seed"].values():
            facts["temperature"] = {"temperature": temperature}
        (root / "metrics/finetune/cls.json").write_text(json.dumps(finetune))
    return metrics


def test_brier_and_nll_of_the_prediction_files_are_sklearns(tmp_path):
    metrics = write_workspace(tmp_path)
    arm = arm_calibration("cls", OVERCONFIDENT, metrics)
    recs = overconfident_records()
    gold = [LABELS.index(r["gold"]) for r in recs]
    probs = [r["probs"] for r in recs]
    # two classes: the multi-class Brier score is twice sklearn's binary one (of the probability of label "b")
    binary = brier_score_loss(gold, [p[1] for p in probs])
    assert point_estimate(arm, "brier", 15) == pytest.approx(2 * binary, rel=1e-12)
    assert point_estimate(arm, "nll", 15) == pytest.approx(log_loss(gold, probs), rel=1e-12)
    # a span is a binary forecast: its NLL is sklearn's log loss of (confidence, correct)
    conf, hit = np.array([0.9, 0.6, 0.3, 0.99]), np.array([True, False, True, True])
    assert nll_binary_terms(conf, hit).mean() == pytest.approx(log_loss(hit, conf), rel=1e-12)


def test_a_claim_on_the_scaled_brier_score_reads_probs_scaled_and_notes_ece_nll_and_t(tmp_path):
    metrics = scaled_workspace(tmp_path)
    row = evaluate(claim(CALIBRATED, OVERCONFIDENT, "test_brier_scaled"), metrics, Lock({}), STATS)
    # scaled over-confident arm: confidence 0.6, 60% right: Brier 0.6 * 2 * 0.4**2 + 0.4 * 2 * 0.6**2 = 0.48
    assert row.baseline.mean == pytest.approx(0.48)
    raw = evaluate(claim(CALIBRATED, OVERCONFIDENT, "test_brier"), metrics, Lock({}), STATS)
    assert row.treatment.mean == pytest.approx(raw.treatment.mean)  # T = 1 changes nothing
    baseline_note = next(n for n in row.notes if n.startswith("baseline calibration"))
    assert "mean T over 1 seeds 7.800" in baseline_note and "Brier 0.7842 -> 0.4800" in baseline_note
    nll_after = -(0.6 * np.log(0.6) + 0.4 * np.log(0.4))
    assert "ECE 0.3900 -> 0.0000; " in baseline_note and f"NLL {-(0.6 * np.log(0.99) + 0.4 * np.log(0.01)):.4f}" in (
        baseline_note
    )
    assert f"-> {nll_after:.4f}; the verdict reads test_brier_scaled" in baseline_note


def test_a_scaled_claim_without_probs_scaled_is_not_run_with_the_reason(tmp_path):
    metrics = scaled_workspace(tmp_path, scaled=False)
    row = evaluate(claim(CALIBRATED, OVERCONFIDENT, "test_nll_scaled"), metrics, Lock({}), STATS)
    assert row.verdict == "not run" and "no probs_scaled" in row.reason and "rerun the finetune stage" in row.reason


def test_the_calibration_table_gives_nll_and_the_scaled_scores_with_t(tmp_path):
    metrics = scaled_workspace(tmp_path)
    ((_, header, body),) = calibration_grids(metrics, STATS)
    assert header[4:6] == ["NLL (nats)", "after temperature scaling on dev: ECE / Brier / NLL (plug-in), mean T"]
    over = next(r for r in body if r[0] == OVERCONFIDENT)
    assert over[4] == f"{-(0.6 * np.log(0.99) + 0.4 * np.log(0.01)):.4f}"
    assert over[5] == f"0.0000 / 0.4800 / {-(0.6 * np.log(0.6) + 0.4 * np.log(0.4)):.4f}, T 7.800"


def test_a_calibration_claim_on_our_encoder_pools_its_pretraining_seeds(tmp_path):
    metrics = write_workspace(tmp_path)
    # a further pretraining seed's run of the calibrated arm: over-confident, so the pooled Brier is the mean of both
    further = CALIBRATED.replace("pretrained/", "pretrained@pretrain_seed21/")
    folder = tmp_path / "data" / "finetune" / "cls" / further
    folder.mkdir(parents=True)
    for seed in (1, 2, 3):
        (folder / f"seed{seed}.test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in overconfident_records()))
    path = tmp_path / "metrics" / "finetune" / "cls.json"
    data = json.loads(path.read_text())
    data["runs"][further] = data["runs"][CALIBRATED]
    data["pretraining_seeds"] = {"runs": {CALIBRATED: {"21": further}}}
    path.write_text(json.dumps(data))
    metrics = Metrics(tmp_path / "metrics", predictions=tmp_path / "data" / "finetune")
    pooled = pooled_calibration("cls", CALIBRATED, metrics)
    assert pooled.seeds == (1, 2, 3, 1, 2, 3) and pooled.pretrain == ("first",) * 3 + ("21",) * 3
    own, other = point_estimate(arm_calibration("cls", CALIBRATED, metrics), "brier", 15), 0.7842
    assert point_estimate(pooled, "brier", 15) == pytest.approx((own + other) / 2)
    row = evaluate(claim(CALIBRATED, OVERCONFIDENT, "test_brier"), metrics, Lock({}), STATS)
    assert row.treatment.mean == pytest.approx((own + other) / 2)
    assert any(
        n.startswith("pretraining seeds resampled at the top of the bootstrap (2 pretraining") for n in row.notes
    )
