"""Every benchmark script runs its whole path at a tiny size (``--smoke``) through its command line, so a layout change
that breaks a benchmark fails the tests (issue 61): corpus build, every tool and variant it measures (peers whose
own environment is absent, ``benchmarks/peers/setup.sh``, are skipped and said so), its results file with the
provenance of the code it measured, and the docs table made from that file.

The scripts run as subprocesses, a few at a time (most of a smoke run is process start-up and imports, which overlap
well), all started by the first test; each test waits for its own. ``fine_tune_sweep.py``'s smoke runs in
tests/benchmarks/test_bench_fine_tune_sweep.py, with its own checks, not twice. The GPU check's dry run
(tests/benchmarks/test_gpu_check.py, ``gpu_check.sh --dry-run``, in ``make test-pipeline``) runs ``pretrain.py`` and
``fine_tune_sweep.py`` with ``--smoke`` too; here it is checked that it still does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from argparse import Namespace
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from benchmarks import _table
from benchmarks._provenance import RESULTS, out_path
from tasks.common.imports import closure_fingerprint

REPO = Path(__file__).resolve().parents[2]
#: run here, longest first (so the pool ends sooner)
HERE = (
    "scheduled",
    "fine_tune",
    "leakage_semantic",
    "document_mask",
    "scaling",
    "pretrain",
    "gpu_recipe_curve",
    "tokenize",
    "dedup",
    "leakage",
)
#: run by another test of ``make test``, with ``--smoke``
ELSEWHERE = {"fine_tune_sweep": "tests/benchmarks/test_bench_fine_tune_sweep.py"}
#: run with ``--smoke`` by the GPU check's dry run too (benchmarks/gpu_check.sh)
DRY_RUN = ("pretrain", "fine_tune_sweep")
AT_ONCE = 2
TIMEOUT_S = 400
ENV = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "OMP_WAIT_POLICY": "PASSIVE",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "DVC_NO_ANALYTICS": "1",
    "MLFLOW_DISABLE_TELEMETRY": "true",
}


def _smoke(name: str, out: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, str(REPO / "benchmarks" / f"{name}.py"), "--smoke", "--out", str(out)]
    return subprocess.run(
        command, cwd=REPO, env={**os.environ, **ENV}, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )


@pytest.fixture(scope="module")
def smokes(tmp_path_factory) -> dict[str, tuple[Path, Future]]:
    """Every script of ``HERE`` started with ``--smoke``, ``AT_ONCE`` at a time: ``{name: (results path, future)}``."""
    folder = tmp_path_factory.mktemp("smoke")
    with ThreadPoolExecutor(AT_ONCE) as pool:
        yield {
            name: (folder / name / f"{name}.json", pool.submit(_smoke, name, folder / name / f"{name}.json"))
            for name in HERE
        }


def test_every_benchmark_script_has_a_smoke_run_in_the_tests():
    scripts = {path.stem for path in (REPO / "benchmarks").glob("[!_]*.py")}
    assert scripts == set(HERE) | set(ELSEWHERE), "a new benchmark needs --smoke and a place in HERE"


def test_the_script_run_elsewhere_runs_there_with_smoke():
    for name, test in ELSEWHERE.items():
        assert f'"benchmarks" / "{name}.py"), "--smoke"' in (REPO / test).read_text(encoding="utf-8")


@pytest.mark.parametrize("name", DRY_RUN)
def test_the_gpu_checks_dry_run_runs_the_pretraining_scripts_smoke(name):
    script = (REPO / "benchmarks" / "gpu_check.sh").read_text(encoding="utf-8")
    dry = script.split('if [ "$DRY" = 1 ]; then\n  DEVICE=cpu', 1)[1].split("else", 1)[0]
    flags = {"pretrain": "PRETRAIN", "fine_tune_sweep": "FINE_TUNE"}[name]
    assert f"{flags}=(--smoke)" in dry and f"benchmarks/{name}.py" in script


@pytest.mark.parametrize("name", HERE)
def test_smoke_run_writes_results_with_provenance_and_the_table(name, smokes):
    out, future = smokes[name]
    done = future.result()
    assert done.returncode == 0, f"{name} --smoke failed:\n{(done.stdout + done.stderr)[-4000:]}"
    body = json.loads(out.read_text(encoding="utf-8"))
    recorded = body["provenance"]
    ancestor = ["git", "merge-base", "--is-ancestor", recorded["commit"], "HEAD"]  # HEAD itself, or one since
    assert recorded["smoke"] is True and subprocess.run(ancestor, cwd=REPO, check=False).returncode == 0
    assert recorded["code_fingerprint"] == closure_fingerprint(recorded["code_modules"])
    assert recorded["cpu"]["model"] and recorded["gpu"] is None
    rows = _table.load_rows(files=[out])
    if name == "leakage" and not (REPO / "benchmarks" / ".peers" / "datatrove" / "bin" / "python").exists():
        assert "datatrove skipped: no peer environment" in done.stdout  # a peer not run is said, not silent
        assert "datatrove" in body["scales"]["1x"]["skipped"]
    if name == "scaling":  # its rows are Ray beside local; the smoke runs the local engine (Ray: test_ray_engines)
        # every data stage, tokenize from scratch and incremental, leakage without its semantic pass
        assert {(run["stage"], run["engine"]) for run in body["runs"]} == {
            *[(stage, "local") for stage in ("ingest", "dedup", "split", "leakage", "tokenize")],
            ("tokenize", "local, incremental"),
            ("feed", "rank 0/1"),
        } and "engine ray skipped" in done.stdout
        measured = (out.parent / "scaling.md").read_text()
        assert measured.count("| dedup | local |") == 1 and "| leakage, semantic pass off | local |" in measured
        feed = [run for run in body["runs"] if run["stage"] == "feed"]  # two sizes 10x apart, their peak RSS recorded
        assert [run["blocks"] for run in feed] == [2_000, 20_000]
        assert all(run["peak_rss_mib"] >= run["imports_rss_mib"] > 0 and run["steps_per_s"] > 0 for run in feed)
        # a data stage's record fingerprints its own package only, so an edit to one stage leaves the others current
        stages = [run for run in body["runs"] if run["stage"] != "feed"]
        assert all(run["provenance"]["code_modules"] == [f"tasks.{run['stage']}"] for run in stages)
        # tokenize's runs say which of its steps set the peak: a phase a progress line of the stage, then the end
        for run in (run for run in stages if run["stage"] == "tokenize"):
            lines = [phase["message"] for phase in run["phases"]]
            assert lines[-1] == "(end)" and lines[:-1] and all(line.startswith("tokenize: ") for line in lines[:-1])
        assert [row["goal"] for row in rows if "feed peak RSS" in row["case"]] == ["<= 1.10x"]
        return
    assert rows and all(row["benchmark"] == name for row in rows)
    table = _table.markdown(rows)
    assert table.splitlines()[2] in done.stdout  # the script printed the docs table of its results
    assert all(line.endswith("| current |") for line in table.splitlines()[2:])


def test_a_smoke_run_never_writes_over_the_measured_results():
    with pytest.raises(SystemExit, match="--smoke writes no results into benchmarks/results"):
        out_path(Namespace(smoke=True, out=RESULTS / "tokenize.json"), RESULTS / "tokenize.json")
    assert out_path(Namespace(smoke=False, out=None), RESULTS / "tokenize.json") == RESULTS / "tokenize.json"
    made = out_path(Namespace(smoke=True, out=None), RESULTS / "tokenize.json")
    assert made.name == "tokenize.json" and RESULTS not in made.parents
