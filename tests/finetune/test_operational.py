"""Operational evidence of finetune: latency percentiles, saved models, and the numbers of a tiny end-to-end run."""

from __future__ import annotations

import json
from contextlib import contextmanager

import datasets
import pytest
import torch
from safetensors.torch import save_file

from finetune_fixtures import save_tiny_bert, tiny_params, write_task_data
from tasks.common.models import encoders
from tasks.config import Paths
from tasks.config.model.finetune import FinetuneParams, RunSpec
from tasks.finetune import run
from tasks.finetune.arms import operational
from tasks.finetune.arms.model import build_model, load_model, save_model
from tasks.tracking import NullLog

N_DOCS = {"train": 8, "dev": 4, "test": 5}
MIB = 2**20


class MetricsLog(NullLog):
    """A RunLog that keeps its nested runs by name and the metrics logged on each."""

    def __init__(self) -> None:
        self.children, self.logged = {}, {}

    def metrics(self, values, step=None):
        self.logged.update(values)

    @contextmanager
    def child(self, name):
        self.children[name] = MetricsLog()
        yield self.children[name]


def test_cycled_wraps_around_the_items():
    assert operational.cycled(["a", "b", "c"], 2, 3) == [["a", "b"], ["c", "a"], ["b", "c"]]


def test_timings_are_percentiles_of_the_timed_batches_per_doc(monkeypatch):
    clock = {"now": 0.0, "calls": 0}
    durations = [9.0, 0.004, 0.001, 0.005, 0.002, 0.003]  # the first batch is the warm-up: never counted

    def infer(batch):
        clock["now"] += durations[clock["calls"]]
        clock["calls"] += 1

    monkeypatch.setattr(operational.time, "perf_counter", lambda: clock["now"])
    got = operational.timings(infer, list(range(7)), size=2, count=5, warmup=1)
    # per doc: 0.5, 1, 1.5, 2, 2.5 ms; p95 by linear interpolation at rank 0.95 * 4 = 3.8: 2 + 0.8 * 0.5
    assert got["p50_ms_per_doc"] == pytest.approx(1.5) and got["p95_ms_per_doc"] == pytest.approx(2.4)
    assert got["docs_per_s"] == pytest.approx(10 / 0.015) and got["timed_batches"] == 5 and clock["calls"] == 6


def test_a_saved_model_loads_back_with_the_same_weights_and_outputs(tmp_path):
    folder = save_tiny_bert(tmp_path / "bert", hidden=32, seed=0)
    model = build_model("random", folder, "mean-pool", 3, "full", 0.1, seed=4).eval()
    loaded = load_model(save_model(model, tmp_path / "saved"))
    assert sorted(p.name for p in (tmp_path / "saved").iterdir()) == [
        "config.json",
        "head.json",
        "head.safetensors",
        "model.safetensors",
    ]
    assert loaded.state_dict().keys() == model.state_dict().keys()
    assert all(torch.equal(v, loaded.state_dict()[k]) for k, v in model.state_dict().items())
    ids, mask = torch.tensor([[2, 7, 9, 3, 0]]), torch.tensor([[1, 1, 1, 1, 0]])
    with torch.no_grad():
        assert torch.equal(loaded(ids, mask), model(ids, mask)) and not loaded.training


