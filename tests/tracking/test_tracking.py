"""MLflow wrapper: sanitizing, run status on success, failure and SIGTERM, stage runner wiring."""

import hashlib
import json
import multiprocessing
import os
import re
import signal
import time
from pathlib import Path

import mlflow
import pytest

import tasks.__main__ as stage_main
from tasks.common.provenance import input_md5s
from tasks.tracking import (
    MAX_KEY,
    MAX_PARAM_VALUE,
    DataInput,
    RunKilled,
    numeric_leaves,
    open_run,
    sanitize_key,
    sanitize_value,
    tracking_uri,
    training_view_url,
)

ROOT = Path(__file__).resolve().parents[2]


def test_sanitize_key_is_deterministic_and_collision_free():
    a, b = sanitize_key("f1[LOC]"), sanitize_key("f1(LOC)")
    assert a != b  # both map '[' and '(' to '_' but the md5 suffix differs
    assert a == sanitize_key("f1[LOC]")
    assert sanitize_key("test/accuracy") == "test/accuracy"  # valid keys are untouched
    long = sanitize_key("x" * 400)
    assert len(long) <= MAX_KEY and long != sanitize_key("x" * 401)


def test_path_like_keys_become_plain_segments_without_collisions():
    cases = {"labels/": "labels/_", "a//b": "a/_/b", "/lead": "_/lead", "a/../b": "a/_/b", "a/./b": "a/_/b"}
    for key, stem in cases.items():
        clean = sanitize_key(key)
        digest = hashlib.md5(key.encode("utf-8")).hexdigest()[:8]
        assert clean == f"{stem}-h{digest}", key
    assert sanitize_key("a//b") != sanitize_key("a/../b")  # same stem, different keys
    assert sanitize_key("test/f1/LOC") == "test/f1/LOC" and sanitize_key("v1.2") == "v1.2"
    with open_run("paths") as log:  # the file store of the tests writes each key as a path: none may escape
        log.metrics({"labels/": 1.0, "a//b": 2.0, "a/../b": 3.0, "/lead": 4.0})
    assert sorted(mlflow.MlflowClient().get_run(log.run_id).data.metrics.values()) == [1.0, 2.0, 3.0, 4.0]


def test_sanitize_value_caps_length_with_hash():
    text = "a" * (MAX_PARAM_VALUE + 10)
    clean = sanitize_value(text)
    assert len(clean) <= MAX_PARAM_VALUE and clean != sanitize_value(text + "b")
    assert sanitize_value([1, 2]) == "[1, 2]"


def test_numeric_leaves_flattens_and_drops_non_numbers():
    got = numeric_leaves({"a": {"b": 1, "c": [1, 2], "d": "x"}, "e": float("nan"), "f": True})
    assert got == {"a/b": 1.0, "f": 1.0}


