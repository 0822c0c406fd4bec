"""Verdicts that say what happened: `ruled out`, Holm within declared families (a hand case), the unadjusted
verdict beside a demoted one, the floor gate, optimiser steps, the verdict cell, report.json and the lead
sentence."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from sklearn.metrics import f1_score

from report_fixtures import ARMS, GOLD, STATS, claim, write_workspace
from tasks import report
from tasks.common.provenance import Lock
from tasks.report.claims import gates
from tasks.report.claims.evaluation import apply_holm, evaluate
from tasks.report.claims.gates import floor_key, run_steps
from tasks.report.claims.grammar import Metrics
from tasks.report.claims.row import Row
from tasks.report.render.answer import answer, deciding_design, integrity_line, verdict_cell, without_parentheses
from tasks.report.stats.components import Components
from tasks.report.stats.estimates import Estimate, Tests, difference_verdict
from tasks.report.stats.power import power_of

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
        _row("c", "findings", "supported", 0.03),
        _row("d", "findings", "ruled out", 0.04),
        _row("e", "findings", "inconclusive", 0.5),
    ]
    apply_holm(rows, 0.05)
    # primary, m = 2: a 2 x 0.01 = 0.02, b max(0.02, 1 x 0.04) = 0.04: both kept (pooled over all five claims,
    # b would be max(0.05, 4 x 0.03, ...) > 0.05 and demoted)
    # findings, m = 3: c 3 x 0.03 = 0.09, d max(0.09, 2 x 0.04) = 0.09, e 0.5: c and d demoted
    assert [r.p_adjusted for r in rows] == pytest.approx([0.02, 0.04, 0.09, 0.09, 0.5])
    assert [r.verdict for r in rows] == ["supported", "supported", "inconclusive", "inconclusive", "inconclusive"]
    assert [r.unadjusted for r in rows] == ["supported", "supported", "supported", "ruled out", "inconclusive"]
    assert "within the findings family (m = 3 claims declared)" in rows[2].reason
    assert verdict_cell(rows[2]) == "inconclusive (Holm p 0.09 in the findings family; unadjusted: supported)"
    assert verdict_cell(rows[0]) == "supported (Holm p 0.02 in the primary family)"
    metrics = report.row_metrics(rows[3])
    assert metrics["family"] == "findings" and metrics["verdict_unadjusted"] == "ruled out"
    assert metrics["verdict"] == "inconclusive" and metrics["p_holm"] == pytest.approx(0.09)
    assert report.summarize(rows)["ruled_out"] == 0 and report.summarize(rows)["inconclusive"] == 3


def test_holms_m_is_the_familys_declared_size_not_the_claims_that_got_a_p_value():
    # 7 primary claims declared, 2 tested (the others not resolvable): m = 7, not 2
    rows = [_row("a", "primary", "supported", 0.005), _row("b", "primary", "supported", 0.009)]
    rows += [_row(f"n{i}", "primary", "not resolvable", 1.0) for i in range(5)]
    for row in rows[2:]:
        row.p_value = None
    apply_holm(rows, 0.05)
    # a: 7 x 0.005 = 0.035 <= 0.05 kept; b: max(0.035, 6 x 0.009 = 0.054) > 0.05 demoted (with m = 2 it was 0.018)
    assert [rows[0].p_adjusted, rows[1].p_adjusted] == pytest.approx([0.035, 0.054])
    assert rows[0].verdict == "supported" and rows[1].verdict == "inconclusive"
    assert "(m = 7 claims declared)" in rows[1].reason


def test_an_underpowered_inconclusive_verdict_says_so():
    row = _row("a", "primary", "inconclusive", 0.3)
    row.p_adjusted = 0.3
    # min_effect 0.02, SE 0.01 at alpha 0.05 / 7: reach (z_{1 - 0.05/14} + z_0.8) x 0.01 = 0.0353; observed 0.04
    row.power = power_of(0.01, 200, "test items", 0.02, 0.05 / 7, 0.8, difference=0.04)
    assert verdict_cell(row) == (
        "inconclusive (underpowered: reach 0.0353 > |difference - min_effect| 0.0200; Holm p 0.3 in the primary family)"
    )
    out = report.row_metrics(row)
    assert out["mde"] == pytest.approx(0.0553, abs=5e-5) and out["mde_alpha"] == pytest.approx(0.05 / 7)
    assert out["gap_detectable"] is False and out["n_needed"] == 624  # ceil(200 x (0.03532 / 0.02)^2)
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


def _macro(key: str) -> float:
    """Mean over seeds of sklearn's macro-F1 of an arm of the fixture on its 20 test docs."""
    return float(np.mean([f1_score(GOLD, p, average="macro") for p in ARMS[key].values()]))


