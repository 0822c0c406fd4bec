"""The export stage on a tiny task of each kind: the kept model exported as a standard HF folder, reloaded in a
fresh process from raw test text, equal to the training run's test predictions; a wrong ``id2label`` and a wrong
truncation each make the task's claims ``not resolvable``; bad folders are one-line errors; the release stage's
card, registry tags and alias gate (MLflow in a temporary sqlite store)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from transformers import AutoConfig, AutoModelForSequenceClassification, AutoModelForTokenClassification

from clozeline.predict import ExportError, load
from export_fixtures import SOURCES, build_workspace, export_params, finetune_params
from tasks import export
from tasks.common.provenance import Lock
from tasks.config.model.release import ReleaseParams
from tasks.export import rescore
from tasks.release import run as release_run
from tasks.report.claims.evaluation import evaluate
from tasks.report.claims.grammar import Claim, Metrics
from tasks.report.stats.estimates import StatsConfig
from tasks.tracking import NullLog

pytestmark = pytest.mark.slow  # the module fixture fine-tunes three tiny tasks and spawns a process per export

SEEDS = [3, 4]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The workspace after finetune and export of every fixture task: ``(paths, {task: export metrics})``."""
    paths = build_workspace(tmp_path_factory.mktemp("export_ws"), SEEDS)
    out = {}
    for task in SOURCES:
        out[task] = export.run(export_params(), paths, NullLog(), task)
        (paths.metrics / "export").mkdir(parents=True, exist_ok=True)
        (paths.metrics / "export" / f"{task}.json").write_text(json.dumps(out[task]), encoding="utf-8")
    return paths, out


@pytest.mark.parametrize("task", list(SOURCES))
def test_the_export_rescores_exactly_as_trained(exported, task):
    paths, metrics = exported
    found = metrics[task]
    finetune = json.loads((paths.metrics / "finetune" / f"{task}.json").read_text())
    assert found["run"] == finetune["selection"]["best_arm"] and found["seed"] in SEEDS
    assert found["agreement"]["disagree"] == 0 and found["agrees"], found["agreement"]
    assert found["agreement"]["items"] == finetune["docs"]["clozeline"]["test"]["docs_kept"]
    assert found["agreement"]["max_abs_probability_difference"] <= 1e-4
    assert found["rescored"] == found["evaluated"]
    seed_index = finetune["runs"][found["run"]][found["metric"]]["seeds"].index(found["seed"])
    assert found["evaluated"][found["metric"]] == pytest.approx(
        finetune["runs"][found["run"]][found["metric"]]["per_seed"][seed_index]
    )
    assert found["operational"]["batch"]["1"]["timed_batches"] == found["agreement"]["items"]


