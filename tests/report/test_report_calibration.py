"""Calibration claims and tables of the report: a calibrated arm against an over-confident one, both directions,
the Brier score by hand, the calibration and cost tables, and the reliability diagrams."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tasks.common.provenance import Lock
from tasks.report.claims.evaluation import evaluate
from tasks.report.claims.grammar import Claim, Metrics
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
    table = {r[0]: r[1] for r in calibration_grids(metrics, STATS)[0][2]}  # the same arm estimates as the table
    assert table[OVERCONFIDENT].startswith(f"{row.baseline.mean:.4f} [{row.baseline.low:.4f}, {row.baseline.high:.4f}]")
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
    assert body[0][2] == "0.3900" and body[0][4] == "1 seed x 200 test docs (200 predictions)"
    assert body[1][4] == "3 seeds x 200 test docs (600 predictions)"
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
