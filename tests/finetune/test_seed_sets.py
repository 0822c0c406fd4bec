"""Seeds per arm class (``finetune.seeds``, ``finetune.variant_seed_counts``, ``pretrain.seeds``) and the stage's
``cost`` section (``tasks/finetune/cost.py``): values written out by hand here, not taken from the code under test."""

from __future__ import annotations

from pathlib import Path

import pytest

from tasks.config import ParamsError, load_params
from tasks.finetune import cost

ROOT = Path(__file__).resolve().parents[2]


def test_the_default_runs_20_seeds_for_tiny_arms_5_for_the_minilm_and_3_pretraining_seeds():
    params = load_params(ROOT / "params.yaml")
    ft = params.finetune
    assert len(ft.seeds) >= 20 and len(set(ft.seeds)) == len(ft.seeds) and ft.sweep_seed not in ft.seeds
    assert ft.seeds_for("reference") == ft.seeds[:5] == [13, 21, 42, 87, 100]  # the seeds of ef74e30's MiniLM
    for variant in ("pretrained", "random", "adapted"):
        assert ft.seeds_for(variant) == ft.seeds
    assert len(params.pretrain.seeds) >= 3
    grid = params.finetune.task("cls").lr_grid
    assert ft.lr_grid_for("reference", grid) == [3.0] and ft.lr_grid_for("pretrained", grid) == grid


@pytest.mark.parametrize("grid", [[], [0.0], [3.0, 3.0]])
def test_a_bad_variant_lr_grid_names_the_key(grid):
    with pytest.raises(ParamsError, match=r"finetune\.variant_lr_grids"):
        load_params(ROOT / "params.yaml", overrides={"finetune.variant_lr_grids": {"reference": grid}})


@pytest.mark.parametrize(
    ("counts", "message"),
    [
        ({"reference": 3}, None),
        ({"reference": 4}, None),  # at most 4: every one of the 3 (a user's shorter seeds list keeps working)
        ({"reference": 0}, r"finetune\.variant_seed_counts\.reference"),
        ({"minilm": 2}, r"finetune\.variant_seed_counts\.minilm"),
    ],
)
def test_a_variant_runs_a_prefix_of_the_seeds_and_a_bad_count_names_the_key(counts, message):
    overrides = {"finetune.seeds": [5, 6, 9], "finetune.variant_seed_counts": counts}
    if message is None:
        ft = load_params(ROOT / "params.yaml", overrides=overrides).finetune
        assert ft.seeds_for("reference") == [5, 6, 9] and ft.seeds_for("random") == [5, 6, 9]
        overrides["finetune.variant_seed_counts"] = {"reference": 2}
        assert load_params(ROOT / "params.yaml", overrides=overrides).finetune.seeds_for("reference") == [5, 6]
        return
    with pytest.raises(ParamsError, match=message):
        load_params(ROOT / "params.yaml", overrides=overrides)


def test_cost_groups_runs_by_why_they_exist_and_sums_train_minutes():
    def arm(sweep: list[float], seeds: list[float]) -> dict:
        return {
            "sweep": {i: {"train_seconds": s} for i, s in enumerate(sweep)},
            "seeds": [{"train_seconds": s} for s in seeds],
        }

    results = {
        "pretrained/full/mean-pool": arm([6, 6, 6], [3, 3]),
        "pretrained/frozen/mean-pool": arm([1], [1, 1]),
        "reference/full/mean-pool": arm([120, 120], [60]),
        "pretrained@n32/full/mean-pool": arm([2], [2, 2]),
        "pretrained@pretrain_seed21/full/mean-pool": arm([6], [6, 6]),
        "pretrained@pretrain_seed21@n32/full/mean-pool": arm([3], [3, 3]),  # a curve rerun: a pretraining-seed run
        "pretrained@ablation_all-mask/full/mean-pool": arm([30], [15, 15]),
        "pretrained@step_100/full/mean-pool": arm([60], []),
    }
    assert cost.section(results) == {
        "pretrained": {"arms": 2, "runs": 8, "train_minutes": 0.45},  # (18 + 6 + 1 + 2) s / 60
        "learning_curve": {"arms": 1, "runs": 3, "train_minutes": 0.1},
        "ablations": {"arms": 1, "runs": 3, "train_minutes": 1.0},
        "dose_response": {"arms": 1, "runs": 1, "train_minutes": 1.0},
        "pretraining_seeds": {"arms": 2, "runs": 6, "train_minutes": 0.45},  # (18 + 9) s / 60
        "reference": {"arms": 1, "runs": 3, "train_minutes": 5.0},
    }
    line = cost.log_line("cls", cost.section(results))
    assert line.startswith("finetune[cls]: cost by group") and "reference 3 runs / 5.0 min" in line