@pytest.mark.parametrize("task", list(SOURCES))
def test_standard_classes_load_the_folder_with_every_weight_and_no_pickle(exported, task):
    paths, metrics = exported
    folder = Path(metrics[task]["folder"])
    labels = json.loads((paths.data / "tokenize" / task / "clozeline" / "labels.json").read_text())
    auto = AutoModelForTokenClassification if task == "ner" else AutoModelForSequenceClassification
    model, info = auto.from_pretrained(folder, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert model.config.id2label == dict(enumerate(labels))
    assert model.config.label2id == {name: i for i, name in enumerate(labels)}
    assert {p.suffix for p in folder.iterdir()} <= {".json", ".safetensors"}  # never a pickle (.bin, .pt, .pkl)
    assert AutoConfig.from_pretrained(folder).clozeline["kind"] == metrics[task]["kind"]


def _claim(task: str) -> Claim:
    return Claim(
        id=f"best-arm-beats-best-baseline-{task}",
        statement="s",
        evidence="extrinsic",
        kind="difference",
        task=task,
        data_slice=f"{task}/test",
        metric="test_macro_f1",
        treatment=f"finetune/{task}/best-arm",
        baseline=f"finetune/{task}/best-baseline",
        ablation="the encoder",
        min_effect=0.0,
        known_confounders=[],
    )


def _verdict(paths, task: str, export_metrics: dict, tmp_path: Path):
    folder = tmp_path / "metrics"
    shutil.copytree(paths.metrics, folder)
    (folder / "export" / f"{task}.json").write_text(json.dumps(export_metrics), encoding="utf-8")
    metrics = Metrics(folder, predictions=paths.data / "finetune")
    return evaluate(_claim(task), metrics, Lock({}), StatsConfig(0.95, "t", 1000, 0, 0.2, 500, 5))


def _rescore_broken(paths, metrics: dict, task: str, tmp_path: Path, edit) -> dict:
    """Copy the export, change its config.json with ``edit``, and re-score the copy as the stage does."""
    broken = tmp_path / "broken"
    shutil.copytree(metrics[task]["folder"], broken)
    config = json.loads((broken / "config.json").read_text())
    edit(config)
    (broken / "config.json").write_text(json.dumps(config))
    out = paths.data / "export" / task
    labels = json.loads((paths.metrics / "finetune" / f"{task}.json").read_text())["labels"]
    rescored, _ = rescore.run_predict(broken, out / "test_inputs.jsonl", tmp_path / "r.jsonl", labels, 1, None)
    run = metrics[task]
    evaluated = rescore.read_jsonl(paths.data / "finetune" / task / run["run"] / f"seed{run['seed']}.test.jsonl")
    agreement = rescore.compare(evaluated, rescored, labels, 1e-4)
    return {**run, "agreement": agreement, "agrees": agreement["disagree"] == 0}


def test_agreeing_export_leaves_the_claim_alone(exported, tmp_path):
    paths, metrics = exported
    row = _verdict(paths, "cls", metrics["cls"], tmp_path)
    assert "exported model" not in row.reason


def test_a_wrong_id2label_makes_the_tasks_claims_not_resolvable(exported, tmp_path):
    paths, metrics = exported

    def swap(config):
        config["id2label"] = {"0": "tech", "1": "sport"}
        config["label2id"] = {"tech": 0, "sport": 1}

    broken = _rescore_broken(paths, metrics, "cls", tmp_path, swap)
    n = broken["agreement"]["items"]
    assert broken["agreement"]["label_mismatches"] == n  # every label swapped
    row = _verdict(paths, "cls", broken, tmp_path)
    assert row.verdict == "not resolvable"
    assert row.reason == f"not resolvable: exported model disagrees with the evaluated one ({n} of {n} items)"


def test_a_wrong_truncation_makes_the_tasks_claims_not_resolvable(exported, tmp_path):
    paths, metrics = exported

    def tail(config):  # the recipe cut the head; cutting head + tail changes the long docs' inputs
        config["clozeline"] |= {"truncation": "head_tail", "head_tokens": 2}

    broken = _rescore_broken(paths, metrics, "cls", tmp_path, tail)
    long_docs = sum(
        1
        for r in rescore.read_jsonl(
            paths.data / "finetune" / "cls" / metrics["cls"]["run"] / f"seed{metrics['cls']['seed']}.test.jsonl"
        )
        if r["seen_fraction"] < 1
    )
    assert 0 < broken["agreement"]["disagree"] <= long_docs
    row = _verdict(paths, "cls", broken, tmp_path)
    k, n = broken["agreement"]["disagree"], broken["agreement"]["items"]
    assert row.reason == f"not resolvable: exported model disagrees with the evaluated one ({k} of {n} items)"


def test_a_folder_that_does_not_load_or_has_other_labels_is_one_line_naming_it(exported, tmp_path):
    paths, metrics = exported
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ExportError, match=str(empty)):
        load(empty)
    with pytest.raises(ExportError, match="not the task's"):
        load(metrics["cls"]["folder"], ["business", "tech"])
    inputs = paths.data / "export" / "cls" / "test_inputs.jsonl"
    with pytest.raises(ValueError) as err:
        rescore.run_predict(empty, inputs, tmp_path / "o.jsonl", ["sport", "tech"], 1, None)
    assert str(empty) in str(err.value) and "\n" not in str(err.value)


def _release(paths, verdict: str, log, cfg_gate: dict | None = None) -> dict:
    claims = {"question": "q", "claims": [_claim("cls").model_dump()]}
    paths.reports.mkdir(parents=True, exist_ok=True)
    (paths.reports / "claims.yaml").write_text(json.dumps(claims), encoding="utf-8")
    report = {
        "gate_claims": {"cls": "best-arm-beats-best-baseline-cls"},
        "claims": {
            "best-arm-beats-best-baseline-cls": {
                "verdict": verdict,
                "difference": 0.1,
                "task": "cls",
                "statement": _claim("cls").statement,
                "difference_ci_low": 0.05,
                "difference_ci_high": 0.15,
            }
        },
    }
    (paths.metrics / "report.json").write_text(json.dumps(report), encoding="utf-8")
    cfg = ReleaseParams(
        registered_model_prefix="clozeline-",
        alias="candidate",
        gate_claims=cfg_gate or {},
        dvc_lock_file=paths.metrics / "no-dvc.lock",
    )
    return release_run(cfg, paths, log, "cls")


