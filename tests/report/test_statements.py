"""Statements from values (tasks/report/claims/arms/statements.py): a fine-tuning claim names the runs, comparator,
seeds and train size the verdict read, and the notes name every baseline above the best arm with the interval."""

from __future__ import annotations

import json
from types import SimpleNamespace

from tasks.report.claims.arms.statements import above_note, baselines_above, resolved
from tasks.report.claims.grammar import Claim, Metrics, NotRun, Sample

ARM, CRF, MEMO, REF = "pretrained/full/first", "baseline/crf/words", "baseline/memorise/words", "baseline/crf/all-data"


def _run(mean: float, train: list[int], **extra) -> dict:
    per_seed = {str(13 + i): {"train_docs": n} for i, n in enumerate(train)}
    return {"test_entity_f1": {"mean": mean}, "details": {"per_seed": per_seed}, **extra}


def _metrics(tmp_path) -> Metrics:
    crf = {"baseline": "crf", "described_as": "a linear-chain CRF on word features", "input": "the arms' train docs"}
    runs = {
        ARM: _run(0.30, [400, 400, 400]),
        CRF: _run(0.25, [400, 400, 400], **crf),
        MEMO: _run(0.20, [398, 400, 400], baseline="memorise", input="the arms' train docs, full text"),
        REF: _run(0.35, [1800], **crf | {"input": "every train doc, full text"}),
    }
    (tmp_path / "finetune").mkdir(exist_ok=True)
    finetune = {"kind": "token_classification", "metric": "test_entity_f1", "runs": runs}
    (tmp_path / "finetune" / "ner.json").write_text(json.dumps(finetune))
    return Metrics(tmp_path)


def _claim(treatment: str = "finetune/ner/best-arm", baseline: str = "finetune/ner/best-baseline") -> Claim:
    return Claim(
        id="best-arm-beats-best-baseline-ner",
        statement="The best arm beats the best baseline.",
        evidence="extrinsic",
        kind="difference",
        task="ner",
        data_slice="wnut/test",
        metric="test_entity_f1",
        treatment=treatment,
        baseline=baseline,
        ablation="x",
        min_effect=0.01,
        known_confounders=[],
    )


def _sample(run_key: str, seeds: int = 3) -> Sample:
    return Sample((0.0,) * seeds, tuple(str(13 + i) for i in range(seeds)), "seed", "m", run_key=run_key)


def test_the_statement_names_the_resolved_runs_their_model_input_seeds_and_train_size(tmp_path):
    text = resolved(_claim(), _sample(ARM), _sample(CRF), _metrics(tmp_path))
    assert text == (
        "The best arm beats the best baseline. Computed: `pretrained/full/first` (the best arm on dev; 3 seeds, 400 "
        "train sentences each) against `baseline/crf/words` (the best baseline on dev; a linear-chain CRF on word "
        "features; the arms' train docs; 3 seeds, 400 train sentences each), scored by test_entity_f1."
    )
    # another baseline resolved: the text follows it, with the range of its seeds' draws
    text = resolved(_claim(baseline=f"finetune/ner/{MEMO}"), _sample(ARM), _sample(MEMO), _metrics(tmp_path))
    assert "against `baseline/memorise/words` (memorise; the arms' train docs, full text; 3 seeds, 398-400" in text


def test_a_claim_outside_finetune_keeps_its_statement(tmp_path):
    claim = _claim(treatment="probe/pretrained/pairs/all", baseline="probe/random/pairs/all")
    assert resolved(claim, _sample(""), _sample(""), _metrics(tmp_path)) == claim.statement


def test_every_baseline_above_the_best_arm_is_noted_with_both_means_and_the_interval(tmp_path):
    metrics, asked = _metrics(tmp_path), []

    def arm(ref, claim, metrics):
        asked.append((ref, claim.baseline))
        return _sample(ref.split("/", 2)[2], 1)

    def estimate(claim, treat, base):
        return SimpleNamespace(difference=SimpleNamespace(mean=-0.05, low=-0.081, high=-0.012))

    found = baselines_above(_claim(), _sample(ARM), metrics, arm, estimate)
    assert [(f["run"], f["mean"], f["best_arm_mean"], f["ci_low"]) for f in found] == [(REF, 0.35, 0.30, -0.081)]
    notes = [above_note(f, "test_entity_f1") for f in found]
    assert asked == [(f"finetune/ner/{REF}", f"finetune/ner/{REF}")]  # only the reference scores above 0.30
    assert notes == [
        "a baseline scores above the best arm (the shipped one) on this test set: `baseline/crf/all-data` (a "
        "linear-chain CRF on word features; every train doc, full text) test_entity_f1 0.3500 against "
        "`pretrained/full/first` 0.3000; best arm - baseline -0.050 [-0.081, -0.012]"
    ]

    def missing(claim, treat, base):
        raise NotRun("no predictions")

    unknown = above_note(baselines_above(_claim(), _sample(ARM), metrics, arm, missing)[0], "test_entity_f1")
    assert unknown == notes[0].split("; best arm")[0] + "; best arm - baseline not computed (no predictions)"
    assert baselines_above(_claim().model_copy(update={"items": "clean"}), _sample(ARM), metrics, arm, estimate) == []
