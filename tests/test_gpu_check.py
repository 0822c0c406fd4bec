"""``benchmarks/gpu_check.sh --dry-run``: the GPU check's every step on the CPU at tiny sizes, so the script a
lent GPU runs once has already run here (machine report, the gpu tests collected, the pretraining and fine-tuning
benchmarks, a short run of the gpu profile end to end)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.gpucheck  # make test-gpucheck (CI runs it after make test)
def test_gpu_check_dry_run_runs_every_step_on_cpu(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path)}
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--dry-run"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1200)  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    steps = [line.split("\t") for line in (tmp_path / "times.tsv").read_text().splitlines()]
    assert [s[0] for s in steps] == ["machine", "gpu_tests_collected", "pretrain_bench", "fine_tune_bench",
                                     "gpu_profile_run"]  # fmt: skip
    assert all(status == "0" for _, _, status in steps)
    assert json.loads((tmp_path / "pretrain_gpu.json").read_text())["rows"]
    fine_tune = json.loads((tmp_path / "fine_tune_gpu.json").read_text())
    assert {row["unit"] for row in fine_tune["rows"]} == {"train tokens/s", "eval docs/s"}
    assert all(row["ours"] > 0 and row["best_peer_value"] > 0 for row in fine_tune["rows"])
    run = json.loads((tmp_path / "gpu_profile_run.json").read_text())
    assert run["profile"] == "gpu" and run["dry_run"] and run["params_set"]["pretrain.size"] == "tiny"
    assert set(run["stage_seconds"]) >= {"ingest", "pretrain", "finetune@cls", "finetune@ner", "probe", "report"}
    curve = run["heldout_curve"]
    assert len(curve) >= 2 and curve[-1]["eval_loss"] < curve[0]["eval_loss"]  # it trained
    assert run["pretrained_beats_random_cls"]["answer"]


def test_gpu_check_refuses_an_unknown_flag():
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--fast"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2 and "usage" in done.stderr
