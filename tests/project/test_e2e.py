"""The whole flow on tiny params, in a fresh copy of the repo: every stage runs, the claim table is complete,
MLflow holds a parent run with one child per stage, a second run reruns nothing, and what users review (an
MLflow server with its UI in headless Chromium, ``dvc exp show``, ``dvc plots show``) shows the run."""

import html
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from tasks.common.imports import PACKAGES
from tasks.common.provenance import Lock, stage_names
from tasks.config import load_params, read_yaml
from tasks.report.claims.standard import claim_set

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.pipeline  # make test-pipeline (and CI), not make test

#: Dotted params overrides that shrink the default run to a few hundred documents, a 2-layer model, a few
#: optimizer steps, 2 seeds and a 2-point LR sweep (the same code paths as the default run, at a fraction of the
#: cost).
TINY = {
    "tokenizer.vocab_size_tokens": 1500,
    "pretrain.presets.tiny": {
        "num_hidden_layers": 2,
        "hidden_size": 64,
        "num_attention_heads": 2,
        "intermediate_size": 128,
    },
    "pretrain.batch_size_blocks": 8,
    "pretrain.max_steps": 12,
    "pretrain.eval_every_steps": 6,
    "pretrain.eval_max_blocks": 16,
    "pretrain.checkpoint_every_steps": 6,
    "pretrain.seeds": [13, 21],  # a further pretraining seed: our arms and curve arms rerun from its model
    "finetune.seeds": [13, 21],
    "finetune.variant_seed_counts": {"reference": 1},  # the MiniLM on fewer seeds than the tiny arms, as the default
    "finetune.recipes.cls.lr_grid": [1.0, 3.0],
    "finetune.recipes.ner.lr_grid": [1.0, 3.0],
    "finetune.recipes.ner.baseline_crf_c1_grid": [0.1],  # one CRF fit per seed and size (the default tries 2)
    "finetune.recipes.cls.train_sizes": [16],  # the learning curve: 16 docs, then the 48 of the full-size runs
    "finetune.recipes.ner.train_sizes": [16],
    # tests/finetune/test_lr_widening.py widens; the suite has no time for it here
    "finetune.recipes.cls.lr_grid_widen": 0,
    "finetune.recipes.ner.lr_grid_widen": 0,
    "finetune.recipes.cls.max_train_docs": 48,
    "finetune.recipes.cls.max_dev_docs": 24,
    "finetune.recipes.cls.max_test_docs": 32,
    "finetune.recipes.cls.max_epochs": 1,
    "finetune.recipes.ner.max_train_docs": 48,
    "finetune.recipes.ner.max_dev_docs": 24,
    "finetune.recipes.ner.max_test_docs": 32,
    "finetune.recipes.ner.max_epochs": 1,
    "finetune.operational.timed_batches": {1: 4, 32: 2},
    "leakage.semantic.planted_docs": 20,
    # split.task_sizing: study puts about half of the 150 BBC docs in dev/test, and leakage removes their pretraining
    # twins: at the default 2% the held-out MLM text (3 BBC docs, 0 of 6 Wikipedia articles) could lose every doc
    "split.pretrain_fractions": {"train": 0.9, "heldout": 0.1},
    # ... and the eval sets grow from about 70 to about 200 docs: plant copies of 70, as many as before
    "leakage.planted.max_docs": 70,
}
#: Six Wikipedia articles (about 37k words; 30 were 136k, 70% of the pretraining text and of the semantic
#: leakage pass's windows, which the suite runs three times).
MAX_DOCS = {"bbc_news": 150, "bbc_news_pretrain": 150, "wnut16": 200, "wikipedia_sample": 6}


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
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.split("\0")
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
    return subprocess.run(
        [sys.executable, "-m", "flows.pipeline"], cwd=repo, env=env, capture_output=True, text=True, timeout=1200
    )  # two test files run at once (make test -n 2)


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
    expected = [f"{name.replace('@', '/')}.json" for name in stage_names(repo) if name != "report"]  # finetune/cls.json
    missing = [name for name in expected if not (repo / "metrics" / name).exists()]
    assert not missing, missing
    table_md = (repo / "reports" / "claims.md").read_text()
    html = (repo / "reports" / "claims.html").read_text()
    for claim in run_claims(repo):
        assert claim.id in table_md and claim.id in html, claim.id
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
#: The data stages' ``persist`` outputs that only make the next run incremental (dvc.yaml).
PERSISTED_CACHES = ("ingest_cache", "dedup_index", "leakage_cache", "leakage_embeddings", "tokenize_cache")


def run_claims(repo: Path) -> list:
    """The claims of the run: the standard claims for its params' tasks with its reports/claims.yaml applied."""
    return claim_set(repo / "reports" / "claims.yaml", load_params(repo / "params.yaml").report.setup).claims


