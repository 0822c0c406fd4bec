"""The report stage: statistics against scipy and hand computation, verdicts, not-run rows, rendering."""

from __future__ import annotations

import csv
import json
import math
import subprocess
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy import stats
from scipy.stats import binomtest, ttest_1samp

from report_fixtures import DEFAULT_CLAIMS, PARAMS
from tasks import report
from tasks.common.provenance import Lock
from tasks.report.claims.evaluation import evaluate
from tasks.report.claims.grammar import EVIDENCE, ClaimsError, Metrics
from tasks.report.claims.standard import claim_set
from tasks.report.render import pages as render
from tasks.report.stats.estimates import (
    VERDICTS,
    Estimate,
    StatsConfig,
    difference_verdict,
    mean_ci,
    paired_ci,
    proportion_ci,
    two_proportion_ci,
    untestable,
    welch_ci,
)
from tasks.tracking import NullLog

REPO = Path(__file__).resolve().parents[2]
STATS = StatsConfig(level=0.95, paired_method="t", resamples=9999, seed=0, max_diverged_fraction=0.5)
TREAT, BASE = (0.80, 0.82, 0.84), (0.70, 0.71, 0.72)


def _verdict(est: Estimate, min_effect: float) -> str:
    """The CI rule alone (no equivalence test: every p-value 1)."""
    return difference_verdict(est, min_effect, untestable(), 0.05)[0]


# ---------------------------------------------------------------- statistics


def test_welch_ci_matches_scipy_and_hand_computation():
    est = welch_ci(TREAT, BASE, 0.95)
    # By hand: diff 0.11; se^2 = 0.0004/3 + 0.0001/3; Welch df = 2.941; t_0.975(2.941) = 3.2146.
    se = math.sqrt(0.0004 / 3 + 0.0001 / 3)
    df = (0.0004 / 3 + 0.0001 / 3) ** 2 / ((0.0004 / 3) ** 2 / 2 + (0.0001 / 3) ** 2 / 2)
    half = stats.t.ppf(0.975, df) * se
    assert est.mean == pytest.approx(0.11)
    assert round(est.low, 3) == round(0.11 - half, 3) == 0.068
    assert round(est.high, 3) == round(0.11 + half, 3) == 0.152
    assert df == pytest.approx(2.941, abs=1e-3)


def test_three_seeds_clear_min_effect_is_supported():
    est = welch_ci(TREAT, BASE, 0.95)
    assert _verdict(est, 0.05) == "supported"
    # the same seeds, paired: differences 0.10, 0.11, 0.12 -> 0.11 +- t_0.975(2) * 0.01/sqrt(3)
    paired = paired_ci(TREAT, BASE, 0.95, "t", 9999, 0)
    half = stats.t.ppf(0.975, 2) * 0.01 / math.sqrt(3)
    assert (round(paired.low, 3), round(paired.high, 3)) == (round(0.11 - half, 3), round(0.11 + half, 3))
    assert (round(paired.low, 3), round(paired.high, 3)) == (0.085, 0.135)
    assert _verdict(paired, 0.05) == "supported"


def test_overlapping_results_are_inconclusive():
    est = welch_ci((0.70, 0.75, 0.80), (0.69, 0.74, 0.78), 0.95)
    assert est.low < 0 < est.high
    assert _verdict(est, 0.05) == "inconclusive"


def test_clearly_worse_treatment_is_contradicted_and_small_effect_ruled_out():
    worse = welch_ci(BASE, TREAT, 0.95)
    assert _verdict(worse, 0.05) == "contradicted"
    # real but smaller than min_effect: CI inside (0, min_effect), so an effect of min_effect is ruled out
    small = Estimate(0.02, 0.01, 0.03, 3, "x")
    assert _verdict(small, 0.05) == "ruled out"
    # the upper bound at min_effect or above: not excluded
    assert _verdict(Estimate(0.02, 0.01, 0.05, 3, "x"), 0.05) == "inconclusive"
    # non-inferiority: CI above -0.05 supports, CI below -0.05 contradicts
    assert _verdict(Estimate(-0.02, -0.04, 0.0, 3, "x"), -0.05) == "supported"
    assert _verdict(Estimate(-0.2, -0.3, -0.1, 3, "x"), -0.05) == "contradicted"