def test_tracking_uri_is_absolute_and_escapes_dvc_temp(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    temp = tmp_path / "repo" / ".dvc" / "tmp" / "exps" / "run1"
    assert tracking_uri(temp) == f"sqlite:///{tmp_path / 'repo' / 'mlruns.db'}"


def _status(run_id: str) -> str:
    return mlflow.MlflowClient().get_run(run_id).info.status


def test_run_ends_failed_on_exception():
    with pytest.raises(ValueError), open_run("boom") as log:
        run_id = log.run_id
        raise ValueError("inside a stage")
    assert _status(run_id) == "FAILED"


def test_child_run_has_parent_tag():
    with open_run("parent") as parent, parent.child("kid") as kid:
        kid.metrics({"score": 1.0}, step=3)
    run = mlflow.MlflowClient().get_run(kid.run_id)
    assert run.data.tags["mlflow.parentRunId"] == parent.run_id
    assert run.data.metrics["score"] == 1.0


def test_weird_param_and_metric_names_never_crash():
    with open_run("weird") as log:
        log.params({"a" * 300: "v" * 9000, "b{c}": 1})
        log.metrics({"f1[LOC]": 0.5, "f1(LOC)": 0.25})
    metrics = mlflow.MlflowClient().get_run(log.run_id).data.metrics
    assert sorted(metrics.values()) == [0.25, 0.5]


@pytest.fixture()
def workdir(tmp_path, monkeypatch):
    for name in ("params.yaml", "dvc.yaml"):  # the stage names come from dvc.yaml
        (tmp_path / name).write_text((ROOT / name).read_text())
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _last_run(name: str):
    """The latest run named ``name`` in the store the environment names (stage runs are recorded by a child
    process, tasks/tracking/child.py, which reads MLFLOW_TRACKING_URI, not this process's MLflow state)."""
    client = mlflow.MlflowClient(os.environ["MLFLOW_TRACKING_URI"])
    experiments = [e.experiment_id for e in client.search_experiments()]
    return client.search_runs(
        experiments, filter_string=f"tags.mlflow.runName = '{name}'", order_by=["attributes.start_time DESC"]
    )[0]


def test_stage_runner_writes_metrics_and_logs_them(workdir, monkeypatch):
    monkeypatch.setattr(stage_main, "run_stage", lambda stage, params, log, item=None: {"docs": {"in": 3}})
    assert stage_main.main(["ingest"]) == 0
    assert json.loads((workdir / "metrics" / "ingest.json").read_text()) == {"docs": {"in": 3}}
    run = _last_run("ingest")
    assert run.info.status == "FINISHED" and run.data.metrics["docs/in"] == 3.0
    assert "git_commit" in run.data.tags


def test_stage_exception_marks_run_failed(workdir, monkeypatch):
    def explode(stage, params, log, item=None):
        raise RuntimeError("forced failure")

    monkeypatch.setattr(stage_main, "run_stage", explode)
    with pytest.raises(RuntimeError, match="forced failure"):
        stage_main.main(["dedup"])
    assert _last_run("dedup").info.status == "FAILED"
    assert not (workdir / "metrics" / "dedup.json").exists()


def test_sigterm_marks_run_killed(workdir, monkeypatch):
    def terminate(stage, params, log, item=None):
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("SIGTERM handler did not fire")

    monkeypatch.setattr(stage_main, "run_stage", terminate)
    try:
        assert stage_main.main(["split"]) == 143
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    assert _last_run("split").info.status == "KILLED"


def test_runkilled_is_not_an_exception_subclass():
    # so a stage's `except Exception` cannot swallow a SIGTERM
    assert not issubclass(RunKilled, Exception)


def test_input_md5_tags_take_upstream_outputs_from_dvc_lock(tmp_path):
    (tmp_path / "dvc.yaml").write_text(
        "stages:\n  dedup:\n    cmd: x\n    deps: [tasks/dedup/__init__.py, data/ingest]\n"
        "  finetune:\n    foreach: [cls]\n    do:\n      cmd: y\n"
        '      deps: ["data/tokenize/${item}", models/pretrained]\n'
    )
    (tmp_path / "dvc.lock").write_text(
        "schema: '2.0'\nstages:\n  ingest:\n    outs:\n    - path: data/ingest\n      md5: aaa.dir\n"
        "  dedup:\n    deps:\n    - path: tasks/dedup/__init__.py\n      md5: bbb\n"
        "    - path: data/ingest\n      md5: old.dir\n"
        "  tokenize:\n    outs:\n    - path: data/tokenize/cls\n      md5: ccc.dir\n"
    )
    assert stage_main.input_md5_tags(input_md5s(tmp_path, "dedup")) == {
        "dvc.dep.tasks/dedup/__init__.py": "bbb",
        "dvc.dep.data/ingest": "aaa.dir",
    }
    assert stage_main.input_md5_tags(input_md5s(tmp_path, "finetune@cls")) == {"dvc.dep.data/tokenize/cls": "ccc.dir"}


def test_stage_items_are_checked_against_dvc_yaml(workdir, capsys):
    for argv, message in (
        (["finetune"], "stage 'finetune' takes one item of ['cls', 'ner']"),
        (["finetune", "pos"], "stage 'finetune' takes one item of ['cls', 'ner']"),
        (["dedup", "cls"], "stage 'dedup' takes no item"),
        (["nope"], "invalid choice: 'nope'"),
    ):
        with pytest.raises(SystemExit) as exit_:
            stage_main.main(argv)
        assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_invalid_params_exit_2_with_the_dotted_key_and_no_traceback(workdir, capsys):
    text = (workdir / "params.yaml").read_text().replace("retries: 0", "retries: -1", 1)
    (workdir / "params.yaml").write_text(text)
    assert stage_main.main(["ingest"]) == 2
    err = capsys.readouterr().err
    assert "pipeline.retries" in err and "Traceback" not in err


def test_inputs_are_dvc_datasets_that_child_runs_inherit_and_the_experiment_is_a_training_one():
    digest = "0123456789abcdef0123456789abcdef.dir"  # 36 characters: MLflow's digest limit
    with open_run("with-data") as log:
        log.inputs([DataInput("data/ingest", digest, "preprocessing", "abc123")])
        log.note("**2 supported**")
        with log.child("seed13") as kid:
            pass
    client = mlflow.MlflowClient()
    run, child = client.get_run(log.run_id), client.get_run(kid.run_id)
    (entry,) = run.inputs.dataset_inputs
    assert (entry.dataset.name, entry.dataset.digest, entry.dataset.source_type) == ("data/ingest", digest, "dvc")
    assert json.loads(entry.dataset.source) == {"path": "data/ingest", "git_commit": "abc123"}
    assert [(t.key, t.value) for t in entry.tags] == [("mlflow.data.context", "preprocessing")]
    assert [(d.dataset.name, d.dataset.digest) for d in child.inputs.dataset_inputs] == [("data/ingest", digest)]
    assert run.data.tags["mlflow.note.content"] == "**2 supported**"
    experiment = client.get_experiment(run.info.experiment_id)
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    assert (log.run_name, log.experiment_id, kid.run_name) == ("with-data", run.info.experiment_id, "seed13")


def test_sibling_runs_are_the_other_children_of_the_parent_latest_first():
    with open_run("pipeline") as parent:
        with parent.child("probe") as old_probe:
            pass
        time.sleep(0.01)  # start times are in milliseconds: the second probe run must start later
        with parent.child("probe") as probe, parent.child("report") as report:
            pass
    with open_run("probe"):  # the same name outside this pipeline run: not a sibling
        pass
    got = report.sibling_runs(["probe", "pretrain"])
    assert got == {"probe": ("probe", probe.run_id, probe.experiment_id)} and old_probe.run_id != probe.run_id
    assert parent.sibling_runs(["probe"]) == {}  # a run without a parent has no siblings


def test_training_view_links():
    assert training_view_url("http://127.0.0.1:5000/", "7") == (
        "http://127.0.0.1:5000/#/experiments/7/runs?workflowType=machine_learning"
    )
    assert (
        training_view_url("http://h:1", "7", "r1") == "http://h:1/#/experiments/7/runs/r1?workflowType=machine_learning"
    )
    assert training_view_url("http://h:1", None) == "http://h:1/#/experiments?workflowType=machine_learning"


def test_stage_runner_logs_data_deps_as_datasets_with_fresh_md5s(workdir, monkeypatch):
    # probe's deps: code (not datasets), models/pretrained (a model: a tag, not a dataset), two probe sets
    senses = workdir / "tasks" / "probe" / "senses.jsonl"
    senses.parent.mkdir(parents=True)
    senses.write_bytes(b'{"word": "port"}\n')
    (senses.parent / "__init__.py").write_text('"""the probe package: code, not data"""\n')
    monkeypatch.setattr(stage_main, "run_stage", lambda stage, params, log, item=None: {"ok": 1})
    # sqlite, as in real runs: the file store cannot hold both tags dvc.dep.tasks/probe and .../senses.jsonl
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{workdir / 'mlruns.db'}")
    assert stage_main.main(["probe"]) == 0
    run = _last_run("probe")
    got = {(d.dataset.name, d.dataset.digest, d.tags[0].value) for d in run.inputs.dataset_inputs}
    # DVC 3 hashes a file as the md5 of its bytes; the file is new, so dvc.lock (absent here) cannot know it
    assert got == {("tasks/probe/senses.jsonl", hashlib.md5(b'{"word": "port"}\n').hexdigest(), "evaluation")}
    assert run.data.tags["dvc.dep.tasks/probe/senses.jsonl"] == hashlib.md5(senses.read_bytes()).hexdigest()


def _open_at(uri: str, name: str, start: float) -> None:
    os.environ["MLFLOW_TRACKING_URI"] = uri
    while time.time() < start:
        time.sleep(0.001)
    with open_run(name) as log:
        log.metrics({"score": 1.0})


def test_two_runs_opened_at_once_on_a_fresh_sqlite_file_are_both_recorded(tmp_path):
    # without the store lock both processes run MLflow's schema migration and (measured) both die in alembic
    uri = f"sqlite:///{tmp_path / 'fresh.db'}"
    start = time.time() + 8  # both processes imported mlflow and wait for the same instant
    context = multiprocessing.get_context("spawn")
    procs = [context.Process(target=_open_at, args=(uri, name, start)) for name in ("stage-a", "stage-b")]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=120)
    assert [proc.exitcode for proc in procs] == [0, 0]
    runs = mlflow.MlflowClient(uri).search_runs(
        [mlflow.MlflowClient(uri).get_experiment_by_name("clozeline").experiment_id]
    )
    assert sorted((r.info.run_name, r.info.status) for r in runs) == [("stage-a", "FINISHED"), ("stage-b", "FINISHED")]