def dvc(repo: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dvc", *args], cwd=repo, env=env, capture_output=True, text=True, timeout=300
    )


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
    """Forcing the data stages to run again from scratch gives the same md5 for every output (same params, same
    seeds). The persisted caches go first: with them the rerun would reuse every stored result (incremental, 0 new
    texts) instead of computing them again."""
    repo, env, _ = pipeline_run
    before = data_md5s(repo)
    for cache in PERSISTED_CACHES:
        shutil.rmtree(repo / "data" / cache)
    forced = dvc(repo, env, "repro", "--force", "tokenize")
    assert forced.returncode == 0, forced.stdout[-3000:] + forced.stderr[-3000:]
    assert all(f"Running stage '{stage}'" in forced.stdout for stage in DATA_STAGES)
    assert data_md5s(repo) == before


# ---------------------------------------------------------------- where users review the run: MLflow, DVC


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def mlflow_server(pipeline_run, tmp_path_factory):
    """MLflow's UI over the run's sqlite store, started as a user starts it: ``make mlflow-ui PORT=<free port>`` in
    the run's checkout (this checkout's .venv; ``-o`` keeps a stale install stamp from reinstalling)."""
    repo, env, _ = pipeline_run
    log = tmp_path_factory.mktemp("mlflow-server") / "server.log"
    port = _free_port()
    venv = ROOT / ".venv"
    cmd = ["make", "-s", "-C", str(repo), f"VENV={venv}", "-o", f"{venv}/.installed", "mlflow-ui", f"PORT={port}"]
    user_env = {k: v for k, v in env.items() if not k.startswith(("MAKE", "MFLAGS"))}  # not a sub-make of make test
    with log.open("w") as out:  # its own session: make, then the script that execs mlflow ui, stop together
        proc = subprocess.Popen(
            cmd, cwd=repo, env=user_env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while not _answers(url + "/health"):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.5)
        assert f"clozeline runs (training view): {url}/#/experiments/" in log.read_text()
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def _pipeline_runs(url: str):
    """The experiment, the pipeline run, its stage runs by name and every run below them, via the server."""
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=url)
    exp = client.get_experiment_by_name("clozeline")
    runs = client.search_runs([exp.experiment_id], max_results=5000)
    pipeline = next(r for r in runs if r.info.run_name == "pipeline")
    children: dict[str, list] = {}
    for run in runs:
        children.setdefault(run.data.tags.get("mlflow.parentRunId"), []).append(run)
    stages = {r.info.run_name: r for r in children[pipeline.info.run_id]}
    below, frontier = [], list(stages.values())
    while frontier:
        kids = children.get(frontier.pop().info.run_id, [])
        below += kids
        frontier += kids
    return client, exp, pipeline, stages, below


def _is_data(path: str) -> bool:
    """A dvc.yaml dep that is data: not a model, and not project code (a package: tasks, flows, clozeline; the
    probe sets are data in tasks/probe)."""
    code = path in PACKAGES or path.startswith(tuple(f"{package}/" for package in PACKAGES))
    return not path.startswith("models/") and (not code or path.endswith(".jsonl"))


@pytest.mark.slow
def test_mlflow_server_shows_a_training_experiment_with_dvc_datasets_seed_params_and_the_report(
    pipeline_run, mlflow_server
):
    repo, _, _ = pipeline_run
    client, exp, pipeline, stages, below = _pipeline_runs(mlflow_server)
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    lock = Lock.read(repo / "dvc.lock")
    assert set(stages) == set(stage_names(repo))
    for name, run in stages.items():
        # every data dep of the stage is one dataset input, its digest the md5 dvc.lock recorded for that run
        got = {(d.dataset.name, d.dataset.digest) for d in run.inputs.dataset_inputs}
        assert got == {(p, md5) for p, md5 in lock.dep_md5s(name).items() if _is_data(p)}, name
        assert all(d.dataset.source_type == "dvc" for d in run.inputs.dataset_inputs)
    contexts = {d.tags[0].value for d in stages["finetune@cls"].inputs.dataset_inputs}
    assert contexts == {"training"}
    assert {d.tags[0].value for d in stages["report"].inputs.dataset_inputs} == {"evaluation"}
    # seed runs carry the arm's coordinates as params, and inherit the stage's datasets
    seeds = [r for r in below if re.fullmatch(r"(cls|ner)/.+/seed\d+", r.info.run_name)]
    assert len(seeds) >= 2 * 2 * 2  # two tasks, at least two arms, two seeds (TINY)
    for run in seeds:
        task, variant, mode, head, seed = run.info.run_name.split("/")
        if variant == "baseline":  # <task>/baseline/<name>/<input>/seed<k>: a comparator fitted on seed k's draw
            variant, mode = mode, "baseline"
        assert {k: run.data.params[k] for k in ("task", "variant", "mode", "head", "seed")} == {
            "task": task,
            "variant": variant.split("@")[0],
            "mode": mode,
            "head": head,
            "seed": seed[len("seed") :],
        }
        assert {d.dataset.name for d in run.inputs.dataset_inputs} == {f"data/tokenize/{task}"}
    # the pipeline run: the claim table, its figures and plot data as artifacts, its summary as the description
    report = {a.path for a in client.list_artifacts(pipeline.info.run_id, "report")}
    expected = ("claims.md", "claims.html", "claims.yaml", "summary.md", "figures", "plots")
    assert {f"report/{name}" for name in expected} <= report
    figures = {a.path for a in client.list_artifacts(pipeline.info.run_id, "report/figures")}
    assert "report/figures/forest.png" in figures
    assert pipeline.data.tags["mlflow.note.content"] == (repo / "reports" / "summary.md").read_text(encoding="utf-8")
    snapshot = {(d.dataset.name, d.dataset.digest) for d in pipeline.inputs.dataset_inputs}
    assert snapshot == {(p, md5) for (_, p), md5 in lock.out_md5s().items() if p.startswith("data/")}