def test_mean_ci_and_proportion_ci_against_scipy():
    est = mean_ci(TREAT, 0.95)
    half = stats.t.ppf(0.975, 2) * stats.sem(TREAT)
    assert (est.low, est.high) == pytest.approx((0.82 - half, 0.82 + half))
    assert not mean_ci((0.5,), 0.95).has_ci
    # Clopper-Pearson with 0 events in n: upper = 1 - (alpha/2)^(1/n)
    prop = proportion_ci(0, 640, 0.95)
    assert prop.low == 0.0 and prop.high == pytest.approx(1 - 0.025 ** (1 / 640))


def test_paired_bootstrap_is_seeded_and_brackets_the_mean():
    t = (0.81, 0.85, 0.79, 0.83, 0.80, 0.84)
    b = (0.75, 0.76, 0.74, 0.79, 0.73, 0.77)
    one = paired_ci(t, b, 0.95, "bootstrap", 2000, 7)
    two = paired_ci(t, b, 0.95, "bootstrap", 2000, 7)
    assert (one.low, one.high) == (two.low, two.high)
    deltas = np.subtract(t, b)
    assert deltas.min() <= one.low < deltas.mean() < one.high <= deltas.max()


# ---------------------------------------------------------------- fixtures: contract-shaped metrics


def _summary(values, seeds=(0, 1, 2)):
    mean = float(np.mean(values))
    return {
        "per_seed": list(values),
        "seeds": list(seeds),
        "mean": mean,
        "std": float(np.std(values, ddof=1)),
        "ci95_low": 0.0,
        "ci95_high": 1.0,
        "n": len(values),
    }


def _run(metric_values: dict, run_id: str, diverged=(), details=None):
    run = {m: _summary(v) for m, v in metric_values.items()}
    run.update(mlflow_run_id=run_id, diverged_seeds=list(diverged), details=details or {})
    return run


def _leak(docs, pretrain, task_train):
    """One eval set of metrics/leakage.json: headline rates = pretraining side, task_train_rate_* = task side."""
    return {
        "docs": docs,
        "rate_before": pretrain[0],
        "rate_after": pretrain[1],
        "task_train_rate_before": task_train[0],
        "task_train_rate_after": task_train[1],
    }


