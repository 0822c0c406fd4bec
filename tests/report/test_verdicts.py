"""Verdicts that say what happened: `ruled out`, Holm within declared families (a hand case), the unadjusted
verdict beside a demoted one, the floor gate, optimiser steps, the verdict cell, report.json and the lead
sentence."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from report_fixtures import STATS, claim, write_workspace
from tasks import report
from tasks.common.provenance import Lock
from tasks.report.claims.evaluation import apply_holm, evaluate
from tasks.report.claims.gates import run_steps
from tasks.report.claims.grammar import Metrics
from tasks.report.claims.row import Row
from tasks.report.render.answer import answer, verdict_cell, without_parentheses
from tasks.report.stats.estimates import Estimate, Tests, difference_verdict
from tasks.report.stats.power import Power

FLOOR = replace(STATS, floor_margin=0.01, floor_baseline="best")
ARM, CONTROL = "pretrained/full/mean-pool", "random/full/mean-pool"


def _tests(p_less: float) -> Tests:
    """Tests whose ``less`` p-value is ``p_less`` (the others 1)."""
    return Tests(lambda m: 1.0, lambda m: p_less, lambda m: 1.0)


def test_ruled_out_when_a_positive_claims_ci_lies_below_min_effect():
    verdict, reason, p = difference_verdict(Estimate(0.01, 0.002, 0.015, 200, "x"), 0.02, _tests(0.003), 0.05)
    assert verdict == "ruled out" and reason.startswith("CI upper bound 0.0150 < min_effect 0.02")
    assert p == pytest.approx(0.006)  # H0 diff >= min_effect, two-sided: 2 x 0.003
    # below 0: contradicted, not ruled out; across min_effect: inconclusive
    assert difference_verdict(Estimate(-0.05, -0.08, -0.02, 200, "x"), 0.02, _tests(0.001), 0.05)[0] == "contradicted"
    assert difference_verdict(Estimate(0.01, -0.01, 0.03, 200, "x"), 0.02, _tests(0.3), 0.05)[0] == "inconclusive"
    # a non-inferiority claim (min_effect < 0) has no `ruled out`: below the margin is contradicted
    assert difference_verdict(Estimate(-0.1, -0.12, -0.08, 200, "x"), -0.05, _tests(0.001), 0.05)[0] == "contradicted"


def _row(cid: str, family: str, verdict: str, p: float) -> Row:
    return Row(claim("x", "y", cid=cid).model_copy(update={"family": family}), verdict, "why", p_value=p)


def test_holm_runs_within_each_family_and_keeps_the_unadjusted_verdict():
    rows = [
        _row("a", "primary", "supported", 0.01),
        _row("b", "primary", "supported", 0.04),
        _row("c", "secondary", "supported", 0.03),
        _row("d", "secondary", "ruled out", 0.04),
        _row("e", "secondary", "inconclusive", 0.5),
    ]
    apply_holm(rows, 0.05)
    # primary, m = 2: a 2 x 0.01 = 0.02, b max(0.02, 1 x 0.04) = 0.04: both kept (pooled over all five claims,
    # b would be max(0.05, 4 x 0.03, ...) > 0.05 and demoted)
    # secondary, m = 3: c 3 x 0.03 = 0.09, d max(0.09, 2 x 0.04) = 0.09, e 0.5: c and d demoted
    assert [r.p_adjusted for r in rows] == pytest.approx([0.02, 0.04, 0.09, 0.09, 0.5])
    assert [r.verdict for r in rows] == ["supported", "supported", "inconclusive", "inconclusive", "inconclusive"]
    assert [r.unadjusted for r in rows] == ["supported", "supported", "supported", "ruled out", "inconclusive"]
    assert "within the secondary family (3 tests)" in rows[2].reason
    assert verdict_cell(rows[2]) == "inconclusive (Holm p 0.09 in the secondary family; unadjusted: supported)"
    assert verdict_cell(rows[0]) == "supported (Holm p 0.02 in the primary family)"
    metrics = report.row_metrics(rows[3])
    assert metrics["family"] == "secondary" and metrics["verdict_unadjusted"] == "ruled out"
    assert metrics["verdict"] == "inconclusive" and metrics["p_holm"] == pytest.approx(0.09)
    assert report.summarize(rows)["ruled_out"] == 0 and report.summarize(rows)["inconclusive"] == 3


def test_an_underpowered_inconclusive_verdict_says_so():
    row = _row("a", "primary", "inconclusive", 0.3)
    row.p_adjusted = 0.3
    row.power = Power(mde=0.06, se=0.0214, alpha=0.05, power=0.8, n=200, unit="test items", min_effect=0.02)
    assert verdict_cell(row) == (
        "inconclusive (underpowered: MDE 0.0600 > min_effect 0.02; Holm p 0.3 in the primary family)"
    )
    out = report.row_metrics(row)
    assert out["mde"] == 0.06 and out["min_effect_detectable"] is False and out["n_needed"] == 1800
    # a supported verdict does not call itself underpowered, even with a large MDE
    row.verdict = "supported"
    assert verdict_cell(row) == "supported (Holm p 0.3 in the primary family)"


def _set_dev(root, dev: dict, selection: dict | None = None, **extra) -> None:
    path = root / "metrics" / "finetune" / "cls.json"
    data = json.loads(path.read_text())
    data["selection"]["dev"] = dev
    data["selection"].update(selection or {})
    data.update(extra)
    path.write_text(json.dumps(data))


DEV = {ARM: 0.80, CONTROL: 0.60, "baseline/tfidf-lr/full-text": 0.85, "baseline/majority/labels": 0.30}


def test_a_treatment_arm_at_the_best_baselines_dev_score_is_not_resolvable(tmp_path):
    metrics = write_workspace(tmp_path)  # read lazily: the dev scores set next are what it reads
    _set_dev(tmp_path, DEV)
    row = evaluate(claim(ARM, CONTROL), metrics, Lock({}), FLOOR)
    assert row.verdict == "not resolvable" and row.p_value is None
    assert row.reason == (
        "not resolvable: pretrained/full/mean-pool at floor (dev 0.8000; floor: "
        "baseline/tfidf-lr/full-text dev 0.8500 + margin 0.01)"
    )
    assert verdict_cell(row) == row.reason and row.difference is not None  # the arms are still shown
    assert any("baseline random/full/mean-pool at floor (dev 0.6000" in n for n in row.notes)
    # the claim against the best baseline itself tests that floor on test: not gated
    assert evaluate(claim("best-arm", "best-baseline"), metrics, Lock({}), FLOOR).verdict != "not resolvable"


def test_each_arm_is_gated_by_the_comparator_that_read_its_own_input(tmp_path):
    metrics = write_workspace(tmp_path)
    # the treatment read the clozeline cut, whose TF-IDF scored 0.79 on dev; the MiniLM cut's TF-IDF 0.85
    # (the best arm's, so best_baseline) must not gate it, and the control's own comparator 0.65 is above it
    cuts = {"baseline/tfidf-lr/clozeline-cut": 0.79, "baseline/tfidf-lr/reference-cut": 0.85}
    _set_dev(
        tmp_path,
        {ARM: 0.80, CONTROL: 0.60, **cuts},
        {
            "best_baseline": "baseline/tfidf-lr/reference-cut",
            "comparator_of": {ARM: "baseline/tfidf-lr/clozeline-cut", CONTROL: "baseline/tfidf-lr/clozeline-cut"},
        },
    )
    row = evaluate(claim(ARM, CONTROL), metrics, Lock({}), replace(FLOOR, floor_margin=0.0))
    assert row.verdict != "not resolvable"  # 0.80 > 0.79 + 0: above its own floor, below the other cut's
    assert any(
        n.startswith(
            "baseline random/full/mean-pool at floor (dev 0.6000; floor: baseline/tfidf-lr/clozeline-cut dev 0.7900"
        )
        for n in row.notes
    )
    without = {ARM: 0.80, CONTROL: 0.60, **cuts}  # an older metrics file: best_baseline for every arm
    _set_dev(tmp_path, without, {"best_baseline": "baseline/tfidf-lr/reference-cut", "comparator_of": {}})
    metrics = Metrics(tmp_path / "metrics", predictions=tmp_path / "data" / "finetune")
    assert evaluate(claim(ARM, CONTROL), metrics, Lock({}), replace(FLOOR, floor_margin=0.0)).reason.startswith(
        "not resolvable: pretrained/full/mean-pool at floor (dev 0.8000; floor: baseline/tfidf-lr/reference-cut"
    )


def test_the_weakest_baseline_floor_and_its_margin(tmp_path):
    metrics = write_workspace(tmp_path)
    _set_dev(tmp_path, DEV)
    weakest = replace(FLOOR, floor_baseline="weakest")  # majority 0.30 + 0.01
    assert evaluate(claim(ARM, CONTROL), metrics, Lock({}), weakest).verdict == "supported"
    _set_dev(tmp_path, {**DEV, ARM: 0.31})  # exactly floor + margin: at the floor
    metrics = Metrics(tmp_path / "metrics", predictions=tmp_path / "data" / "finetune")
    row = evaluate(claim(ARM, CONTROL), metrics, Lock({}), weakest)
    assert row.reason.startswith(
        "not resolvable: pretrained/full/mean-pool at floor (dev 0.3100; floor: "
        "baseline/majority/labels dev 0.3000 + margin 0.01)"
    )


def test_without_dev_scores_the_gate_says_it_was_not_checked(tmp_path):
    metrics = write_workspace(tmp_path)  # selection has no dev scores
    row = evaluate(claim(ARM, CONTROL), metrics, Lock({}), FLOOR)
    assert row.verdict == "supported" and any(n.startswith("floor gate not checked") for n in row.notes)
    assert not any("KeyError" in n for n in row.notes), row.notes  # the key named in words, no exception class


def test_optimiser_steps_per_run_from_epochs_docs_and_the_batch_size_as_run(tmp_path):
    metrics = write_workspace(tmp_path)
    path = tmp_path / "metrics" / "finetune" / "cls.json"
    data = json.loads(path.read_text())
    data["docs"] = {"clozeline": {"train": {"docs_kept": 20}}, "reference": {"train": {"docs_kept": 20}}}
    for key, epochs in ((ARM, (4, 4, 3)), (CONTROL, (4, 4, 4))):
        data["runs"][key]["details"] = {
            "per_seed": {str(s): {"epochs_run": e, "best_epoch": e - 1} for s, e in zip((1, 2, 3), epochs)}
        }
    path.write_text(json.dumps(data))
    lock = Lock({"finetune@cls": {"params": {"params.yaml": {"finetune.recipes.cls": {"batch_size": 8}}}}})
    row = evaluate(claim(ARM, CONTROL), metrics, lock, STATS)
    # ceil(20 / 8) = 3 steps per epoch; 3 or 4 epochs run
    assert row.steps == [
        "pretrained/full/mean-pool: 3-4 epochs run per seed (best epoch 2, 3; the last epoch run in 0 of 3 seeds); "
        "9-12 optimiser steps per run (3 per epoch = ceil(20 train docs / batch size 8))",
        "random/full/mean-pool: 4 epochs run per seed (best epoch 3; the last epoch run in 0 of 3 seeds); 12 "
        "optimiser steps per run (3 per epoch = ceil(20 train docs / batch size 8))",
    ]
    # a learning-curve run trains on the docs its key names; a best epoch that is the last one run is counted
    curve = "pretrained@n9/full/mean-pool"
    data["runs"][curve] = {
        "details": {"per_seed": {"1": {"epochs_run": 4, "best_epoch": 4}, "2": {"epochs_run": 4, "best_epoch": 2}}}
    }
    path.write_text(json.dumps(data))
    assert run_steps("cls", curve, Metrics(tmp_path / "metrics"), lock) == (
        "pretrained@n9/full/mean-pool: 4 epochs run per seed (best epoch 2, 4; the last epoch run in 1 of 2 seeds: "
        "dev was still improving); 8 optimiser steps per run (2 per epoch = ceil(9 train docs / batch size 8))"
    )
    assert "CI excludes pretraining variance (1 pretraining seed; pretrain.seeds)" in row.notes
    assert any(n.startswith("each seed draws its own training subset") for n in row.notes)
    # a frozen probe (tasks/finetune/arms/frozen.py) reports its lbfgs iterations at the chosen C instead
    probe = {"chosen_c": 0.1, "n_iter_by_c": {"0.01": 12, "0.1": 40, "1": 90}}
    data["runs"][CONTROL]["details"]["per_seed"] = {"1": {"epochs_run": 0, "best_epoch": 0, "probe": probe}}
    path.write_text(json.dumps(data))
    assert run_steps("cls", CONTROL, Metrics(tmp_path / "metrics"), lock) == (
        "random/full/mean-pool: no optimiser steps: a logistic-regression probe on the frozen features (lbfgs, 40 "
        "iterations at the C chosen on dev)"
    )


def test_the_report_leads_with_the_primary_familys_answer():
    a = _row("pretraining-helps-cls", "primary", "supported", 0.01)
    a.difference = Estimate(0.05, 0.02, 0.08, 200, "x")
    b = _row("pretraining-helps-ner", "primary", "not resolvable", 1.0)
    b.reason = "not resolvable: pretrained/full/first at floor (dev 0.0913; floor: x)"
    c = _row("best-arm-beats-best-baseline-cls", "secondary", "supported", 0.01)
    assert answer([a, b, c]) == (
        "1 of the 2 primary claims (Holm within the family) is supported: pretraining-helps-cls is supported "
        "(difference +0.0500 [0.0200, 0.0800] against min_effect 0.02); pretraining-helps-ner is not resolvable "
        "(pretrained/full/first at floor)."
    )
    assert answer([c]).startswith("No claim is declared primary")
    assert (
        without_parentheses(
            "a: 2 of 5 seeds diverged (dev at chance; at most 20%); b at floor (dev 0.09; floor: x (y) z)"
        )
        == "a: 2 of 5 seeds diverged; b at floor"
    )


def test_an_undefined_best_baseline_estimate_is_shown_as_missing_not_raised(monkeypatch):
    # e2e: a NER memoriser seed whose draw predicts no entity span has no calibration unit (ValueError)
    from tasks.report.claims import evaluation
    from tasks.report.claims.grammar import Sample

    sample = Sample((0.5,), ("13",), "seed", "x", run_key="baseline/memorise/words")
    monkeypatch.setattr(evaluation, "arm", lambda ref, claim, metrics: sample)

    def undefined(*_):
        raise ValueError("seed 21 has no calibration unit (no predicted entity span)")

    monkeypatch.setattr(evaluation, "arm_estimate", undefined)
    assert evaluation.best_baseline(claim(ARM, CONTROL), None, FLOOR) == ("baseline/memorise/words", None)