def test_a_direct_stage_run_clears_its_outputs_first_and_a_failed_one_leaves_none(workdir, monkeypatch):
    stale = workdir / "data" / "dedup" / "source_removed_from_params.parquet"
    stale.parent.mkdir(parents=True)
    stale.write_text("from an earlier run")

    def writes(stage, params, log, item=None):
        assert not stale.exists()  # gone before the stage starts, as under dvc repro
        (workdir / "data" / "dedup" / "kept.parquet").parent.mkdir(parents=True, exist_ok=True)
        (workdir / "data" / "dedup" / "kept.parquet").write_text("new")
        return {"ok": 1}

    monkeypatch.setattr(stage_main, "run_stage", writes)
    assert stage_main.main(["dedup"]) == 0
    assert sorted(p.name for p in (workdir / "data" / "dedup").iterdir()) == ["kept.parquet"]

    def fails_halfway(stage, params, log, item=None):
        (workdir / "data" / "dedup" / "half.parquet").parent.mkdir(parents=True, exist_ok=True)
        (workdir / "data" / "dedup" / "half.parquet").write_text("partial")
        raise RuntimeError("disk full")

    monkeypatch.setattr(stage_main, "run_stage", fails_halfway)
    with pytest.raises(RuntimeError, match="disk full"):
        stage_main.main(["dedup"])
    assert not (workdir / "data" / "dedup").exists() and not (workdir / "metrics" / "dedup.json").exists()


