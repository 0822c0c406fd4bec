"""benchmarks/fine_tune_sweep.py at its tiny CPU size: the stage's sweep and one HF Trainer run per configuration
both run, over the same (arm, LR multiplier, seed) runs, and the row is what benchmarks/_table.py reads (about
20-40 s on 2 shared cores: a random arm and a frozen probe arm on the pretrain stage's tiny model, 16 docs, 1 epoch)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks._table import markdown

REPO = Path(__file__).resolve().parents[2]
KEYS = {
    "benchmark",
    "case",
    "unit",
    "ours",
    "best_peer",
    "best_peer_value",
    "ratio_vs_best_peer",
    "limit",
    "fraction_of_limit",
    "goal",
    "meets_goal",
}


@pytest.mark.slow
def test_tiny_cpu_sweep_runs_the_same_runs_on_both_sides(tmp_path):
    out = tmp_path / "sweep.json"
    cmd = [sys.executable, str(REPO / "benchmarks" / "fine_tune_sweep.py"), "--smoke", "--out", out]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_WAIT_POLICY": "PASSIVE"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    ours, peer = result["ours"], result["hf_trainer"]
    assert ours["seconds"] > 0 and peer["seconds"] > 0
    ran = sorted((r["arm"], r["seed"], r["lr_scale"]) for r in ours["runs"])
    assert ran == sorted((r["arm"], r["seed"], r["lr_scale"]) for r in peer["runs"])  # the same runs each side
    # 2 arms x (1 sweep run with sweep seed 7 + 1 reported seed): the grid has one entry, so nothing widens
    assert len(ran) == result["n_runs"] == 4 and {seed for _, seed, _ in ran} == {7, 13}
    assert all(r["seconds"] > 0 and r["epochs_run"] == 1 for r in peer["runs"])
    [row] = result["rows"]
    assert set(row) == KEYS and row["benchmark"] == "fine_tune"
    assert row["ours"] > 0 and row["best_peer_value"] > 0
    assert row["ratio_vs_best_peer"] == pytest.approx(peer["seconds"] / ours["seconds"])
    assert row["goal"] is None and row["meets_goal"] is None  # the CPU: information, no goal
    assert "4 runs each side" in row["case"] and "random/full/mean-pool" in row["case"]
    assert "none (information)" in markdown([row])
