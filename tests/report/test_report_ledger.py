"""The experiment ledger's hardware section says which numeric precision each model stage ran in."""

import json

from tasks.report.claims.grammar import Metrics
from tasks.report.tables.ledger import hardware, model_precision


def _write(folder, name, data):
    path = folder / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def test_each_finetune_task_and_the_semantic_encoder_report_their_precision(tmp_path):
    _write(tmp_path, "finetune/cls", {"train_precision": "bf16 autocast", "prediction_precision": "fp32"})
    _write(tmp_path, "finetune/ner", {"train_precision": "fp32"})
    _write(tmp_path, "leakage", {"semantic": {"enabled": True, "precision": "fp32", "device": "cpu"}})
    assert model_precision(Metrics(tmp_path)) == {
        "finetune cls: training steps": "bf16 autocast",
        "finetune cls: evaluated predictions (dev, test)": "fp32",
        "finetune ner: training steps": "fp32",
        "finetune ner: evaluated predictions (dev, test)": "not recorded",
        "leakage semantic encoder": "fp32 on cpu",
    }


def test_a_metrics_file_without_the_field_says_so_and_a_disabled_detector_is_left_out(tmp_path):
    _write(tmp_path, "finetune/cls", {"runs": {}})
    _write(tmp_path, "leakage", {"semantic": {"enabled": False}})
    got = hardware(Metrics(tmp_path))
    assert got["finetune cls: training steps"] == "not recorded"
    assert "leakage semantic encoder" not in got
    assert got["pretrain"] == "no hardware recorded in metrics/pretrain.json"
