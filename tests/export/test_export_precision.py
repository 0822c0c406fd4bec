"""Issue 57 item 5: the exported model's labels equal the evaluated ones whatever precision the training steps
ran in. The rule: every evaluated (dev, test) prediction is computed in fp32 (no autocast, TF32 off on CUDA), the
precision the export re-scores in (fp32 on the CPU).

CUDA's bf16 autocast is on for every forward pass a stage opens; on this CPU test it is stood in for by making
``autocast`` in ``tasks.finetune.arms.training`` bf16 always (CPU autocast is the same mechanism), with the training
steps under bf16 (``cpu_train_precision: bf16``). Before the rule, ``predict`` ran under that autocast, the
evaluated predictions were bf16 ones and the export (fp32) disagreed with them."""

from __future__ import annotations

import json

import pytest
import torch

from clozeline.predict import load, predict_records
from export_fixtures import N_DOCS, export_params, finetune_params, write_pair_data, write_raw_test_rows
from finetune_fixtures import save_tiny_bert, write_task_data
from tasks import export
from tasks.common.runtime import device as device_module
from tasks.config import Paths
from tasks.config.model.finetune import FinetuneParams
from tasks.export import rescore
from tasks.finetune import run as finetune_run
from tasks.finetune.arms import training
from tasks.report.claims.grammar import Metrics
from tasks.report.tables.exported_models import export_grids
from tasks.report.tables.ledger import model_precision
from tasks.tracking import NullLog

pytestmark = pytest.mark.slow  # fine-tunes two tiny tasks and spawns a process per export

TASKS = ("cls", "ner")


@pytest.fixture(scope="module")
def trained_in_bf16(tmp_path_factory):
    """Finetune (training steps under bf16 autocast, every forward's autocast bf16 as on CUDA) and export of a
    classifier and a tagger: ``(paths, {task: export metrics}, {task: finetune metrics}, bf16 forwards seen)``."""
    root = tmp_path_factory.mktemp("bf16_ws")
    pretrained = save_tiny_bert(root / "models" / "pretrained", hidden=32, seed=0)
    write_task_data(root / "data", pretrained, "clozeline", N_DOCS)
    write_pair_data(root / "data", pretrained)
    paths = Paths(data=root / "data", models=root / "models", metrics=root / "metrics", reports=root / "reports")
    write_raw_test_rows(paths, pretrained)
    raw = finetune_params([3, 4]).model_dump(mode="json")
    raw["cpu_train_precision"] = "bf16"
    cfg = FinetuneParams.model_validate(raw)
    real, entered = device_module.autocast, []

    def cuda_like(device, bf16=True, cpu=False):  # CUDA: every autocast a stage opens is bf16
        entered.append(bf16)
        return real(device, bf16, cpu=True)

    finetune, exported = {}, {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(training, "autocast", cuda_like)
        for task in TASKS:
            finetune[task] = finetune_run(cfg, paths, NullLog(), task)
            (paths.metrics / "finetune").mkdir(parents=True, exist_ok=True)
            (paths.metrics / "finetune" / f"{task}.json").write_text(json.dumps(finetune[task]), encoding="utf-8")
    (paths.metrics / "export").mkdir(parents=True, exist_ok=True)
    for task in TASKS:
        exported[task] = export.run(export_params(), paths, NullLog(), task)
        (paths.metrics / "export" / f"{task}.json").write_text(json.dumps(exported[task]), encoding="utf-8")
    return paths, exported, finetune, entered


@pytest.mark.parametrize("task", TASKS)
def test_bf16_training_exports_the_evaluated_labels_exactly(trained_in_bf16, task):
    _, exported, finetune, entered = trained_in_bf16
    assert entered and all(entered)  # the training steps ran under bf16 autocast
    assert finetune[task]["train_precision"] == "bf16 autocast"
    found = exported[task]
    assert found["agreement"]["label_mismatches"] == 0 and found["agreement"]["missing"] == 0, found["agreement"]
    assert found["agrees"] and found["agreement"]["disagree"] == 0, found["agreement"]
    assert found["rescored"] == found["evaluated"]
    assert found["evaluated_precision"] == device_module.PREDICTION_PRECISION == finetune[task]["prediction_precision"]
    assert found["rescored_precision"] == "fp32 on the CPU"


@pytest.mark.parametrize("task", TASKS)
def test_bf16_predictions_of_the_same_model_would_fail_the_check(trained_in_bf16, task):
    """The check has teeth: the exported model run under bf16 autocast (what CUDA's predictions were before the
    rule) disagrees with the evaluated predictions beyond the tolerance, while fp32 agrees."""
    paths, exported, finetune, _ = trained_in_bf16
    out = paths.data / "export" / task
    raw = rescore.read_jsonl(out / "test_inputs.jsonl")
    selected = json.loads((paths.data / "finetune" / task / "selected" / "selected.json").read_text())
    evaluated = rescore.read_jsonl(paths.data / "finetune" / task / selected["predictions"])
    pipe = load(out / "model", finetune[task]["labels"])
    tolerance = export_params().probability_tolerance
    with torch.autocast("cpu", dtype=torch.bfloat16):
        bf16 = rescore.compare(evaluated, predict_records(pipe, raw), finetune[task]["labels"], tolerance)
    fp32 = rescore.compare(evaluated, predict_records(pipe, raw), finetune[task]["labels"], tolerance)
    assert fp32["disagree"] == 0, fp32
    assert bf16["disagree"] > 0 and bf16["max_abs_probability_difference"] > tolerance, bf16


def test_the_claim_tables_ledger_and_export_table_name_the_precision_of_the_predictions(trained_in_bf16):
    paths, *_ = trained_in_bf16
    lines = model_precision(Metrics(paths.metrics))
    for task in TASKS:
        assert lines[f"finetune {task}: training steps"] == "bf16 autocast"
        assert lines[f"finetune {task}: evaluated predictions (dev, test)"] == device_module.PREDICTION_PRECISION
    [(_, header, body)] = export_grids(Metrics(paths.metrics), None)
    cells = [dict(zip(header, row, strict=True))["predictions computed in"] for row in body]
    assert cells == [f"evaluated: {device_module.PREDICTION_PRECISION}; re-scored: fp32 on the CPU"] * len(TASKS)


def test_predictions_on_cuda_turn_tf32_off_and_restore_it():
    """On CUDA ``configure`` turns TF32 on for training; a prediction pass runs with it off, then restores it."""
    matmul, cudnn, seen = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, []
    try:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
        with device_module.fp32_predictions(torch.device("cuda", 0)):
            seen.append((torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32))
        assert seen == [(False, False)]
        assert torch.backends.cuda.matmul.allow_tf32 is True and torch.backends.cudnn.allow_tf32 is True
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn
