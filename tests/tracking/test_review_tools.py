"""The review tools a user opens after a run, through the commands they type: ``make mlflow-ui`` (the run's
tracking store, any port, 127.0.0.1), ``make plots REV=...`` (``dvc plots diff`` between two commits, on a page
that draws offline) and ``make exp-show``. ``make mlflow-ui``'s server itself is started by tests/project/test_e2e.py's
``mlflow_server`` fixture, over a real run's store."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tasks.tracking.ui import links_ui_url

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv"
# `install` is up to date in `make test` (it runs first); -o keeps a stale stamp from reinstalling here.
MAKE = ["make", "-s", "-f", str(ROOT / "Makefile"), f"VENV={VENV}", "-o", f"{VENV}/.installed"]
CHROMIUM = Path("/usr/bin/chromium")
REMOTE_SCRIPT = re.compile(r"<(?:script|link)\b[^>]*(?:src|href)\s*=\s*[\"']?(?:https?:)?//", re.I)


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make(*args: str, cwd: Path = ROOT, env: dict | None = None) -> subprocess.CompletedProcess:
    """``make <args>`` in ``cwd`` as a user types it (not as a sub-make of ``make test``: no MAKEFLAGS)."""
    env = {k: v for k, v in (os.environ if env is None else env).items() if not k.startswith(("MAKE", "MFLAGS"))}
    return subprocess.run([*MAKE, "-C", str(cwd), *args], env=env, capture_output=True, text=True, timeout=300)


# ---------------------------------------------------------------- MLflow: the run's store, any port


def test_run_links_open_a_tracking_server_itself_else_the_configured_ui(monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:////tmp/x/mlruns.db")
    assert links_ui_url("http://127.0.0.1:5000") == "http://127.0.0.1:5000"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5001/")
    assert links_ui_url("http://127.0.0.1:5000") == "http://127.0.0.1:5001"
    assert links_ui_url("http://127.0.0.1:5000/", uri="file:///tmp/mlruns") == "http://127.0.0.1:5000"


def test_make_mlflow_ui_takes_the_port_and_serves_mlflow_tracking_uri(tmp_path, capsys):
    assert make("-n", "mlflow-ui", "PORT=5001").stdout.rstrip().endswith('scripts/mlflow_ui.py --port "5001"')
    store = tmp_path / "elsewhere.db"
    env = os.environ | {"MLFLOW_TRACKING_URI": f"sqlite:///{store}"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "mlflow_ui.py"), "--port", "5001", "--print-only"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    link, note, command = done.stdout.splitlines()
    assert link == "clozeline runs (training view): http://127.0.0.1:5001/#/experiments?workflowType=machine_learning"
    assert "point at port 5000 (report.mlflow_ui_url)" in note  # params.yaml's links: the user is told
    assert command.split()[1:] == [
        "ui",
        "--backend-store-uri",
        f"sqlite:///{store}",
        "--host",
        "127.0.0.1",
        "--port",
        "5001",
        "--workers",
        "1",
    ]
    assert load_script("mlflow_ui").main(["--port", "70000"]) == 2
    assert capsys.readouterr().err == "make mlflow-ui: PORT=70000: a port is 1-65535\n"


def test_mlflow_lock_and_journal_files_are_ignored():
    names = ["mlruns.db", "mlruns.db.lock", "mlflow.db", "mlflow.db.lock", "mlruns.db-journal", "sub/mlflow.db.lock"]
    ignored = subprocess.run(["git", "check-ignore", "--no-index", *names], cwd=ROOT, capture_output=True, text=True)
    assert ignored.stdout.split() == names


# ---------------------------------------------------------------- DVC plots: versioned data, offline page


def _commit(repo: Path, message: str) -> None:
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@localhost"]
    subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", message], cwd=repo, check=True)


def _specs(page: str) -> dict[str, dict]:
    """The Vega-Lite spec of each plot DVC put on its page, by div id."""
    found = re.findall(
        r'<div id = "([^"]+)">\s*<script type = "text/javascript">\s*var spec = (\{.*?\});\s*vegaEmbed', page, re.S
    )
    return {div: json.loads(spec) for div, spec in found}


@pytest.mark.slow
def test_make_plots_rev_diffs_two_commits_on_a_page_that_draws_offline(tmp_path):
    repo = tmp_path / "clone"
    for rel in ("dvc.yaml", "params.yaml", ".dvc/config", ".dvc/plots", ".dvc/plots_offline.html", "reports/plots"):
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        copy = shutil.copytree if (ROOT / rel).is_dir() else shutil.copyfile
        copy(ROOT / rel, repo / rel)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    _commit(repo, "the committed run")
    seeds = repo / "reports" / "plots" / "seeds.csv"
    lines = seeds.read_text().splitlines()
    arm, seed, before, *rest = lines[1].split(",")
    seeds.write_text("\n".join([lines[0], ",".join([arm, seed, "0.123", *rest]), *lines[2:]]) + "\n")
    _commit(repo, "a later run")
    done = make("plots", "REV=HEAD~1", cwd=repo, env=os.environ | {"DVC_NO_ANALYTICS": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    page = (repo / "dvc_plots" / "index.html").read_text(encoding="utf-8")
    assert not REMOTE_SCRIPT.findall(page) and "vega-embed" in page and "window.vegaEmbed=" in page
    specs = _specs(page)
    assert len(specs) == 3
    points = [
        v
        for v in specs["Fine-tuning__per-seed_test_scores"]["data"]["values"]
        if v["arm"] == arm and str(v["seed"]) == seed
    ]
    assert sorted((p["rev"], float(p["score"])) for p in points) == [("HEAD~1", float(before)), ("workspace", 0.123)]
    if CHROMIUM.exists():  # the page draws every plot with the network unreachable (a proxy that refuses)
        dom = subprocess.run(
            [
                str(CHROMIUM),
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-background-networking",
                "--proxy-server=127.0.0.1:9",
                f"--user-data-dir={tmp_path / 'chromium'}",
                "--virtual-time-budget=10000",
                "--dump-dom",
                (repo / "dvc_plots" / "index.html").as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout
        drawn = re.split(r'<div id\s*=\s*"', dom)[1:]
        assert len(drawn) == 3 and all('class="marks"' in part for part in drawn), [p[:60] for p in drawn]


def test_the_committed_plots_page_is_the_pinned_bundle_and_names_no_network_script():
    committed = (ROOT / ".dvc" / "plots_offline.html").read_text(encoding="utf-8")
    assert "html_template = plots_offline.html" in (ROOT / ".dvc" / "config").read_text()
    assert not REMOTE_SCRIPT.findall(committed)
    assert "{plot_divs}" in committed and "{scripts}" not in committed  # DVC's CDN tags have nowhere to go
    template = load_script("plots_template")
    assert template.page() == committed, "rewrite it: make plots-template"


# ---------------------------------------------------------------- dvc exp show that fits a terminal


def test_make_exp_show_fits_200_columns_with_verdict_counts_and_headline_scores():
    done = make("exp-show", env=os.environ | {"COLUMNS": "200", "DVC_NO_ANALYTICS": "1"})
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert max(len(line) for line in out.splitlines()) <= 200
    summary = json.loads((ROOT / "metrics" / "summary.json").read_text())
    for verdict, count in summary["verdicts"].items():
        assert (f"{count} {verdict.replace('_', ' ')}" in out) == (count > 0), verdict
    tasks = [key for key, value in summary.items() if isinstance(value, dict) and "best_arm" in value]
    assert tasks
    for task in tasks:
        for key, value in summary[task].items():
            if "_test_" in key:
                assert f"{value:.4f}" in out, (task, key)
    assert f"{summary['pretrain']['heldout_gap_to_unigram_nats']:.2f}" in out
    assert "workspace" in out
