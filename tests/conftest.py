"""Test-wide settings: offline, quiet, and tracking that never touches the repo's mlruns.db."""

import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

_TMP = tempfile.mkdtemp(prefix="clozeline-tests-")
os.environ.update(
    HF_HUB_OFFLINE="1",
    HF_DATASETS_OFFLINE="1",
    TRANSFORMERS_OFFLINE="1",
    HF_HUB_DISABLE_PROGRESS_BARS="1",
    HF_HUB_DISABLE_TELEMETRY="1",
    DVC_NO_ANALYTICS="1",
    MLFLOW_DISABLE_TELEMETRY="true",
    PREFECT_SERVER_ANALYTICS_ENABLED="false",
    PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="120",
    PREFECT_HOME=os.path.join(_TMP, "prefect"),
    TOKENIZERS_PARALLELISM="false",
    TRANSFORMERS_VERBOSITY="error",
    OMP_WAIT_POLICY="PASSIVE",  # OpenMP spin-waiting slows torch 5-7x when processes share the cores
    MLFLOW_ALLOW_FILE_STORE="true",
    MLFLOW_TRACKING_URI="file://" + os.path.join(_TMP, "mlruns"),
    CLOZELINE_TRACKING_SERVER_IDLE_S="20",  # a warm tracking server a test's stage started outlives the run briefly
)
os.environ.pop("MLFLOW_RUN_ID", None)
os.environ.pop("CLOZELINE_PARENT_RUN_ID", None)


@pytest.fixture()
def torch_one_thread():
    """One torch thread for tests on tiny tensors: a second OpenMP thread only adds waiting."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


#: Test files by wall time, longest first (``--durations`` of ``make test``: the end-to-end flow about 500 s of
#: set-up and 110 s of byte-for-byte rerun, the task-kind flows, the DDP runs, the scheduled flow). ``make test``
#: runs two files at once (``-n 2 --dist loadfile --no-loadscope-reorder``) in collection order, so these go
#: first: started last, one of them alone would set the suite's wall time. (``make test`` runs the Ray engine
#: tests beside, in a process of their own.) The GPU check's dry run goes first: it is one subprocess for
#: minutes; then every benchmark's smoke (its subprocesses, a few at a time).
LONGEST_FIRST = (
    "test_gpu_check.py",
    "test_benchmarks_smoke.py",
    "test_e2e.py",
    "test_tasks.py",
    "test_pretrain_ddp.py",
    "test_flow.py",
)


def pytest_collection_modifyitems(config, items):
    """Put the files of ``LONGEST_FIRST`` first (in that order); every other test keeps its place."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.fixture(autouse=True)
def mlflow_uri_follows_the_environment():
    """After each test, MLflow's process-wide tracking URI is the environment's again. ``mlflow.set_tracking_uri``
    (``open_run`` calls it) outlives ``monkeypatch.setenv``; a later test in the same worker would otherwise read
    an earlier test's store while its stage's child process writes to the environment's (CI, stop 46)."""
    yield
    mlflow = sys.modules.get("mlflow")
    if mlflow is not None:
        mlflow.set_tracking_uri(os.environ.get("MLFLOW_TRACKING_URI"))


@pytest.fixture()
def run_dedup():
    """``dedup_fixtures.run_dedup``: the dedup stage on the hand-made ingest files of a test's folder; returns a
    ``DedupRun`` (metrics, rows, cluster records)."""
    import dedup_fixtures

    return dedup_fixtures.run_dedup


@pytest.fixture()
def tracking_runtime(monkeypatch):
    """A private runtime folder for warm tracking servers (``tasks/tracking/server.py``), on; returns the
    socket path. Every server on it, started by the test or by a stage, is killed after the test."""
    import psutil

    from tasks.tracking import connection

    runtime = tempfile.mkdtemp(prefix="cz-")  # short: a Unix socket's path holds at most 107 bytes
    monkeypatch.setenv("XDG_RUNTIME_DIR", runtime)
    monkeypatch.setenv(connection.ENABLED_ENV, "1")
    path = connection.socket_path()
    yield path
    for proc in psutil.process_iter(["cmdline"]):
        if str(path) in (proc.info["cmdline"] or []):
            proc.kill()
    shutil.rmtree(runtime, ignore_errors=True)


@pytest.fixture()
def warm_server(tracking_runtime):
    """A function that starts a tracking server on ``tracking_runtime`` and returns its process once it
    listens."""
    from tasks.tracking import connection, server

    def start(idle_s: float = 120.0) -> subprocess.Popen:
        env = {**os.environ, server.IDLE_ENV: str(idle_s)}
        proc = subprocess.Popen(
            [sys.executable, "-m", "tasks.tracking.server", str(tracking_runtime)], cwd=connection.PACKAGE_ROOT, env=env
        )
        deadline = time.time() + 120
        while not tracking_runtime.exists():
            assert proc.poll() is None and time.time() < deadline, "the tracking server did not start"
            time.sleep(0.05)
        return proc

    return start


@pytest.fixture(scope="module")
def tiny_encoder(tmp_path_factory):
    """A 2-layer random BertModel (hidden 32) with MiniLM's tokenizer, saved in a temporary folder: the semantic
    leakage encoder of the leakage tests and of its placement tests (tests/project/test_placement.py)."""
    import torch
    from transformers import BertConfig, BertModel

    from tasks.common.models.encoders import reference_model_dir

    folder = tmp_path_factory.mktemp("tiny-encoder")
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        if (reference_model_dir() / name).exists():
            shutil.copy(reference_model_dir() / name, folder / name)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=512,
    )
    BertModel(config, add_pooling_layer=False).save_pretrained(folder)
    return folder