def test_the_floor_gate_compares_each_arm_with_its_floor_on_test_with_a_ci(tmp_path):
    metrics = write_workspace(tmp_path)  # dev scores say nothing now: the gate reads the test items
    _set_dev(tmp_path, DEV)
    row = evaluate(claim(ARM, CONTROL), metrics, Lock({}), FLOOR)
    assert row.verdict == "supported"  # the arms are compared with TF-IDF on test, not at a dev point
    tfidf = "baseline/tfidf-lr/full-text"
    notes = {n.split(" on test")[0]: n for n in row.notes if n.startswith("floor: ")}
    gap = _macro(CONTROL) - _macro(tfidf)  # sklearn, by hand: -0.1503
    assert f"{gap:+.4f}" == "-0.1503" and f"= {gap:+.4f} [" in notes[f"floor: {CONTROL} near its floor"]
    assert f"{_macro(ARM) - _macro(tfidf):+.4f} [" in notes[f"floor: {ARM} near its floor"]
    assert "test items, not used for selection" in notes[f"floor: {ARM} near its floor"]
    # the claim against the best baseline itself tests that floor on test: not gated
    assert not any(
        n.startswith("floor") for n in evaluate(claim("best-arm", "best-baseline"), metrics, Lock({}), FLOOR).notes
    )


def test_the_floor_gate_compares_an_arm_with_its_floor_once_per_report(tmp_path, monkeypatch):
    metrics = write_workspace(tmp_path)
    _set_dev(tmp_path, DEV)
    calls = []
    real = gates.arm_floor
    monkeypatch.setattr(gates, "arm_floor", lambda *a: calls.append(a[1].run_key) or real(*a))
    loaded: dict = {}
    first = evaluate(claim(ARM, CONTROL), metrics, Lock({}), FLOOR, loaded)
    again = evaluate(claim(ARM, CONTROL, cid="again"), metrics, Lock({}), FLOOR, loaded)
    # two claims on the same two arms: each arm against its floor computed once (the memo), the same notes
    assert sorted(calls) == sorted([ARM, CONTROL])
    assert [n for n in first.notes if n.startswith("floor")] == [n for n in again.notes if n.startswith("floor")]


def test_a_decisive_verdict_stands_and_the_gate_adds_its_scope(tmp_path):
    metrics = write_workspace(tmp_path)
    # margin 0.5: both arms' CIs against TF-IDF lie below it: both at floor
    wide = replace(FLOOR, floor_margin=0.5)
    row = evaluate(claim(CONTROL, ARM), metrics, Lock({}), wide)  # random - pretrained: CI far below 0
    assert row.verdict == "contradicted" and row.p_value is not None
    assert any(
        n.startswith(f"scope: {CONTROL} at floor on test") and n.endswith("holds for encoders at this scale")
        for n in row.notes
    )
    # an undecided claim whose treatment is at floor keeps its verdict: the gate scopes it, with the CI that says so
    undecided = evaluate(claim(ARM, CONTROL, min_effect=row.difference.mean * -1), metrics, Lock({}), wide)
    assert undecided.verdict == "inconclusive" and undecided.p_value is not None
    scope = [n for n in undecided.notes if n.startswith(f"scope: {ARM} at floor on test ({ARM} - baseline/tfidf-lr/")]
    assert len(scope) == 1 and scope[0].endswith(
        "undecided, and about an encoder that does no better than a fitted baseline here"
    )
    assert undecided.difference is not None
    # the lead sentence keeps the undecided primary claim's verdict and names its scope
    undecided.claim = undecided.claim.model_copy(update={"family": "primary"})
    lead = answer([undecided])
    assert f"is inconclusive (difference {undecided.difference.mean:+.4f}" in lead
    assert lead.endswith(f", scope: {ARM} at floor on test. No findings beyond the primary claims.")