def test_every_arm_and_tfidf_are_measured_and_the_saved_models_removed(tmp_path, monkeypatch):
    pretrained = save_tiny_bert(tmp_path / "models" / "pretrained", hidden=32, seed=0)
    reference = save_tiny_bert(tmp_path / "reference", hidden=48, seed=1)
    monkeypatch.setattr(encoders, "reference_model_dir", lambda: reference)
    write_task_data(tmp_path / "data", pretrained, "clozeline", N_DOCS)
    write_task_data(tmp_path / "data", reference, "reference", N_DOCS)
    paths = Paths(data=tmp_path / "data", models=tmp_path / "models", metrics=tmp_path / "m", reports=tmp_path / "r")
    configs = ["pretrained/full/mean-pool", "reference/frozen/cls-pool"]
    base = tiny_params(configs, ["pretrained/full/first"], [3, 4], epochs=1, operational=True).model_dump()
    base["recipes"]["cls"]["baselines"] = ["majority", "tfidf-lr"]
    cfg = FinetuneParams.model_validate(base)
    log = MetricsLog()
    metrics = run(cfg, paths, log, "cls")
    ops = metrics["operational"]
    json.dumps(ops, allow_nan=False)  # the metrics file is strict JSON
    # every reported seed saved its model, so the export takes the best dev seed's as trained, whichever it is
    assert metrics["export"]["model"] == "saved" and metrics["export"]["seed"] in (3, 4)

    tfidfs = ["baseline/tfidf-lr/clozeline-cut", "baseline/tfidf-lr/reference-cut"]  # one per tokenization
    assert sorted(ops) == sorted([*configs, *tfidfs])  # majority has no model to time, the all-data rows are not timed
    tfidf = tfidfs[0]
    assert not (paths.data / "finetune" / "cls" / operational.SCRATCH).exists()
    test_rows = datasets.load_from_disk(str(paths.data / "tokenize" / "cls" / "clozeline" / "test")).to_list()
    longest = max(min(len(r["input_ids"]), cfg.recipes["cls"].max_seq_len_tokens) for r in test_rows)
    for key, entry in ops.items():
        assert log.children[f"cls/{key}"].logged["operational"] == entry  # on the arm's MLflow run
        assert sorted(entry["batch"]) == ["1", "4"]
        for size, count in cfg.operational.timed_batches.items():
            timed = entry["batch"][str(size)]
            assert 0 < timed["p50_ms_per_doc"] <= timed["p95_ms_per_doc"] and timed["docs_per_s"] > 0
            assert timed["timed_batches"] == count
    for key in configs:
        entry, spec = ops[key], RunSpec.model_validate(key)
        folder = reference if spec.variant == "reference" else pretrained
        model = build_model(spec.variant, folder, spec.head, 2, spec.mode, 0.1, seed=0)
        assert entry["parameters"] == sum(p.numel() for p in model.parameters())
        saved = tmp_path / "independent" / spec.variant
        model.encoder.save_pretrained(saved)
        save_file(model.head.state_dict(), saved / "head.safetensors")
        assert entry["size_on_disk_mib"] * MIB == sum(f.stat().st_size for f in saved.glob("*.safetensors"))
        assert entry["device"] == "cpu" and entry["threads"] == cfg.operational.threads
        assert entry["seq_len_tokens"] == longest
        assert 0 < entry["rss_before_mib"] < entry["peak_rss_mib"]
        assert entry["rss_increase_mib"] == pytest.approx(entry["peak_rss_mib"] - entry["rss_before_mib"])
    vocabulary = ops[tfidf]["vocabulary"]
    assert ops[tfidf]["parameters"] == vocabulary + 1  # two classes: one weight per term and one intercept
    assert ops[tfidf]["size_on_disk_mib"] * MIB > 8 * (2 * vocabulary + 1)  # float64 coef_, idf_ and intercept_
    assert ops[tfidf]["peak_rss_mib"] is None and ops[tfidf]["vocabulary_mib"] > 0


def test_disabled_measurement_saves_nothing_and_reports_nothing(tmp_path):
    pretrained = save_tiny_bert(tmp_path / "models" / "pretrained", hidden=32, seed=0)
    write_task_data(tmp_path / "data", pretrained, "clozeline", N_DOCS)
    paths = Paths(data=tmp_path / "data", models=tmp_path / "models", metrics=tmp_path / "m", reports=tmp_path / "r")
    metrics = run(
        tiny_params(["pretrained/full/mean-pool"], ["pretrained/full/first"], [3], epochs=1), paths, NullLog(), "cls"
    )
    assert "operational" not in metrics
    # the arm's predictions, the model kept for the export stage (trained again: nothing was saved) and the items
    assert sorted(p.name for p in (paths.data / "finetune" / "cls").iterdir()) == [
        "pretrained",
        "selected",
        "test_items.jsonl",
    ]
    assert metrics["export"]["model"] == "retrained"
