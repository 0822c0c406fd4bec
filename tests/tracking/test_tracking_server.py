"""The warm tracking server (tasks/tracking/server.py, reached through tasks/tracking/connection.py): stages after
the first get a tracking child forked from it, with the stage's environment; it idles out, and a dead one costs a
cold child, not a failed stage."""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import types

import mlflow
import pytest

from tasks.tracking import connection
from tasks.tracking.sidecar import SidecarLog, TrackingError, open_sidecar_run


def _status_and_metrics(run_id: str) -> tuple[str, dict]:
    run = mlflow.MlflowClient(os.environ["MLFLOW_TRACKING_URI"]).get_run(run_id)
    return run.info.status, run.data.metrics


def _wait_listening(path, timeout_s: float = 120) -> None:
    deadline = time.time() + timeout_s
    while True:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            try:
                probe.connect(str(path))
                return
            except OSError:
                assert time.time() < deadline, f"no tracking server on {path}"
                time.sleep(0.1)


def test_the_first_stage_starts_a_server_and_the_next_gets_a_child_forked_from_it(tmp_path, tracking_runtime):
    path = tracking_runtime
    with open_sidecar_run("first", tmp_path) as first:
        first.metrics({"night": 1.0})
    assert type(first._proc).__name__ == "Popen"  # no server yet: a cold child, and a server for the next stage
    _wait_listening(path)
    with open_sidecar_run("second", tmp_path) as second:
        second.metrics({"night": 2.0})
    assert isinstance(second._proc, connection.ForkedChild)
    assert _status_and_metrics(first.run_id) == ("FINISHED", {"night": 1.0})
    assert _status_and_metrics(second.run_id) == ("FINISHED", {"night": 2.0})
    assert os.stat(os.path.dirname(path)).st_mode & 0o777 == 0o700


def test_the_forked_child_runs_with_the_stages_environment_not_the_servers(tmp_path, warm_server, monkeypatch):
    warm_server()  # started with MLFLOW_ALLOW_FILE_STORE=true (conftest), which the file store needs
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "mlruns").as_uri())
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE")
    with pytest.raises(TrackingError, match="MLFLOW_ALLOW_FILE_STORE"), open_sidecar_run("no-file-store", tmp_path):
        pass
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    with open_sidecar_run("file-store", tmp_path) as log:
        log.params({"threshold": 0.8})
    assert isinstance(log._proc, connection.ForkedChild)
    assert _status_and_metrics(log.run_id)[0] == "FINISHED"


def test_an_idle_server_removes_its_socket_and_exits(warm_server):
    server = warm_server(idle_s=3.0)  # long enough to be seen listening on a loaded machine
    assert server.wait(timeout=60) == 0
    assert not connection.socket_path().exists()


def test_a_killed_servers_socket_costs_a_cold_child_and_a_new_server(tmp_path, warm_server):
    server = warm_server()
    server.send_signal(signal.SIGKILL)
    server.wait()
    path = connection.socket_path()
    assert path.exists()  # the stale socket file of the killed server
    with open_sidecar_run("after-a-crash", tmp_path) as log:
        log.metrics({"night": 3.0})
    assert type(log._proc).__name__ == "Popen"
    assert _status_and_metrics(log.run_id) == ("FINISHED", {"night": 3.0})
    _wait_listening(path)  # the stale file was replaced by a new server's socket


def test_a_runtime_folder_others_can_enter_is_not_used(tracking_runtime):
    folder = tracking_runtime.parent
    folder.chmod(0o755)
    assert connection.socket_path() is None and connection.connect() is None


def test_off_means_no_server_and_a_cold_child(tmp_path, tracking_runtime, monkeypatch):
    monkeypatch.setenv(connection.ENABLED_ENV, "0")
    with open_sidecar_run("cold", tmp_path) as log:
        pass
    assert type(log._proc).__name__ == "Popen" and not connection.socket_path().exists()


STAGE_WITHOUT_STDERR = """
import os, sys
from pathlib import Path
from tasks.tracking.sidecar import open_sidecar_run
with open_sidecar_run("no-stderr", Path(sys.argv[1])) as log:
    log.metrics({"night": 4.0})
print(type(log._proc).__name__, log.run_id, flush=True)
"""


def test_a_stage_with_stderr_closed_gets_a_cold_child_that_records_its_run(tmp_path, warm_server):
    # with fd 2 closed, the stage's socket would take fd 2 and be passed to the fork as its own stderr
    warm_server()
    done = subprocess.run(
        ["bash", "-c", 'exec 2>&-; exec "$0" -c "$1" "$2"', sys.executable, STAGE_WITHOUT_STDERR, str(tmp_path)],
        cwd=connection.PACKAGE_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout
    kind, run_id = done.stdout.split()
    assert kind == "Popen" and _status_and_metrics(run_id) == ("FINISHED", {"night": 4.0})


def test_a_socket_path_too_long_to_bind_means_no_server(monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", tempfile.mkdtemp(prefix="cz-" + "x" * 60))
    assert connection.socket_path() is None and connection.connect() is None


def test_servers_started_at_once_leave_one_and_the_others_exit_before_importing_mlflow(tracking_runtime, tmp_path):
    path = tracking_runtime
    cmd = [sys.executable, "-X", "importtime", "-m", "tasks.tracking.server", str(path)]
    logs = [tmp_path / f"imports-{k}.txt" for k in range(3)]  # -X importtime lists every module imported
    procs = [subprocess.Popen(cmd, cwd=connection.PACKAGE_ROOT, stderr=log.open("w")) for log in logs]
    _wait_listening(path)
    time.sleep(1)
    exited = [k for k, p in enumerate(procs) if p.poll() is not None]
    assert len(exited) == 2 and all(procs[k].returncode == 0 for k in exited)
    assert not any("mlflow" in logs[k].read_text() for k in exited)
    assert "mlflow" in logs[({0, 1, 2} - set(exited)).pop()].read_text()


def test_a_connection_reset_by_a_dead_child_is_a_tracking_error():
    class Reset:
        def readline(self):
            raise ConnectionResetError(104, "Connection reset by peer")

    log = SidecarLog(types.SimpleNamespace(stdout=Reset()), "reset", "sqlite:///x.db")
    with pytest.raises(TrackingError, match="ended before it answered 'open'"):
        _ = log.run_id
