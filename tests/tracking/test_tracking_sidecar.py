"""A stage's MLflow run held by a child process (tasks/tracking/sidecar.py, tasks/tracking/child.py): what it
records, how it ends, and how MLflow's failures reach the stage."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import mlflow
import pytest

from tasks.tracking import DataInput, RunKilled
from tasks.tracking.connection import ENABLED_ENV
from tasks.tracking.sidecar import TrackingError, open_sidecar_run

ROOT = Path(__file__).resolve().parents[2]
#: The tests that hold for a child forked by the warm server as for a cold one run with both.
BOTH = pytest.mark.parametrize("tracking_child", ["cold", "warm"], indirect=True)


@pytest.fixture(autouse=True)
def cold_by_default(monkeypatch):
    """A cold child unless the test asks for both (``tracking_child``)."""
    monkeypatch.setenv(ENABLED_ENV, "0")


@pytest.fixture()
def tracking_child(request, cold_by_default):
    """``cold``: every run gets a cold child (no server is started either); ``warm``: a server of the test's own
    is up and forks it."""
    if request.param == "warm":
        request.getfixturevalue("warm_server")()
    return request.param


def _run(run_id: str):
    return mlflow.MlflowClient().get_run(run_id)


@BOTH
def test_a_sidecar_run_records_every_call_with_the_stage_times(tmp_path, tracking_child):
    report = tmp_path / "report.md"
    report.write_text("# claims\n")
    started_ms = int(time.time() * 1000)
    with open_sidecar_run("stage-x", tmp_path) as log:
        log.params({"dedup": {"threshold": 0.8}, "path": Path("data/x")})
        log.metrics({"docs": {"in": 3, "out": 2}, "nan": float("nan")}, step=4)
        log.tags({"git_commit": "abc", "f1[LOC]": "x"})
        log.inputs([DataInput("data/ingest", "0" * 32 + ".dir", "preprocessing", "abc")])
        log.note("**note**")
        log.text("trace", "traceback.txt")
        log.artifact(report, "report")
        report.unlink()  # the artifact call returned once the file was stored
        with log.child("seed13") as kid:
            kid.metrics({"loss": 1.5})
        time.sleep(0.05)
        ended_ms = int(time.time() * 1000)
    assert type(log._proc).__name__ == {"cold": "Popen", "warm": "ForkedChild"}[tracking_child]
    run = _run(log.run_id)
    assert (run.info.run_name, run.info.status, run.info.experiment_id) == ("stage-x", "FINISHED", log.experiment_id)
    assert run.data.params == {"dedup.threshold": "0.8", "path": "data/x"}
    assert run.data.metrics == {"docs/in": 3.0, "docs/out": 2.0}  # NaN is not a finite leaf
    history = mlflow.MlflowClient().get_metric_history(log.run_id, "docs/in")
    assert [(m.step, started_ms <= m.timestamp <= ended_ms) for m in history] == [(4, True)]
    assert run.data.tags["git_commit"] == "abc" and run.data.tags["mlflow.note.content"] == "**note**"
    assert any(key.startswith("f1_LOC_-h") for key in run.data.tags)
    (entry,) = run.inputs.dataset_inputs
    assert (entry.dataset.name, entry.dataset.source_type) == ("data/ingest", "dvc")
    assert mlflow.artifacts.load_text(f"{run.info.artifact_uri}/report/report.md") == "# claims\n"
    assert mlflow.artifacts.load_text(f"{run.info.artifact_uri}/traceback.txt") == "trace"
    # the run spans the stage, not the child's own life: it starts before MLflow is imported there
    assert started_ms <= run.info.start_time <= started_ms + 1000 and ended_ms <= run.info.end_time
    child = _run(kid.run_id)
    assert child.data.tags["mlflow.parentRunId"] == log.run_id and child.data.metrics == {"loss": 1.5}
    assert [d.dataset.name for d in child.inputs.dataset_inputs] == ["data/ingest"]


@BOTH
def test_an_exception_ends_the_run_failed_and_runkilled_ends_it_killed(tmp_path, tracking_child):
    with pytest.raises(ValueError, match="bad row"), open_sidecar_run("fails", tmp_path) as failed:
        raise ValueError("bad row")
    with pytest.raises(RunKilled), open_sidecar_run("killed", tmp_path) as killed:
        raise RunKilled("signal 15")
    assert (_run(failed.run_id).info.status, _run(killed.run_id).info.status) == ("FAILED", "KILLED")


@BOTH
def test_a_call_mlflow_rejects_fails_the_stage_at_the_end_with_mlflows_message(tmp_path, tracking_child, capfd):
    refused = r"MLflow, run 'twice', end: params: .*threshold"
    with pytest.raises(TrackingError, match=refused), open_sidecar_run("twice", tmp_path) as log:
        log.params({"threshold": 0.8})
        log.params({"threshold": 0.9})  # MLflow refuses to change a logged param
    assert "clozeline: MLflow refused params: MlflowException: Changing param values" in capfd.readouterr().err


@BOTH
def test_a_store_that_cannot_be_opened_fails_the_stage_at_its_next_call_not_at_its_end(
    tmp_path, tracking_child, monkeypatch
):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the store's folder should be")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{blocker / 'mlruns.db'}")
    calls = 0
    unopened = "MLflow, run 'nowhere', open: (NotADirectoryError|FileExistsError): "
    with pytest.raises(TrackingError, match=unopened), open_sidecar_run("nowhere", tmp_path) as log:
        while calls < 600:  # a stage logging every 0.1 s hears of it once the child has tried (about 3 s)
            log.metrics({"step": calls})
            calls += 1
            time.sleep(0.1)
    assert 0 < calls < 600


def test_a_sigterm_while_the_child_still_starts_ends_the_run_killed(tmp_path):
    def killed(signum, frame):
        raise RunKilled(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, killed)
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM))  # the child needs seconds to start
    try:
        with pytest.raises(RunKilled), open_sidecar_run("early", tmp_path) as log:
            log.params({"threshold": 0.8})
            timer.start()  # the stage's work ends here: the signal comes while the stage waits for the child
    finally:
        timer.join()
        signal.signal(signal.SIGTERM, previous)
    run = _run(log.run_id)
    assert run.info.status == "KILLED" and run.data.params == {"threshold": "0.8"}


@BOTH
def test_a_stage_process_killed_outright_leaves_its_run_failed_not_running(tmp_path, tracking_child):
    script = (
        "import os, signal, sys\n"
        "from pathlib import Path\n"
        "from tasks.tracking.sidecar import open_sidecar_run\n"
        "with open_sidecar_run('sigkilled', Path(sys.argv[1])) as log:\n"
        "    log.metrics({'step': 1.0})\n"
        "    print(log.run_id, flush=True)\n"
        "    assert 'mlflow' not in sys.modules  # the stage itself never imported MLflow\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    run_id = done.stdout.strip()
    deadline = time.time() + 60
    while _run(run_id).info.status == "RUNNING" and time.time() < deadline:
        time.sleep(0.2)
    run = _run(run_id)
    assert run.info.status == "FAILED" and run.data.metrics == {"step": 1.0}


def test_the_child_ignores_sigterm_so_the_stage_can_end_its_run_killed(tmp_path):
    with pytest.raises(RunKilled), open_sidecar_run("terminated", tmp_path) as log:
        assert log.run_id  # the child is up and serving
        log._proc.send_signal(signal.SIGTERM)  # as a signal to the whole process group would
        log.metrics({"after": 1.0})
        raise RunKilled("signal 15")
    run = _run(log.run_id)
    assert run.info.status == "KILLED" and run.data.metrics == {"after": 1.0}


def test_the_wire_is_json_lines(tmp_path):
    # nothing is pickled between the two processes: every call is one JSON object per line
    proc = subprocess.Popen(
        [sys.executable, "-m", "tasks.tracking.child"],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    uri = os.environ["MLFLOW_TRACKING_URI"]
    calls = [
        {"op": "open", "name": "wire", "parent": None, "experiment": "clozeline", "uri": uri, "start_ms": 1000},
        {"op": "metrics", "values": {"a": 2.0}, "step": 0, "stamp_ms": 1500},
        {"op": "end", "status": "FINISHED", "end_ms": 2000},
    ]
    out, _ = proc.communicate("".join(json.dumps(c) + "\n" for c in calls), timeout=120)
    opened, ended = (json.loads(line) for line in out.splitlines())
    assert proc.returncode == 0 and ended == {"ok": "FINISHED"}
    run = _run(opened["ok"]["run_id"])
    assert (run.info.start_time, run.info.end_time, run.data.metrics) == (1000, 2000, {"a": 2.0})