def test_persist_outputs_survive_a_direct_run(workdir, monkeypatch):
    checkpoint = workdir / "models" / "checkpoints" / "pretrain" / "step-6" / "state.txt"
    old_model = workdir / "models" / "pretrained" / "model.safetensors"
    for path in (checkpoint, old_model):
        path.parent.mkdir(parents=True)
        path.write_text("x")
    monkeypatch.setattr(stage_main, "run_stage", lambda stage, params, log, item=None: {"ok": 1})
    assert stage_main.main(["pretrain"]) == 0
    assert checkpoint.exists() and not old_model.exists()  # the resume point stays; the old model goes


def test_a_data_error_is_one_line_naming_the_file_and_the_traceback_goes_to_mlflow(workdir, monkeypatch, capsys):
    def bad_input(stage, params, log, item=None):
        raise ValueError("data/ingest/news.parquet: row 3 has a null text")

    monkeypatch.setattr(stage_main, "run_stage", bad_input)
    assert stage_main.main(["dedup"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        "clozeline: dedup: data/ingest/news.parquet: row 3 has a null text "
        "(traceback: MLflow run 'dedup', artifact traceback.txt)"
    )
    assert not any("Traceback" in line for line in err)
    run = _last_run("dedup")
    assert run.info.status == "FAILED"
    text = mlflow.artifacts.load_text(f"{run.info.artifact_uri}/traceback.txt")
    assert text.startswith("Traceback (most recent call last)") and "row 3 has a null text" in text


def test_a_store_that_cannot_be_opened_is_one_line_and_leaves_no_outputs(workdir, monkeypatch, capsys):
    def writes(stage, params, log, item=None):
        (workdir / "data" / "ingest").mkdir(parents=True, exist_ok=True)
        (workdir / "data" / "ingest" / "news.parquet").write_text("written before MLflow failed")
        return {"ok": 1}

    blocker = workdir / "not-a-folder"
    blocker.write_text("a file where the store's folder should be")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{blocker / 'mlruns.db'}")
    monkeypatch.setattr(stage_main, "run_stage", writes)
    assert stage_main.main(["ingest"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert re.match(r"clozeline: ingest: MLflow, run 'ingest', open: (NotADirectoryError|FileExistsError): ", err[-1])
    assert not any("Traceback" in line for line in err)
    assert not (workdir / "data" / "ingest").exists() and not (workdir / "metrics" / "ingest.json").exists()
