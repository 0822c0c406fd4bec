"""finetune end to end on tiny fixtures: metrics layout of the contract, predictions, fresh-process replay."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from finetune_fixtures import (
    N_DOCS,
    NestedRecordingLog,
    save_tiny_bert,
    tiny_params,
    two_model_workspace,
    write_task_data,
)
from tasks.common.models import encoders
from tasks.config import Paths
from tasks.config.model.finetune import FinetuneParams
from tasks.finetune import log_caps, run
from tasks.finetune.arms import model as finetune_model
from tasks.tracking import NullLog

ROOT = Path(__file__).resolve().parents[2]
STAT_KEYS = {"per_seed", "seeds", "mean", "std", "ci95_low", "ci95_high", "n"}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """models/pretrained (tiny, hidden 32), a 'reference' model of another width, and both tokenizations."""
    root = tmp_path_factory.mktemp("ft_ws")
    paths, reference = two_model_workspace(root, N_DOCS)
    return root, paths, reference


def _no_timing(metrics: dict) -> dict:
    metrics.pop("elapsed_minutes")
    for group in metrics["cost"]["groups"].values():
        group.pop("train_minutes")
    for entry in metrics["runs"].values():
        for seed in entry["details"]["per_seed"].values():
            seed.pop("train_seconds")
    return metrics


def test_cls_run_follows_the_metrics_contract(workspace, monkeypatch):
    root, paths, reference = workspace
    monkeypatch.setattr(encoders, "reference_model_dir", lambda: reference)
    configs = [
        "pretrained/full/cls-pool",
        "random/full/cls-pool",
        "pretrained/frozen/mean-pool",
        "reference/full/cls-pool",
    ]
    log = NestedRecordingLog()
    metrics = run(tiny_params(configs, ["pretrained/full/first"], [3, 4], max_train_docs=10), paths, log, "cls")
    assert sorted(metrics["runs"]) == sorted(configs)
    # MLflow layout: one parent run per configuration, one nested run per seed holding its predictions
    assert [c.name for c in log.children] == [f"cls/{k}" for k in configs]
    for parent, key in zip(log.children, configs, strict=True):
        assert metrics["runs"][key]["mlflow_run_id"] == parent.run_id
        assert parent.logged["variant"] == key.split("/")[0] and parent.logged["test_examples"] == N_DOCS["test"]
        assert [c.name for c in parent.children] == [f"cls/{key}/seed3", f"cls/{key}/seed4"]
        for seed_run, seed in zip(parent.children, (3, 4), strict=True):
            assert seed_run.logged["seed"] == seed
            pred_file = paths.data / "finetune" / "cls" / key / f"seed{seed}.test.jsonl"
            assert seed_run.artifacts == [(pred_file, "predictions")]
    assert metrics["labels"] == ["sport", "tech"]
    assert set(metrics["metric_implementations"]) == {"test_accuracy", "test_macro_f1"}
    assert metrics["docs"]["clozeline"]["test"] == {"docs_available": 5, "docs_kept": 5, "docs_dropped_by_cap": 0}
    assert metrics["docs"]["reference"]["train"] == {"docs_available": 12, "docs_kept": 10, "docs_dropped_by_cap": 2}
    for key, entry in metrics["runs"].items():
        for name in ("test_accuracy", "test_macro_f1"):
            stats = entry[name]
            assert set(stats) == STAT_KEYS and stats["seeds"] == [3, 4] and stats["n"] == 2
            assert stats["ci95_low"] <= stats["mean"] <= stats["ci95_high"]
            assert all(0 <= v <= 1 for v in stats["per_seed"])
        per_seed = entry["details"]["per_seed"]
        assert entry["diverged_seeds"] == [int(s) for s, d in per_seed.items() if d["diverged"]]
        for seed, d in per_seed.items():
            assert d["diverged"] == (d["dev_divergence_score"] <= d["dev_chance"])
            assert sum(map(sum, d["details"]["confusion_matrix"]["matrix"])) == N_DOCS["test"]
            lines = (paths.data / "finetune" / "cls" / key / f"seed{seed}.test.jsonl").read_text().splitlines()
            rows = [json.loads(line) for line in lines]
            assert [r["doc_id"] for r in rows] == sorted(f"test-{i:03d}" for i in range(N_DOCS["test"]))
            assert {r["gold"] for r in rows} <= {"sport", "tech"}
            for r in rows:  # the softmax over both labels, rounded to 6 decimals; its argmax is the prediction
                assert len(r["probs"]) == 2 and abs(sum(r["probs"]) - 1) <= 2e-6
                assert r["pred"] == metrics["labels"][r["probs"].index(max(r["probs"]))]
            correct = sum(r["gold"] == r["pred"] for r in rows) / len(rows)
            accuracy = entry["test_accuracy"]
            assert correct == pytest.approx(accuracy["per_seed"][accuracy["seeds"].index(int(seed))])
        pooled = entry["details"]["confusion_matrix"]["matrix"]
        assert sum(map(sum, pooled)) == 2 * N_DOCS["test"]
        buckets = entry["details"]["accuracy_by_length"]
        assert buckets["truncated"]["docs"] + buckets["not_truncated"]["docs"] == N_DOCS["test"]
    json.dumps(metrics, allow_nan=False)  # the report reads strict JSON


def test_dose_response_fine_tunes_the_config_from_every_snapshot(tmp_path):
    pretrained = save_tiny_bert(tmp_path / "models" / "pretrained", hidden=32, seed=0)
    for step, seed in ((0, 5), (7, 6)):  # two snapshots with other weights than the final model
        save_tiny_bert(pretrained / "snapshots" / f"step_{step:08d}", hidden=32, seed=seed)
    write_task_data(tmp_path / "data", pretrained, "clozeline", N_DOCS)
    paths = Paths(data=tmp_path / "data", models=tmp_path / "models", metrics=tmp_path / "m", reports=tmp_path / "r")
    params = tiny_params(
        ["pretrained/full/mean-pool"], ["pretrained/full/first"], [3, 4], cls_dose_response="pretrained/full/mean-pool"
    )
    log = NestedRecordingLog()
    metrics = run(params, paths, log, "cls")
    keys = [
        "pretrained/full/mean-pool",
        "pretrained@step_00000000/full/mean-pool",
        "pretrained@step_00000007/full/mean-pool",
    ]
    assert sorted(metrics["runs"]) == sorted(keys)
    assert metrics["dose_response"] == {"config": keys[0], "runs": {0: keys[1], 7: keys[2]}}
    folders = {c.name: Path(c.logged["model_dir"]) for c in log.children}  # each run loaded its own weights
    assert folders == {
        f"cls/{keys[0]}": pretrained,
        f"cls/{keys[1]}": pretrained / "snapshots" / "step_00000000",
        f"cls/{keys[2]}": pretrained / "snapshots" / "step_00000007",
    }
    for key in keys:
        assert (paths.data / "finetune" / "cls" / key / "seed3.test.jsonl").is_file()


def test_dose_response_without_snapshots_names_the_param(workspace):
    _, paths, _ = workspace
    params = tiny_params(
        ["pretrained/full/mean-pool"], ["pretrained/full/first"], [3], cls_dose_response="pretrained/full/mean-pool"
    )
    with pytest.raises(FileNotFoundError, match="dose_snapshot_fractions"):
        run(params, paths, NullLog(), "cls")


def test_ner_run_scores_words_and_flags_divergence(workspace, monkeypatch):
    root, paths, reference = workspace
    monkeypatch.setattr(encoders, "reference_model_dir", lambda: reference)
    configs = ["pretrained/full/first", "pretrained/full/all", "reference/full/first"]
    base = tiny_params(["pretrained/full/cls-pool"], configs, [5, 6]).model_dump()
    base["recipes"]["ner"]["divergence_margin"] = 1.0  # every dev F1 <= 0 + 1: every seed must be reported as diverged
    cfg = FinetuneParams.model_validate(base)
    metrics = run(cfg, paths, NullLog(), "ner")
    assert sorted(metrics["runs"]) == sorted(configs)
    for key, entry in metrics["runs"].items():
        assert {"test_entity_f1", "test_entity_precision", "test_entity_recall"} <= set(entry)
        assert entry["diverged_seeds"] == [5, 6]
        spans = entry["details"]["span_errors"]
        for seed in ("5", "6"):
            rows = [
                json.loads(x)
                for x in (paths.data / "finetune" / "ner" / key / f"seed{seed}.test.jsonl").read_text().splitlines()
            ]
            assert len(rows) == N_DOCS["test"] and all(len(r["gold"]) == len(r["pred"]) for r in rows)
            # a tag's probability is the max of a softmax over the 5 labels (O, B/I-LOC, B/I-PER): >= 1/5
            assert all(
                len(r["probs"]) == len(r["pred"]) and all(0.2 - 1e-6 <= q <= 1 for q in r["probs"]) for r in rows
            )
        n_gold = 2 * sum(len([t for t in r["gold"] if t.startswith("B-")]) for r in rows)
        assert sum(spans[k] for k in ("exact", "type", "boundary", "boundary_and_type", "missed")) == n_gold


REPLAY = """
import json, sys
sys.path.insert(0, {tests!r})
from pathlib import Path
from finetune_fixtures import tiny_params
from tasks.config import Paths
from tasks.finetune import run
from tasks.finetune.arms.model import build_model
from tasks.tracking import NullLog
root = Path({root!r})
paths = Paths(data=root / "replay", models=root / "models", metrics=root / "m", reports=root / "r")
head = build_model("pretrained", root / "models" / "pretrained", "cls-pool", 2, "full", 0.1, 7).head.weight
metrics = run(tiny_params(["pretrained/full/mean-pool"], ["pretrained/full/first"], [7]), paths, NullLog(), "cls")
print(json.dumps({{"head": head.flatten().tolist(), "metrics": metrics}}))
"""


@pytest.mark.slow
def test_same_seed_reproduces_exactly_in_a_fresh_process(workspace):
    root, paths, _ = workspace
    (root / "replay").mkdir(exist_ok=True)
    (root / "replay" / "tokenize").symlink_to(paths.data / "tokenize")
    here = run(tiny_params(["pretrained/full/mean-pool"], ["pretrained/full/first"], [7]), paths, NullLog(), "cls")
    head = finetune_model.build_model("pretrained", paths.models / "pretrained", "cls-pool", 2, "full", 0.1, 7)
    script = REPLAY.format(tests=str(ROOT / "tests"), root=str(root))
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    there = json.loads(done.stdout.strip().splitlines()[-1])
    assert there["head"] == head.head.weight.flatten().tolist()
    assert _no_timing(there["metrics"]) == _no_timing(json.loads(json.dumps(here)))
    key = "pretrained/full/mean-pool/seed7.test.jsonl"
    replayed = (root / "replay" / "finetune" / "cls" / key).read_bytes()
    assert replayed == (paths.data / "finetune" / "cls" / key).read_bytes()


def test_each_arm_picks_its_own_lr_on_dev_and_baselines_score_the_same_test_docs(workspace):
    _, paths, _ = workspace
    base = tiny_params(
        ["pretrained/full/mean-pool", "pretrained/frozen/mean-pool"],
        ["pretrained/full/first"],
        [3, 4],
        lr_grid=(0.1, 1.0, 10.0),
    ).model_dump()
    base["recipes"]["cls"]["baselines"] = ["majority", "tfidf-lr"]
    metrics = run(FinetuneParams.model_validate(base), paths, NestedRecordingLog(), "cls")
    for key in ("pretrained/full/mean-pool", "pretrained/frozen/mean-pool"):
        entry = metrics["runs"][key]
        sweep = entry["lr_sweep"]
        # the frozen arm is a logistic-regression probe: no learning rate, so one run at the grid's first entry
        assert sweep["seed"] == 99 and set(sweep["dev"]) == ({"0.1"} if "/frozen/" in key else {"0.1", "1", "10"})
        # the chosen multiplier is the dev argmax (ties: the earlier grid value), and every seed used it
        best = max(sweep["dev"].values())
        assert sweep["dev"][f"{sweep['chosen_scale']:g}"] == best
        assert sweep["chosen_scale"] == next(s for s in (0.1, 1.0, 10.0) if sweep["dev"].get(f"{s:g}") == best)
        per_seed = entry["details"]["per_seed"]
        # every reported seed used it, and none of them is the sweep run (seed 99, not a reported seed)
        assert sorted(per_seed) == ["3", "4"] and {d["lr_scale"] for d in per_seed.values()} == {sweep["chosen_scale"]}
        want = None if "/frozen/" in key else pytest.approx(1e-2 * sweep["chosen_scale"])  # frozen: a probe, no LR
        assert per_seed["3"]["lr_head"] == want
    comparators = ("baseline/majority/labels", "baseline/tfidf-lr/clozeline-cut")  # the arms' docs and input
    for key in (*comparators, "baseline/majority/all-data", "baseline/tfidf-lr/all-data"):
        entry = metrics["runs"][key]
        seeds = [0] if key.endswith("all-data") else [3, 4]  # a comparator: one fit per seed's draw, as the arms
        assert entry["test_macro_f1"]["seeds"] == seeds
        for seed in seeds:
            path = paths.data / "finetune" / "cls" / key / f"seed{seed}.test.jsonl"
            rows = [json.loads(x) for x in path.read_text().splitlines()]
            assert [r["doc_id"] for r in rows] == sorted(f"test-{i:03d}" for i in range(N_DOCS["test"]))
    # 12 train docs, 6 sport and 6 tech, every one drawn by each seed (max_train_docs null): a tie goes to the
    # smaller label id, sport; 3 of 5 test docs are sport
    assert metrics["runs"]["baseline/majority/labels"]["test_accuracy"]["per_seed"] == [3 / 5, 3 / 5]
    sel = metrics["selection"]
    assert sel["best_arm"] in ("pretrained/full/mean-pool", "pretrained/frozen/mean-pool")
    assert sel["dev"][sel["best_arm"]] == max(
        sel["dev"][k] for k in ("pretrained/full/mean-pool", "pretrained/frozen/mean-pool")
    )
    assert sel["best_baseline"] == max(comparators, key=lambda k: (sel["dev"][k], k))
    assert "baseline/tfidf-lr/all-data" not in sel["dev"]  # a reference row is never chosen
    assert sel["baselines"]["baseline/tfidf-lr/clozeline-cut"]["3"]["analyzer"] in ("word", "char_wb")
    items = [json.loads(x) for x in (paths.data / "finetune" / "cls" / "test_items.jsonl").read_text().splitlines()]
    assert [(r["doc_id"], r["train_overlap"]) for r in items] == [(f"test-{i:03d}", i % 4 == 0) for i in range(5)]


@pytest.mark.slow
def test_two_worker_processes_give_the_same_numbers_as_one(workspace):
    _, paths, _ = workspace
    configs = ["pretrained/full/mean-pool", "random/full/cls-pool"]
    one = run(tiny_params(configs, ["pretrained/full/first"], [3, 4], lr_grid=(0.5, 1.0)), paths, NullLog(), "cls")
    files = {p: p.read_bytes() for p in sorted((paths.data / "finetune" / "cls").rglob("*.jsonl"))}
    two = run(
        tiny_params(configs, ["pretrained/full/first"], [3, 4], lr_grid=(0.5, 1.0), workers=2), paths, NullLog(), "cls"
    )
    assert _no_timing(two) == _no_timing(one)
    assert {p: p.read_bytes() for p in sorted((paths.data / "finetune" / "cls").rglob("*.jsonl"))} == files


def test_a_recipe_cap_that_samples_a_split_is_one_info_line_naming_its_key():
    # a user's 240 train docs were cut to 160 per seed and the finetune log did not say so (R2's review)
    lines = []
    log = type("Log", (), {"info": lambda self, message: lines.append(message)})()
    counts = {
        "train": {"docs_available": 240, "docs_kept": 160, "docs_dropped_by_cap": 80},
        "dev": {"docs_available": 30, "docs_kept": 30, "docs_dropped_by_cap": 0},
    }
    log_caps(log, "topics", "cls", counts)
    assert lines == [
        "finetune[topics]: train keeps 160 of 240 docs (a seeded sample: "
        "finetune.recipes.cls.max_train_docs; null keeps every doc)"
    ]
