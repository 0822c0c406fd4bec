"""The report's summaries: the curated metrics of `dvc exp show`, the plot data of `dvc plots show`."""

import csv
import json

from tasks.report.claims.grammar import Claim, Metrics
from tasks.report.claims.row import Row
from tasks.report.render import summary
from tasks.report.stats.estimates import Estimate


def _arm(per_seed, seeds=(13, 21)):
    return {"test_macro_f1": {"per_seed": list(per_seed), "seeds": list(seeds), "mean": sum(per_seed) / len(per_seed)}}


def _metrics(folder):
    folder.mkdir()
    runs = {
        "pretrained/full/mean-pool": _arm((0.76, 0.80)),
        "pretrained/frozen/mean-pool": _arm((0.50, 0.60)),
        "reference/full/mean-pool": _arm((0.86, 0.90)),
        "baseline/tfidf-lr/full-text": _arm((0.93,), (0,)),
    }
    # dev scores: the frozen arm is worse on dev, so the best pretrained arm is the full one
    dev = {
        "pretrained/full/mean-pool": 0.80,
        "pretrained/frozen/mean-pool": 0.61,
        "reference/full/mean-pool": 0.9,
        "baseline/tfidf-lr/full-text": 0.95,
    }
    cls = {
        "kind": "classification",
        "metric": "test_macro_f1",
        "runs": runs,
        "selection": {
            "best_arm": "reference/full/mean-pool",
            "best_baseline": "baseline/tfidf-lr/full-text",
            "dev": dev,
        },
    }
    (folder / "finetune").mkdir()
    (folder / "finetune/cls.json").write_text(json.dumps(cls))
    (folder / "pretrain.json").write_text(
        json.dumps({"heldout_perplexity": 102.5, "heldout_mlm_accuracy": None, "heldout_gap_to_unigram_nats": 2.4})
    )
    return Metrics(folder)


def test_summary_holds_the_dev_selected_arms_the_best_pretrained_arm_and_the_pretraining_gap(tmp_path):
    verdicts = {"supported": 2, "inconclusive": 1}
    got = summary.summary_metrics([], verdicts, _metrics(tmp_path / "metrics"))
    assert got == {
        "verdicts": verdicts,
        "claims": 0,
        "cls": {
            "best_arm": "reference/full/mean-pool",
            "best_arm_test_macro_f1": 0.88,
            "best_baseline": "baseline/tfidf-lr/full-text",
            "best_baseline_test_macro_f1": 0.93,
            "pretrained_arm": "pretrained/full/mean-pool",
            "pretrained_arm_test_macro_f1": 0.78,
        },
        "pretrain": {"heldout_perplexity": 102.5, "heldout_gap_to_unigram_nats": 2.4},
    }
    # no finetune/ner.json: no ner columns (not zeros); a null metric is left out too


def test_plot_data_has_one_line_per_arm_and_seed_and_drops_stale_files(tmp_path):
    metrics = _metrics(tmp_path / "metrics")
    plots = tmp_path / "plots"
    plots.mkdir()
    (plots / "seeds_ner.csv").write_text("stale from a run with NER\n")
    written = summary.write_plot_data(plots, [], metrics)
    assert [p.name for p in written] == ["forest.csv", "seeds.csv"] and not (plots / "seeds_ner.csv").exists()
    assert (plots / "forest.csv").read_text() == "claim,difference,ci_low,ci_high,verdict\n"
    with (plots / "seeds.csv").open() as handle:
        lines = list(csv.DictReader(handle))
    assert len(lines) == 2 + 2 + 2 + 1
    assert lines[0] == {
        "arm": "cls baseline/tfidf-lr/full-text",
        "seed": "0",
        "score": "0.93",
        "task": "cls",
        "metric": "test_macro_f1",
    }
    assert {(r["arm"], r["seed"], float(r["score"])) for r in lines if r["arm"].startswith("cls pretrained/full")} == {
        ("cls pretrained/full/mean-pool", "13", 0.76),
        ("cls pretrained/full/mean-pool", "21", 0.80),
    }


def test_loss_curves_keep_only_the_steps_each_series_has(tmp_path):
    metrics = _metrics(tmp_path / "metrics")
    # as the trainer writes it: an eval step that is not a logging step has no train_loss (step 6)
    (tmp_path / "metrics" / "pretrain_curve.tsv").write_text(
        "step\ttrain_loss\tlr\teval_loss\tunigram_ce\n5\t9.0\t1e-4\t\t7.0\n6\t\t1e-4\t8.9\t7.0\n"
        "10\t8.5\t2e-4\t8.7\t7.0\n15\t8.0\t3e-4\tnan\t7.0\n"
    )
    written = summary.write_plot_data(tmp_path / "plots", [], metrics)
    assert {"pretrain_train.csv", "pretrain_heldout.csv"} <= {p.name for p in written}
    # an empty cell would be drawn as a loss of 0 by DVC's line template: each file holds only its own steps
    assert (tmp_path / "plots" / "pretrain_heldout.csv").read_text() == "step,eval_loss\n6,8.9\n10,8.7\n"
    assert (tmp_path / "plots" / "pretrain_train.csv").read_text() == (
        "step,train_loss,unigram_ce\n5,9.0,7.0\n10,8.5,7.0\n15,8.0,7.0\n"
    )


def _row(cid: str) -> Row:
    claim = Claim.model_validate(
        {
            "id": cid,
            "statement": "s",
            "evidence": "extrinsic",
            "kind": "difference",
            "task": "news",
            "data_slice": "news/test",
            "metric": "test_macro_f1",
            "treatment": "finetune/news/pretrained/full/cls",
            "baseline": "finetune/news/baseline/majority/labels",
            "ablation": "the encoder",
            "min_effect": 0.0,
            "known_confounders": [],
        }
    )
    return Row(claim, "inconclusive", "made", difference=Estimate(0.01, -0.02, 0.04, 3, "made"))


def test_the_run_description_fits_mlflow_and_says_how_many_claims_it_leaves_out():
    # MLflow cut a description of 34 claims at 8,000 characters mid-line (tests/project/test_e2e.py saw it)
    rows = [_row(f"claim-{i:03d}-" + "x" * 60) for i in range(120)]
    text = summary.summary_md(rows)
    line = len(text.splitlines()[4]) + 1  # every claim line has the same length here
    shown = [ln for ln in text.splitlines() if ln.startswith("| claim-")]
    assert len(text) <= summary.NOTE_CHARS < len(text) + line and len(shown) < 120
    assert f"| ... and {120 - len(shown)} more claims | | in `report/claims.html` |" in text
    assert text.endswith("`report/claims.html`.\n")
    few = summary.summary_md(rows[:3])
    assert "more claims" not in few and len([ln for ln in few.splitlines() if ln.startswith("| claim-")]) == 3