@pytest.mark.slow
def test_dvc_exp_show_lists_the_curated_metrics_and_dvc_plots_draws_the_report_plots(pipeline_run):
    repo, env, _ = pipeline_run
    shown = dvc(repo, env, "exp", "show", "--json")
    assert shown.returncode == 0, shown.stderr
    workspace = json.loads(shown.stdout)[0]["data"]
    assert list(workspace["metrics"]) == ["metrics/summary.json"]  # one file: the curated columns
    summary = workspace["metrics"]["metrics/summary.json"]["data"]
    report = json.loads((repo / "metrics" / "report.json").read_text())
    assert summary["verdicts"] == report["verdicts"] and "heldout_gap_to_unigram_nats" in summary["pretrain"]
    plots = dvc(repo, env, "plots", "show", "--json")
    assert plots.returncode == 0, plots.stderr
    specs = {name: body[0] for name, body in json.loads(plots.stdout)["data"].items()}
    assert {
        "Pretraining loss curve",
        "Fine-tuning: per-seed test scores",
        "Forest plot: the difference of each claim, with its CI",
    } <= set(specs)
    for name, spec in specs.items():  # an empty cell would be drawn as 0
        assert all(row.get("dvc_inferred_y_value", "x") != "" for row in spec["content"]["data"]["values"]), name
    seeds = specs["Fine-tuning: per-seed test scores"]["content"]
    assert seeds["encoding"]["x"]["type"] == "nominal"  # arms are categories
    assert {row["task"] for row in seeds["data"]["values"]} == {"cls", "ner"}  # both tasks in one plot
    forest = specs["Forest plot: the difference of each claim, with its CI"]["content"]
    assert "<DVC_METRIC" not in json.dumps(forest)  # the template's anchors are all filled
    claims = {row["claim"] for row in forest["data"]["values"]}
    assert claims == {k for k, v in report["claims"].items() if "difference_ci_low" in v}


CHROMIUM = Path("/usr/bin/chromium")


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--no-first-run",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
        "--virtual-time-budget=20000",
        "--window-size=1400,900",
    ]
    return subprocess.run([str(CHROMIUM), *flags, *args], capture_output=True, text=True, timeout=180)


def _text(dom: str) -> str:
    body = re.sub(r"<(script|style)\b.*?</\1>", " ", dom, flags=re.S)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", body)))


@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.skipif(not CHROMIUM.exists(), reason="headless Chromium not installed (/usr/bin/chromium)")
def test_claim_table_and_mlflow_runs_page_in_headless_chromium(pipeline_run, mlflow_server, tmp_path, monkeypatch):
    from tasks.report.stats.estimates import VERDICTS
    from tasks.tracking import runs_page_url

    repo, _, _ = pipeline_run
    claims = (repo / "reports" / "claims.html").resolve()
    counts = json.loads((repo / "metrics" / "summary.json").read_text())["verdicts"]
    page = _chromium(tmp_path, "--dump-dom", claims.as_uri())
    assert page.returncode == 0, page.stderr[-2000:]
    expected = ", ".join(f"{counts[v.replace(' ', '_')]} {v}" for v in VERDICTS)  # in the table's order
    assert f"Verdicts. {expected} (of {sum(counts.values())} claims;" in _text(page.stdout)
    assert page.stdout.count("<details>") == len(run_claims(repo))
    # the link users are given opens the runs table on the training view, with the DVC snapshot as datasets
    monkeypatch.delenv("MLFLOW_TRACKING_URI")  # as make mlflow-ui: the repo's own store
    url = runs_page_url(repo, mlflow_server)
    assert url.endswith("/runs?workflowType=machine_learning"), url
    ui = _chromium(tmp_path, "--dump-dom", url)
    assert ui.returncode == 0, ui.stderr[-2000:]
    text = _text(ui.stdout)
    assert "Run Name" in text and "Dataset" in text and "pipeline" in text, text[:2000]
    assert "Traces 0" not in text and "No data available" not in text  # not the GenAI overview
    lock = Lock.read(repo / "dvc.lock")
    entries = [f"{p} ({md5})" for (_, p), md5 in lock.out_md5s().items() if p.startswith("data/")]
    assert any(entry in text for entry in entries), text[:2000]
    for name, target in (("claims.png", claims.as_uri()), ("mlflow-runs.png", url)):
        shot = tmp_path / name
        assert _chromium(tmp_path, f"--screenshot={shot}", target).returncode == 0
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
