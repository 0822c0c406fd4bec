"""scripts/time_model.py: the finetune stage's predicted minutes on a measured run written out here, against the
arithmetic done by hand (docs/pipeline.md "Time budget")."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from tasks.config import load_params

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("time_model", ROOT / "scripts" / "time_model.py")
time_model = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(time_model)


def test_finetune_minutes_count_runs_seeds_grids_pretraining_seeds_and_test_items(tmp_path):
    def arm(seconds: list[float], sweep: int) -> dict:
        per_seed = {str(i): {"train_seconds": s} for i, s in enumerate(seconds)}
        return {"details": {"per_seed": per_seed}, "lr_sweep": {"dev": {str(k): 0.5 for k in range(sweep)}}}

    measured = {
        "runs": {
            "pretrained/full/mean-pool": arm([4, 6], 2),  # median 5 s, 2 sweep runs
            "reference/full/mean-pool": arm([100, 100], 2),
            "baseline/majority/labels": {"details": {"per_seed": {}}},  # not a training run
        },
        "docs": {"clozeline": {"test": {"docs_kept": 100}}},
        "elapsed_minutes": 5.0,  # 300 s = (5 x 4 + 100 x 4) / 2 workers + 90 s of what is not a run
    }
    (tmp_path / "finetune").mkdir()
    (tmp_path / "finetune" / "cls.json").write_text(json.dumps(measured), encoding="utf-8")
    params = load_params(
        ROOT / "params.yaml",
        overrides={
            "finetune.recipes.cls.configs": ["pretrained/full/mean-pool", "reference/full/mean-pool"],
            "finetune.recipes.cls.train_sizes": [],
            "finetune.recipes.cls.curve_configs": [],
            "finetune.recipes.cls.baselines": ["majority"],
            "finetune.seeds": [1, 2, 3, 4],
            "finetune.variant_seed_counts": {"reference": 2},
            "finetune.variant_lr_grids": {"reference": [3.0]},
            "finetune.workers": 2,
            "pretrain.seeds": [13, 21],
        },
    )
    before = time_model.measured("cls", tmp_path)
    assert before["items"] == 100 and before["arms"]["pretrained/full/mean-pool"] == (5, 2, 2)
    # 300 test items, 200 more: a seed run +0.32 s (tiny) / +4 s (MiniLM); a sweep run skips its test pass, -0.16 s /
    # -2 s (100 items). pretrained: 4 seeds x 5.32 s + 2 sweep x 4.84 s, twice (the further pretraining seed reruns
    # it); reference: 2 seeds x 104 s + 1 sweep (its own grid) x 98 s; over 2 workers, + the 90 s not a run +
    # majority fitted for the 2 seeds more than measured (2 x 0.05 s)
    expected = ((2 * (4 * 5.32 + 2 * 4.84) + 2 * 104 + 98) / 2 + 90 + 2 * 0.05) / 60
    assert time_model.finetune_minutes("cls", params, before, 300) == (5.0, pytest.approx(expected))
