"""``benchmarks/gpu_check.sh``: the one script a lent GPU runs, tried here as it will be run there.

``--dry-run`` takes every step on the CPU at tiny sizes (the machine report, every GPU test collected and run, which
skips them here, the pretraining benchmark, the fine-tuning sweep against one HF Trainer run per configuration, and
the gpu profile end to end with the semantic pass on), and its results files must be readable by
``benchmarks/_table.py``. The budget is checked with a budget too small for anything past the first step: the
script must skip the rest, say so, and still write its summary.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"
STEPS = ["machine", "gpu_tests", "pretrain_bench", "fine_tune_bench", "gpu_profile_run"]


def run_check(tmp_path: Path, *args: str, timeout: int = 1500) -> subprocess.CompletedProcess:
    env = {**os.environ, "OUT": str(tmp_path)}
    env.pop("RESULTS", None)
    return subprocess.run(
        ["bash", str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.slow
@pytest.mark.pipeline  # make test-pipeline (and CI), not make test: about 8 minutes of one core
def test_gpu_check_dry_run_runs_every_step_on_cpu(tmp_path):
    done = run_check(tmp_path, "--dry-run")
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    summary = json.loads((tmp_path / "gpu_check.json").read_text())
    assert [s["step"] for s in summary["steps"]] == STEPS
    assert [s["status"] for s in summary["steps"]] == ["passed"] * len(STEPS)
    # every GPU test ran (no -x), each listed with its outcome: skipped here, without a GPU
    tests = summary["gpu_tests"]
    assert len(tests) >= 5 and {t["outcome"] for t in tests} == {"skipped"}
    listed = [line for line in done.stdout.splitlines() if line.strip().startswith("skipped")]
    assert all(any(t["test"] in line for line in listed) for t in tests)
    # the results land where the README table reads them: rows in the table's format
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from _table import load_rows, markdown
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    results = tmp_path / "results"
    assert sorted(p.name for p in results.glob("*.json")) == [
        "fine_tune_gpu.json",
        "gpu_profile_run.json",
        "pretrain_gpu.json",
    ]
    rows = load_rows(results)
    assert {r["benchmark"] for r in rows} == {"pretrain", "fine_tune", "gpu_profile_run"}
    assert markdown(rows).count("\n") == len(rows) + 1
    fine_tune = json.loads((results / "fine_tune_gpu.json").read_text())
    assert all(row["ours"] > 0 and row["best_peer_value"] > 0 for row in fine_tune["rows"])
    run = json.loads((results / "gpu_profile_run.json").read_text())
    assert run["profile"] == "gpu" and run["dry_run"] and run["params_set"]["pretrain.size"] == "tiny"
    assert run["leakage_semantic"]["enabled"] and run["leakage_semantic"]["windows_embedded"] > 0
    assert set(run["stage_seconds"]) >= {
        "ingest",
        "leakage",
        "pretrain",
        "finetune@cls",
        "finetune@ner",
        "probe",
        "report",
    }
    curve = run["heldout_curve"]
    assert len(curve) >= 2 and curve[-1]["eval_loss"] < curve[0]["eval_loss"]  # it trained
    assert run["pretrained_beats_random_cls"]["answer"]
    for step in STEPS:  # each step's elapsed time is printed as it ends
        assert f"== {step}: exit 0 after " in done.stdout


def test_a_step_that_would_overrun_the_budget_is_skipped_and_the_summary_still_written(tmp_path):
    done = run_check(tmp_path, "--dry-run", "--budget-s", "20", timeout=120)
    assert done.returncode == 3, (done.stdout + done.stderr)[-4000:]
    summary = json.loads((tmp_path / "gpu_check.json").read_text())
    assert summary["budget_s"] == 20
    statuses = {s["step"]: s["status"] for s in summary["steps"]}
    assert statuses == {
        "machine": "passed",
        "gpu_tests": "skipped",
        "pretrain_bench": "skipped",
        "fine_tune_bench": "skipped",
        "gpu_profile_run": "skipped",
    }
    assert "== gpu_tests: skipped: it takes about 40 s" in done.stdout
    assert not (tmp_path / "results" / "pretrain_gpu.json").exists()


def test_what_an_earlier_run_left_in_out_is_not_reported_as_this_runs(tmp_path):
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "pretrain_gpu.json").write_text('{"rows": []}')
    (tmp_path / "gpu_tests.xml").write_text(
        '<testsuites><testsuite><testcase classname="tests.test_gpu" name="t"/></testsuite></testsuites>'
    )
    done = run_check(tmp_path, "--dry-run", "--budget-s", "20", timeout=120)
    assert done.returncode == 3, (done.stdout + done.stderr)[-4000:]
    assert json.loads((tmp_path / "gpu_check.json").read_text())["gpu_tests"] == []
    assert "GPU tests: 0" in done.stdout
    assert not (tmp_path / "results" / "pretrain_gpu.json").exists()


def test_a_relative_out_is_taken_from_where_the_script_was_started(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("OUT", "RESULTS")} | {"OUT": "check-out"}
    done = subprocess.run(
        ["bash", str(SCRIPT), "--dry-run", "--budget-s", "20"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 3, (done.stdout + done.stderr)[-4000:]
    assert (tmp_path / "check-out" / "gpu_check.json").is_file()


def test_help_prints_the_usage_and_what_the_check_runs():
    done = subprocess.run(["bash", str(SCRIPT), "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("usage: ") and "--budget-s" in done.stdout
    assert "gpu_profile_run" in done.stdout


@pytest.mark.parametrize("args", [["--fast"], ["--budget-s"], ["--budget-s", "soon"]])
def test_gpu_check_refuses_an_unknown_flag_or_a_bad_budget(args):
    done = subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "usage" in done.stderr