def _pairs(passed: dict[str, int], n: int = 40) -> dict:
    """``minimal_pairs`` of metrics/probe.json: n pairs, half agreement_attractor, half negation; each variant
    passes its first ``passed[variant]`` pairs."""
    items = [{"line": i + 1, "phenomenon": "agreement_attractor" if i < n // 2 else "negation"} for i in range(n)]
    variants = {}
    for variant, k in passed.items():
        outcome = [1] * k + [0] * (n - k)
        per = {
            ph: {
                "pairs": n // 2,
                "passed": sum(o for o, it in zip(outcome, items) if it["phenomenon"] == ph),
                "ties": 0,
                "length_mismatched": 0,
            }
            for ph in ("agreement_attractor", "negation")
        }
        for table in per.values():
            table["accuracy"] = table["passed"] / table["pairs"]
        variants[variant] = {
            "all": {"pairs": n, "passed": k, "ties": 0, "accuracy": k / n, "length_mismatched": 0},
            "per_phenomenon": per,
            "passed": outcome,
        }
    return {
        "file": "pairs.jsonl",
        "method": "PLL",
        "pairs": n,
        "items": items,
        "variants": variants,
        "phenomena": {"agreement_attractor": n // 2, "negation": n // 2},
    }


def write_metrics(folder: Path, skip: tuple[str, ...] = ()) -> None:
    """Hand-made metrics files following tasks/CONTRACTS.md."""
    files = {
        "finetune/cls": {
            "kind": "classification",
            "metric": "test_macro_f1",
            "runs": {
                "pretrained/full/mean-pool": _run(
                    {"test_macro_f1": TREAT, "test_accuracy": TREAT},
                    "run-pf",
                    details={
                        "confusion_matrix": {"labels": ["biz", "sport"], "matrix": [[40, 2], [3, 55]]},
                        "accuracy_by_length": {
                            "truncated": {"docs": 25, "accuracy": 0.8},
                            "not_truncated": {"docs": 75, "accuracy": 0.9},
                        },
                    },
                ),
                "random/full/mean-pool": _run({"test_macro_f1": BASE, "test_accuracy": BASE}, "run-rf", diverged=[2]),
                "pretrained/frozen/mean-pool": _run({"test_macro_f1": (0.70, 0.75, 0.80)}, "run-pz"),
                "pretrained/full/cls-pool": _run({"test_macro_f1": (0.83, 0.80, 0.85)}, "run-pfm"),
            },
        },
        "finetune/ner": {
            "kind": "token_classification",
            "metric": "test_entity_f1",
            "runs": {
                "pretrained/full/first": _run(
                    {"test_entity_f1": (0.30, 0.32, 0.31)},
                    "run-nf",
                    details={
                        "span_errors": {
                            "boundary": 30,
                            "boundary_and_type": 4,
                            "exact": 120,
                            "missed": 80,
                            "spurious": 25,
                            "type": 12,
                        }
                    },
                ),
                "random/full/first": _run({"test_entity_f1": (0.10, 0.12, 0.11)}, "run-nr"),
            },
        },
        "probe": {
            "models": {
                "pretrained": {
                    "layers": 3,
                    "separation": [0.01, 0.05, 0.08],
                    "within": [0.9, 0.8, 0.7],
                    "across": [0.89, 0.75, 0.62],
                    "knn_accuracy": [0.5, 0.7, 0.8],
                    "per_word": {
                        "bank": {"separation": [0.00, 0.06, 0.09]},
                        "bass": {"separation": [0.02, 0.05, 0.07]},
                        "port": {"separation": [0.01, 0.04, 0.08]},
                    },
                }
            },
            "shuffled_control": {
                "seed": 0,
                "models": {
                    "pretrained": {  # the context words shuffled
                        "layers": 3,
                        "separation": [0.01, 0.03, 0.02],
                        "per_word": {
                            "bank": {"separation": [0.00, 0.02, 0.01]},
                            "bass": {"separation": [0.02, 0.04, 0.03]},
                            "port": {"separation": [0.01, 0.03, 0.02]},
                        },
                    }
                },
            },
            "static_baseline": {"layer": 0, "note": "only position embeddings differ"},
            "minimal_pairs": _pairs({"pretrained": 34, "random": 20, "unigram": 22}),
        },
        "leakage": {
            "eval_sets": {  # flagged task-train overlaps still count after the audit
                "bbc_news/test": _leak(400, pretrain=(0.25, 0.0), task_train=(0.05, 0.05)),
                "bbc_news/dev": _leak(200, pretrain=(0.2, 0.0), task_train=(0.0, 0.0)),
                "wnut16/test": _leak(300, pretrain=(0.0, 0.0), task_train=(0.01, 0.01)),
            },
            "planted": {
                "planted": 200,
                "found": 200,
                "missed": 0,
                "variants": {
                    v: {"planted": 40, "found": 40, "missed": 0}
                    for v in ("verbatim", "rewrapped", "in_filler", "replaced_every_20", "unicode")
                },
            },
            "residual": {
                "detector": "pooled 8-gram coverage >= 0.1",
                "eval_docs": 900,
                "contaminated_docs": 0,
                "contaminated_docs_before": 140,
            },
        },
        "dedup": {
            "sources": {
                "bbc_news": {
                    "docs_in": 2224,
                    "exact_duplicates": 98,
                    "near_duplicates": 12,
                    "clusters": 2110,
                    "fraction_removed": 0.0495,
                }
            }
        },
        "tokenize": {"cls": {"clozeline": {"truncation_rate": 0.125}, "reference": {"truncation_rate": 0.3}}},
        "pretrain": {
            "heldout_loss": 5.1,
            "heldout_unigram_ce": 6.7,
            "heldout_gap_to_unigram_nats": 1.6,
            "heldout_mlm_accuracy": 0.3,
            "heldout_unigram_accuracy": 0.05,
            "heldout_masked_tokens": 1000,
            "hardware": {"device": "cpu", "count": 2},
        },
    }
    folder.mkdir(parents=True, exist_ok=True)
    for name, body in files.items():
        if name not in skip:
            (folder / f"{name}.json").parent.mkdir(exist_ok=True)
            (folder / f"{name}.json").write_text(json.dumps(body), encoding="utf-8")
    if "pretrain" not in skip:
        rows = ["step\ttrain_loss\tlr\teval_loss", "0\t9.0\t0.0\t9.1", "10\t7.5\t0.001\t", "20\t6.0\t0.0005\t6.4"]
        (folder / "pretrain_curve.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")


def _rows_by_id(cfg, paths):
    claims = claim_set(paths.reports / "claims.yaml", cfg.setup)
    lock = Lock.read(cfg.dvc_lock_file)
    return {c.id: evaluate(c, Metrics(paths.metrics), lock, STATS) for c in claims.claims}


# ---------------------------------------------------------------- claims against metrics files


def test_missing_metrics_file_gives_not_run_row(workspace):
    cfg, paths = workspace
    write_metrics(paths.metrics, skip=("finetune/ner",))
    rows = _rows_by_id(cfg, paths)
    row = rows["pretraining-helps-ner"]
    assert row.verdict == "not run"
    assert row.reason.startswith("not run: ") and "finetune/ner.json is missing" in row.reason
    # the missing run of an existing file names the run and what exists
    assert rows["ours-within-5pt-of-reference-cls"].verdict == "not run"
    assert "reference/full/mean-pool" in rows["ours-within-5pt-of-reference-cls"].reason


def test_claim_rows_from_contract_metrics(workspace):
    cfg, paths = workspace
    write_metrics(paths.metrics)
    rows = _rows_by_id(cfg, paths)
    cls = rows["pretraining-helps-cls"]
    assert cls.verdict == "supported"
    assert cls.pairing.startswith("paired by seed")
    half = stats.t.ppf(0.975, 2) * 0.01 / math.sqrt(3)
    assert (cls.difference.low, cls.difference.high) == pytest.approx((0.11 - half, 0.11 + half))
    # no mlflow_run_name in these metrics: the name is the finetune stage's own (task/arm key)
    assert cls.runs == [("cls/pretrained/full/mean-pool", "run-pf", ""), ("cls/random/full/mean-pool", "run-rf", "")]
    assert cls.data_md5 == {"data/tokenize": "aaaa.dir"}
    confounders = "\n".join(cls.confounders)
    assert (
        "25.00% of 400 eval docs found in the pretraining corpus before the audit, 0.00% after; "
        "task-train overlap (flagged, kept) 5.00% -> 5.00%"
    ) in confounders
    assert (
        "pretrained/full/mean-pool test docs cut at fine-tuning 25.00%, accuracy cut 0.8000 vs whole 0.9000"
        in confounders
    )
    assert "4.95% of 2224 docs removed (98 exact, 12 near)" in confounders
    assert "clozeline 12.50%" in confounders and "random/full/mean-pool: 1" in confounders
    assert any("diverged seeds 2" in n for n in cls.notes)
    # paired t over 3 seeds (no predictions folder given): H0 diff <= 0.02, two-sided (the CI picked the side)
    deltas = np.subtract(TREAT, BASE)
    assert cls.p_value == pytest.approx(2 * stats.ttest_1samp(deltas, 0.02, alternative="greater").pvalue)
    # Cohen's d with the pooled SD: sd(TREAT) = 0.02, sd(BASE) = 0.01 -> pooled sqrt((0.0004 + 0.0001) / 2)
    assert cls.effect_size == pytest.approx(0.11 / math.sqrt(0.00025))
    assert rows["mean-pool-beats-cls-pool-cls"].verdict == "inconclusive"
    # probe: paired over the 3 words (no sentence cosines in these metrics), last layer on the sentences vs on
    # their shuffled controls: deltas 0.08, 0.04, 0.06
    probe = rows["contextual-layers-separate-senses"]
    assert probe.pairing.startswith("paired by word") and probe.difference.n == 3
    assert probe.difference.mean == pytest.approx(0.06)
    assert (
        probe.verdict == "supported" and "baseline: pretrained layer 2 of 0..2, shuffled-context control" in probe.notes
    )
    assert rows["reference-contextual-layers-separate-senses"].verdict == "not run"
    # residual leakage: 0 of 900 eval docs after; Clopper-Pearson upper 1 - 0.025^(1/900) < 0.01
    leak = rows["no-eval-leakage-after-audit"]
    assert leak.verdict == "supported" and leak.treatment.n == 900
    assert leak.treatment.high == pytest.approx(1 - 0.025 ** (1 / 900))
    assert leak.baseline.mean == pytest.approx(140 / 900)
    # exact binomial p of H0 "rate >= 0.01" with 0 of 900: 0.99^900, doubled (two-sided)
    assert leak.p_value == pytest.approx(2 * 0.99**900)
    assert rows["leakage-audit-finds-planted-copies"].verdict == "supported"
    assert "treatment: pretrained layer 2 of 0..2" in probe.notes


def test_a_failed_precondition_gives_not_resolvable_never_contradicted(workspace):
    cfg, paths = workspace
    write_metrics(paths.metrics)
    pre = json.loads((paths.metrics / "pretrain.json").read_text())
    pre["heldout_gap_to_unigram_nats"] = 0.31  # the encoder learned token frequencies and little more
    (paths.metrics / "pretrain.json").write_text(json.dumps(pre))
    rows = _rows_by_id(cfg, paths)
    row = rows["pretraining-helps-cls"]
    assert row.verdict == "not resolvable"
    assert row.reason == (
        "not resolvable: the pretrained encoder beats the unigram baseline by at least 1 nat on "
        "the held-out masks (pretrain/heldout_gap_to_unigram_nats >= 1), measured 0.31"
    )
    assert row.difference is not None  # the arms are still shown, only the verdict is withheld
    assert rows["no-eval-leakage-after-audit"].verdict == "supported"  # no precondition: unaffected

    del pre["heldout_gap_to_unigram_nats"]
    (paths.metrics / "pretrain.json").write_text(json.dumps(pre))
    row = _rows_by_id(cfg, paths)["pretraining-helps-cls"]
    assert row.verdict == "not resolvable" and "not measured" in row.reason


def test_newcombe_interval_matches_the_paper():
    # Newcombe (1998), Statistics in Medicine 17:873, Table II, example (a): 56/70 vs 48/80, method 10
    est = two_proportion_ci((56, 48), (70, 80), 0.95)
    assert est.mean == pytest.approx(0.2) and (est.low, est.high) == pytest.approx((0.0524, 0.3339), abs=1e-4)


def test_intrinsic_and_behavioural_claims(workspace):
    cfg, paths = workspace
    write_metrics(paths.metrics)
    rows = _rows_by_id(cfg, paths)
    heldout = rows["pretrained-mlm-predicts-heldout-masks"]
    assert heldout.verdict == "supported" and heldout.difference.mean == pytest.approx(0.25)
    assert (heldout.treatment.low, heldout.treatment.high) == pytest.approx(
        tuple(binomtest(300, 1000).proportion_ci(0.95, method="exact"))
    )
    pairs = rows["pretrained-mlm-prefers-acceptable-minimal-pairs"]
    ci = binomtest(34, 40).proportion_ci(0.95, method="exact")
    assert (pairs.treatment.mean, pairs.treatment.low, pairs.treatment.high) == pytest.approx((0.85, ci.low, ci.high))
    deltas = np.array([1] * 34 + [0] * 6) - np.array([1] * 20 + [0] * 20)  # paired by pair line
    low, high = ttest_1samp(deltas, 0.0).confidence_interval(0.95)
    assert (pairs.difference.mean, pairs.difference.low, pairs.difference.high) == pytest.approx((0.35, low, high))
    assert pairs.verdict == "supported" and "paired by pair" in pairs.pairing
    agreement = rows["pretrained-mlm-agreement-across-attractor"]
    assert agreement.treatment.mean == 1.0 and agreement.baseline.mean == 1.0  # the first 20 pairs pass for both
    assert pairs.runs == [] and heldout.runs == []  # not finetune arms: their stage's run is linked by the stage
    report.link_stage_runs([pairs, heldout], {"probe": ("probe", "run-probe", "7")})
    assert pairs.runs == [("probe", "run-probe", "7")] and heldout.runs == []  # no pretrain run among the siblings
    assert render.run_links(pairs, "http://h:1") == [
        render.Link("probe", "http://h:1/#/experiments/7/runs/run-probe?workflowType=machine_learning")
    ]

    probe = json.loads((paths.metrics / "probe.json").read_text())
    probe["minimal_pairs"] = _pairs({"pretrained": 34, "random": 36, "unigram": 22})  # a length-biased set
    (paths.metrics / "probe.json").write_text(json.dumps(probe))
    row = _rows_by_id(cfg, paths)["pretrained-mlm-prefers-acceptable-minimal-pairs"]
    assert row.verdict == "not resolvable" and "random-init control sits near chance" in row.reason


def test_invalid_claims_file_names_the_key(tmp_path):
    bad = {"claims": [c.model_dump() for c in DEFAULT_CLAIMS.claims[:3]]}
    bad["claims"][1]["id"] = bad["claims"][0]["id"]
    del bad["claims"][2]["min_effect"]
    bad["claims"][2]["id"] = "a-new-claim"
    path = tmp_path / "claims.yaml"
    path.write_text(yaml.safe_dump(bad), encoding="utf-8")
    with pytest.raises(ClaimsError, match="is written twice") as err:
        claim_set(path, PARAMS.report.setup)
    assert str(path) in str(err.value)
    del bad["claims"][1]
    path.write_text(yaml.safe_dump(bad), encoding="utf-8")
    with pytest.raises(ClaimsError, match=r"claim 'a-new-claim' \(no standard claim .*\): min_effect: Field required"):
        claim_set(path, PARAMS.report.setup)


# ---------------------------------------------------------------- the stage end to end


@pytest.mark.slow
def test_run_writes_md_html_figures_with_every_claim(workspace):
    cfg, paths = workspace
    write_metrics(paths.metrics, skip=("finetune/ner",))
    out = report.run(cfg, paths, NullLog())
    md = (paths.reports / "claims.md").read_text(encoding="utf-8")
    page = (paths.reports / "claims.html").read_text(encoding="utf-8")
    claim_ids = [c.id for c in DEFAULT_CLAIMS.claims]
    for claim_id in claim_ids:
        assert f"| [{claim_id}](#{claim_id}) | " in md and f'<a id="{claim_id}"></a>{claim_id}' in md
        assert f'<tr id="{claim_id}"' in page and f'<a href="#detail-{claim_id}">' in page
    assert md.count("not run: ") >= 2 and "not drawn: " in md
    assert "- **pretrained model quality (metrics/pretrain.json)**:\n  - heldout_loss: 5.1" in md
    verdicts = [line for line in md.splitlines() if line.startswith("**Verdicts.** ")]
    # the headline counts leave the integrity checks out (a line of their own)
    integrity = {c.id for c in DEFAULT_CLAIMS.claims if c.family == "integrity"}
    table = [line for line in md.splitlines() if line.startswith("| [") and line[3:].split("]")[0] not in integrity]
    counted = {v: sum(f"| {v}" in line for line in table) for v in VERDICTS}
    assert verdicts == [
        "**Verdicts.** "
        + ", ".join(f"{n} {v}" for v, n in counted.items())
        + f" (of {len(claim_ids) - 7} claims; the 7 integrity checks are on their own line)"
    ]
    assert len(integrity) == 7 and out["integrity_checks"]["of"] == 7 and "**Integrity.** Integrity checks" in md
    cls_row = next(line for line in md.splitlines() if line.startswith("| [pretraining-helps-cls]"))
    # the headline row: claim, arms with CIs, difference with CI (min_effect, units), verdict with Holm's p;
    # the t intervals over 3 seeds are those of test_claim_rows_from_contract_metrics. Holm runs within the primary
    # family: m = 7 declared (3 tested here; the not-run ones still count), two-sided p: pretraining-helps-cls
    # 2 * ttest_1samp([.10, .11, .12], .02) = 0.00409, full-beats-frozen 0.102, mean-pool-beats-cls-pool 1; the
    # cls claim is the smallest: 7 * 0.00409 = 0.0286
    assert cls_row == (
        "| [pretraining-helps-cls](#pretraining-helps-cls) "
        "| treatment 0.8200 [0.7703, 0.8697]<br>baseline 0.7100 [0.6852, 0.7348] "
        "| 0.1100 [0.0852, 0.1348]<br>min_effect 0.02<br>n=3 "
        "| supported (Holm p 0.029 in the primary family) |"
    )
    details = md.split('<a id="pretraining-helps-cls"></a>')[1].split("### ")[0]
    assert "supported: CI lower bound 0.0852 > min_effect 0.02" in details
    # confounders and provenance are folded; run links are named by run, not by id
    open_part, folded = details.split("<details><summary>")
    assert "confounders (measured)" not in open_part and "MLflow runs" not in open_part
    listed = folded.split("**confounders (measured)**:")[1].split("- **MLflow runs**")[0].count("\n  - ")
    assert folded.startswith(f"confounders ({listed}) and provenance (2 MLflow runs, 1 data md5s)</summary>")
    assert listed >= 2
    assert "[cls/pretrained/full/mean-pool](http://127.0.0.1:5000/#/runs/run-pf)" in folded
    assert "data/tokenize: aaaa.dir" in folded and folded.rstrip().endswith("</details>")
    assert (
        "eval_leakage: 25.00% of 400 eval docs found in the pretraining corpus before the audit, 0.00% after" in folded
    )
    assert '<a href="http://127.0.0.1:5000/#/runs/run-rf">cls/random/full/mean-pool</a>' in page
    assert ">run-rf<" not in page and "run-rf:" not in page
    # the forest plot sits between the headline table and the details
    assert md.index("![Forest plot") < md.index("## Claims in detail") and "## Slices" in md
    assert out["verdicts"]["not_run"] == sum(
        r["verdict"] == "not run" and r["family"] != "integrity" for r in out["claims"].values()
    )
    assert sum(out["verdicts"].values()) + out["integrity_checks"]["of"] == len(claim_ids)
    figures = sorted(p.name for p in (paths.reports / "figures").glob("*.png"))
    assert figures == ["cls_confusion.png", "forest.png", "pretrain_loss.png", "seeds_cls.png", "sense_separation.png"]
    assert page.count("data:image/png;base64,") == 5 and 'src="figures/' not in page
    assert "![Pretraining loss curve](figures/pretrain_loss.png)" in md
    for key in (
        "question",
        "git commit",
        "data snapshot",
        "preprocessing hash",
        "seeds",
        "hardware",
        "library versions",
        "metric implementations",
        "ingest: data/ingest: bbbb.dir",
        "transformers",
    ):
        assert key in md
    assert [p.name for p in report.report_files(paths)][:2] == ["claims.md", "claims.html"]
    table = [line for line in md[: md.index(f"## {render.SINCE}")].splitlines() if line.startswith("|")]
    assert table[0].startswith("| claim |") and len(table) == 2 + len(claim_ids) + len(EVIDENCE)
    groups = [line for line in table if line.startswith("| **")]
    assert [g.split()[1].strip("*") for g in groups] == list(EVIDENCE)  # one heading row per kind, in order
    assert sum(out["verdicts_by_evidence"]["behavioural"].values()) == sum(
        c.evidence == "behavioural" for c in DEFAULT_CLAIMS.claims
    )
    # what dvc exp show, dvc plots show and the MLflow run description read
    assert json.loads((paths.metrics / "summary.json").read_text())["verdicts"] == out["verdicts"]
    with (paths.reports / "plots" / "forest.csv").open() as handle:
        forest = {line["claim"]: line for line in csv.DictReader(handle)}
    with_ci = {k: v for k, v in out["claims"].items() if "difference_ci_low" in v}
    assert set(forest) == set(with_ci) and forest["pretraining-helps-cls"]["verdict"] == "supported"
    assert float(forest["pretraining-helps-cls"]["ci_low"]) == with_ci["pretraining-helps-cls"]["difference_ci_low"]
    note = (paths.reports / "summary.md").read_text()
    assert note.count("\n| ") == len(claim_ids) + 1 and verdicts[0].removeprefix("**Verdicts.** ") in note
    # determinism: a second run writes the same bytes
    before = {p.name: p.read_bytes() for p in report.report_files(paths)}
    report.run(cfg, paths, NullLog())
    assert {p.name: p.read_bytes() for p in report.report_files(paths)} == before


def test_run_with_no_metrics_at_all_still_lists_every_claim(workspace):
    cfg, paths = workspace
    out = report.run(cfg, paths, NullLog())
    n_claims = len(DEFAULT_CLAIMS.claims)
    assert out["verdicts"]["not_run"] + out["integrity_checks"]["of"] == len(out["claims"]) == n_claims
    assert list((paths.reports / "figures").glob("*.png")) == []


CHROMIUM = Path("/usr/bin/chromium")


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM.exists(), reason="headless Chromium not installed (/usr/bin/chromium)")
def test_html_opens_in_headless_chromium(workspace, tmp_path):
    cfg, paths = workspace
    write_metrics(paths.metrics)
    report.run(cfg, paths, NullLog())
    assert len(list((paths.reports / "figures").glob("*.png"))) == 7
    page = (paths.reports / "claims.html").resolve()
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
        "--enable-logging=stderr",
        "--v=0",
    ]
    dom = subprocess.run(
        [str(CHROMIUM), *flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert '<table id="claims">' in dom.stdout and 'id="pretraining-helps-cls"' in dom.stdout
    console_errors = [line for line in dom.stderr.splitlines() if "CONSOLE" in line and "ERROR" in line.upper()]
    assert console_errors == []
    shot = tmp_path / "claims.png"
    subprocess.run(
        [str(CHROMIUM), *flags, f"--screenshot={shot}", "--window-size=1400,900", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    # the table's header row is grey (#eee) and a supported row green (#d4f4d4): both must be on screen
    from matplotlib import image

    pixels = (image.imread(shot)[..., :3] * 255).round().astype(int).reshape(-1, 3)
    assert (pixels == (0xEE, 0xEE, 0xEE)).all(axis=1).sum() > 500
    assert (pixels == (0xD4, 0xF4, 0xD4)).all(axis=1).sum() > 500


def test_curve_reader_skips_empty_and_nan_cells_and_span_bars_keep_severity_order(tmp_path):
    from tasks.report.render import figures

    curve = tmp_path / "pretrain_curve.tsv"
    curve.write_text("step\ttrain_loss\tlr\teval_loss\n0\t9.0\t0.0\t9.1\n5\t8.0\t1e-3\t\n10\tnan\t5e-4\t7.0\n")
    series = figures.read_curve(curve)
    assert series == {
        "train_loss": [(0.0, 9.0), (5.0, 8.0)],
        "eval_loss": [(0.0, 9.1), (10.0, 7.0)],
        "lr": [(0.0, 0.0), (5.0, 1e-3), (10.0, 5e-4)],
        "unigram_ce": [],
    }
    raw = {"spurious": 1, "exact": 5, "zeta": 2, "missed": 3, "boundary": 4, "type": 0, "note": "x"}
    assert list(figures.span_counts(raw)) == ["exact", "boundary", "type", "missed", "spurious", "zeta"]
    write_metrics(tmp_path / "metrics")
    out = figures.span_errors(Metrics(tmp_path / "metrics"), "ner", "pretrained/full/first", tmp_path / "s.png", 50)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(figures.NotRun, match="no key 'runs.random/full/all'"):
        figures.span_errors(Metrics(tmp_path / "metrics"), "ner", "random/full/all", tmp_path / "t.png", 50)


def test_malformed_metrics_give_not_run_rows_and_no_figure(workspace):
    cfg, paths = workspace
    write_metrics(paths.metrics)
    broken = json.loads((paths.metrics / "finetune/cls.json").read_text())
    broken["runs"]["random/full/mean-pool"]["test_macro_f1"]["per_seed"] = [0.7, None, 0.72]
    broken["runs"]["pretrained/full/mean-pool"]["details"]["confusion_matrix"] = {"labels": ["a"], "matrix": [[1, 2]]}
    (paths.metrics / "finetune/cls.json").write_text(json.dumps(broken))
    (paths.metrics / "probe.json").write_text("{not json")
    rows = _rows_by_id(cfg, paths)
    assert rows["pretraining-helps-cls"].verdict == "not run"
    assert "malformed metrics" in rows["pretraining-helps-cls"].reason
    assert "probe.json is not valid JSON" in rows["contextual-layers-separate-senses"].reason
    drawn = report.draw_figures(cfg, paths, Metrics(paths.metrics), [], NullLog())
    assert drawn["cls: confusion matrix"] == "not drawn: confusion_matrix is not a square list of rows"
    assert drawn["Sense separation by layer"].startswith("not drawn: ") and isinstance(drawn["ner: span errors"], Path)
