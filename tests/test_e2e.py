"""The whole flow on tiny params, in a fresh copy of the repo: every stage runs, the claim table is complete,
MLflow holds a parent run with one child per stage, and a second run reruns nothing."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tasks.common.provenance import Lock, stage_names
from tasks.config import read_yaml

ROOT = Path(__file__).resolve().parents[1]

#: Dotted params overrides that shrink the default run to a few hundred documents, a 2-layer model, a few
#: optimizer steps, 2 seeds and a 2-point LR sweep (the same code paths as the default run, at a fraction of the
#: cost).
TINY = {
    "tokenizer.vocab_size_tokens": 1500,
    "pretrain.presets.tiny": {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 2,
                              "intermediate_size": 128},
    "pretrain.batch_size_blocks": 8,
    "pretrain.max_steps": 12,
    "pretrain.eval_every_steps": 6,
    "pretrain.eval_max_blocks": 16,
    "pretrain.checkpoint_every_steps": 6,
    "finetune.seeds": [13, 21],
    "finetune.cls.lr_grid": [1.0, 3.0],
    "finetune.ner.lr_grid": [1.0, 3.0],
    "finetune.cls.max_train_docs": 48,
    "finetune.cls.max_dev_docs": 24,
    "finetune.cls.max_test_docs": 32,
    "finetune.cls.max_epochs": 1,
    "finetune.ner.max_train_docs": 48,
    "finetune.ner.max_dev_docs": 24,
    "finetune.ner.max_test_docs": 32,
    "finetune.ner.max_epochs": 1,
    "finetune.operational.timed_batches": {1: 4, 32: 2},
}
MAX_DOCS = {"bbc_news": 150, "bbc_news_pretrain": 150, "wnut16": 200, "wikipedia_sample": 30}


def tiny_params(source: Path) -> dict:
    """The repo's params.yaml with the TINY overrides and per-source ``max_docs`` applied."""
    params = read_yaml(source)
    for dotted, value in TINY.items():
        *parents, leaf = dotted.split(".")
        node = params
        for key in parents:
            node = node[key]
        assert leaf in node, f"params.yaml has no {dotted}"
        node[leaf] = value
    for spec in params["ingest"]["sources"]:
        spec["max_docs"] = MAX_DOCS[spec["name"]]
    return params


def copy_worktree(dest: Path) -> Path:
    """Copy the files git would clone (tracked + untracked, not ignored) into ``dest`` and commit them."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout.split("\0")
    for rel in filter(None, listed):
        if (ROOT / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, dest / rel)
    git = ["git", "-c", "user.name=ci", "-c", "user.email=ci@localhost"]
    subprocess.run(["git", "init", "-q"], cwd=dest, check=True)
    subprocess.run(["git", "add", "-A"], cwd=dest, check=True)
    subprocess.run([*git, "commit", "-qm", "e2e"], cwd=dest, check=True)
    return dest


def flow_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("MLFLOW_TRACKING_URI", None)  # use the default: sqlite:///<repo>/mlruns.db
    env.pop("MLFLOW_ALLOW_FILE_STORE", None)
    env["PREFECT_HOME"] = str(tmp_path / "prefect-home")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    return env


def run_flow(repo: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flows.pipeline"], cwd=repo, env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.fixture(scope="module")
def pipeline_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("e2e")
    repo = copy_worktree(tmp / "repo")
    (repo / "params.yaml").write_text(yaml.safe_dump(tiny_params(repo / "params.yaml"), sort_keys=False))
    env = flow_env(tmp)
    first = run_flow(repo, env)
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-6000:]
    return repo, env, first


@pytest.mark.slow
def test_every_stage_wrote_metrics_and_the_claim_table_is_complete(pipeline_run):
    repo, _, first = pipeline_run
    expected = [f"{name.replace('@', '_')}.json" for name in stage_names(repo) if name != "report"]
    missing = [name for name in expected if not (repo / "metrics" / name).exists()]
    assert not missing, missing
    claims = read_yaml(repo / "reports" / "claims.yaml")["claims"]
    table_md = (repo / "reports" / "claims.md").read_text()
    html = (repo / "reports" / "claims.html").read_text()
    for claim in claims:
        assert claim["id"] in table_md and claim["id"] in html, claim["id"]
    log = first.stdout + first.stderr
    names = stage_names(repo)
    for position, stage in enumerate(names, start=1):
        assert f"stage {position}/{len(names)}: {stage} done in" in log, stage


@pytest.mark.slow
def test_mlflow_has_a_parent_run_with_one_child_per_stage(pipeline_run):
    import mlflow

    repo, _, _ = pipeline_run
    mlflow.set_tracking_uri(f"sqlite:///{repo / 'mlruns.db'}")
    try:
        runs = mlflow.search_runs(search_all_experiments=True, output_format="list")
    finally:
        mlflow.set_tracking_uri(os.environ["MLFLOW_TRACKING_URI"])
    parents = [r for r in runs if r.info.run_name == "pipeline"]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    children = {r.info.run_name for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id}
    assert set(stage_names(repo)) <= children
    assert any(key.startswith("dvc.out.") for key in parents[0].data.tags)


DATA_STAGES = ("ingest", "dedup", "split", "leakage", "tokenizer", "tokenize")


def dvc(repo: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dvc", *args], cwd=repo, env=env, capture_output=True,
                          text=True, timeout=300)


def data_md5s(repo: Path) -> dict[str, str]:
    return {f"{s}:{p}": md5 for (s, p), md5 in Lock.read(repo / "dvc.lock").out_md5s().items() if s in DATA_STAGES}


@pytest.mark.slow
def test_second_run_reruns_nothing(pipeline_run):
    repo, env, _ = pipeline_run
    status = dvc(repo, env, "status")
    assert status.returncode == 0 and "up to date" in status.stdout, status.stdout + status.stderr
    again = dvc(repo, env, "repro")
    assert again.returncode == 0, again.stderr
    assert "Running stage" not in again.stdout
    assert again.stdout.count("didn't change, skipping") == len(stage_names(repo))


@pytest.mark.slow
def test_data_stages_are_byte_for_byte_reproducible(pipeline_run):
    """Forcing the data stages to run again gives the same md5 for every output (same params, same seeds)."""
    repo, env, _ = pipeline_run
    before = data_md5s(repo)
    forced = dvc(repo, env, "repro", "--force", "tokenize")
    assert forced.returncode == 0, forced.stdout[-3000:] + forced.stderr[-3000:]
    assert all(f"Running stage '{stage}'" in forced.stdout for stage in DATA_STAGES)
    assert data_md5s(repo) == before
