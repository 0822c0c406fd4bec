"""Fast checks of the export pieces: ``clozeline.encoding`` (the predict pipelines' input) cuts a document exactly as
the finetune stage does, the item-by-item comparison, the report's gate, the release's alias gate and its file check."""

from __future__ import annotations

import json
import random

import pytest

from clozeline import encoding
from tasks.config.model.release import ReleaseParams
from tasks.export.rescore import compare
from tasks.finetune import cls as finetune_cls
from tasks.release import check_files, gate_of
from tasks.report.claims.gates import export_gates
from tasks.report.claims.grammar import Claim, Metrics


@pytest.mark.parametrize("truncation", ["head", "head_tail"])
def test_the_entry_point_cuts_documents_as_finetune_does(truncation):
    rng = random.Random(0)
    for _ in range(300):
        ids = [101, *(rng.randrange(1000, 2000) for _ in range(rng.randrange(0, 40))), 102]
        max_len = rng.randrange(8, 30)
        head = rng.randrange(0, max_len - 2)
        assert encoding.cut(ids, max_len, truncation, head) == finetune_cls.cut(ids, max_len, truncation, head)


def test_the_entry_point_cuts_pairs_longest_first_as_finetune_does():
    rng = random.Random(1)
    for _ in range(300):
        a, b = rng.randrange(1, 20), rng.randrange(1, 20)
        ids = [101, *range(1000, 1000 + a), 102, *range(2000, 2000 + b), 102]
        types = [0] * (a + 2) + [1] * (b + 1)
        max_len = rng.randrange(5, 45)
        assert encoding.cut_pair(ids, types, max_len) == finetune_cls.cut_pair(ids, types, max_len)


def test_compare_counts_labels_probabilities_and_missing_items():
    evaluated = [
        {"doc_id": "a", "pred": "x", "probs": [0.9, 0.1]},
        {"doc_id": "b", "pred": "y", "probs": [0.2, 0.8]},
        {"doc_id": "c", "pred": "x", "probs": [0.6, 0.4]},
        {"doc_id": "d", "pred": "x", "probs": [0.7, 0.3]},
    ]
    rescored = [
        {"doc_id": "a", "pred": "x", "probs": {"x": 0.90000004, "y": 0.09999996}},
        {"doc_id": "b", "pred": "x", "probs": {"x": 0.2, "y": 0.8}},
        {"doc_id": "c", "pred": "x", "probs": {"x": 0.61, "y": 0.39}},
    ]
    found = compare(evaluated, rescored, ["x", "y"], 1e-4)
    assert (
        found["items"],
        found["disagree"],
        found["label_mismatches"],
        found["probability_mismatches"],
        found["missing"],
    ) == (4, 3, 1, 1, 1)
    assert found["examples"] == ["b", "c", "d"] and found["max_abs_probability_difference"] == pytest.approx(0.01)


def test_compare_reads_tags_per_word():
    evaluated = [{"doc_id": "s", "pred": ["O", "B-LOC"], "probs": [0.9, 0.7]}]
    same = [{"doc_id": "s", "pred": ["O", "B-LOC"], "probs": [0.9, 0.70000001]}]
    other = [{"doc_id": "s", "pred": ["O", "O"], "probs": [0.9, 0.7]}]
    assert compare(evaluated, same, ["O", "B-LOC", "I-LOC"], 1e-4)["disagree"] == 0
    assert compare(evaluated, other, ["O", "B-LOC", "I-LOC"], 1e-4)["label_mismatches"] == 1


def _claim(treatment: str) -> Claim:
    return Claim(
        id="c",
        statement="s",
        evidence="extrinsic",
        kind="difference",
        task="cls",
        data_slice="t",
        metric="test_macro_f1",
        treatment=treatment,
        baseline="finetune/cls/best-baseline",
        ablation="a",
        min_effect=0.0,
        known_confounders=[],
    )


def test_the_report_gates_a_tasks_finetune_claims_on_its_export(tmp_path):
    (tmp_path / "export").mkdir()
    metrics = Metrics(tmp_path)
    assert export_gates(_claim("finetune/cls/best-arm"), metrics) == []  # no export: no gate
    (tmp_path / "export" / "cls.json").write_text(
        json.dumps({"agrees": False, "agreement": {"disagree": 2, "items": 9}})
    )
    metrics = Metrics(tmp_path)
    assert export_gates(_claim("finetune/cls/best-arm"), metrics) == [
        "exported model disagrees with the evaluated one (2 of 9 items)"
    ]
    (tmp_path / "export" / "cls.json").write_text(
        json.dumps({"agrees": True, "agreement": {"disagree": 0, "items": 9}})
    )
    assert export_gates(_claim("finetune/cls/best-arm"), Metrics(tmp_path)) == []


def test_the_alias_moves_only_when_every_gate_claim_is_supported_and_the_export_agrees():
    cfg = ReleaseParams(
        registered_model_prefix="clozeline-",
        alias="candidate",
        gate_claims={"ner": ["a", "b"]},
        dvc_lock_file="dvc.lock",
    )
    agree = {"agrees": True, "agreement": {"disagree": 0, "items": 5}}
    claims = [
        {"id": "best-arm-beats-best-baseline-cls", "verdict": "supported"},
        {"id": "a", "verdict": "supported"},
        {"id": "b", "verdict": "inconclusive"},
    ]
    report = {"gate_claims": {task: f"best-arm-beats-best-baseline-{task}" for task in ("cls", "ner", "pair")}}
    assert gate_of(cfg, "cls", claims, agree, report)["passed"]
    ner = gate_of(cfg, "ner", claims, agree, report)
    assert not ner["passed"] and ner["reason"] == "not passed (b: inconclusive)"
    assert gate_of(cfg, "pair", claims, agree, report)["reason"] == (
        "not passed (best-arm-beats-best-baseline-pair: not in the report (dropped in reports/claims.yaml? the gate "
        "reads it: keep it there, or name another claim in release.gate_claims.pair))"
    )
    disagree = {"agrees": False, "agreement": {"disagree": 1, "items": 5}}
    assert "export disagrees" in gate_of(cfg, "cls", claims, disagree, report)["reason"]
    assert not gate_of(cfg, "cls", claims, agree, {})["passed"]  # a report without the generated gate claims


def test_release_refuses_a_folder_that_is_not_the_rescored_one(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    digest = "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"  # sha256 of "{}"
    check_files(tmp_path, {"config.json": digest})
    (tmp_path / "config.json").write_text('{"changed": 1}')
    with pytest.raises(ValueError, match="config.json is not the file"):
        check_files(tmp_path, {"config.json": digest})