def test_the_lead_sentence_says_what_would_decide_an_undecided_claim():
    # pretraining-seed part 0.0004 (SE 0.02) against the gap 0.05 - 0.02 = 0.03 at alpha 0.05 / 7, power 0.8:
    # multiplier z(1 - 0.05 / 14) + z(0.8) = 2.6901 + 0.8416 = 3.5317 and 3.5317 x 0.02 = 0.0706 >= 0.03, so no
    # fine-tuning seeds or items decide it; pretraining seeds: ceil(3 x 3.5317^2 x 0.0004 / 0.03^2) = ceil(16.63) = 17
    parts = Components(0.0004, 0.0001, 0.0001, (), n_seeds=20, n_items=1000, n_pretraining=3)
    row = _row("pretraining-helps-cls", "primary", "inconclusive", 0.3)
    row.difference = Estimate(0.05, -0.01, 0.11, 1000, "x")
    row.power = power_of(0.0006**0.5, 1000, "test items", 0.02, 0.05 / 7, 0.8, difference=0.05, parts=parts)
    assert deciding_design(row) == (
        "what would decide it: no number of fine-tuning seeds or test items: the pretraining-seed part alone exceeds "
        "it (more than 17 pretraining seeds, from 3)"
    )
    assert f", {deciding_design(row)}. " in answer([row])
    row.power = power_of(0.0006**0.5, 1000, "test items", 0.02, 0.05 / 7, 0.8, difference=0.5, parts=parts)
    assert deciding_design(row) == ""  # a gap within reach needs no other design


def test_the_floor_of_a_learning_curve_arm_is_its_comparator_at_its_size():
    finetune = {
        "selection": {
            "best_baseline": "baseline/tfidf-lr/reference-cut",
            "comparator_of": {ARM: "baseline/tfidf-lr/clozeline-cut"},
            "dev": {"baseline/tfidf-lr/clozeline-cut": 0.8, "baseline/majority/labels": 0.1},
        },
        "learning_curve": {
            "selection": {
                "n32": {
                    "best_baseline": "baseline/tfidf-lr/reference-cut@n32",
                    "dev": {"baseline/tfidf-lr/clozeline-cut@n32": 0.4, "baseline/majority/labels@n32": 0.07},
                }
            }
        },
    }
    assert floor_key(finetune, "pretrained@n32/full/mean-pool", "best") == "baseline/tfidf-lr/clozeline-cut@n32"
    assert floor_key(finetune, "random@n32/full/mean-pool", "best") == "baseline/tfidf-lr/reference-cut@n32"
    assert floor_key(finetune, "pretrained@n32/full/mean-pool", "weakest") == "baseline/majority/labels@n32"
    assert floor_key(finetune, "pretrained@ablation_mlm-15/full/mean-pool", "best") == "baseline/tfidf-lr/clozeline-cut"
    assert floor_key(finetune, ARM, "weakest") == "baseline/majority/labels"
    with pytest.raises(KeyError):
        floor_key(finetune, "pretrained@n80/full/mean-pool", "best")  # a size the curve did not run


def test_without_a_floor_baseline_the_gate_says_it_was_not_checked(tmp_path):
    metrics = write_workspace(tmp_path)  # selection has no dev scores: no weakest baseline to name
    row = evaluate(claim(ARM, CONTROL), metrics, Lock({}), replace(FLOOR, floor_baseline="weakest"))
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


def test_the_report_leads_with_the_primary_familys_decided_verdicts_then_findings_then_integrity():
    b = _row("pretraining-helps-ner", "primary", "not resolvable", 1.0)
    b.reason = "not resolvable: pretrained/full/first at floor (dev 0.0913; floor: x)"
    a = _row("pretraining-helps-cls", "primary", "supported", 0.01)
    a.difference = Estimate(0.05, 0.02, 0.08, 200, "x")
    c = _row("best-arm-beats-best-baseline-cls", "findings", "supported", 0.01)
    d = _row("ours-within-5pt-of-reference-cls", "findings", "contradicted", 0.01)
    e = _row("f", "findings", "inconclusive", 0.5)
    checks = [_row("leak", "integrity", "supported", 0.01), _row("mlm", "integrity", "inconclusive", 0.2)]
    checks[1].reason = "CI [0.1, 0.3] contains min_effect 0.2"
    assert answer([b, a, c, d, e, *checks]) == (
        "1 of the 2 primary claims (Holm within the family, m = 2) is decided, 1 supported: pretraining-helps-cls "
        "is supported (difference +0.0500 [0.0200, 0.0800] against min_effect 0.02); pretraining-helps-ner is not "
        "resolvable (pretrained/full/first at floor). Findings: 2 of 3 decided (1 supported, 1 contradicted)."
    )
    assert integrity_line([a, *checks]) == (
        "Integrity checks (preconditions of the run, not findings): 1 of 2 passed; NOT PASSED: mlm is inconclusive "
        "(CI [0.1, 0.3] contains min_effect 0.2). The claims resting on them say so in their notes."
    )
    assert integrity_line(checks[:1]) == "Integrity checks (preconditions of the run, not findings): all 1 passed."
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