def test_release_writes_the_export_with_its_model_card(exported):
    paths, metrics = exported
    out = _release(paths, "supported", NullLog())
    folder = paths.models / "export" / "cls"
    shipped_baseline = {"baseline"} if metrics["cls"].get("baseline") else set()  # TF-IDF may win on dev here
    assert {p.name for p in folder.iterdir()} == set(metrics["cls"]["files"]) | {"README.md"} | shipped_baseline
    card = (folder / "README.md").read_text()
    assert ("in skops format" in card) == bool(shipped_baseline)
    for needed in (
        "pipeline_tag: text-classification",
        "import clozeline.predict",
        "## How it was chosen",
        "best-arm-beats-best-baseline-cls",
        "| supported | 0.1000 [0.0500, 0.1500] |",
        "95% t CI",
        "re-scored from raw text",
        "## Data and code",
        "data md5",
        "git commit",
        "## Params",
        "## Intended use and limits",
        "- **Base model**: `clozeline's own encoder` (pretrained from scratch",
        "**Licence of the base model**: `none declared`",
        "train documents of source `news`",
        "## Baselines on the same test set",
        "`models:/clozeline-cls@evaluated`",
    ):
        assert needed in card, needed
    assert out["gate"]["passed"] and out["registered"] is None  # NullLog: nothing registered


def test_registry_versions_carry_verdicts_and_the_alias_follows_the_gate(exported, tmp_path, monkeypatch):
    mlflow = pytest.importorskip("mlflow")
    from tasks.tracking import open_run

    paths, _ = exported
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlruns.db'}")
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlruns.db'}")
    with open_run("export@cls") as log:
        logged = export.run(export_params(log_model=True), paths, log, "cls")
    (paths.metrics / "export" / "cls.json").write_text(json.dumps(logged), encoding="utf-8")
    assert logged["mlflow"]["signature"] is not None
    with open_run("release@cls") as log:
        first = _release(paths, "supported", log)
    with open_run("release@cls") as log:
        second = _release(paths, "inconclusive", log)
    assert (first["registered"]["version"], first["registered"]["alias_version"]) == (1, 1)
    assert (second["registered"]["version"], second["registered"]["alias_version"]) == (2, 1)  # gate failed: stays
    client = mlflow.MlflowClient()
    tags = client.get_model_version("clozeline-cls", "2").tags
    assert tags["verdict.best-arm-beats-best-baseline-cls"] == "inconclusive"
    assert tags["gate"].startswith("not passed") and "git_commit" in tags
    assert client.get_model_version("clozeline-cls", "1").tags["gate"].startswith("passed")
    # the registered model, served in process through pyfunc, predicts what the export predicts
    text = json.loads((paths.data / "export" / "cls" / "test_inputs.jsonl").read_text().splitlines()[0])["text"]
    served = mlflow.pyfunc.load_model("models:/clozeline-cls@candidate").predict([text])
    assert served["label"][0] == load(logged["folder"])(text)[0]["label"]
    assert served["score"][0] == pytest.approx(load(logged["folder"])(text)[0]["score"], abs=1e-6)


def test_a_baseline_that_wins_on_dev_ships_in_skops_format_and_rescores_equal(exported, tmp_path):
    from tasks.common.models.encoders import load_tokenizer
    from tasks.finetune import load_task_data
    from tasks.finetune.baselines import fitting
    from tasks.finetune.baselines.runs import run_baseline
    from tasks.finetune.draw import Draw
    from tasks.finetune.selected import keep_baseline

    paths, _ = exported
    root = tmp_path / "ws"
    shutil.copytree(paths.data.parent, root)
    copy = type(paths)(data=root / "data", models=root / "models", metrics=root / "metrics", reports=root / "reports")
    cfg = finetune_params(SEEDS)
    tcfg = cfg.task("cls")
    data = load_task_data(copy.data / "tokenize" / "cls" / "clozeline", cfg.data_seed, tcfg)
    row = next(r for r in fitting.plan(["tfidf-lr"], ["clozeline"]) if not r.reference)  # reads the arms' cut
    out = copy.data / "finetune" / "cls"
    _, _, kept = run_baseline(
        "cls",
        "cls",
        row,
        data,
        load_tokenizer(copy.models / "pretrained"),
        data["labels"],
        tcfg,
        cfg,
        out,
        NullLog(),
        Draw(tcfg.max_train_docs, cfg.data_seed),
    )
    won = {"dev": {row.key: 1.0, "pretrained/full/mean-pool": 0.5}}
    assert keep_baseline(won, {row.key: kept}, data["labels"], out) == {"baseline": row.key}
    found = export.run(export_params(), copy, NullLog(), "cls")["baseline"]
    assert found["agrees"] and found["rescored"] == found["evaluated"], found["agreement"]
    assert {"model.skops", "baseline.json", "tokenizer.json"} <= {p.name for p in Path(found["folder"]).iterdir()}
    assert (
        keep_baseline({"dev": {row.key: 0.5, "pretrained/full/mean-pool": 0.9}}, {row.key: kept}, data["labels"], out)
        == {}
    )
